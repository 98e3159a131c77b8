"""Run assembly: which rank (or the driver) every source is, one clock for all ranks, the steps.

* **Ranks and roles** (:func:`assign_ranks`, called when a run is built): a rank from the trace
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
* **Steps** (product ``steps``): ``ProfilerStep#N`` ranges, else step-level ranges (verl
  ``step``), else one step per rollout wave, else the log's step numbers. Trace steps are
  renumbered to the log's numbering when logs of the same run come along (their stage
  durations are matched). Stage ranges join the step they belong to (:func:`step_of`) and the
  step window is ``[min start, max end)`` of its ranges over all ranks.
* **Incomplete steps** (product ``incomplete_steps``): steps a trace does not cover — from where
  a file cut short ends on, or one a rank's trace ends inside without closing its marker — are
  left out of ``steps`` and every per-step product, with a warning (docs/assembly.md, Steps).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from parsers import ParsedSource
from parsers.errors import InputError
from parsers.events import GPU_ACTIVITY_KINDS, concat
from taxonomy import profiles as tp

from . import frames

if TYPE_CHECKING:
    from .run import Run

PROVIDES = ("clock", "aligned", "collective_calls", "steps", "incomplete_steps")

DRIVER_FILE = re.compile(r"(?i)(^|[^a-z])(driver|controller|taskrunner|main_task)([^a-z]|$)")
RANK_IN_FILE = re.compile(r"(?i)(?:^|[^a-z])rank[-_]?(\d{1,5})(?:[^0-9]|$)")
SIGNIFICANCE = 3.0
"""An estimated offset is applied when |offset| > SIGNIFICANCE × its uncertainty (MAD)."""
MIN_OFFSET_NS = 1_000
"""Offsets below a microsecond are below what the clocks tell apart; never applied."""
SYMMETRIC: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
"""Collectives every member leaves together (the last arrival releases everyone)."""
ROOTED_DISCOUNT = 1000
"""A pair linked by symmetric collectives outweighs this many rooted ones."""
MATCH_TOLERANCE = 0.10
"""Trace steps take a log's numbering when their stage durations agree within this (mean
relative error; log rounding and the untimed driver work between timers stay well inside)."""
CLEAR_MARGIN = 1.5
"""…and the next-best numbering errs at least this many times more."""
DRIVER = "driver"
WORKER = "worker"
LOG = "log"


# --- ranks and roles ---------------------------------------------------------------------------


def assign_ranks(parsed: list[ParsedSource]) -> tuple[pl.DataFrame, list[int], list[str], list[str]]:
    """Events of all sources with ``source`` and ``rank`` filled, each source's rank (-1: several
    or none) and role (``worker``, ``driver``, ``log``), and notes saying what was decided."""
    notes: list[str] = []
    tables = [p.events.with_columns(pl.lit(i, dtype=pl.UInt32).alias("source")) for i, p in enumerate(parsed)]
    taken = {int(r) for t in tables for r in t["rank"].unique().to_list() if r is not None and r >= 0}
    units = _units(parsed, tables)
    several = sum(u["trace"] for u in units) > 1
    fixes: dict[tuple[int, int | None], int] = {}
    next_free = 0
    for u in units:
        if not u["trace"] or u["rank"] >= 0:
            continue
        where = u["label"]
        by_file = RANK_IN_FILE.search(u["file"]) if u["pid"] is None else None
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


def _units(parsed: list[ParsedSource], tables: list[pl.DataFrame]) -> list[dict[str, Any]]:
    """The processes of the run: a whole source, or one pid of a multi-process (nsys) source."""
    units = []
    names: set[str] = set()
    for table in tables:
        names.update(table.filter(pl.col("kind").is_in(["annotation", "gpu_annotation"]))["name"].cast(pl.String).unique().to_list())
    profiles = tp.load_profiles()
    detection = tp.detect(names, meta=next((p.meta for p in parsed if p.meta.get("framework")), None), profiles=profiles)
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
    calls = _fill_groups(calls, pg_config)
    return _instances(calls).select(CALL_COLUMNS).sort("rank", "start_ns")


def _outermost(rows: pl.DataFrame) -> pl.DataFrame:
    """Host collective rows not inside another collective row of the same rank and thread."""
    if rows.height == 0:
        return rows
    ordered = rows.sort(["rank", "source", "pid", "tid", "start_ns", "end_ns"], descending=[False] * 5 + [True])
    reach = pl.col("end_ns").cum_max().shift(1).over(["rank", "source", "pid", "tid"])
    return ordered.filter(reach.is_null() | (pl.col("start_ns") >= reach))


def _fill_groups(calls: pl.DataFrame, pg_config: dict[int, list[dict[str, Any]]]) -> pl.DataFrame:
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


INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Selection:
    """A ``--steps`` or ``--ranks`` selection as inclusive ranges, sorted and merged: ``0-10**10``
    is one pair, not ten billion numbers (a list of them exhausted memory)."""

    spans: tuple[tuple[int, int], ...]

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and any(a <= value <= b for a, b in self.spans)

    def count(self) -> int:
        """How many values are selected (``len`` cannot say more than 2**63)."""
        return sum(b - a + 1 for a, b in self.spans)

    def __str__(self) -> str:
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.spans)

    def expr(self, column: str) -> pl.Expr:
        """Whether ``column`` lies in the selection (bounds past int64 cannot match a value)."""
        inside = [pl.col(column).is_between(max(a, INT64[0]), min(b, INT64[1])) for a, b in self.spans]
        return pl.any_horizontal(inside)

    def within(self, values: Iterable[int]) -> list[int]:
        """The ``values`` selected, sorted."""
        return sorted({v for v in values if v in self})

    def without(self, values: Iterable[int]) -> Selection:
        """The selection less ``values``: what was asked for and is not there."""
        return Selection(_merged(_cut(self.spans, sorted(set(values)))))


def _cut(spans: Iterable[tuple[int, int]], holes: list[int]) -> list[tuple[int, int]]:
    out = []
    for a, b in spans:
        for hole in holes:
            if a <= hole <= b:
                if a < hole:
                    out.append((a, hole - 1))
                a = hole + 1
        if a <= b:
            out.append((a, b))
    return out


def _merged(spans: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def parse_selection(text: str | None) -> Selection | None:
    """``"2-4,7"`` → the ranges 2-4 and 7; None or empty → no selection."""
    if text is None or not str(text).strip():
        return None
    found = []
    for part in str(text).split(","):
        part = part.strip()
        match = re.fullmatch(r"(-?\d{1,30})(?:\s*(?:-|\.\.)\s*(-?\d{1,30}))?", part)
        if not match:
            raise ValueError(f"bad selection {part!r} (use e.g. 2-4,7)")
        a = int(match.group(1))
        b = int(match.group(2)) if match.group(2) is not None else a
        found.append((min(a, b), max(a, b)))
    return Selection(_merged(found))


def step_markers(ranges: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """Step-level ranges (``rank, step, start_ns, end_ns``) and what they are: ProfilerStep#N
    (numbered by N), else a framework's step ranges (numbered by order on each rank), else one
    step per rollout wave (rollout ranges that overlap across ranks), else nothing."""
    steps = ranges.filter(pl.col("relation") == "step")
    profiler = steps.filter(pl.col("name").str.starts_with("ProfilerStep#"))
    if profiler.height:
        return profiler.select(
            "rank", pl.col("name").str.extract(r"#(\d+)$", 1).cast(pl.Int32).alias("step"), "start_ns", "end_ns"
        ), "ProfilerStep"
    if steps.height:
        outer = _outermost_ranges(steps)
        return outer.sort("rank", "start_ns").select(
            "rank", (pl.int_range(pl.len()).over("rank") + 1).cast(pl.Int32).alias("step"), "start_ns", "end_ns"
        ), "step ranges: " + ", ".join(sorted(outer["name"].unique().to_list()))
    rollout = ranges.filter((pl.col("stage") == "rollout") & ~pl.col("inferred").fill_null(False))
    if rollout.height == 0:
        rollout = ranges.filter(pl.col("stage") == "rollout")
    if rollout.height:
        driver = rollout.filter(pl.col("rank") < 0)
        waves = _waves(driver if driver.height else rollout)
        return waves, "rollout waves"
    return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64}), "none"


def _outermost_ranges(rows: pl.DataFrame) -> pl.DataFrame:
    ordered = rows.sort(["rank", "start_ns", "end_ns"], descending=[False, False, True])
    reach = pl.col("end_ns").cum_max().shift(1).over("rank")
    return ordered.filter(reach.is_null() | (pl.col("start_ns") >= reach))


def _waves(rollout: pl.DataFrame) -> pl.DataFrame:
    """Each wave of overlapping rollout ranges starts a step that lasts until the next wave."""
    ordered = rollout.sort("start_ns")
    wave = (pl.col("start_ns") > pl.col("end_ns").cum_max().shift(1)).fill_null(True).cum_sum().cast(pl.Int32)
    starts = ordered.with_columns(wave.alias("step")).group_by("step").agg(pl.col("start_ns").min()).sort("step")
    return starts.with_columns(
        pl.lit(-2, pl.Int32).alias("rank"),
        pl.col("start_ns").shift(-1).fill_null(pl.col("start_ns")).alias("end_ns"),
    ).select("rank", "step", "start_ns", "end_ns")


def step_of(rows: pl.DataFrame, starts: pl.DataFrame) -> pl.Series:
    """The step each row (``start_ns``) belongs to: the last step started at or before it (null
    before the first). ``starts`` holds ``step, start_ns``."""
    if rows.height == 0 or starts.height == 0:
        return pl.Series("step", [None] * rows.height, dtype=pl.Int32)
    keyed = rows.select(pl.col("start_ns").alias("t")).with_row_index("_row").sort("t")
    found = keyed.join_asof(starts.sort("start_ns").select(pl.col("start_ns").alias("t"), "step"), on="t", strategy="backward")
    return found.sort("_row")["step"].cast(pl.Int32)


def log_step_stages(events: pl.DataFrame, classes: pl.DataFrame) -> pl.DataFrame:
    """Per log step and stage, the seconds of the stage timers (composite timers left out)."""
    logs = events.filter(pl.col("kind") == "log_stage").select(pl.col("name").cast(pl.String), "step", (pl.col("end_ns") - pl.col("start_ns")).alias("dur"))
    if logs.height == 0 or classes.height == 0:
        return pl.DataFrame(schema={"step": pl.Int32, "stage": pl.String, "dur": pl.Int64})
    staged = classes.filter((pl.col("relation") == "stage") & (pl.col("covers").list.len().fill_null(0) <= 1) & (pl.col("stage") != "other"))
    return (
        logs.join(staged.select("name", pl.col("stage").cast(pl.String)), on="name")
        .group_by("step", "stage").agg(pl.col("dur").sum())
    )


def match_log_steps(trace: pl.DataFrame, log: pl.DataFrame) -> tuple[int, float] | None:
    """The shift k (trace step s is log step s + k) whose stage durations agree best, with its
    mean relative error; None unless one shift agrees within :data:`MATCH_TOLERANCE` and
    clearly better than any other. Both frames: step, stage, dur."""
    if trace.height == 0 or log.height == 0:
        return None
    first, last = log["step"].min() - trace["step"].min(), log["step"].max() - trace["step"].max()
    errors = (
        trace.lazy().join(log.lazy(), on="stage", suffix="_log")
        .with_columns((pl.col("step_log") - pl.col("step")).alias("k"))
        .filter(pl.col("k").is_between(first, last))
        .group_by("k").agg(
            pl.col("step").n_unique().alias("matched"),
            ((pl.col("dur") - pl.col("dur_log")).abs() / pl.col("dur_log").clip(lower_bound=1)).mean().alias("err"),
        )
        .filter(pl.col("matched") == trace["step"].n_unique())
        .sort("err", "k").head(2).collect()
    )
    if errors.height == 0:
        return None
    best_err, best_k = float(errors["err"][0]), int(errors["k"][0])
    clear = errors.height == 1 or errors["err"][1] >= CLEAR_MARGIN * best_err + 0.01
    return (best_k, best_err) if best_err <= MATCH_TOLERANCE and clear else None


# --- options -----------------------------------------------------------------------------------


def assembly_options(*, framework: str | None = None, steps: str | None = None, ranks: str | None = None,
                     rules: str | Path | None = None, layout: str | None = None) -> dict[str, Any]:
    """``Run.options`` for ``--framework``, ``--steps``, ``--ranks``, ``--rules`` and ``--layout``,
    checked before any file is read: a bad value is one :class:`InputError` line."""
    from taxonomy.collectives import CollectiveRulesError, parse_layout

    for flag, text in (("--steps", steps), ("--ranks", ranks)):
        try:
            parse_selection(text)
        except ValueError as exc:
            raise InputError(flag, str(exc)) from None
    try:
        profiles = tp.load_profiles(rules)
    except tp.ProfileError as exc:
        raise InputError(rules or "--rules", str(exc).removeprefix(f"{rules}: ")) from None
    if framework and not any(framework == p.name or framework in p.frameworks for p in profiles.values()):
        raise InputError("--framework", f"no profile {framework!r} (one of {', '.join(sorted(profiles))})")
    if layout:
        try:
            parse_layout(layout)
        except CollectiveRulesError as exc:
            raise InputError("--layout", str(exc)) from None
    given = {"framework": framework, "steps": steps, "ranks": ranks, "rules": str(rules) if rules else None, "layout": layout}
    return {k: v for k, v in given.items() if v}


# --- products ----------------------------------------------------------------------------------


def _unaligned_sources(run: Run) -> list[int]:
    return [s.index for s in run.sources if str(s.meta.get("time_base", "")).startswith(("synthetic", "session-relative", "none"))
            or s.format.endswith("stats") or s.format.endswith("csv")]


def _pg_config(run: Run) -> dict[int, list[dict[str, Any]]]:
    return {s.index: s.meta.get("pg_config") or [] for s in run.sources}


def provide(run: Run, name: str) -> Any:
    if name == "collective_calls":
        return collective_calls(run.events, _pg_config(run))
    if name == "clock":
        clock = estimate_clock(run.collective_calls, run.ranks)
        return frames.check(clock, frames.CLOCK, "clock")
    if name == "aligned":
        ranks = parse_selection(run.options.get("ranks"))
        return aligned_events(run.events, run.clock, _unaligned_sources(run), ranks)
    if name == "steps":
        return _steps(run)
    if name == "incomplete_steps":
        return _incomplete_steps(run)
    raise KeyError(name)


def _steps(run: Run) -> pl.DataFrame:
    """The step windows over all ranks (docs/analyses.md §1), after the ``--steps`` selection."""
    from .classify import step_table

    table = step_table(run)
    selected = parse_selection(run.options.get("steps"))
    if selected is not None:
        table = table.filter(selected.expr("step"))
    table = table.filter(~pl.col("step").is_in(excluded_steps(run)))
    return frames.check(table, frames.STEPS, "steps")


# --- incomplete steps --------------------------------------------------------------------------


def excluded_steps(run: Run) -> list[int]:
    """Steps a trace leaves unobserved (product ``incomplete_steps``): no per-step analysis
    reads them."""
    return sorted(set(run.incomplete_steps["step"].to_list()))


def trace_ends(events: pl.DataFrame, cut_sources: list[int]) -> pl.DataFrame:
    """Per trace source and rank: where its data ends (``trace_end_ns``) and whether the file
    was cut short. A writer emits a trace in runs (one thread's operators, then another's, then
    the GPU work), so a cut stops the run of the last event the file holds — that thread or
    stream has nothing after its last end — and loses every later run; for a cut file the end
    is that thread's or stream's last end (rows keep the file's order)."""
    rows = events.filter((pl.col("kind") != "log_stage") & ~pl.col("synthetic_time")).with_row_index("_row")
    keys = ["source", "rank"]
    lane = ["pid", "tid", "stream"]
    ends = rows.group_by(keys).agg(pl.col("end_ns").max().alias("_end"))
    cut = rows.filter(pl.col("source").is_in(cut_sources))
    last = cut.sort("_row").group_by(keys).agg(pl.col(lane).last())
    frontier = cut.join(last, on=[*keys, *lane]).group_by(keys).agg(pl.col("end_ns").max().alias("_cut"))
    return ends.join(frontier, on=keys, how="left").select(
        pl.col("source").cast(pl.UInt32), pl.col("rank").cast(pl.Int32), pl.col("_cut").is_not_null().alias("cut"),
        pl.coalesce("_cut", "_end").alias("trace_end_ns"),
    ).sort("source", "rank")


def incomplete_steps(steps: pl.DataFrame, ends: pl.DataFrame, markers: pl.DataFrame) -> pl.DataFrame:
    """INCOMPLETE_STEPS from step windows (``step, start_ns, end_ns``), :func:`trace_ends`
    and the step markers each rank closed (``rank, step``; empty when steps are not marked
    per rank). A cut trace leaves every step not over before its data ends (a window that ends
    just there was cut to the last complete event, not closed by the run); any trace
    leaves a step it ends inside when it marks steps and has no marker of that one (its step
    never closed). A rank finishing before the others (the window ends at the last rank's, or
    at the driver's, end) is not a reason."""
    windows = steps.select(pl.col("step").cast(pl.Int32), "start_ns", "end_ns")
    cut = ends.filter(pl.col("cut")).join(windows, how="cross").filter(pl.col("end_ns") >= pl.col("trace_end_ns"))
    marking = ends.filter(~pl.col("cut")).join(markers.select(pl.col("rank").cast(pl.Int32)).unique(), on="rank")
    closed = markers.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32))
    unclosed = (
        marking.join(windows, how="cross")
        .filter((pl.col("start_ns") < pl.col("trace_end_ns")) & (pl.col("trace_end_ns") < pl.col("end_ns")))
        .join(closed, on=["rank", "step"], how="anti")
    )
    return pl.concat([
        cut.with_columns(pl.lit("cut").alias("reason")),
        unclosed.with_columns(pl.lit("unclosed").alias("reason")),
    ], how="diagonal_relaxed").select(list(frames.INCOMPLETE_STEPS)).cast(frames.INCOMPLETE_STEPS).sort("step", "source", "rank")


def _incomplete_steps(run: Run) -> pl.DataFrame:
    from .classify import step_markers_closed, step_table

    cut = [s.index for s in run.sources if s.meta.get("salvaged")]
    found = incomplete_steps(step_table(run), trace_ends(run.aligned, cut), step_markers_closed(run))
    frames.check(found, frames.INCOMPLETE_STEPS, "incomplete_steps")
    for (source, reason), rows in found.group_by("source", "reason", maintain_order=True):
        run.warnings.append(f"{run.sources[int(source)].path.name}: {_exclusion(reason, rows['step'].unique().sort().to_list())}")
    return found


def _exclusion(reason: str, steps: list[int]) -> str:
    """Why ``steps`` are left out, as the warning and the data-quality section say it."""
    listed = f"step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}"
    if reason == "cut":
        return f"cut short: its complete events end before step {steps[0]} does; {listed} excluded from the per-step analyses"
    return f"the trace ends inside step {steps[0]}, before its own marker of that step closed; {listed} excluded from the per-step analyses"
