"""Nsight Systems SQLite exports (``nsys export --type sqlite``) → the event table.

Reads exports of nsys 2022.x–2026.x. Kernels, memcpy, memset, CUDA synchronisation, CUDA
runtime and driver calls, and NVTX ranges and marks, each with one SELECT of the needed
columns straight into polars; names are joined from ``StringIds`` as columns. Times become
absolute epoch ns through ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``; ``deviceId`` becomes
the CUDA ordinal through ``TARGET_INFO_GPU.cuDevice`` where that table exists; ``globalPid`` /
``globalTid`` are decoded into OS pid/tid; host and rank per process come from
:mod:`parsers.nsys_procs`. See ``docs/formats-nsys.md``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl

from .errors import InputError
from .events import conform
from .nccl import kernel_coll_expr
from .nsys_db import SQLITE_MAGIC, Db, is_nsys, sqlite_problem
from .nsys_nvtx import read_nvtx
from .nsys_procs import (
    Ranks,
    assign_ranks,
    captured_env,
    hosts_by_vm,
    launch_command,
    pid_of,
    tid_of,
    vm_of,
)
from .source import ParsedSource

FORMAT = "nsys-sqlite"
EXTENSIONS: tuple[str, ...] = (".sqlite", ".sqlite3", ".db")

RUNTIME_CLASSES: dict[int, str] = {0: "CUDA runtime", 1: "CUDA driver"}
"""``CUPTI_ACTIVITY_KIND_RUNTIME.eventClass`` values kept; others (67, CUDA backtrace in 2022
exports) repeat calls already there."""

MEMCPY_KINDS: dict[int, str] = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "Unified HtoD", 12: "Unified DtoH", 13: "Unified DtoD",
}
"""``copyKind`` → the short label PyTorch's profiler uses in ``Memcpy HtoD (Pinned -> Device)``."""
MEM_KINDS: dict[int, str] = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}
"""nsys' own memory-kind numbering (``ENUM_CUDA_MEM_KIND``, which is not CUPTI's)."""
SYNC_NAMES: dict[int, str] = {
    0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync",
}
"""``syncType`` → the names PyTorch's profiler gives ``cuda_sync`` events."""

_GPU = {
    "start": pl.Int64(),
    "end": pl.Int64(),
    "deviceId": pl.Int64(),
    "streamId": pl.Int64(),
    "correlationId": pl.Int64(),
    "globalPid": pl.Int64(),
}


def sniff(head: bytes, path: Path) -> int:
    if not head.startswith(SQLITE_MAGIC):
        return 0
    if all(t.encode() in head for t in ("TARGET_INFO_SESSION_START_TIME", "StringIds")):
        return 95
    try:
        db = Db(path)
    except InputError:
        return 0
    try:
        return 95 if is_nsys(db.tables) else 0
    finally:
        db.close()


def parse(path: Path, source: int = 0) -> ParsedSource:
    path = Path(path)
    db = Db(path)
    try:
        if not is_nsys(db.tables):
            raise InputError(
                path,
                "an SQLite database but not an Nsight Systems export "
                "(no StringIds and TARGET_INFO_SESSION_START_TIME tables)",
            )
        return _parse(db, path, source)
    except sqlite3.DatabaseError as exc:
        raise InputError(path, sqlite_problem(exc)) from None
    finally:
        db.close()


def _parse(db: Db, path: Path, source: int) -> ParsedSource:
    out = ParsedSource(path=path, format=FORMAT)
    export = db.metadata()
    base = _time_base(db, export, out)
    strings = db.query("SELECT id, value FROM StringIds", {"id": pl.Int64(), "value": pl.String()})
    devices = _device_ordinals(db)

    gpu = pl.concat(
        [_kernels(db, strings), _memcpys(db), _memsets(db), _syncs(db)], how="diagonal_relaxed"
    )
    gpu = gpu.with_columns(
        device=_unsigned32(pl.col("deviceId")).replace_strict(devices, default=None)
        .fill_null(_unsigned32(pl.col("deviceId"))),
        stream=_unsigned32(pl.col("streamId")),
        corr=pl.col("correlationId"),
        g=pl.col("globalPid"),
        tid=pl.lit(-1, pl.Int64),
    )
    host_side, domains, thread_names, unclosed = read_nvtx(db, strings)
    cpu = pl.concat([_runtime(db, strings), host_side], how="diagonal_relaxed").with_columns(
        g=pl.col("globalTid"), tid=tid_of(pl.col("globalTid"))
    )
    if unclosed:
        out.warn(f"{unclosed} NVTX ranges never closed in the capture were left out")

    frame = pl.concat([gpu, cpu], how="diagonal_relaxed").with_columns(
        pid=pid_of(pl.col("g")), vm=vm_of(pl.col("g"))
    )
    frame = frame.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())
    negative = frame.filter(pl.col("end") < pl.col("start")).height
    if negative:
        out.warn(f"{negative} rows ending before they start were left out")
        frame = frame.filter(pl.col("end") >= pl.col("start"))

    hosts = hosts_by_vm(db)
    pids = sorted(int(p) for p in frame["pid"].unique())
    per_pid_devices = {
        int(p): sorted(int(d) for d in ds)
        for p, ds in frame.filter(pl.col("kind") == "kernel")
        .group_by("pid")
        .agg(pl.col("device").unique())
        .iter_rows()
    }
    env = captured_env(db)
    command = launch_command(db)
    ranks = assign_ranks(path, pids, env, thread_names, per_pid_devices, command)
    for warning in ranks.warnings:
        out.warn(warning)

    frame = frame.with_columns(
        start_ns=pl.col("start") + base,
        end_ns=pl.col("end") + base,
        rank=pl.col("pid").replace_strict(ranks.by_pid, default=-1, return_dtype=pl.Int32),
        host=pl.col("vm").replace_strict(hosts, default=None, return_dtype=pl.String),
    ).sort("start_ns", maintain_order=True)
    out.events = conform(frame, source=source)

    counts = frame.group_by("kind").len()
    processes = _processes(db, pids, ranks, per_pid_devices)
    out.meta.update(
        {
            "nsys_version": export.get("EXPORT_PRODUCT_VERSION"),
            "export_schema": export.get("EXPORT_SCHEMA_VERSION"),
            "session_start_ns": base,
            "nvtx_domains": domains,
            "processes": processes,
            "device_map": devices,
            "counts": {str(k): int(n) for k, n in counts.iter_rows()},
            "command": command,
        }
    )
    distinct_hosts = sorted(set(hosts.values()))
    if len(distinct_hosts) == 1:
        out.meta["host"] = distinct_hosts[0]
    elif distinct_hosts:
        out.meta["hosts"] = distinct_hosts
    distinct_ranks = sorted(set(ranks.by_pid.values()))
    if len(distinct_ranks) == 1 and len(ranks.by_pid) == len(pids):
        out.meta["rank"] = distinct_ranks[0]
    if ranks.world_size is not None:
        out.meta["world_size"] = ranks.world_size
    if "DERIVED_WINDOW_NS" in export:
        out.warn(
            f"a time-window slice ({export['DERIVED_WINDOW_NS']} ns) of another export: ranges "
            "crossing its edges and NVTX domain names may be missing"
        )
    return out


def _time_base(db: Db, export: dict[str, str], out: ParsedSource) -> int:
    """Epoch ns to add to the export's session-relative times."""
    if export.get("EXPORT_PARAM_TIME_NORMALIZE", "false").lower() == "true":
        out.meta["time_base"] = "exported with --ts-normalize: times already UTC epoch ns"
        return 0
    start = db.scalar("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
    if start is None:
        out.warn("no session start time (TARGET_INFO_SESSION_START_TIME is empty): times stay session-relative")
        out.meta["time_base"] = "session-relative (session start unknown)"
        return 0
    shift = int(export.get("EXPORT_PARAM_TIME_SHIFT", "0") or 0)
    if shift:
        out.warn(f"exported with a time shift of {shift} ns; it is left in the times")
    out.meta["time_base"] = "TARGET_INFO_SESSION_START_TIME.utcEpochNs + session time"
    return int(start)


def _device_ordinals(db: Db) -> dict[int, int]:
    """nsys ``deviceId`` → CUDA ordinal (``TARGET_INFO_GPU.id`` → ``cuDevice``)."""
    if not db.has("TARGET_INFO_GPU") or not {"id", "cuDevice"} <= db.columns("TARGET_INFO_GPU"):
        return {}
    rows = db.con.execute("SELECT DISTINCT id, cuDevice FROM TARGET_INFO_GPU").fetchall()
    ids = [r[0] for r in rows]
    if len(ids) != len(set(ids)):
        return {}
    return {int(i): int(c) for i, c in rows if i is not None and c is not None}


def _unsigned32(expr: pl.Expr) -> pl.Expr:
    """CUPTI writes "none" as 0xFFFFFFFF (e.g. the stream of a context sync) → -1."""
    return pl.when(expr >= (1 << 31)).then(-1).otherwise(expr)


def _kernels(db: Db, strings: pl.DataFrame) -> pl.DataFrame:
    schema = {**_GPU, "demangledName": pl.Int64(), "shortName": pl.Int64()}
    df = db.frame("CUPTI_ACTIVITY_KIND_KERNEL", schema)
    df = (
        df.join(strings.rename({"id": "demangledName", "value": "_long"}), on="demangledName", how="left")
        .join(strings.rename({"id": "shortName", "value": "_short"}), on="shortName", how="left")
        .with_columns(name=pl.coalesce("_long", "_short", pl.lit("")))
    )
    return df.select(*_GPU, kind=pl.lit("kernel"), name="name", coll=kernel_coll_expr(pl.col("name")))


def _memcpys(db: Db) -> pl.DataFrame:
    schema = {**_GPU, "bytes": pl.Int64(), "copyKind": pl.Int64(), "srcKind": pl.Int64(), "dstKind": pl.Int64()}
    df = db.frame("CUPTI_ACTIVITY_KIND_MEMCPY", schema)
    mem = db.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    name = pl.format(
        "Memcpy {} ({} -> {})",
        pl.col("copyKind").replace_strict(MEMCPY_KINDS, default="Unknown", return_dtype=pl.String),
        pl.col("srcKind").replace_strict(mem, default="Unknown", return_dtype=pl.String),
        pl.col("dstKind").replace_strict(mem, default="Unknown", return_dtype=pl.String),
    )
    return df.select(*_GPU, "bytes", kind=pl.lit("memcpy"), name=name)


def _memsets(db: Db) -> pl.DataFrame:
    df = db.frame("CUPTI_ACTIVITY_KIND_MEMSET", {**_GPU, "bytes": pl.Int64(), "memKind": pl.Int64()})
    mem = db.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    name = pl.format(
        "Memset ({})", pl.col("memKind").replace_strict(mem, default="Unknown", return_dtype=pl.String)
    )
    return df.select(*_GPU, "bytes", kind=pl.lit("memset"), name=name)


def _syncs(db: Db) -> pl.DataFrame:
    df = db.frame("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {**_GPU, "syncType": pl.Int64()})
    name = pl.col("syncType").replace_strict(SYNC_NAMES, default="Unknown Sync", return_dtype=pl.String)
    return df.select(*_GPU, kind=pl.lit("gpu_sync"), name=name)


def _runtime(db: Db, strings: pl.DataFrame) -> pl.DataFrame:
    schema = {
        "start": pl.Int64(),
        "end": pl.Int64(),
        "globalTid": pl.Int64(),
        "correlationId": pl.Int64(),
        "nameId": pl.Int64(),
    }
    classes = ", ".join(map(str, RUNTIME_CLASSES))
    where = f"WHERE eventClass IN ({classes})" if "eventClass" in db.columns("CUPTI_ACTIVITY_KIND_RUNTIME") else ""
    df = db.frame("CUPTI_ACTIVITY_KIND_RUNTIME", schema, where=where)
    df = df.join(strings.rename({"id": "nameId", "value": "name"}), on="nameId", how="left")
    return df.select(
        "start",
        "end",
        "globalTid",
        corr="correlationId",
        kind=pl.lit("runtime"),
        name=pl.col("name").fill_null("").str.replace(r"_v\d+$", ""),
    )


def _processes(db: Db, pids: list[int], ranks: Ranks, devices: dict[int, list[int]]) -> list[dict]:
    names: dict[int, str] = {}
    if db.has("PROCESSES"):
        names = {int(p): str(n) for p, n in db.con.execute("SELECT pid, name FROM PROCESSES") if p is not None}
    return [
        {
            "pid": pid,
            "name": names.get(pid),
            "rank": ranks.by_pid.get(pid, -1),
            "rank_source": ranks.source.get(pid),
            "devices": devices.get(pid, []),
        }
        for pid in pids
    ]
