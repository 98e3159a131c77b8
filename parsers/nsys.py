"""Nsight Systems SQLite exports (``nsys export --type sqlite``) → the event table.

Reads exports of nsys 2022.x–2026.x. Kernels, memcpy, memset, CUDA synchronisation, CUDA
runtime and driver calls, and NVTX ranges and marks, each with one SELECT of the needed
columns straight into polars; names are joined from ``StringIds`` as columns. Times become
absolute epoch ns through ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``; ``deviceId`` becomes
the CUDA ordinal through ``TARGET_INFO_GPU.cuDevice`` where that table exists; ``globalPid`` /
``globalTid`` are decoded into OS pid/tid; host and rank per process come from
:mod:`parsers.nsys_procs`. See ``docs/formats-nsys.md``.

A damaged export never fails in a cast and never wraps: wrong-typed cells read as empty
(:mod:`parsers.nsys_db`), a session start that is no epoch time leaves times session-relative,
and rows the event table cannot hold (no time, no process, an epoch time past int64, an end
before the start, GPU work without a device) are left out; each case is warned and counted in
``meta["quality"]``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TypeGuard

import polars as pl

from .errors import InputError
from .events import GPU_ACTIVITY_KINDS, conform
from .nccl import kernel_coll_expr, with_range_kinds
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
from .source import CORRELATION_PER_PROCESS, ParsedSource

FORMAT = "nsys-sqlite"
TRAITS = frozenset({CORRELATION_PER_PROCESS})
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

I64_MAX = 2**63 - 1
MAX_SESSION_START_NS = 2**62
"""Latest session start taken as an epoch time (year 2116): later ones are damage, and keep
``start + session time`` far from the int64 edge."""
MAX_DEVICE = 2**15 - 1
MAX_STREAM = 2**31 - 1
NO_STREAM = 0xFFFFFFFF

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
    strings = db.frame("StringIds", {"id": pl.Int64(), "value": pl.String()})
    devices = _device_ordinals(db, out)

    gpu = pl.concat(
        [_kernels(db, strings), _memcpys(db), _memsets(db), _syncs(db)], how="diagonal_relaxed"
    )
    gpu = _checked_gpu_columns(gpu, devices, out).with_columns(
        corr=pl.col("correlationId"), g=pl.col("globalPid"), tid=pl.lit(-1, pl.Int64)
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
    frame = _rows_that_fit(with_range_kinds(frame), base, out)

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
    _report_cells(db, out)
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
    """Epoch ns to add to the export's session-relative times (0 when unknown or unusable)."""
    if export.get("EXPORT_PARAM_TIME_NORMALIZE", "false").lower() == "true":
        out.meta["time_base"] = "exported with --ts-normalize: times already UTC epoch ns"
        return 0
    start = db.scalar("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
    out.meta["time_base"] = "session-relative (session start unknown)"
    if start is None:
        out.warn(
            "no session start time (TARGET_INFO_SESSION_START_TIME "
            "is empty): times stay session-relative"
        )
        return 0
    if not _is_int(start) or not 0 <= start <= MAX_SESSION_START_NS:
        shown = repr(start)[:40]
        out.warn(
            f"TARGET_INFO_SESSION_START_TIME.utcEpochNs is {shown}, not an epoch time in ns up to "
            f"{MAX_SESSION_START_NS}: times stay session-relative"
        )
        out.tally("unusable_time_base")
        return 0
    shift = export.get("EXPORT_PARAM_TIME_SHIFT", "0") or "0"
    if not shift.lstrip("-").isdigit():
        out.warn(
            f"EXPORT_PARAM_TIME_SHIFT is {shift[:40]!r}, not a whole number of ns; it is ignored"
        )
        out.tally("unreadable_metadata")
    elif int(shift):
        out.warn(f"exported with a time shift of {int(shift)} ns; it is left in the times")
    out.meta["time_base"] = "TARGET_INFO_SESSION_START_TIME.utcEpochNs + session time"
    return start


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _device_ordinals(db: Db, out: ParsedSource) -> dict[int, int]:
    """nsys ``deviceId`` → CUDA ordinal (``TARGET_INFO_GPU.id`` → ``cuDevice``); an id listed
    twice makes the table useless, an ordinal outside 0…32767 is left out (and counted)."""
    if not db.has("TARGET_INFO_GPU") or not {"id", "cuDevice"} <= db.columns("TARGET_INFO_GPU"):
        return {}
    rows = db.frame("TARGET_INFO_GPU", {"id": pl.Int64(), "cuDevice": pl.Int64()}).unique()
    if rows["id"].is_duplicated().any():
        return {}
    usable = rows.filter(pl.col("cuDevice").is_between(0, MAX_DEVICE))
    out.tally(
        "dropped_out_of_range", rows.filter(pl.col("cuDevice").is_not_null()).height - usable.height
    )
    return dict(usable.drop_nulls().iter_rows())


def _checked_gpu_columns(
    gpu: pl.DataFrame, devices: dict[int, int], out: ParsedSource
) -> pl.DataFrame:
    """``device``, ``stream`` and ``bytes`` in the event table's ranges: a device outside
    0…32767 becomes null (the row is dropped later), a stream outside 0…2³¹-1 becomes -1 (CUPTI
    writes "none" as 0xFFFFFFFF, e.g. the stream of a context sync), negative bytes become null;
    all but CUPTI's "none" are counted."""
    raw = pl.col("deviceId").replace_strict(devices, default=None).fill_null(pl.col("deviceId"))
    stream = pl.col("streamId")
    odd_stream = ~stream.is_between(0, MAX_STREAM) & (stream != NO_STREAM)
    counts = gpu.select(
        clamped_stream=odd_stream.sum(), negative_bytes=(pl.col("bytes") < 0).sum()
    ).row(0, named=True)
    what = {
        "clamped_stream": "a stream id outside 0…2³¹-1 (set to -1)",
        "negative_bytes": "negative bytes (left empty)",
    }
    for kind, n in counts.items():
        if n:
            out.tally(kind, n)
            out.warn(f"{n} GPU rows with {what[kind]}")
    return gpu.with_columns(
        device=pl.when(raw.is_between(0, MAX_DEVICE)).then(raw),
        stream=pl.when(stream.is_between(0, MAX_STREAM)).then(stream).otherwise(-1),
        bytes=pl.when(pl.col("bytes") >= 0).then(pl.col("bytes")),
    )


def _rows_that_fit(frame: pl.DataFrame, base: int, out: ParsedSource) -> pl.DataFrame:
    """The rows the event table can hold, each rule's drops warned and counted in turn.

    ``base + time`` must stay in int64 ns; the bounds are computed in Python integers, so the
    check itself cannot wrap.
    """
    in_range = pl.col("start").is_between(-base, I64_MAX - base) & pl.col("end").is_between(
        -base, I64_MAX - base
    )
    gpu = pl.col("kind").is_in([*GPU_ACTIVITY_KINDS, "gpu_sync"])
    rules = (
        (
            "dropped_no_time",
            pl.col("start").is_null() | pl.col("end").is_null(),
            "without a start or end time",
        ),
        ("dropped_no_process", pl.col("g").is_null(), "without a process (globalPid/globalTid)"),
        ("dropped_out_of_range", ~in_range, "whose epoch time would be past the int64 range"),
        ("negative_dur", pl.col("end") < pl.col("start"), "ending before they start"),
        (
            "dropped_out_of_range",
            gpu & pl.col("device").is_null(),
            "of GPU work without a device id in 0…32767",
        ),
    )
    return out.drop_counted(frame, rules)


def _report_cells(db: Db, out: ParsedSource) -> None:
    """Warn about and count the cells :class:`~parsers.nsys_db.Db` could not read."""
    for column, n in sorted(db.wrong_types.items()):
        out.warn(f"{n} cells of {column} hold a type nsys does not write there; read as empty")
        out.tally("wrong_type_cells", n)
    if db.undecodable:
        out.warn(f"{db.undecodable} text cells are not UTF-8; undecodable bytes were replaced")
        out.tally("undecodable_text", db.undecodable)


def _kernels(db: Db, strings: pl.DataFrame) -> pl.DataFrame:
    schema = {**_GPU, "demangledName": pl.Int64(), "shortName": pl.Int64()}
    df = db.frame("CUPTI_ACTIVITY_KIND_KERNEL", schema)
    df = (
        df.join(
            strings.rename({"id": "demangledName", "value": "_long"}),
            on="demangledName",
            how="left",
        )
        .join(strings.rename({"id": "shortName", "value": "_short"}), on="shortName", how="left")
        .with_columns(name=pl.coalesce("_long", "_short", pl.lit("")))
    )
    return df.select(
        *_GPU, kind=pl.lit("kernel"), name="name", coll=kernel_coll_expr(pl.col("name"))
    )


def _memcpys(db: Db) -> pl.DataFrame:
    schema = {
        **_GPU,
        "bytes": pl.Int64(),
        "copyKind": pl.Int64(),
        "srcKind": pl.Int64(),
        "dstKind": pl.Int64(),
    }
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
    df = db.frame(
        "CUPTI_ACTIVITY_KIND_MEMSET", {**_GPU, "bytes": pl.Int64(), "memKind": pl.Int64()}
    )
    mem = db.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    name = pl.format(
        "Memset ({})",
        pl.col("memKind").replace_strict(mem, default="Unknown", return_dtype=pl.String),
    )
    return df.select(*_GPU, "bytes", kind=pl.lit("memset"), name=name)


def _syncs(db: Db) -> pl.DataFrame:
    df = db.frame("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {**_GPU, "syncType": pl.Int64()})
    name = pl.col("syncType").replace_strict(
        SYNC_NAMES, default="Unknown Sync", return_dtype=pl.String
    )
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
    where = (
        f"WHERE eventClass IN ({classes})"
        if "eventClass" in db.columns("CUPTI_ACTIVITY_KIND_RUNTIME")
        else ""
    )
    df = db.frame("CUPTI_ACTIVITY_KIND_RUNTIME", schema, where=where, checked=("eventClass",))
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
        rows = db.frame("PROCESSES", {"pid": pl.Int64(), "name": pl.String()}).filter(
            pl.col("pid").is_not_null()
        )
        names = dict(rows.iter_rows())
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
