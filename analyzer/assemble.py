"""Run assembly: which rank (or the driver) every source is, one clock for all ranks.

* **Ranks and roles** (:func:`assign_ranks`, called by :func:`build`, which makes the run): a rank from the trace
  (``distributedInfo``, nsys environment), else from the file name (``rank-3``, ``rank3``),
  else the next free number. The single controller of verl/OpenRLHF-style runs is not a device:
  a source (or, in an Nsight report of the whole job, a process) without device work whose
  ranges are the driver's timers (``step``, ``gen``, …), or whose file is named so
  (``driver``, ``controller``), gets rank ``-1`` and the ``driver`` role. Log rows keep ``-1``.
* **Clock** (product ``clock``, docs/analyses.md §2): parsers already put every source on the
  epoch clock; per-rank offsets are then estimated from matched collective instances (members
  leave a collective together), alternating between each instance's common end and each rank's
  offset (medians, so a few odd instances do not move the estimate). An offset is applied only
  when it exceeds its own uncertainty (``SIGNIFICANCE`` × MAD); ranks on one host clock stay put.
* **Aligned events** (product ``aligned``): the event table with offsets subtracted, restricted
  to the ``--ranks`` selection (the driver and logs always stay).
* **Collective calls** (product ``collective_calls``): one row per rank and call — NCCL kernels
  on ranks with device work, the outermost host collective ranges otherwise — with its process
  group filled from the source's ``pg_config`` and matched across members into instances by
  (group, ``seq``) or, without ``seq``, by order within the group.
The steps (``ProfilerStep#N``, step ranges, rollout waves, log steps) are
:mod:`analyzer.steps`'s.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl

from parsers import ParsedSource
from parsers.discover import format_traits
from parsers.events import GPU_ACTIVITY_KINDS, concat
from parsers.source import RANK_IN_NAME_BOUNDED, SESSION_CLOCK, empty_metrics
from taxonomy import profiles as tp

from . import frames
from .options import Options, Selection
from .products import provides
from .run import Run, SourceInfo

DRIVER_FILE = re.compile(r"(?i)(^|[^a-z])(driver|controller|taskrunner|main_task)([^a-z]|$)")
SIGNIFICANCE = 3.0
"""An estimated offset is applied when |offset| > SIGNIFICANCE × its uncertainty (MAD)."""
MIN_OFFSET_NS = 1_000
"""Offsets below a microsecond are below what the clocks tell apart; never applied."""
SYMMETRIC: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
"""Collectives every member leaves together (the last arrival releases everyone)."""
ROOTED_DISCOUNT = 1000
"""A pair linked by symmetric collectives outweighs this many rooted ones."""
DRIVER = "driver"
WORKER = "worker"
LOG = "log"


# --- ranks and roles ---------------------------------------------------------------------------


def assign_ranks(parsed: list[ParsedSource], options: Options | None = None) -> tuple[pl.DataFrame, list[int], list[str], list[str]]:
    """Events of all sources with ``source`` and ``rank`` filled, each source's rank (-1: several
    or none) and role (``worker``, ``driver``, ``log``), and notes saying what was decided. The
    driver is told by the names of its ranges, classified with the user's ``--rules`` and
    ``--framework``."""
    notes: list[str] = []
    tables = [p.events.with_columns(pl.lit(i, dtype=pl.UInt32).alias("source")) for i, p in enumerate(parsed)]
    taken = {int(r) for t in tables for r in t["rank"].unique().to_list() if r is not None and r >= 0}
    units = _units(parsed, tables, options or Options())
    several = sum(u["trace"] for u in units) > 1
    fixes: dict[tuple[int, int | None], int] = {}
    next_free = 0
    for u in units:
        if not u["trace"] or u["rank"] >= 0:
            continue
        where = u["label"]
        by_file = RANK_IN_NAME_BOUNDED.search(u["file"]) if u["pid"] is None else None
        if u["driver_file"] or (several and u["driverish"]):
            u["role"] = DRIVER
            why = "its file name" if u["driver_file"] else "driver timers and no device work"
            notes.append(f"{where}: the single controller ({why}); role driver, not a device")
            continue
        if by_file and int(by_file.group(1)) not in taken:
            rank = int(by_file.group(1))
            notes.append(f"{where}: rank {rank} from the file name")
        else:
            while next_free in taken:
                next_free += 1
            rank = next_free
            notes.append(f"{where}: no rank recorded; numbered {rank} by input order")
        taken.add(rank)
        fixes[(u["source"], u["pid"])] = rank
        u["rank"] = rank
    out = []
    for i, table in enumerate(tables):
        mine = {pid: r for (s, pid), r in fixes.items() if s == i}
        if None in mine:
            table = table.with_columns(pl.when(pl.col("rank") < 0).then(pl.lit(mine[None], pl.Int32)).otherwise(pl.col("rank")).alias("rank"))
        elif mine:
            table = table.with_columns(
                pl.when(pl.col("rank") < 0)
                .then(pl.col("pid").replace_strict(mine, default=-1, return_dtype=pl.Int32))
                .otherwise(pl.col("rank")).alias("rank")
            )
        out.append(table)
    ranks, roles = [], []
    for i in range(len(parsed)):
        mine = [u for u in units if u["source"] == i and u["trace"]]
        worker_ranks = {u["rank"] for u in mine if u["role"] == WORKER and u["rank"] >= 0}
        ranks.append(worker_ranks.pop() if len(worker_ranks) == 1 else -1)
        roles.append(LOG if not mine else DRIVER if all(u["role"] == DRIVER for u in mine) else WORKER)
    return concat(out), ranks, roles, notes


def _units(parsed: list[ParsedSource], tables: list[pl.DataFrame], options: Options) -> list[dict[str, Any]]:
    """The processes of the run: a whole source, or one pid of a multi-process (nsys) source."""
    units = []
    names: set[str] = set()
    for table in tables:
        names.update(table.filter(pl.col("kind").is_in(["annotation", "gpu_annotation"]))["name"].cast(pl.String).unique().to_list())
    profiles = tp.load_profiles(options.rules)
    meta = next((p.meta for p in parsed if p.meta.get("framework")), None)
    detection = tp.detect(names, meta=meta, profiles=profiles, framework=options.framework)
    classes = tp.classify(names, "trace", detection, profiles=profiles)
    driver_names = set(classes.filter((pl.col("role") == "driver") & pl.col("relation").is_in(["stage", "step"]))["name"].to_list())
    other_names = set(classes.filter((pl.col("role") != "driver") & (pl.col("relation") == "stage"))["name"].to_list())
    for i, (p, table) in enumerate(zip(parsed, tables, strict=True)):
        split = "processes" in p.meta and table.filter(pl.col("rank") < 0).height > 0
        stats = (
            table.with_columns(pl.col("pid") if split else pl.lit(None, pl.Int64).alias("pid"))
            .group_by("pid")
            .agg(
                pl.col("rank").max().alias("rank"),
                (pl.col("kind") != "log_stage").any().alias("trace"),
                pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)).any().alias("gpu"),
                pl.col("coll").is_not_null().any().alias("coll"),
                pl.col("name").filter(pl.col("kind").is_in(["annotation", "gpu_annotation"])).cast(pl.String).unique().alias("names"),
            )
            .sort("pid", nulls_last=True)
        )
        for row in stats.iter_rows(named=True):
            own = set(row["names"] or [])
            n_driver, n_other = len(own & driver_names), len(own & other_names)
            units.append({
                "source": i, "pid": row["pid"], "rank": int(row["rank"]) if row["rank"] is not None else -1,
                "trace": bool(row["trace"]), "file": p.path.name,
                "label": p.path.name + (f" pid {row['pid']}" if row["pid"] is not None else ""),
                "driver_file": bool(DRIVER_FILE.search(p.path.name)) and row["pid"] is None and not row["gpu"],
                "driverish": not row["gpu"] and not row["coll"] and n_driver > 0 and n_driver >= n_other,
                "role": WORKER,
            })
    return units


# --- collective calls and instances ------------------------------------------------------------

CALL_COLUMNS = ["rank", "source", "name", "kind", "coll", "pg", "pg_desc", "pg_ranks", "group_size",
                "bytes", "seq", "start_ns", "end_ns", "group", "instance"]


def collective_calls(events: pl.DataFrame, pg_config: dict[int, list[dict[str, Any]]]) -> pl.DataFrame:
    """One row per rank and collective call, with its group (canonical ranks) and instance."""
    coll = events.filter(pl.col("coll").is_not_null() & (pl.col("rank") >= 0) & (pl.col("kind") != "log_stage"))
    device_ranks = events.filter(pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("rank") >= 0))["rank"].unique()
    on_device = coll.filter(pl.col("kind") == "kernel")
    host = coll.filter(~pl.col("rank").is_in(device_ranks.implode()) & pl.col("kind").is_in(["annotation", "cpu_op"]))
    # per rank, the annotation rows (gloo:/nccl: record_function) when there are any, else cpu ops
    has_ann = host.filter(pl.col("kind") == "annotation")["rank"].unique()
    host = host.filter(
        (pl.col("kind") == "annotation") | ~pl.col("rank").is_in(has_ann.implode())
    )
    host = _outermost(host)
    calls = pl.concat([on_device, host]).select(
        "rank", "source", pl.col("name").cast(pl.String), pl.col("kind").cast(pl.String), pl.col("coll").cast(pl.String),
        pl.col("pg").cast(pl.String), pl.col("pg_desc").cast(pl.String), "pg_ranks", "group_size", "bytes", "seq",
        "start_ns", "end_ns",
    )
    calls = fill_groups(calls, pg_config)
    return _instances(calls).select(CALL_COLUMNS).sort("rank", "start_ns")


def _outermost(rows: pl.DataFrame) -> pl.DataFrame:
    """Host collective rows not inside another collective row of the same rank and thread."""
    if rows.height == 0:
        return rows
    ordered = rows.sort(["rank", "source", "pid", "tid", "start_ns", "end_ns"], descending=[False] * 5 + [True])
    reach = pl.col("end_ns").cum_max().shift(1).over(["rank", "source", "pid", "tid"])
    return ordered.filter(reach.is_null() | (pl.col("start_ns") >= reach))


def fill_groups(calls: pl.DataFrame, pg_config: dict[int, list[dict[str, Any]]]) -> pl.DataFrame:
    """Group ranks and description from ``pg_config`` where rows name only the group; for rows
    with no group at all (gloo on CPU), the ranks that make calls of that kind the same number
    of times — named after the one ``pg_config`` group with exactly those ranks, and left
    without a description when several groups have them."""
    config = pl.DataFrame(
        [{"source": s, "pg": str(g.get("pg_name")), "cfg_desc": g.get("pg_desc"), "cfg_ranks": g.get("ranks")}
         for s, groups in pg_config.items() for g in groups or []],
        schema={"source": pl.UInt32, "pg": pl.String, "cfg_desc": pl.String, "cfg_ranks": pl.String},
    )
    calls = calls.join(config, on=["source", "pg"], how="left").with_columns(
        pl.coalesce("pg_ranks", "cfg_ranks").alias("pg_ranks"),
        pl.coalesce("pg_desc", "cfg_desc").alias("pg_desc"),
    ).drop("cfg_desc", "cfg_ranks")
    bare = calls.filter(pl.col("pg_ranks").is_null())
    if bare.height:
        counts = bare.group_by("coll", "rank").len()
        members = counts.group_by("coll").agg(
            pl.col("rank").sort().cast(pl.String).str.join(",").alias("members"),
            (pl.col("len").n_unique() == 1).alias("even"),
            pl.len().alias("n"),
        ).filter(pl.col("even") & (pl.col("n") > 1))
        by_ranks = (
            config.unique(["cfg_ranks", "pg"]).group_by("cfg_ranks")
            .agg(pl.col("cfg_desc").first(), pl.col("pg").first().alias("cfg_pg"), pl.len().alias("_n"))
            .filter(pl.col("_n") == 1).drop("_n")
        )
        members = members.join(by_ranks, left_on="members", right_on="cfg_ranks", how="left").with_columns(
            pl.coalesce(pl.col("cfg_pg"), pl.lit("~") + pl.col("coll")).alias("cfg_pg"))
        calls = calls.join(members.select("coll", "members", "cfg_desc", "cfg_pg"), on="coll", how="left").with_columns(
            pl.when(pl.col("pg_ranks").is_null()).then(pl.col("members")).otherwise(pl.col("pg_ranks")).alias("pg_ranks"),
            pl.when(pl.col("pg_ranks").is_null()).then(pl.col("cfg_desc")).otherwise(pl.col("pg_desc")).alias("pg_desc"),
            pl.when(pl.col("pg_ranks").is_null()).then(pl.col("cfg_pg")).otherwise(pl.col("pg")).alias("pg"),
        ).drop("members", "cfg_desc", "cfg_pg")
    return calls.with_columns(
        pl.when(pl.col("pg_ranks").is_not_null())
        .then(pl.concat_str([pl.col("pg_ranks"), pl.lit("|"), pl.col("pg").fill_null("")]))
        .otherwise(pl.lit("|") + pl.col("pg")).alias("group"),
        pl.coalesce(pl.col("group_size"), pl.col("pg_ranks").str.count_matches(",") + 1).cast(pl.Int32).alias("group_size"),
    )


def _instances(calls: pl.DataFrame) -> pl.DataFrame:
    """Match calls across group members: by (group, seq) where every call of the group records
    ``seq``, else by order within the group on each rank. Unmatched calls get instance -1."""
    seq_ok = calls.group_by("group").agg(pl.col("seq").is_not_null().all().alias("seq_ok"))
    keyed = calls.sort("rank", "start_ns").join(seq_ok, on="group", how="left").with_columns(
        pl.when(pl.col("seq_ok")).then(pl.col("seq"))
        .otherwise(pl.int_range(pl.len()).over(["group", "rank"]).cast(pl.Int64)).alias("_key")
    )
    members = pl.col("rank").n_unique().over(["group", "_key"])
    ident = pl.struct("group", "_key").rank("dense").cast(pl.Int64) - 1
    return keyed.with_columns(
        pl.when(pl.col("group").is_not_null() & (members > 1)).then(ident).otherwise(-1).alias("instance")
    ).drop("seq_ok", "_key")


# --- clock -------------------------------------------------------------------------------------


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
    ref_end = rows.filter(pl.col("rank") == pl.col("ref")).select("instance", pl.col("end_ns").alias("ref_end"))
    edges = (
        rows.filter(pl.col("rank") != pl.col("ref")).join(ref_end, on="instance")
        .group_by("rank", "ref", "sym").agg((pl.col("end_ns") - pl.col("ref_end")).median().alias("d"), pl.len().alias("w"))
        .with_columns(pl.when(pl.col("sym")).then(pl.col("w") * ROOTED_DISCOUNT).otherwise(pl.col("w")).alias("w"))
    )
    offsets = _spanning_offsets(edges.iter_rows(named=True))
    table = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32}).join(
        pl.DataFrame({"rank": list(offsets), "offset": list(offsets.values())}, schema={"rank": pl.Int32, "offset": pl.Float64}),
        on="rank", how="left",
    )
    if rows.height:
        with_off = rows.join(table, on="rank").with_columns((pl.col("end_ns") - pl.col("offset")).alias("_t"))
        common = with_off.group_by("instance").agg(pl.col("_t").median().alias("_e"))
        resid = with_off.join(common, on="instance").group_by("rank").agg(
            (pl.col("_t") - pl.col("_e")).abs().median().alias("mad"), pl.len().alias("matched"))
        table = table.join(resid, on="rank", how="left")
    else:
        table = table.with_columns(pl.lit(None, pl.Float64).alias("mad"), pl.lit(0, pl.UInt32).alias("matched"))
    significant = (pl.col("offset").abs() > SIGNIFICANCE * pl.col("mad")) & (pl.col("offset").abs() >= MIN_OFFSET_NS)
    return table.select(
        "rank",
        pl.when(significant).then(pl.col("offset").round(0)).otherwise(0).fill_null(0).cast(pl.Int64).alias("offset_ns"),
        pl.when(significant).then(pl.col("mad")).otherwise(pl.max_horizontal(pl.col("mad"), pl.col("offset").abs()))
        .round(0).fill_null(0).cast(pl.Int64).alias("uncertainty_ns"),
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


def aligned_events(events: pl.DataFrame, clock: pl.DataFrame, unaligned_sources: list[int],
                   ranks: Selection | None = None) -> pl.DataFrame:
    """``events`` with each rank's offset subtracted (synthetic-time and epoch-less sources stay),
    restricted to ``ranks`` (plus the driver and logs) when given."""
    offsets = clock.select("rank", "offset_ns")
    shift = pl.col("offset_ns").fill_null(0)
    keep = ~pl.col("source").is_in(unaligned_sources) & ~pl.col("synthetic_time")
    out = events.join(offsets, on="rank", how="left", maintain_order="left").with_columns(
        pl.when(keep).then(pl.col("start_ns") - shift).otherwise(pl.col("start_ns")).alias("start_ns"),
        pl.when(keep).then(pl.col("end_ns") - shift).otherwise(pl.col("end_ns")).alias("end_ns"),
    ).drop("offset_ns")
    if ranks is not None:
        out = out.filter((pl.col("rank") < 0) | ranks.expr("rank"))
    return out


# --- steps -------------------------------------------------------------------------------------




# --- the run and its products --------------------------------------------------------------------


def build(parsed: list[ParsedSource], options: Options | None = None, *, unknown: list[Path] | None = None,
          notes: list[str] | None = None) -> Run:
    """The run of ``parsed`` (one run's sources): ranks and roles assigned with the user's
    options, events and metric rows concatenated, the parsers' warnings kept."""
    options = options or Options()
    events, ranks, roles, assembly_notes = assign_ranks(parsed, options)
    infos = [SourceInfo(i, p.path, p.format, ranks[i], {**p.meta, "role": roles[i]}, p.warnings)
             for i, p in enumerate(parsed)]
    metrics = pl.concat([p.metrics for p in parsed if p.metrics.height] or [empty_metrics()], how="vertical")
    return Run(sources=infos, events=events, metrics=metrics, warnings=[w for p in parsed for w in p.warnings],
               notes=[*(notes or []), *assembly_notes], unknown=list(unknown or []), options=options)


@provides("ranks")
def ranks(events: pl.DataFrame) -> list[int]:
    """The devices' ranks (the driver, rank -1, and logs are not devices)."""
    return sorted(r for r in events["rank"].unique().to_list() if r is not None and r >= 0)


def _unaligned_sources(sources: list[SourceInfo]) -> list[int]:
    return [s.index for s in sources if str(s.meta.get("time_base", "")).startswith(("synthetic", "session-relative", "none"))
            or SESSION_CLOCK in format_traits(s.format)]


@provides("collective_calls")
def collective_calls_product(events: pl.DataFrame, sources: list[SourceInfo]) -> pl.DataFrame:
    return collective_calls(events, pg_config(sources))


def pg_config(sources: list[SourceInfo]) -> dict[int, list[dict[str, Any]]]:
    """Each source's process groups as its parser read them (Kineto ``distributedInfo``)."""
    return {s.index: s.meta.get("pg_config") or [] for s in sources}


@provides("clock", schema=frames.CLOCK)
def clock(collective_calls: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    return estimate_clock(collective_calls, ranks)


@provides("aligned")
def aligned(events: pl.DataFrame, clock: pl.DataFrame, sources: list[SourceInfo], options: Options) -> pl.DataFrame:
    return aligned_events(events, clock, _unaligned_sources(sources), options.rank_selection)
