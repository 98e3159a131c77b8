"""GPU time per rank: window, busy, idle, communication, computation and their overlap.

The HTA-compatible view of a trace (docs/analyses.md §6): busy is the union of kernels, copies
and memsets over all streams; the window runs from the rank's first to its last GPU activity;
communication kernels are those of a communication family (NCCL, RCCL, DeepEP, custom
all-reduce, …: taxonomy/comm_families.toml), computation kernels every other kernel.

All GPU activity in the trace counts, including work whose launch record is missing (HTA drops
such work from its temporal breakdown; it did run on the GPU inside the window).
"""

from __future__ import annotations

import polars as pl

from parsers.events import GPU_ACTIVITY_KINDS

from ..model import intervals
from ..model.products import provides

COLUMNS = [
    "rank", "trace_start_ns", "trace_end_ns", "gpu_start_ns", "gpu_end_ns", "gpu_window_ns",
    "busy_ns", "idle_ns", "idle_fraction", "comm_ns", "compute_ns", "memory_ns",
    "overlap_ns", "overlap_fraction", "kernels",
]

READS = ["rank", "kind", "stream", "coll", "start_ns", "end_ns"]
"""The event columns the GPU time reads: each filter below copies only these, not the ~25
columns of the event table."""


def compute(events: pl.DataFrame, *, hta_compatible: bool = False) -> pl.DataFrame:
    """One row per rank that has events; GPU columns are null for ranks without GPU activity.

    ``hta_compatible`` also counts CUDA synchronisation rows that sit on a stream as busy, as
    HTA's temporal breakdown does (rlperf does not: a stream sync is the host waiting).
    """
    by = ["rank"]
    traces = events.group_by(by).agg(
        pl.col("start_ns").min().alias("trace_start_ns"),
        pl.col("end_ns").max().alias("trace_end_ns"),
    )
    kinds = [*GPU_ACTIVITY_KINDS, "gpu_sync"] if hta_compatible else list(GPU_ACTIVITY_KINDS)
    device = pl.col("kind").is_in(kinds) & (pl.col("stream") >= 0)
    activity = events.lazy().select(READS).filter(device).collect()
    kernels = activity.filter(pl.col("kind") == "kernel")
    comm = kernels.filter(pl.col("coll").is_not_null())
    comp = kernels.filter(pl.col("coll").is_null())
    memory = activity.filter(pl.col("kind") != "kernel")
    gpu = activity.group_by(by).agg(
        pl.col("start_ns").min().alias("gpu_start_ns"),
        pl.col("end_ns").max().alias("gpu_end_ns"),
        (pl.col("kind") == "kernel").sum().alias("kernels"),
    )
    parts = [
        intervals.union_length(activity, by, "busy_ns"),
        intervals.union_length(comm, by, "comm_ns"),
        intervals.union_length(comp, by, "compute_ns"),
        intervals.union_length(memory, by, "memory_ns"),
        intervals.length(intervals.intersection(comm, comp, by), by, "overlap_ns"),
    ]
    out = traces.join(gpu, on=by, how="left")
    for part in parts:
        out = out.join(part, on=by, how="left")
    window = pl.col("gpu_end_ns") - pl.col("gpu_start_ns")
    has_gpu = pl.col("gpu_start_ns").is_not_null()
    zero = pl.lit(0, pl.Int64)
    out = (
        out.with_columns(
            window.alias("gpu_window_ns"),
            *[
                pl.when(has_gpu).then(pl.col(c).fill_null(zero)).alias(c)
                for c in ("busy_ns", "comm_ns", "compute_ns", "memory_ns", "overlap_ns")
            ],
        )
        .with_columns(
            (pl.col("gpu_window_ns") - pl.col("busy_ns")).alias("idle_ns"),
        )
        .with_columns(
            (pl.col("idle_ns") / pl.col("gpu_window_ns")).alias("idle_fraction"),
            pl.when(pl.col("comm_ns") > 0)
            .then(pl.col("overlap_ns") / pl.col("comm_ns"))
            .alias("overlap_fraction"),
        )
    )
    return out.select(COLUMNS).sort("rank")


@provides("gpu_time", per_rank=True)
def gpu_time(events: pl.DataFrame) -> pl.DataFrame:
    return compute(events)


