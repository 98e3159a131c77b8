"""Nsight Systems SQLite exports from the real corpus (nsys 2022.2, 2025.1, 2026.2)."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

import parsers
from parsers import nsys
from parsers.discover import discover
from parsers.events import validate

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
PIPIT = CORPUS / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
NVFUSER = CORPUS / "nvFuser" / "report1.sqlite"
H100 = CORPUS / "nsys-ai" / "h100_2gpu_1s.sqlite"
MFU = CORPUS / "nsys-ai" / "mfu_2gpu_before.sqlite"
ALL = [PIPIT, NVFUSER, H100, MFU]


@pytest.fixture(scope="module")
def parsed() -> dict[Path, parsers.ParsedSource]:
    return {path: parsers.parse_file(path) for path in ALL}


def sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def count(path: Path, table: str, where: str = "") -> int:
    have = {r[0] for r in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    return sql(path, f"SELECT count(*) FROM {table} {where}")[0][0] if table in have else 0


def kinds(source: parsers.ParsedSource) -> dict[str, int]:
    return dict(source.events.group_by(pl.col("kind").cast(pl.String)).len().iter_rows())


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_corpus_export_parses_and_is_sniffed(path: Path, parsed) -> None:
    assert parsers.sniff(path) == "nsys-sqlite"
    source = parsed[path]
    validate(source.events, where=path.name)
    assert source.format == "nsys-sqlite"
    assert source.events.height > 0


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_counts_equal_plain_sql(path: Path, parsed) -> None:
    got = kinds(parsed[path])
    ranges = "WHERE eventType IN (59, 60, 70, 71) AND end IS NOT NULL"
    expected = {
        "kernel": count(path, "CUPTI_ACTIVITY_KIND_KERNEL"),
        "memcpy": count(path, "CUPTI_ACTIVITY_KIND_MEMCPY"),
        "memset": count(path, "CUPTI_ACTIVITY_KIND_MEMSET"),
        "gpu_sync": count(path, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
        "runtime": count(path, "CUPTI_ACTIVITY_KIND_RUNTIME", "WHERE eventClass IN (0, 1)"),
        "annotation": count(path, "NVTX_EVENTS", ranges),
        "marker": count(path, "NVTX_EVENTS", "WHERE eventType IN (34, 65)"),
    }
    assert got == {k: v for k, v in expected.items() if v}


def test_known_sizes_of_the_corpus(parsed) -> None:
    assert kinds(parsed[NVFUSER]) == {
        "kernel": 18, "memcpy": 3, "memset": 3, "gpu_sync": 3, "runtime": 990, "annotation": 13513,
    }
    assert kinds(parsed[MFU])["kernel"] == 4010
    assert kinds(parsed[H100])["kernel"] == 3442
    assert kinds(parsed[PIPIT]) == {"kernel": 5, "memcpy": 15, "runtime": 57, "annotation": 22}


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_absolute_time_is_session_start_plus_session_time(path: Path, parsed) -> None:
    base = sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]
    events = parsed[path].events
    assert parsed[path].meta["session_start_ns"] == base
    first_kernel = sql(path, "SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    kernels = events.filter(pl.col("kind") == "kernel")
    assert kernels["start_ns"].min() == base + first_kernel[0]
    assert kernels["end_ns"].max() == base + first_kernel[1]
    first_range = sql(path, "SELECT min(start) FROM NVTX_EVENTS WHERE eventType IN (59, 60)")[0][0]
    assert events.filter(pl.col("kind") == "annotation")["start_ns"].min() == base + first_range


def test_bytes_and_copy_names_match_sql(parsed) -> None:
    for path in (PIPIT, NVFUSER, MFU):
        events = parsed[path].events
        for kind, table in (
            ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
            ("memset", "CUPTI_ACTIVITY_KIND_MEMSET"),
        ):
            total = sql(path, f"SELECT total(bytes) FROM {table}")[0][0]
            assert events.filter(pl.col("kind") == kind)["bytes"].sum() == int(total)
    names = parsed[PIPIT].events.filter(pl.col("kind") == "memcpy").group_by("name").len()
    assert dict(names.select(pl.col("name").cast(pl.String), "len").iter_rows()) == {
        "Memcpy HtoD (Pageable -> Device)": 10,
        "Memcpy DtoH (Device -> Pageable)": 5,
    }
    syncs = parsed[NVFUSER].events.filter(pl.col("kind") == "gpu_sync")
    assert sorted(syncs["name"].cast(pl.String)) == [
        "Context Sync",
        "Stream Wait Event",
        "Stream Wait Event",
    ]


def test_kernel_names_streams_devices_and_correlation(parsed) -> None:
    kernels = parsed[MFU].events.filter(pl.col("kind") == "kernel")
    placement = kernels.group_by("pid").agg(pl.col("device").unique(), pl.col("stream").unique())
    assert sorted(placement.iter_rows()) == [(144, [0], [7]), (145, [1], [15])]
    nccl = kernels.filter(pl.col("coll").is_not_null())
    assert nccl.height == 66
    assert set(nccl["coll"].cast(pl.String)) == {"send_recv"}
    assert set(nccl["name"].cast(pl.String)) == {
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"
    }
    runtime = parsed[MFU].events.filter(pl.col("kind") == "runtime")
    # correlation ids are per process: both processes reuse the same numbers
    assert kernels.join(runtime, on="corr", how="inner").height > kernels.height
    linked = kernels.join(
        runtime.select("pid", "corr", launch=pl.col("name")), on=["pid", "corr"], how="left"
    )
    assert linked.height == kernels.height
    assert linked["launch"].null_count() == sql(
        MFU,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE NOT EXISTS (SELECT 1 FROM "
        "CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId AND "
        "(r.globalTid >> 24) = (k.globalPid >> 24))",
    )[0][0]
    assert set(linked["launch"].drop_nulls().cast(pl.String)) <= {
        "cudaLaunchKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchKernelExC",
    }


def test_runtime_names_lose_version_suffix_and_backtrace_twins(parsed) -> None:
    names = parsed[PIPIT].events.filter(pl.col("kind") == "runtime")["name"].cast(pl.String)
    assert not names.str.contains(r"_v\d+$").any()
    assert (names == "cudaLaunchKernel").sum() == 5
    raw = sql(PIPIT, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 67")[0][0]
    assert raw == 38


def test_nvtx_names_domains_and_pytorch_ranges(parsed) -> None:
    assert parsed[PIPIT].meta["nvtx_domains"] == {0: "default", 1: "MPI"}
    assert parsed[MFU].meta["nvtx_domains"] == {0: "default", 1: None}
    names = parsed[MFU].events.filter(pl.col("kind") == "annotation")["name"].cast(pl.String)
    registered = dict(
        sql(
            MFU,
            "SELECT s.value, count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId GROUP "
            "BY 1",
        )
    )
    assert registered["ncclSend"] == 132
    for name, n in registered.items():
        assert (names == name).sum() == n
    assert names.str.contains(r"^aten::mul, (seq = \d+, )?op_id = \d+$").any()
    assert names.str.contains(r"^nccl:all_to_all, op_id = \d+$").any()
    mpi = parsed[PIPIT].events.filter(pl.col("kind") == "annotation")["name"].cast(pl.String)
    assert (mpi == "MPI_Send").sum() > 0 and (mpi == "saxpy").sum() == 5


def reference_depths(events: pl.DataFrame) -> list[int]:
    """A plain stack walk per thread: the nesting the timeline shows (a test oracle)."""
    rows = sorted(
        enumerate(zip(events["tid"], events["start_ns"], events["end_ns"], strict=True)),
        key=lambda r: (r[1][0], r[1][1], -r[1][2], r[0]),
    )
    depth = [0] * events.height
    stacks: dict[int, list[int]] = defaultdict(list)
    for i, (tid, start, end) in rows:
        stack = stacks[tid]
        while stack and stack[-1] <= start:
            stack.pop()
        depth[i] = len(stack)
        stack.append(end)
    return depth


@pytest.mark.parametrize("path", [NVFUSER, MFU, H100], ids=lambda p: p.name)
def test_nesting_depth_equals_a_stack_walk(path: Path, parsed) -> None:
    ranges = parsed[path].events.filter(pl.col("kind") == "annotation")
    assert ranges["depth"].to_list() == reference_depths(ranges)
    assert ranges["depth"].max() == {NVFUSER: 18, MFU: 4, H100: 4}[path]


def test_ranks_hosts_and_processes(parsed) -> None:
    pipit = parsed[PIPIT]
    assert pipit.meta["rank"] == 0 and pipit.meta["world_size"] == 2
    assert pipit.meta["processes"][0]["rank_source"] == "environment variable SLURM_PROCID"
    assert set(pipit.events["rank"]) == {0}
    assert pipit.meta["host"] == "nid001608" and set(pipit.events["host"].cast(pl.String)) == {
        "nid001608"
    }

    mfu = parsed[MFU]
    by_pid = dict(
        mfu.events.group_by("pid")
        .agg(pl.col("rank").unique())
        .select("pid", pl.col("rank").list.first())
        .iter_rows()
    )
    assert by_pid == {144: 0, 145: 1}
    assert (
        "mfu_2gpu_before.sqlite: ranks inferred from each torchrun worker's GPU (LOCAL_RANK = "
        "device convention): pid 144 → rank 0, pid 145 → rank 1"
    ) in mfu.warnings
    assert any("time-window slice" in w for w in mfu.warnings)

    h100 = parsed[H100]
    assert set(h100.events["rank"]) == {-1}
    assert [p["pid"] for p in h100.meta["processes"]] == [111, 112]
    assert parsed[NVFUSER].meta["host"] == "ipp2-0047.nvidia.com"


def test_versions_and_device_map(parsed) -> None:
    assert parsed[PIPIT].meta["nsys_version"] == "2022.2.1.31"
    assert parsed[NVFUSER].meta["export_schema"] == "3.17.1"
    assert parsed[MFU].meta["nsys_version"] == "2026.2.1.210"
    assert parsed[NVFUSER].meta["device_map"] == {0: 0}
    assert parsed[MFU].meta["device_map"] == {}


def test_discovery_reads_a_report_beside_its_export_once() -> None:
    found = discover([CORPUS / "nvFuser"])
    assert found.sources == [(CORPUS / "nvFuser" / "report1.sqlite", "nsys-sqlite")]
    assert any("report1.nsys-rep" in n for n in found.notes)


def test_source_index_and_time_order() -> None:
    source = nsys.parse(MFU, source=3)
    assert set(source.events["source"]) == {3}
    assert source.events["start_ns"].is_sorted()


def test_batched_reading_gives_the_same_table(parsed, monkeypatch: pytest.MonkeyPatch) -> None:
    from parsers import nsys_db

    monkeypatch.setattr(nsys_db, "BATCH_ROWS", 1000)
    assert nsys.parse(NVFUSER).events.equals(parsed[NVFUSER].events)
