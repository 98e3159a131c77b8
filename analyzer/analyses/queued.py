"""Which host-bound idle the GPU spent waiting for a launch (docs/analyses.md, Findings).

The ``host_bound`` idle cause (§4) is GPU idle inside a stage range. The GPU waits for the host
only while no launched work is waiting to start: idle during which work launched earlier has
not begun (a CPU that ran ahead, a graph replay queued at once) is not launch overhead, and
neither is the idle before a rank's first recorded GPU work when that work started long after
its launch returned (the device was busy with work the trace did not record, or its clock is
not the host's). Launch calls are matched to their GPU work by correlation id.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from parsers.events import GPU_ACTIVITY_KINDS

from ..model import intervals
from ..model.query import collect

SPAN = ["rank", "start_ns", "end_ns"]


@dataclass(frozen=True)
class HostWait:
    """Host-bound idle split by what the GPU had to run: ``waited_ns`` with nothing launched,
    ``queued_ns`` with launched work not yet started, of which ``behind_ns`` lies before a
    rank's first recorded GPU work that started ``lag_ns`` after its launch (``rank``)."""

    waited_ns: int
    queued_ns: int
    behind_ns: int = 0
    rank: int | None = None
    lag_ns: int | None = None


def launch_calls(runtime: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Per rank and correlation id, the span of the runtime calls that carry it
    (``launch_start_ns``, ``launch_end_ns``): what launched the GPU work of that id."""
    return runtime.lazy().filter(
        (pl.col("kind") == "runtime") & pl.col("corr").is_not_null()
    ).group_by("rank", "corr").agg(
        pl.col("start_ns").min().alias("launch_start_ns"),
        pl.col("end_ns").max().alias("launch_end_ns"),
    ).pipe(collect)


def _launched(events: pl.DataFrame, ranks: pl.Series) -> pl.DataFrame:
    """Each GPU row with the end of the runtime call that launched it (``launch_end_ns``, null
    where no call has its correlation id)."""
    mine = events.filter(pl.col("rank").is_in(ranks.implode()))
    gpu = mine.filter(pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("stream") >= 0))
    calls = launch_calls(mine).drop("launch_start_ns")
    return gpu.select("rank", "corr", "start_ns").join(calls, on=["rank", "corr"], how="left")


def spans(launched: pl.DataFrame, lag_ns: int) -> pl.DataFrame:
    """Per GPU row launched by a call (``launch_end_ns``) that it started more than ``lag_ns``
    after: the span from ``lag_ns`` past the call's end to the row's start, while the work was
    queued (rank, start_ns, end_ns, and the row's other columns as ``work_*``)."""
    late = launched.filter(pl.col("start_ns") - pl.col("launch_end_ns") > lag_ns)
    extra = [c for c in late.columns if c not in ("rank", "start_ns", "end_ns")]
    return late.select(
        "rank", (pl.col("launch_end_ns") + lag_ns).alias("start_ns"),
        pl.col("start_ns").alias("end_ns"), *[pl.col(c).alias(f"work_{c}") for c in extra],
    )


def split(host_bound: pl.DataFrame, events: pl.DataFrame, lag_ns: int) -> HostWait:
    """``host_bound``: the device-state runs of that cause (rank, start_ns, end_ns). Queued:
    from ``lag_ns`` after a launch returned to its work's start, where that is later (an idle
    GPU starts launched work within microseconds); behind: a rank's window start to its first
    GPU work, where that work waited longer than ``lag_ns``."""
    total = int((host_bound["end_ns"] - host_bound["start_ns"]).sum() or 0)
    if total == 0:
        return HostWait(0, 0)
    launched = _launched(events, host_bound["rank"].unique())
    queued = spans(launched, lag_ns).select(SPAN)
    first = launched.sort("start_ns").group_by("rank", maintain_order=True).first().join(
        host_bound.group_by("rank").agg(pl.col("start_ns").min().alias("_from")), on="rank"
    ).filter(pl.col("start_ns") - pl.col("launch_end_ns") > lag_ns)
    behind = first.select("rank", pl.col("_from").alias("start_ns"), pl.col("start_ns")
                          .alias("end_ns"))
    cover = pl.concat([queued, behind]).select(SPAN)
    waited = intervals.length(intervals.difference(host_bound.select(SPAN), cover, ["rank"]))
    waited_ns = int(waited["length_ns"][0] or 0)
    behind_in = intervals.length(intervals.intersection(host_bound.select(SPAN), behind, ["rank"]))
    out = HostWait(waited_ns, total - waited_ns, int(behind_in["length_ns"][0] or 0))
    if first.height == 0:
        return out
    worst = first.sort(pl.col("start_ns") - pl.col("launch_end_ns"), descending=True).row(
        0, named=True
    )
    return HostWait(out.waited_ns, out.queued_ns, out.behind_ns, worst["rank"],
                    worst["start_ns"] - worst["launch_end_ns"])
