"""Ranks and roles: which rank (or the driver) every source is.

A rank from the trace (``distributedInfo``, nsys environment), else from the file name
(``rank-3``, ``rank3``), else the next free number. The single controller of verl/OpenRLHF-style
runs is not a device: a source (or, in an Nsight report of the whole job, a process) without
device work whose ranges are the driver's timers (``step``, ``gen``, …), or whose file is named
so (``driver``, ``controller``), gets rank ``-1`` and the ``driver`` role. Log rows keep ``-1``.
A report has one controller: processes of one report that all look like it are ranks (verl's
multi-process nsys layout, docs/assembly.md "One report, many processes").
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from parsers import ParsedSource
from parsers.events import GPU_ACTIVITY_KINDS, concat
from parsers.source import RANK_IN_NAME_BOUNDED
from taxonomy import profiles as tp

from ..model.options import Options
from ..model.products import provides

DRIVER_FILE = re.compile(r"(?i)(^|[^a-z])(driver|controller|taskrunner|main_task)([^a-z]|$)")
DRIVER = "driver"
WORKER = "worker"
LOG = "log"


def assign_ranks(
    parsed: list[ParsedSource], options: Options | None = None
) -> tuple[pl.DataFrame, list[int], list[str], list[str]]:
    """Events of all sources with ``source`` and ``rank`` filled, each source's rank (-1: several
    or none) and role (``worker``, ``driver``, ``log``), and notes saying what was decided. The
    driver is told by the names of its ranges, classified with the user's ``--rules`` and
    ``--framework``."""
    notes: list[str] = []
    tables = [
        p.events.with_columns(pl.lit(i, dtype=pl.UInt32).alias("source"))
        for i, p in enumerate(parsed)
    ]
    taken = {
        int(r) for t in tables for r in t["rank"].unique().to_list() if r is not None and r >= 0
    }
    units = _units(parsed, tables, options or Options())
    notes += one_controller_per_report(units)
    several = sum(u["trace"] for u in units) > 1
    fixes: dict[tuple[int, int | None], int] = {}
    next_free = 0
    for u in units:
        if not u["trace"] or u["rank"] >= 0:
            continue
        where = u["label"]
        by_file = RANK_IN_NAME_BOUNDED.search(u["file"]) if u["pid"] is None else None
        if u["declared"] or u["driver_file"] or (several and u["driverish"]):
            u["role"] = DRIVER
            why = (
                "the process table of rlperf's export" if u["declared"]
                else "its file name" if u["driver_file"] else "driver timers and no device work"
            )
            notes.append(f"{where}: the single controller ({why}); role driver, not a device")
            continue
        if u.get("helper"):
            notes.append(f"{where}: no device work and no range beside processes with device "
                         "work: a helper process (a compiler or loader), not a rank")
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
            table = table.with_columns(
                pl.when(pl.col("rank") < 0)
                .then(pl.lit(mine[None], pl.Int32))
                .otherwise(pl.col("rank"))
                .alias("rank")
            )
        elif mine:
            table = table.with_columns(
                pl.when(pl.col("rank") < 0)
                .then(pl.col("pid").replace_strict(mine, default=-1, return_dtype=pl.Int32))
                .otherwise(pl.col("rank")).alias("rank")
            )
        out.append(table)
    ranks, roles = [], []
    for i in range(len(parsed)):
        traced = [u for u in units if u["source"] == i and u["trace"]]
        worker_ranks = {u["rank"] for u in traced if u["role"] == WORKER and u["rank"] >= 0}
        ranks.append(worker_ranks.pop() if len(worker_ranks) == 1 else -1)
        roles.append(
            LOG if not traced else DRIVER if all(u["role"] == DRIVER for u in traced) else WORKER
        )
    return concat(out), ranks, roles, notes


def _units(
    parsed: list[ParsedSource], tables: list[pl.DataFrame], options: Options
) -> list[dict[str, Any]]:
    """The processes of the run: a whole source, or one pid of a multi-process (nsys) source."""
    units = []
    names: set[str] = set()
    for table in tables:
        names.update(
            table.filter(pl.col("kind").is_in(["annotation", "gpu_annotation"]))["name"]
            .cast(pl.String)
            .unique()
            .to_list()
        )
    profiles = tp.load_profiles(options.rules)
    meta = next((p.meta for p in parsed if p.meta.get("framework")), None)
    detection = tp.detect(names, meta=meta, profiles=profiles, framework=options.framework)
    classes = tp.classify(names, "trace", detection, profiles=profiles)
    driver_names = set(
        classes.filter((pl.col("role") == "driver") & pl.col("relation").is_in(["stage", "step"]))[
            "name"
        ].to_list()
    )
    other_names = set(
        classes.filter((pl.col("role") != "driver") & (pl.col("relation") == "stage"))[
            "name"
        ].to_list()
    )
    for i, (p, table) in enumerate(zip(parsed, tables, strict=True)):
        split = "processes" in p.meta and table.filter(pl.col("rank") < 0).height > 0
        declared = {e.get("pid") for e in p.meta.get("processes") or [] if e.get("role") == DRIVER}
        stats = (
            table.with_columns(pl.col("pid") if split else pl.lit(None, pl.Int64).alias("pid"))
            .group_by("pid")
            .agg(
                pl.col("rank").max().alias("rank"),
                (pl.col("kind") != "log_stage").any().alias("trace"),
                pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)).any().alias("gpu"),
                pl.col("coll").is_not_null().any().alias("coll"),
                pl.col("name")
                .filter(pl.col("kind").is_in(["annotation", "gpu_annotation"]))
                .cast(pl.String)
                .unique()
                .alias("names"),
            )
            .sort("pid", nulls_last=True)
        )
        with_gpu = bool(stats["gpu"].any()) if split else False
        for row in stats.iter_rows(named=True):
            own = set(row["names"] or [])
            n_driver, n_other = len(own & driver_names), len(own & other_names)
            units.append(
                {
                    "source": i,
                    "pid": row["pid"],
                    "rank": int(row["rank"]) if row["rank"] is not None else -1,
                    "trace": bool(row["trace"]),
                    "file": p.path.name,
                    "label": p.path.name + (f" pid {row['pid']}" if row["pid"] is not None else ""),
                    "driver_file": bool(DRIVER_FILE.search(p.path.name))
                    and row["pid"] is None
                    and not row["gpu"],
                    "driverish": not row["gpu"]
                    and not row["coll"]
                    and n_driver > 0
                    and n_driver >= n_other,
                    "declared": row["pid"] is not None and row["pid"] in declared,
                    "helper": with_gpu and not row["gpu"] and not row["coll"] and not own,
                    "role": WORKER,
                }
            )
    return units


def one_controller_per_report(units: list[dict[str, Any]]) -> list[str]:
    """A report holds at most one single controller: when several of its processes record
    the driver's timers and no device work, none of them can be told for the controller (every
    process ran the same timers), so each is a rank. Notes say so."""
    notes = []
    by_source: dict[int, list[dict[str, Any]]] = {}
    for u in units:
        if u["pid"] is not None and u["driverish"] and u["rank"] < 0:
            by_source.setdefault(u["source"], []).append(u)
    for alike in by_source.values():
        if len(alike) < 2:
            continue
        for u in alike:
            u["driverish"] = False
        pids = ", ".join(str(u["pid"]) for u in alike)
        notes.append(
            f"{alike[0]['file']}: processes {pids} all record the driver's timers; a run has one "
            "controller, so none is taken for it: each is a rank"
        )
    return notes


@provides("ranks")
def ranks(events: pl.DataFrame) -> list[int]:
    """The devices' ranks (the driver, rank -1, and logs are not devices)."""
    return sorted(r for r in events["rank"].unique().to_list() if r is not None and r >= 0)


@provides("selected_ranks")
def selected_ranks(ranks: list[int], options: Options) -> list[int]:
    """The ranks the analysis covers: the run's, or those of them ``--ranks`` selects. What
    says which ranks a report is about reads this, and so do the per-rank analyses that keep
    only these ranks' rows; the events a rank-local product reads are narrowed alike, in one
    place (:func:`analyzer.model.sharded.rank_input`)."""
    chosen = options.rank_selection
    return ranks if chosen is None else chosen.within(ranks)
