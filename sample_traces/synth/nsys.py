"""Write one rank's part of the timeline in the Nsight Systems SQLite export schema (SYNTHETIC).

The tables and columns rlperf reads (docs/formats-nsys.md) as ``nsys export --type sqlite``
(2025.1, schema 3.17) lays them out: ``StringIds``; ``CUPTI_ACTIVITY_KIND_KERNEL`` /
``RUNTIME`` / ``MEMCPY`` / ``MEMSET``; ``NVTX_EVENTS`` push/pop ranges (eventType 59) with the same
names as the Kineto
annotations; ``TARGET_INFO_SESSION_START_TIME``, ``TARGET_INFO_GPU``, ``TARGET_INFO_SYSTEM_ENV``;
``META_DATA_EXPORT`` / ``META_DATA_CAPTURE`` (the rank's ``RANK`` environment variable);
``ThreadNames``, ``PROCESSES``. Times are ns since the session start on the rank's skewed clock.
A ``META_DATA_EXPORT`` row ``RLPERF_SYNTHETIC`` says the file was never captured by nsys.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import polars as pl

from .kineto import (
    DEVICE_NAME,
    PYTHON,
    RunData,
    annotation_frame,
    base_time_ns,
    device_and_launches,
    device_of,
    host_of,
    pid_of,
)
from .timeline import KERNEL, MEMCPY
from .timeline import MEMSET as MEMSET_KIND

VM = 1
SESSION_LEAD_NS = 500_000_000
"""The capture starts this long before the first step."""
RUNTIME_NAMES = (
    "cudaLaunchKernel_v7000",
    "cudaMemcpyAsync_v3020",
    "cudaMemsetAsync_v3020",
    "cudaGraphLaunch_v10000",
)
COPY_KIND = {
    "Memcpy HtoD (Pinned -> Device)": (1, 1, 2),
    "Memcpy DtoD (Device -> Device)": (8, 2, 2),
}
"""Kineto copy name → (copyKind, srcKind, dstKind) in nsys' numbering."""

SCHEMA = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId "
        "INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid "
        "INTEGER, "
        "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, "
        "launchType INTEGER, "
        "cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY "
        "INTEGER NOT NULL, "
        "gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER "
        "NOT NULL, "
        "staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, "
        "localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER "
        "NOT NULL, "
        "sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid "
        "INTEGER, "
        "correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId "
        "INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId "
        "INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid "
        "INTEGER, "
        "bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind "
        "INTEGER, "
        "dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, "
        "dstContextId INTEGER, "
        "migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId "
        "INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid "
        "INTEGER, "
        "value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER"
    ),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
        "category INTEGER, "
        "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, "
        "domainId INTEGER, "
        "uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, "
        "int32Value INTEGER, "
        "floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT"
    ),
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT",
    "TARGET_INFO_GPU": (
        "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete "
        "INTEGER, "
        "l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, "
        "smCount INTEGER, "
        "uuid TEXT, chipName TEXT, cuDevice INTEGER, computeMajor INTEGER, computeMinor INTEGER"
    ),
    "TARGET_INFO_SYSTEM_ENV": "globalVid INTEGER, devStateName TEXT NOT NULL, name TEXT NOT NULL, "
        "nameEnum INTEGER NOT NULL, value TEXT NOT NULL",
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
    "META_DATA_CAPTURE": "name TEXT NOT NULL, value TEXT",
    "ThreadNames": "nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER",
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
}


def write_nsys(run: RunData, rank: int, path: Path) -> None:
    cfg = run.cfg
    base = base_time_ns(cfg.start_epoch_ns)
    session = run.windows[0][1] + int(run.offsets[rank]) - SESSION_LEAD_NS
    to_session = base - session
    """Kineto-relative ns (relative to ``base``) → ns since the session start."""
    pid = pid_of(cfg, rank)
    gpid = (VM << 48) | (pid << 24)
    gtid = gpid | pid
    device = device_of(cfg, rank)
    dev, launches = device_and_launches(run, rank)
    dev = dev.with_columns(
        s=pl.col("start") + to_session, e=pl.col("start") + pl.col("dur") + to_session
    )

    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings))

    name_ids = np.array([sid(n) for n in run.names], dtype=np.int64)
    short_ids = np.array([sid(_short(n)) for n in run.names], dtype=np.int64)
    runtime_ids = np.array([sid(n) for n in RUNTIME_NAMES], dtype=np.int64)
    thread_name = sid(PYTHON)

    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        for table, columns in SCHEMA.items():
            con.execute(f"CREATE TABLE {table} ({columns})")
        kernels = dev.filter(pl.col("kind") == KERNEL)
        names = kernels["name"].to_numpy()
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, "
            "correlationId, "
            "globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, "
            "blockY, "
            "blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, "
            "localMemoryTotal, gridId) "
            f"VALUES (?, ?, {device}, 1, ?, ?, {gpid}, ?, ?, 128, 132, 1, 1, 256, 1, 1, 0, 0, 0, "
            f"0, ?)",
            zip(
                kernels["s"].to_list(),
                kernels["e"].to_list(),
                kernels["stream"].to_list(),
                kernels["corr"].to_list(),
                name_ids[names].tolist(),
                short_ids[names].tolist(),
                range(1, kernels.height + 1),
                strict=True,
            ),
        )
        copies = dev.filter(pl.col("kind") == MEMCPY)
        kinds = [COPY_KIND[run.names[n]] for n in copies["name"].to_list()]
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
            "correlationId, "
            f"globalPid, bytes, copyKind, srcKind, dstKind, srcDeviceId, dstDeviceId) VALUES (?, "
            f"?, {device}, 1, ?, ?, "
            f"{gpid}, ?, ?, ?, ?, {device}, {device})",
            [
                (*row, *k)
                for row, k in zip(
                    copies.select("s", "e", "stream", "corr", "bytes").iter_rows(),
                    kinds,
                    strict=True,
                )
            ],
        )
        sets = dev.filter(pl.col("kind") == MEMSET_KIND)
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, "
            "correlationId, "
            f"globalPid, value, bytes, memKind) VALUES (?, ?, {device}, 1, ?, ?, {gpid}, 0, ?, 2)",
            sets.select("s", "e", "stream", "corr", "bytes").iter_rows(),
        )
        rt = launches.select(
            s=pl.col("rt_start") + to_session,
            e=pl.col("rt_start") + pl.col("rt_dur") + to_session,
            corr="corr",
            call="call",
        )
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, "
            "correlationId, nameId, "
            f"returnValue) VALUES (?, ?, 0, {gtid}, ?, ?, 0)",
            zip(
                rt["s"].to_list(),
                rt["e"].to_list(),
                rt["corr"].to_list(),
                runtime_ids[rt["call"].to_numpy()].tolist(),
                strict=True,
            ),
        )
        ranges = annotation_frame(run, rank, int(run.offsets[rank]) - session)
        con.executemany(
            f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES "
            f"(?, ?, 59, ?, {gtid}, 0)",
            ranges.select("start", "end", "name").iter_rows(),
        )
        con.executemany(
            "INSERT INTO StringIds (id, value) VALUES (?, ?)", [(i, s) for s, i in strings.items()]
        )
        con.execute(
            "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)", (session, "", "")
        )
        con.execute(
            "INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, isDiscrete, totalMemory, "
            "smCount, chipName, "
            "cuDevice, computeMajor, computeMinor) VALUES (?, ?, ?, ?, 1, 85029158912, 132, "
            "'GH100', ?, 9, 0)",
            (VM << 48, device, DEVICE_NAME, f"0000:{0x18 + 16 * device:02x}:00.0", device),
        )
        con.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, '', ?, 0, ?)", [
            (VM << 48, "Hostname", host_of(cfg, rank)), (VM << 48, "CudaDriverVersion", "12080"),
        ])
        con.executemany(
            "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
            [
                ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                ("EXPORT_PRODUCT_VERSION", "2025.1.1.110"),
                ("EXPORT_SCHEMA_VERSION", "3.17.1"),
                (
                    "RLPERF_SYNTHETIC",
                    f"synthetic rlperf trace (sample_traces/synth), scenario {cfg.scenario}, "
                    "never captured by nsys",
                ),
            ],
        )
        con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", [
            ("PROCESS_0:COMMAND", "python3"),
            ("PROCESS_0:ENVIRONMENT_VARIABLE", f"RANK={rank}"),
            ("PROCESS_0:ENVIRONMENT_VARIABLE", f"WORLD_SIZE={cfg.ranks}"),
        ])
        con.execute("INSERT INTO ThreadNames VALUES (?, 0, ?)", (thread_name, gtid))
        con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (gpid, pid, PYTHON))
        con.commit()
    finally:
        con.close()


def _short(name: str) -> str:
    """nsys ``shortName``: the base name without template arguments or parameters."""
    head = name.split("(")[0].split("<")[0]
    return head.removeprefix("void ").split("::")[-1] or name
