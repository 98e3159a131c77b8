"""Where each step's time went: stage time per step × rank, and the chain that set the step time.

Definitions are docs/analyses.md §3. Both products read the stage timeline (innermost staged
range per time point, per rank) and the step windows:

- ``breakdown``: per step × rank × stage, the rank's time in that stage within the step window,
  and ``other`` = what remains between the rank's first and last staged time in the step;
- ``critical_path``: the chain of stage intervals, walked back from the one that ends last, each
  link the interval that ends last at or before the current one's start (up to
  :data:`CRITICAL_SLACK_NS` of overlap allowed, lowest rank among equal ends).

The walk is pointer chasing; it runs as "predecessor of every interval" (an as-of join plus an
inequality join for the allowed overlap) and then pointer doubling from each step's last
interval, so the work is a few joins and log₂(n) array gathers, not a loop over intervals.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from taxonomy.vocab import STAGE

from ..model import frames
from ..model.products import provides

CRITICAL_SLACK_NS = 100_000
"""Overlap still counted as "ends before" when walking the critical path (residual clock error)."""

KEYS = ["step", "rank"]


def compute_breakdown(stage_timeline: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """BREAKDOWN: per step × rank × stage time (ns) and share of the step's wall time."""
    staged = _in_windows(stage_timeline, steps).filter(pl.col("stage") != "other")
    if staged.height == 0:
        return frames.empty(frames.BREAKDOWN)
    per_stage = staged.group_by([*KEYS, "stage"]).agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("time_ns")
    )
    other = (
        staged.group_by(KEYS)
        .agg(
            (
                pl.col("end_ns").max()
                - pl.col("start_ns").min()
                - (pl.col("end_ns") - pl.col("start_ns")).sum()
            ).alias("time_ns")
        )
        .with_columns(pl.lit("other", STAGE).alias("stage"))
    )
    windows = steps.select("step", (pl.col("end_ns") - pl.col("start_ns")).alias("_window"))
    return (
        pl.concat([per_stage, other.select(per_stage.columns)])
        .join(windows, on="step")
        .with_columns((pl.col("time_ns") / pl.col("_window")).alias("share"))
        .select(
            pl.col("step").cast(pl.Int32),
            pl.col("rank").cast(pl.Int32),
            pl.col("stage").cast(STAGE),
            pl.col("time_ns").cast(pl.Int64),
            "share",
        )
        .sort(["step", "rank", "stage"])
    )


def stage_intervals(stage_timeline: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Maximal runs of one stage on one rank within a step (touching timeline segments merged):
    the "stage intervals" the critical path is made of."""
    staged = (
        _in_windows(stage_timeline, steps)
        .filter((pl.col("stage") != "other") & (pl.col("rank") >= 0))
        .sort([*KEYS, "start_ns"])
    )
    by = KEYS
    new = (pl.col("stage") != pl.col("stage").shift(1)) | (
        pl.col("start_ns") > pl.col("end_ns").shift(1)
    )
    return (
        staged.with_columns(new.fill_null(True).cum_sum().over(by).alias("_run"))
        .group_by([*by, "_run"])
        .agg(pl.col("stage").first(), pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_run")
        .sort([*by, "start_ns"])
    )


def compute_critical_path(stage_timeline: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """CRITICAL_PATH: per step the chain of stage intervals, earliest first."""
    nodes = stage_intervals(stage_timeline, steps).with_row_index("_id")
    if nodes.height == 0:
        return frames.empty(frames.CRITICAL_PATH)
    pred = _predecessors(nodes)
    roots = (
        nodes.sort(["step", "end_ns", "rank"], descending=[False, True, False])
        .group_by("step", maintain_order=True)
        .first()
    )["_id"].to_numpy()
    on_chain = _ancestors(pred, roots)
    return (
        nodes.filter(pl.Series(on_chain))
        .select(
            pl.col("step").cast(pl.Int32),
            pl.col("rank").cast(pl.Int32),
            pl.col("stage").cast(STAGE),
            "start_ns",
            "end_ns",
        )
        .sort(["step", "start_ns", "end_ns"])
    )


def critical_summary(chain: pl.DataFrame) -> pl.DataFrame:
    """Per step: the chain's length (D), its rank and its stage (most time on the chain; ties
    go to the lowest rank and the earliest stage of the vocabulary)."""
    if chain.height == 0:
        return pl.DataFrame(
            schema={
                "step": pl.Int32,
                "rank": pl.Int32,
                "stage": STAGE,
                "depth_ns": pl.Int64,
                "chain_ns": pl.Int64,
            }
        )
    dur = (pl.col("end_ns") - pl.col("start_ns")).sum()

    def top(key: str, order: pl.Expr) -> pl.DataFrame:
        return (
            chain.group_by(["step", key])
            .agg(dur.alias("_t"))
            .sort(["step", "_t", order], descending=[False, True, False])
            .group_by("step", maintain_order=True)
            .first()
            .select("step", key)
        )

    length = chain.group_by("step").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("depth_ns"), dur.alias("chain_ns")
    )
    return (
        top("rank", pl.col("rank"))
        .join(top("stage", pl.col("stage").to_physical()), on="step")
        .join(length, on="step")
        .sort("step")
    )


def _in_windows(stage_timeline: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Timeline segments of each step, clipped to that step's window."""
    windows = steps.select("step", pl.col("start_ns").alias("_ws"), pl.col("end_ns").alias("_we"))
    return (
        stage_timeline.filter(pl.col("step").is_not_null())
        .join(windows, on="step")
        .with_columns(
            pl.max_horizontal("start_ns", "_ws").alias("start_ns"),
            pl.min_horizontal("end_ns", "_we").alias("end_ns"),
        )
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .select("step", "rank", "stage", "start_ns", "end_ns")
    )


def _predecessors(nodes: pl.DataFrame) -> np.ndarray:
    """For every interval, the one that ends last at or before its start (+ slack) among those
    starting before it, in the same step; -1 when none. Lowest rank among equal ends."""
    cols = nodes.select("_id", "step", "rank", "start_ns", "end_ns")
    # Candidates ending by the start: the as-of join on end finds the latest end directly.
    ends = (
        cols.sort(["step", "end_ns", "rank"])
        .group_by(["step", "end_ns"], maintain_order=True)
        .first()
        .select("step", pl.col("end_ns").alias("_pe"), pl.col("_id").alias("_pred"))
    )
    clean = (
        cols.select("_id", "step", "start_ns")
        .sort(["step", "start_ns"])
        .join_asof(
            ends,
            left_on="start_ns",
            right_on="_pe",
            by="step",
            strategy="backward",
            check_sortedness=False,
        )
        .select("_id", "_pred", "_pe")
    )
    # Candidates overlapping the start by at most the slack (and starting before it).
    right = cols.select(
        pl.col("step").alias("_s"), pl.col("_id").alias("_pred"), pl.col("rank").alias("_r"),
        pl.col("start_ns").alias("_ps"), pl.col("end_ns").alias("_pe"),
    )
    # Joined on the slack window alone (an inequality join, pairs bounded by the slack); with
    # the step's equality among the predicates polars paired every two intervals of a step
    # first (3.6 GB at 1,024 ranks), and step and start are filters on the few pairs left.
    overlap = (
        cols.join_where(
            right,
            pl.col("_pe") > pl.col("start_ns"),
            pl.col("_pe") <= pl.col("start_ns") + CRITICAL_SLACK_NS,
        )
        .filter((pl.col("_s") == pl.col("step")) & (pl.col("_ps") < pl.col("start_ns")))
        .sort(["_id", "_pe", "_r"], descending=[False, True, False])
        .group_by("_id", maintain_order=True)
        .first()
        .select("_id", "_pred", "_pe")
    )
    best = (
        pl.concat(
            [clean.drop_nulls("_pred"), overlap.with_columns(pl.col("_pred").cast(pl.UInt32))],
            how="vertical_relaxed",
        )
        .sort(["_id", "_pe"], descending=[False, True])
        .group_by("_id", maintain_order=True)
        .first()
    )
    pred = np.full(nodes.height, -1, dtype=np.int64)
    pred[best["_id"].to_numpy()] = best["_pred"].to_numpy()
    return pred


def _ancestors(pred: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Mask of every node reachable from ``roots`` by following ``pred`` (roots included), by
    pointer doubling: after level k the mask holds every ancestor up to 2^(k+1) - 1 links away."""
    n = pred.size
    jump = np.where(pred < 0, n, pred)
    jump = np.append(jump, n)
    reached = np.zeros(n + 1, dtype=bool)
    reached[roots] = True
    for _ in range(max(1, int(np.ceil(np.log2(n + 1))))):
        reached[jump[reached]] = True
        jump = jump[jump]
    return reached[:n]


@provides("breakdown")
def breakdown(stage_timeline: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    return compute_breakdown(stage_timeline, steps)


@provides("critical_path")
def critical_path(stage_timeline: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    return compute_critical_path(stage_timeline, steps)


