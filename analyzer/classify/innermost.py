"""The stage timeline where a rank's ranges do not nest: who owns each instant.

:func:`analyzer.classify.timeline.timeline` walks nesting depths, which is exact when a rank's
ranges form one stack (one thread). A rank whose ranges come from several threads or processes
(a verl worker's rollout thread beside its trainer, every process of an nsys report taken for
one rank) has ranges that cross: with ``A=[0,10)``, ``B=[5,15)``, ``C=[12,20)`` the walk gives
``B`` and ``C`` both ``[12,15)``, so stage times summed over the step exceed the step and its
``other`` (step time minus staged time) went negative. Here every instant belongs to exactly one
range: the one that started last among those covering it (ties: the shorter, which is the inner
one of two that start together). On ranges that do nest this is the innermost range, so the
depth walk and this agree wherever both apply.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def overlapping_ranks(pieces: pl.DataFrame) -> list[int]:
    """Ranks whose timeline pieces (``rank, start_ns, end_ns``) overlap one another."""
    if pieces.height == 0:
        return []
    reach = pl.col("end_ns").cum_max().shift(1).over("rank")
    ordered = pieces.select("rank", "start_ns", "end_ns").sort("rank", "start_ns")
    return sorted(ordered.filter(pl.col("start_ns") < reach)["rank"].unique().to_list())


def owners(ranges: pl.DataFrame) -> pl.DataFrame:
    """Disjoint pieces ``_id, rank, start_ns, end_ns``: maximal runs of time each range
    (``_id``) owns, the latest-started covering range owning every instant."""
    order = ranges.select("_id", "rank", "start_ns", "end_ns").sort(
        "rank", "start_ns", "end_ns", "_id", descending=[False, False, True, False]
    )
    if order.height == 0:
        return order
    points = (
        pl.concat([order.select("rank", t="start_ns"), order.select("rank", t="end_ns")])
        .unique()
        .sort("rank", "t")
        .with_columns(pl.col("t").shift(-1).over("rank").alias("t_next"))
        .filter(pl.col("t_next").is_not_null())
    )
    rank_code = {r: i for i, r in enumerate(order["rank"].unique().sort().to_list())}
    code = order["rank"].replace_strict(rank_code, return_dtype=pl.Int64).to_numpy()
    p_code = points["rank"].replace_strict(rank_code, return_dtype=pl.Int64).to_numpy()
    t = points["t"].to_numpy()
    last = _last_started(code, order["start_ns"].to_numpy(), p_code, t)
    winner = _last_open(order["end_ns"].to_numpy(), last, t, _group_start(code, p_code))
    owned = points.with_columns(pl.Series("_pos", winner)).filter(pl.col("_pos") >= 0)
    owned = owned.with_columns(pl.Series("_id", order["_id"].to_numpy()[owned["_pos"]]))
    run = (
        (pl.col("_id") != pl.col("_id").shift(1)) | (pl.col("t") != pl.col("t_next").shift(1))
    ).fill_null(True)
    return (
        owned.with_columns(run.cum_sum().over("rank").alias("_run"))
        .group_by("rank", "_run")
        .agg(pl.col("_id").first(), pl.col("t").min().alias("start_ns"),
             pl.col("t_next").max().alias("end_ns"))
        .select("_id", "rank", "start_ns", "end_ns")
        .sort("rank", "start_ns")
    )


def _last_started(code: np.ndarray, starts: np.ndarray, p_code: np.ndarray,
                  t: np.ndarray) -> np.ndarray:
    """Per point, the index of the last range (ranges in rank, start order) of its rank that
    started at or before it: ranges and points sorted together, a point after the ranges that
    start when it lies, and the ranges before each point counted."""
    is_point = np.concatenate([np.zeros(len(starts), np.int8), np.ones(len(t), np.int8)])
    value = np.concatenate([starts, t])
    group = np.concatenate([code, p_code])
    merged = np.lexsort((is_point, value, group))
    before = np.cumsum(is_point[merged] == 0)
    out = np.empty(len(t), dtype=np.int64)
    out[merged[is_point[merged] == 1] - len(starts)] = before[is_point[merged] == 1] - 1
    return out


def _group_start(code: np.ndarray, p_code: np.ndarray) -> np.ndarray:
    """Per point, the index of its rank's first range."""
    first = np.searchsorted(code, np.arange(int(code.max(initial=0)) + 1), side="left")
    return first[p_code]


def _last_open(ends: np.ndarray, last: np.ndarray, t: np.ndarray,
               floor: np.ndarray) -> np.ndarray:
    """Per point, the largest index ``j`` in ``[floor, last]`` with ``ends[j] > t`` (-1: none):
    binary lifting over a sparse table of the running maximum of ends, so log₂(n) array passes
    rather than a loop over ranges."""
    n = len(ends)
    table = [ends.copy()]
    span = 1
    while span * 2 <= n:
        prev = table[-1]
        shifted = np.concatenate([np.full(span, np.iinfo(np.int64).min), prev[:-span]])
        table.append(np.maximum(prev, shifted))
        span *= 2
    pos = last.copy()
    for level in range(len(table) - 1, -1, -1):
        ok = pos >= 0
        block = np.where(ok, table[level][np.maximum(pos, 0)], np.iinfo(np.int64).max)
        skip = ok & (block <= t)
        pos = np.where(skip, pos - (1 << level), pos)
    found = (pos >= floor) & (pos >= 0)
    found &= ends[np.maximum(pos, 0)] > t
    return np.where(found, pos, -1)
