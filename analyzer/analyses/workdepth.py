"""Work–depth: how much parallel work each step held, and what three changes would buy.

Definitions are docs/analyses.md §7. Per step: W = Σ over devices
of productive busy time (from ``bubbles``), D = the critical path's length (from
``critical_path``) and never less than the busiest device's own productive time (its work
takes at least that long, even where the stage ranges on the path ended while it was still
queued), W/D = the parallelism the step exposed; and three what-if bounds:

- async overlap: (T_gen + T_train) / max(T_gen, T_train), T_gen = rollout time on the critical
  path, T_train = the rest of the path after its last rollout interval;
- no rollout tail: the step time had rollout ended when the median rollout rank finished (only
  a tail on the critical path shortens the step);
- balanced DP: the step time had every rank's productive update time equalled the mean.
"""

from __future__ import annotations

import polars as pl

from taxonomy.vocab import TRAIN_STAGES

from ..model import frames, intervals
from ..model.products import provides
from .breakdown import critical_summary


def compute(
    steps: pl.DataFrame,
    bubbles: pl.DataFrame,
    chain: pl.DataFrame,
    stage_ranges: pl.DataFrame,
    stage_timeline: pl.DataFrame,
    states: pl.DataFrame,
) -> pl.DataFrame:
    """WORKDEPTH: per step W, D, W/D and the what-if step times."""
    summary = critical_summary(chain)
    if summary.height == 0:
        return frames.empty(frames.WORKDEPTH)
    step_ns = steps.select(
        pl.col("step").cast(pl.Int32), (pl.col("end_ns") - pl.col("start_ns")).alias("step_ns")
    )
    work = (
        bubbles.group_by("step", "rank").agg(pl.col("productive_ns").first()).group_by("step").agg(
            pl.col("productive_ns").sum().alias("work_ns"),
            pl.col("productive_ns").max().alias("_busiest"),
        )
    )
    out = (
        summary.select("step", "depth_ns")
        .join(step_ns, on="step")
        .join(work, on="step", how="left")
        .with_columns(pl.max_horizontal("depth_ns", pl.col("_busiest").fill_null(0))
                      .alias("depth_ns"))
        .join(_async_overlap(chain), on="step", how="left")
        .join(_tail_saving(chain, stage_ranges), on="step", how="left")
        .join(_imbalance(stage_timeline, states), on="step", how="left")
        .with_columns(pl.col("work_ns", "_tail", "_imbalance").fill_null(0))
    )
    return (
        out.with_columns(
            pl.when(pl.col("depth_ns") > 0)
            .then(pl.col("work_ns") / pl.col("depth_ns"))
            .alias("parallelism"),
            (pl.col("step_ns") - pl.col("_tail")).alias("no_tail_step_ns"),
            (pl.col("step_ns") - pl.col("_imbalance")).alias("balanced_dp_step_ns"),
        )
        .select(pl.col(name).cast(dtype) for name, dtype in frames.WORKDEPTH.items())
        .sort("step")
    )


def _async_overlap(chain: pl.DataFrame) -> pl.DataFrame:
    """Per step: (T_gen + T_train) / max(T_gen, T_train) on the critical path."""
    rollout = chain.filter(pl.col("stage") == "rollout")
    t_gen = intervals.union_length(rollout.select("step", "start_ns", "end_ns"), ["step"], "_gen")
    gen_end = rollout.group_by("step").agg(pl.col("end_ns").max().alias("_gen_end"))
    ends = chain.group_by("step").agg(
        pl.col("start_ns").min().alias("_first"), pl.col("end_ns").max().alias("_last")
    )
    t_train = pl.col("_last") - pl.col("_gen_end").fill_null(pl.col("_first"))
    t_gen_ns = pl.col("_gen").fill_null(0)
    return (
        ends.join(t_gen, on="step", how="left")
        .join(gen_end, on="step", how="left")
        .with_columns(t_train.clip(lower_bound=0).alias("_train"), t_gen_ns.alias("_gen"))
        .select(
            "step",
            pl.when(pl.max_horizontal("_gen", "_train") > 0)
            .then((pl.col("_gen") + pl.col("_train")) / pl.max_horizontal("_gen", "_train"))
            .alias("async_overlap_bound"),
        )
    )


def _tail_saving(chain: pl.DataFrame, stage_ranges: pl.DataFrame) -> pl.DataFrame:
    """Per step: how much earlier the critical path's rollout would end at the median rank's end."""
    finished = (
        stage_ranges.filter(
            (pl.col("stage") == "rollout") & (pl.col("rank") >= 0) & pl.col("step").is_not_null()
        )
        .group_by("step", "rank")
        .agg(pl.col("end_ns").max())
        .group_by("step")
        .agg(pl.col("end_ns").median().round().cast(pl.Int64).alias("_median"))
        .with_columns(pl.col("step").cast(pl.Int32))
    )
    on_chain = (
        chain.filter(pl.col("stage") == "rollout")
        .group_by("step")
        .agg(pl.col("end_ns").max().alias("_gen_end"))
    )
    return on_chain.join(finished, on="step").select(
        "step", (pl.col("_gen_end") - pl.col("_median")).clip(lower_bound=0).alias("_tail")
    )


def _imbalance(stage_timeline: pl.DataFrame, states: pl.DataFrame) -> pl.DataFrame:
    """Per step: max − mean over ranks of productive time inside update stages."""
    updates = stage_timeline.filter(
        pl.col("stage").cast(pl.String).is_in(TRAIN_STAGES) & pl.col("step").is_not_null()
    )
    productive = states.filter(pl.col("cause").is_null())
    keys = ["rank", "step"]
    both = intervals.intersection(
        productive.select(*keys, "start_ns", "end_ns"),
        updates.select(
            pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32), "start_ns", "end_ns"
        ),
        keys,
    )
    per_rank = intervals.length(both, keys, "_update")
    return per_rank.group_by("step").agg(
        (pl.col("_update").max() - pl.col("_update").mean())
        .round()
        .cast(pl.Int64)
        .alias("_imbalance")
    )


@provides("workdepth")
def workdepth(
    steps: pl.DataFrame,
    bubbles: pl.DataFrame,
    critical_path: pl.DataFrame,
    stage_ranges: pl.DataFrame,
    stage_timeline: pl.DataFrame,
    device_states: pl.DataFrame,
) -> pl.DataFrame:
    return compute(steps, bubbles, critical_path, stage_ranges, stage_timeline, device_states)


