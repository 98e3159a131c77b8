"""Synchronisation overhead: collectives per dimension, weight sync, stragglers.

Definitions are docs/analyses.md §4–§5. Everything rests on ``collective_waits``: per
collective row, when its instance's last member arrived, the sync wait (time before that
arrival not hidden behind the rank's own non-collective activity) and the exposed time (time
no non-collective activity overlaps). From it:

- ``collectives_by_dim``: per dimension and collective kind, count, bytes, time, exposed, wait,
  transfer and the bytes-weighted bus bandwidth (nccl-tests convention, :data:`BUSBW_FACTOR`);
- ``weight_sync``: per step, the wall time some rank spends in the ``weight_sync`` stage, the
  bytes its collectives move (each instance once) and the effective bandwidth;
- ``stragglers``: per rank, the wait it caused by arriving last;

``collectives_by_dim`` sums the rows of the ``--ranks`` selection and ``stragglers`` keeps its
ranks' rows; the waits themselves are every rank's (a rank waits for partners not selected).
- ``exposed_intervals`` and ``exposed_comm``: per rank, the pieces of time a collective runs
  exposed, and the time a collective runs with the part of it exposed, each moment counted
  once (the per-call sums above count both of two collectives on two streams or threads at
  once: twice the time of either, more than the device spent).
"""

from __future__ import annotations

import polars as pl

from taxonomy.vocab import STAGE

from ..model import frames, intervals
from ..model.products import provides

BUSBW_FACTOR: dict[str, tuple[float, float]] = {
    "all_reduce": (2.0, 0.0),
    "all_gather": (1.0, 0.0),
    "reduce_scatter": (1.0, 0.0),
    "all_to_all": (1.0, 0.0),
    "gather": (1.0, 0.0),
    "scatter": (1.0, 0.0),
    "broadcast": (0.0, 1.0),
    "reduce": (0.0, 1.0),
    "send": (0.0, 1.0),
    "recv": (0.0, 1.0),
    "send_recv": (0.0, 1.0),
}
"""busbw = algbw × (a·(n−1)/n + b) per collective kind, n the group size (nccl-tests
PERFORMANCE.md); kinds not listed (barrier, other) get no bus bandwidth."""


def compute_waits(collectives: pl.DataFrame, activity: pl.DataFrame) -> pl.DataFrame:
    """COLLECTIVE_WAITS: arrival, sync wait and exposed time of every collective row."""
    if collectives.height == 0:
        return frames.empty(frames.COLLECTIVE_WAITS)
    arrivals = (
        collectives.filter(pl.col("instance") >= 0)
        .group_by("instance")
        .agg(pl.col("start_ns").max().alias("arrival_ns"))
    )
    rows = collectives.join(arrivals, on="instance", how="left").with_columns(
        pl.col("arrival_ns").fill_null(pl.col("start_ns"))
    )
    wait_end = pl.max_horizontal("start_ns", pl.min_horizontal("end_ns", "arrival_ns"))
    compute = non_collective(activity).select("rank", "start_ns", "end_ns")
    waiting = rows.select("rank", "start_ns", wait_end.alias("end_ns"))
    hidden_wait = intervals.overlap_each(waiting, compute, ["rank"])
    hidden = intervals.overlap_each(rows.select("rank", "start_ns", "end_ns"), compute, ["rank"])
    return rows.with_columns(
        ((waiting["end_ns"] - waiting["start_ns"]) - hidden_wait).alias("wait_ns"),
        ((pl.col("end_ns") - pl.col("start_ns")) - hidden).alias("exposed_ns"),
    ).select(
        pl.col(name).cast(dtype) for name, dtype in frames.COLLECTIVE_WAITS.items()
    )


def non_collective(activity: pl.DataFrame) -> pl.DataFrame:
    """What hides a collective: the rank's other activity."""
    return activity.filter(~pl.col("is_collective"))


def compute_exposed_intervals(collectives: pl.DataFrame, activity: pl.DataFrame) -> pl.DataFrame:
    """EXPOSED_INTERVALS: per rank, the disjoint pieces of time some collective runs and no
    other activity does."""
    if collectives.height == 0:
        return frames.empty(frames.EXPOSED_INTERVALS)
    compute = non_collective(activity).select("rank", "start_ns", "end_ns")
    return intervals.difference(collectives, compute, ["rank"]).select(
        pl.col(name).cast(dtype) for name, dtype in frames.EXPOSED_INTERVALS.items()
    )


def exposed_within(
    calls: pl.DataFrame, exposed_intervals: pl.DataFrame, by: list[str]
) -> pl.DataFrame:
    """Per ``by`` (which holds ``rank``): the union of the ``calls`` (``comm_ns``) and the part
    of it in the rank's exposed intervals (``exposed_ns``): each moment counted once, however
    many calls run in it."""
    comm = intervals.union_length(calls, by, "comm_ns")
    pieces = calls.select(by).unique().join(exposed_intervals, on="rank")
    exposed = intervals.length(intervals.intersection(pieces, calls, by), by, "exposed_ns")
    return comm.join(exposed, on=by, how="left").with_columns(pl.col("exposed_ns").fill_null(0))


def compute_exposed(collectives: pl.DataFrame, exposed_intervals: pl.DataFrame) -> pl.DataFrame:
    """EXPOSED_COMM."""
    if collectives.height == 0:
        return frames.empty(frames.EXPOSED_COMM)
    exposed = intervals.length(exposed_intervals, ["rank"], "exposed_ns")
    return (
        intervals.union_length(collectives, ["rank"], "comm_ns")
        .join(exposed, on="rank", how="left")
        .with_columns(pl.col("exposed_ns").fill_null(0))
        .select(pl.col(name).cast(dtype) for name, dtype in frames.EXPOSED_COMM.items())
        .sort("rank")
    )


def compute_by_dim(waits: pl.DataFrame) -> pl.DataFrame:
    """COLLECTIVES_BY_DIM from ``collective_waits``; ``bytes`` is null where no call of the
    kind has a size (HTA's test trace records none of its all-to-all sizes: not 0 B)."""
    if waits.height == 0:
        return frames.empty(frames.COLLECTIVES_BY_DIM)
    factors = pl.DataFrame(
        {
            "coll": list(BUSBW_FACTOR),
            "_a": [a for a, _ in BUSBW_FACTOR.values()],
            "_b": [b for _, b in BUSBW_FACTOR.values()],
        }
    )
    n = pl.col("group_size").cast(pl.Float64)
    transfer = pl.col("end_ns") - pl.col("start_ns") - pl.col("wait_ns")
    rows = waits.join(factors, on="coll", how="left").with_columns(
        pl.when(
            (transfer > 0) & (n >= 1) & pl.col("_a").is_not_null() & pl.col("bytes").is_not_null()
        )
        .then(pl.col("bytes") / transfer * (pl.col("_a") * (n - 1) / n + pl.col("_b")))
        .alias("_busbw")
    )
    weighted = pl.col("_busbw").is_not_null()
    return (
        rows.group_by("dim", "coll")
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.when(pl.col("bytes").is_not_null().any())
            .then(pl.col("bytes").sum())
            .cast(pl.Int64)
            .alias("bytes"),
            (pl.col("end_ns") - pl.col("start_ns")).sum().alias("time_ns"),
            pl.col("exposed_ns").sum().alias("exposed_ns"),
            pl.col("wait_ns").sum().alias("wait_ns"),
            pl.when(pl.col("bytes").filter(weighted).sum() > 0)
            .then(
                (pl.col("_busbw") * pl.col("bytes")).filter(weighted).sum()
                / pl.col("bytes").filter(weighted).sum()
            )
            .alias("busbw_gbps"),
        )
        .with_columns((pl.col("time_ns") - pl.col("wait_ns")).alias("transfer_ns"))
        .select(pl.col(name).cast(dtype) for name, dtype in frames.COLLECTIVES_BY_DIM.items())
        .sort(["dim", "time_ns"], descending=[False, True])
    )


def compute_weight_sync(
    stage_timeline: pl.DataFrame, waits: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    """WEIGHT_SYNC: per step with a weight sync, its wall time, bytes and effective bandwidth."""
    syncing = intervals.clip_to_windows(
        stage_timeline.filter(pl.col("stage") == "weight_sync").select(
            "rank", "start_ns", "end_ns"
        ),
        steps,
    )
    if syncing.height == 0:
        return frames.empty(frames.WEIGHT_SYNC)
    time = intervals.union_length(syncing, ["step"], "time_ns")
    inside = waits.filter(pl.col("stage") == pl.lit("weight_sync", STAGE))
    per_instance = pl.concat(
        [
            inside.filter(pl.col("instance") >= 0)
            .group_by("step", "instance")
            .agg(pl.col("bytes").max()),
            inside.filter(pl.col("instance") < 0).select("step", "instance", "bytes"),
        ]
    )
    moved = per_instance.group_by("step").agg(pl.col("bytes").sum())
    windows = steps.select("step", (pl.col("end_ns") - pl.col("start_ns")).alias("_window"))
    return (
        time.join(moved, on="step", how="left")
        .join(windows, on="step")
        .with_columns(pl.col("bytes").fill_null(0))
        .with_columns(
            pl.when(pl.col("time_ns") > 0)
            .then(pl.col("bytes") / pl.col("time_ns"))
            .alias("bandwidth_gbps"),
            (pl.col("time_ns") / pl.col("_window")).alias("share"),
        )
        .select(pl.col(name).cast(dtype) for name, dtype in frames.WEIGHT_SYNC.items())
        .sort("step")
    )


def compute_stragglers(waits: pl.DataFrame) -> pl.DataFrame:
    """STRAGGLERS: per rank that arrived last at some matched instance, the others' wait there."""
    matched = waits.filter(pl.col("instance") >= 0)
    members = matched.group_by("instance").agg(
        pl.len().alias("_members"), pl.col("wait_ns").sum().alias("_all")
    )
    last = (
        matched.sort(["instance", "start_ns", "rank"], descending=[False, True, False])
        .group_by("instance", maintain_order=True)
        .first()
        .select("instance", "rank", pl.col("wait_ns").alias("_own"))
    )
    return (
        last.join(members, on="instance")
        .filter(pl.col("_members") >= 2)
        .group_by("rank")
        .agg(
            (pl.col("_all") - pl.col("_own")).sum().alias("caused_wait_ns"),
            pl.len().alias("last_arrivals"),
        )
        .select(pl.col(name).cast(dtype) for name, dtype in frames.STRAGGLERS.items())
        .sort(["caused_wait_ns", "rank"], descending=[True, False])
    )


def in_steps(collectives: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The calls every synchronisation number counts: those inside a step window when the trace
    has step windows, every call when it has none. ``--steps`` keeps the calls of its steps, so
    selecting every step changes nothing, and the headline, the per-dimension table and the
    findings count the same calls: HTA's rank-34 trace has 1.10 s of exposed gloo all-reduce
    over the whole trace and 179 ms in its one step, the figure its finding gives."""
    if steps.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()).height:
        return collectives.filter(pl.col("step").is_not_null())
    return collectives


@provides("collective_waits")
def collective_waits(
    collectives: pl.DataFrame, activity: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    return compute_waits(in_steps(collectives, steps), activity)


@provides("exposed_intervals", schema=frames.EXPOSED_INTERVALS)
def exposed_intervals(
    collectives: pl.DataFrame, activity: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    return compute_exposed_intervals(in_steps(collectives, steps), activity)


@provides("exposed_comm", schema=frames.EXPOSED_COMM)
def exposed_comm(
    collectives: pl.DataFrame, exposed_intervals: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    return compute_exposed(in_steps(collectives, steps), exposed_intervals)


def of_ranks(frame: pl.DataFrame, selected_ranks: list[int]) -> pl.DataFrame:
    """The rows of the ranks analysed (``--ranks``; the driver's and rankless ones stay, so
    without a selection it is ``frame``): the waits were measured against every rank's
    arrivals, so a selected rank's rows are those of the run without the selection."""
    rank = pl.col("rank")
    return frame.filter(rank.is_null() | (rank < 0) | rank.is_in(selected_ranks))


@provides("collectives_by_dim")
def collectives_by_dim(collective_waits: pl.DataFrame, selected_ranks: list[int]) -> pl.DataFrame:
    return compute_by_dim(of_ranks(collective_waits, selected_ranks))


@provides("weight_sync")
def weight_sync(
    stage_timeline: pl.DataFrame, collective_waits: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    return compute_weight_sync(stage_timeline, collective_waits, steps)


@provides("stragglers")
def stragglers(collective_waits: pl.DataFrame, selected_ranks: list[int]) -> pl.DataFrame:
    """Per selected rank, the wait it caused every rank (the last arrival is found among all)."""
    return of_ranks(compute_stragglers(collective_waits), selected_ranks)


