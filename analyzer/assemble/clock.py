"""One clock for all ranks (product ``clock``, docs/analyses.md §2) and the events on it (product
``aligned``).

Parsers already put every source on the epoch clock; per-rank offsets are then estimated from
matched collective instances (members leave a collective together), alternating between each
instance's common end and each rank's offset (medians, so a few odd instances do not move the
estimate). An offset is applied only when it exceeds its own uncertainty (``SIGNIFICANCE`` × MAD);
ranks recorded in one file (an Nsight report of several processes) share its clock. ``aligned``
is the event table with offsets subtracted, every rank's whatever ``--ranks`` selects: the
products that read it see each rank's partners (docs/cli.md, "--ranks").
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

import polars as pl

from parsers.discover import format_traits
from parsers.source import SESSION_CLOCK

from ..model import frames
from ..model.products import provides
from ..model.run import SourceInfo

SIGNIFICANCE = 3.0
"""An estimated offset is applied when |offset| > SIGNIFICANCE × its uncertainty (MAD)."""
MIN_OFFSET_NS = 1_000
"""Offsets below a microsecond are below what the clocks tell apart; never applied."""
SYMMETRIC: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
"""Collectives every member leaves together (the last arrival releases everyone)."""
ROOTED_DISCOUNT = 1000
"""A pair linked by symmetric collectives outweighs this many rooted ones."""
def estimate_clock(calls: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Per rank: offset (ns, to subtract), uncertainty (MAD of its residuals), matched instances,
    and whether it could be aligned (docs/analyses.md §2).

    Each matched instance gives every member's end minus the end of its lowest member; the
    median of those differences per rank pair is that pair's offset. Offsets then follow the
    pairs resting on the most instances outwards from the lowest rank of each connected set
    (a maximum spanning tree), which is exact when ends coincide and robust to odd instances.
    Rooted collectives (broadcast, send/recv, …) let the root leave early, so pairs that share
    a symmetric collective are preferred; rooted ones only link what nothing else links."""
    matched = calls.filter(pl.col("instance") >= 0).group_by("instance", "rank").agg(
        pl.col("end_ns").max(), pl.col("coll").is_in(list(SYMMETRIC)).all().alias("sym"))
    ref = matched.group_by("instance").agg(pl.col("rank").min().alias("ref"))
    rows = matched.join(ref, on="instance")
    ref_end = rows.filter(pl.col("rank") == pl.col("ref")).select(
        "instance", pl.col("end_ns").alias("ref_end")
    )
    edges = (
        rows.filter(pl.col("rank") != pl.col("ref"))
        .join(ref_end, on="instance")
        .group_by("rank", "ref", "sym")
        .agg((pl.col("end_ns") - pl.col("ref_end")).median().alias("d"), pl.len().alias("w"))
        .with_columns(
            pl.when(pl.col("sym"))
            .then(pl.col("w") * ROOTED_DISCOUNT)
            .otherwise(pl.col("w"))
            .alias("w")
        )
    )
    offsets = _spanning_offsets(edges.iter_rows(named=True))
    table = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32}).join(
        pl.DataFrame(
            {"rank": list(offsets), "offset": list(offsets.values())},
            schema={"rank": pl.Int32, "offset": pl.Float64},
        ),
        on="rank",
        how="left",
    )
    if rows.height:
        with_off = rows.join(table, on="rank").with_columns(
            (pl.col("end_ns") - pl.col("offset")).alias("_t")
        )
        common = with_off.group_by("instance").agg(pl.col("_t").median().alias("_e"))
        resid = with_off.join(common, on="instance").group_by("rank").agg(
            (pl.col("_t") - pl.col("_e")).abs().median().alias("mad"), pl.len().alias("matched"))
        table = table.join(resid, on="rank", how="left")
    else:
        table = table.with_columns(
            pl.lit(None, pl.Float64).alias("mad"), pl.lit(0, pl.UInt32).alias("matched")
        )
    significant = (pl.col("offset").abs() > SIGNIFICANCE * pl.col("mad")) & (
        pl.col("offset").abs() >= MIN_OFFSET_NS
    )
    return table.select(
        "rank",
        pl.when(significant)
        .then(pl.col("offset").round(0))
        .otherwise(0)
        .fill_null(0)
        .cast(pl.Int64)
        .alias("offset_ns"),
        pl.when(significant)
        .then(pl.col("mad"))
        .otherwise(pl.max_horizontal(pl.col("mad"), pl.col("offset").abs()))
        .round(0)
        .fill_null(0)
        .cast(pl.Int64)
        .alias("uncertainty_ns"),
        pl.col("matched").fill_null(0).cast(pl.Int64).alias("matched"),
        (pl.col("matched").fill_null(0) > 0).alias("aligned"),
        pl.col("offset").round(0).cast(pl.Int64).alias("estimate_ns"),
    ).sort("rank")


def _spanning_offsets(edges: Iterable[dict[str, Any]]) -> dict[int, float]:
    """Offsets from pair estimates ``(rank, ref, d = offset_rank − offset_ref, w)``: Prim's tree
    over the heaviest pairs from the lowest rank of each connected set (offset 0)."""
    adjacent: dict[int, list[tuple[int, int, float]]] = {}
    for e in edges:
        r, s, d, w = int(e["rank"]), int(e["ref"]), float(e["d"]), int(e["w"])
        adjacent.setdefault(r, []).append((w, s, -d))
        adjacent.setdefault(s, []).append((w, r, d))
    offsets: dict[int, float] = {}
    for root in sorted(adjacent):
        if root in offsets:
            continue
        offsets[root] = 0.0
        frontier = [(-w, nxt, root, d) for w, nxt, d in adjacent[root]]
        heapq.heapify(frontier)
        while frontier:
            _, node, via, d = heapq.heappop(frontier)
            if node in offsets:
                continue
            offsets[node] = offsets[via] + d
            for w, nxt, d2 in adjacent[node]:
                if nxt not in offsets:
                    heapq.heappush(frontier, (-w, nxt, node, d2))
    return offsets


def aligned_events(events: pl.DataFrame, clock: pl.DataFrame, unaligned_sources: list[int]
                   ) -> pl.DataFrame:
    """``events`` with each rank's offset subtracted (synthetic-time and epoch-less sources
    stay)."""
    offsets = clock.select("rank", "offset_ns")
    shift = pl.col("offset_ns").fill_null(0)
    keep = ~pl.col("source").is_in(unaligned_sources) & ~pl.col("synthetic_time")
    return (
        events.join(offsets, on="rank", how="left", maintain_order="left")
        .with_columns(
            pl.when(keep)
            .then(pl.col("start_ns") - shift)
            .otherwise(pl.col("start_ns"))
            .alias("start_ns"),
            pl.when(keep)
            .then(pl.col("end_ns") - shift)
            .otherwise(pl.col("end_ns"))
            .alias("end_ns"),
        )
        .drop("offset_ns")
    )


def _unaligned_sources(sources: list[SourceInfo]) -> list[int]:
    return [
        s.index
        for s in sources
        if str(s.meta.get("time_base", "")).startswith(("synthetic", "session-relative", "none"))
        or SESSION_CLOCK in format_traits(s.format)
    ]


def one_clock_per_file(table: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Ranks recorded in one file (the processes of one Nsight report) share its clock: each
    takes the offset of the lowest rank it shares a file with, directly or through others,
    whatever its collectives suggest (point-to-point ends differ by their transfer, which the
    estimate would read as a clock offset)."""
    pairs = calls.filter(pl.col("rank") >= 0).select("source", "rank").unique()
    first = dict(pairs.group_by("source").agg(pl.col("rank").min()).iter_rows())
    parent: dict[int, int] = {}

    def root(r: int) -> int:
        while parent.get(r, r) != r:
            r = parent[r]
        return r

    for source, rank in pairs.iter_rows():
        a, b = root(rank), root(first[source])
        if a != b:
            parent[max(a, b)] = min(a, b)
    roots = {r: root(r) for r in pairs["rank"].to_list() if root(r) != r}
    if not roots:
        return table
    shared = pl.DataFrame(
        {"rank": list(roots), "_root": list(roots.values())},
        schema={"rank": pl.Int32, "_root": pl.Int32},
    )
    offsets = table.select(pl.col("rank").alias("_root"), pl.col("offset_ns").alias("_off"))
    return (
        table.join(shared, on="rank", how="left")
        .join(offsets, on="_root", how="left")
        .with_columns(pl.coalesce("_off", "offset_ns").alias("offset_ns"))
        .select(table.columns)
    )


@provides("clock", schema=frames.CLOCK)
def clock(collective_calls: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    return one_clock_per_file(estimate_clock(collective_calls, ranks), collective_calls)


@provides("aligned")
def aligned(events: pl.DataFrame, clock: pl.DataFrame, sources: list[SourceInfo]) -> pl.DataFrame:
    return aligned_events(events, clock, _unaligned_sources(sources))
