"""Pipeline-schedule phases and the pipeline bubble, from chunk annotations (DualPipe's
``attn(F)``, ``mlp(B)``, ``mlp(W)``, ``dispatch(F)``, Megatron's ``forward-compute``, …).

What is computed, per pipeline rank (a rank with at least one chunk range) and step:

* a **chunk** is a host range whose name ``taxonomy/pipeline_phases.toml`` maps to a phase
  (forward, backward_input, backward_weight); a chunk that encloses another chunk on its thread
  is left out (its children carry the time), and a rule marked ``within_schedule`` counts only
  inside a schedule range (``1F1B``) of the same rank;
* a chunk (or schedule range) belongs to the step whose window holds its start;
* the step's **pipeline window** runs from the earliest start to the latest end of any chunk or
  schedule range of any rank in that step (one window for all ranks: a last stage that waits
  for its first forward is in the bubble from the window's start);
* ``<phase>_ns`` is the union of the rank's chunks of that phase in the window, ``busy_ns`` the
  union of all its chunks, ``bubble_ns`` = window − busy (time in no chunk), ``overlap_ns`` =
  Σ phases − busy (phases running at once, on two threads).

Times are the host ranges' wall time on the aligned clock, not the GPU time of the kernels the
chunks launched.
"""

from __future__ import annotations

import polars as pl

from taxonomy.pipeline_phases import PHASES, SCHEDULE, phase_of

from ..model import intervals
from ..model.products import provides

THREAD = ["source", "pid", "tid"]
PIPELINE_PHASES = pl.Schema(
    {
        "rank": pl.Int32(),
        "step": pl.Int32(),
        "window_ns": pl.Int64(),
        **{f"{p}_ns": pl.Int64() for p in PHASES},
        "busy_ns": pl.Int64(),
        "bubble_ns": pl.Int64(),
        "bubble_share": pl.Float64(),
        "overlap_ns": pl.Int64(),
        "chunks": pl.Int64(),
    }
)
"""One row per pipeline rank and step (step null when the run has no steps)."""


def tagged_ranges(aligned: pl.DataFrame) -> pl.DataFrame:
    """Host ranges whose name the phase table knows, with their ``phase``."""
    ann = aligned.filter(pl.col("kind") == "annotation").select(
        "rank", *THREAD, pl.col("name").cast(pl.String), "start_ns", "end_ns"
    )
    if ann.height == 0:
        return ann.with_columns(pl.lit(None, pl.String).alias("phase"),
                                pl.lit(None, pl.Boolean).alias("within_schedule"))
    known = phase_of(ann["name"]).filter(pl.col("phase").is_not_null())
    return ann.join(known, on="name")


def _inside_schedule(chunks: pl.DataFrame, schedules: pl.DataFrame) -> pl.DataFrame:
    """The ``within_schedule`` chunks that lie inside a schedule range of their rank."""
    frames = schedules.select(
        pl.col("rank").alias("_r"), pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e")
    )
    loose = chunks.filter(pl.col("within_schedule")).with_row_index("_row")
    if loose.height == 0 or frames.height == 0:
        return loose.clear().drop("_row")
    inside = loose.join_where(
        frames,
        pl.col("rank") == pl.col("_r"),
        pl.col("start_ns") >= pl.col("_s"),
        pl.col("end_ns") <= pl.col("_e"),
    )
    return loose.filter(pl.col("_row").is_in(inside["_row"].implode())).drop("_row")


def leaf_chunks(chunks: pl.DataFrame) -> pl.DataFrame:
    """Chunks that enclose no other chunk on their thread (ranges of a thread nest, so sorted by
    start, a range encloses the next exactly when the next starts before it ends)."""
    ordered = chunks.sort([*THREAD, "start_ns", "end_ns"], descending=[False] * 4 + [True])
    encloses = (
        (pl.col("start_ns").shift(-1).over(THREAD) < pl.col("end_ns"))
        .fill_null(False)
    )
    return ordered.filter(~encloses)


def _with_steps(ranges: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Each range with the step whose window holds its start (null without steps or outside
    every step)."""
    if steps.height == 0:
        return ranges.with_columns(pl.lit(None, pl.Int32).alias("step"))
    windows = steps.select(
        pl.col("start_ns").alias("_ws"), pl.col("end_ns").alias("_we"), "step"
    ).sort("_ws")
    joined = ranges.sort("start_ns").join_asof(
        windows, left_on="start_ns", right_on="_ws", strategy="backward"
    )
    inside = pl.col("step").is_not_null() & (pl.col("start_ns") < pl.col("_we"))
    return joined.with_columns(
        pl.when(inside).then(pl.col("step")).otherwise(None).cast(pl.Int32).alias("step")
    ).drop("_ws", "_we")


def compute(aligned: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    tagged = tagged_ranges(aligned)
    schedules = tagged.filter(pl.col("phase") == SCHEDULE)
    chunks = tagged.filter(pl.col("phase") != SCHEDULE)
    chunks = pl.concat(
        [chunks.filter(~pl.col("within_schedule")), _inside_schedule(chunks, schedules)]
    )
    if chunks.height == 0:
        return pl.DataFrame(schema=PIPELINE_PHASES)
    chunks = _with_steps(leaf_chunks(chunks), steps)
    pipeline_ranks = chunks["rank"].unique().implode()
    framing = _with_steps(schedules.filter(pl.col("rank").is_in(pipeline_ranks)), steps)
    window = (
        pl.concat([chunks.select("step", "start_ns", "end_ns"),
                   framing.select("step", "start_ns", "end_ns")])
        .group_by("step")
        .agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("window_ns"))
    )
    keys = ["rank", "step"]
    per_phase = (
        intervals.union_length(chunks, [*keys, "phase"], name="ns")
        .pivot("phase", index=keys, values="ns")
    )
    busy = intervals.union_length(chunks, keys, name="busy_ns")
    counted = chunks.group_by(keys).agg(pl.len().cast(pl.Int64).alias("chunks"))
    phase_cols = [f"{p}_ns" for p in PHASES]
    out = (
        counted.join(busy, on=keys, how="left", nulls_equal=True)
        .join(per_phase, on=keys, how="left", nulls_equal=True)
        .join(window, on="step", how="left", nulls_equal=True)
        .with_columns(
            [pl.col(p).fill_null(0).alias(f"{p}_ns") if p in per_phase.columns
             else pl.lit(0, pl.Int64).alias(f"{p}_ns") for p in PHASES]
        )
        .with_columns(
            (pl.col("window_ns") - pl.col("busy_ns")).alias("bubble_ns"),
            (pl.sum_horizontal(phase_cols) - pl.col("busy_ns")).alias("overlap_ns"),
        )
        .with_columns(
            pl.when(pl.col("window_ns") > 0)
            .then(pl.col("bubble_ns") / pl.col("window_ns"))
            .otherwise(None)
            .alias("bubble_share")
        )
    )
    return out.select(list(PIPELINE_PHASES)).cast(PIPELINE_PHASES).sort(keys, nulls_last=True)


@provides("pipeline_phases", schema=PIPELINE_PHASES)
def pipeline_phases(aligned: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    return compute(aligned, steps)
