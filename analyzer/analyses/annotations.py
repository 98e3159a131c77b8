"""Time by top-level user annotation, per rank: count, the wall time it covers, and that time's
share of the rank's trace window.

"Top-level" means not enclosed by another user annotation on the same thread, ignoring the
profiler's own ``ProfilerStep#N`` ranges (they frame steps; the user's ranges sit inside them).
The time is the union of the annotation's ranges: two threads running ``gloo:all_reduce`` at once
cover the wall clock once (summed, a HolisticTraceAnalysis trace showed 166% of its window).
"""

import polars as pl

from parsers.events import nesting_depth

from ..model import intervals
from ..model.products import provides

OP_ID_SUFFIX = r", (?:op_id|seq) = \d+.*$"
"""PyTorch's emit_nvtx names every call apart (``aten::to, op_id = 999599``); grouped by op."""
STEP_PREFIX = "ProfilerStep#"
TOP = 8


def compute(events: pl.DataFrame) -> pl.DataFrame:
    """One row per rank and top-level annotation name; the event table is narrowed to the
    annotations (and their few columns) before any name is read as text, and the windows are
    a lazy query (eagerly, ``max - min`` in an aggregation materialised every group's rows).
    The shares are a lazy query too: an eager join with a one-row frame (a run of one rank)
    makes the window a constant column, which polars divides by as a multiplication by its
    reciprocal, one unit in the last place off the quotient that several ranks get."""
    windows = events.lazy().group_by("rank").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("window_ns")
    ).collect()
    keys = ["source", "pid", "tid"]
    ranges = events.lazy().filter(pl.col("kind").is_in(["annotation"])).select(
        *keys, "rank", "name", "start_ns", "end_ns"
    ).filter(~pl.col("name").cast(pl.String).str.starts_with(STEP_PREFIX)).collect()
    ranges = ranges.with_columns(nesting_depth(ranges, keys).alias("outer_depth"))
    top = ranges.filter(pl.col("outer_depth") == 0).with_columns(
        pl.col("name").cast(pl.String).str.replace(OP_ID_SUFFIX, "").alias("name")
    )
    covered = intervals.union_length(top, ["rank", "name"], name="time_ns")
    return (
        top.lazy()
        .group_by("rank", "name")
        .agg(pl.len().alias("count"))
        .join(covered.lazy(), on=["rank", "name"], how="left")
        .join(windows.lazy(), on="rank")
        .with_columns(
            pl.col("name").cast(pl.String),
            pl.col("time_ns").fill_null(0),
        )
        .with_columns((pl.col("time_ns") / pl.col("window_ns")).alias("share"))
        .drop("window_ns")
        .sort(["rank", "time_ns", "name"], descending=[False, True, False])
        .collect()
    )


@provides("annotations", per_rank=True)
def annotations(events: pl.DataFrame) -> pl.DataFrame:
    return compute(events)


