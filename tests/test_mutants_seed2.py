"""Tests for the survivors of the seed-2 mutation sample (docs/mutation.md), each on a tiny input
built here whose right answer is worked out by hand."""

from __future__ import annotations

import sqlite3
import types
from pathlib import Path

import polars as pl
import pytest

from analyzer.analyses import guideline_metrics, log_steps, quality
from analyzer.classify import dims, placement, steps, timeline
from analyzer.model.options import Options
from parsers import kineto, nsys, nsys_db, nsys_procs, nsys_stats
from parsers.errors import InputError

GPU_HEADER = "Start (ns),Duration (ns),CorrId,Bytes (B),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name"


def gpu_trace(tmp_path: Path, *rows: str) -> pl.DataFrame:
    """The event table of a hand-written ``cuda_gpu_trace`` CSV."""
    path = tmp_path / "run_cuda_gpu_trace.csv"
    path.write_text("\n".join([GPU_HEADER, *rows]) + "\n")
    return nsys_stats.parse(path).events.sort("start_ns")


def test_gpu_trace_reads_the_bytes_column(tmp_path: Path):
    events = gpu_trace(
        tmp_path, "100,50,7,4096,Pinned,Device,NVIDIA H100 (0),1,7,[CUDA memcpy Host-to-Device]"
    )
    assert events.select("kind", "bytes", "start_ns", "end_ns").rows() == [
        ("memcpy", 4096, 100, 150)
    ]


def test_gpu_trace_takes_the_collective_of_kernels_only(tmp_path: Path):
    events = gpu_trace(
        tmp_path,
        "100,50,7,,,,NVIDIA H100 (0),1,7,ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm)",
        "200,10,8,64,Device,Device,NVIDIA H100 (0),1,7,[CUDA memcpy Device-to-Device]",
    )
    assert events.select("kind", "coll").rows() == [("kernel", "all_reduce"), ("memcpy", None)]


def test_gpu_trace_keeps_nanosecond_times_exact_past_float_precision(tmp_path: Path):
    start = 2**53 + 1
    events = gpu_trace(tmp_path, f"{start},3,7,,,,NVIDIA H100 (0),1,7,k")
    assert events.select("start_ns", "end_ns").rows() == [(start, start + 3)]


def memcpy_db(tmp_path: Path) -> Path:
    path = tmp_path / "memcpy.sqlite"
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, "
        "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, "
        "copyKind INTEGER, srcKind INTEGER, dstKind INTEGER)"
    )
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (10, 20, 0, 7, 3, 1, 64, 1, 1, 99)")
    con.commit()
    con.close()
    return path


def test_memcpy_of_an_unknown_destination_kind_is_named_unknown(tmp_path: Path):
    db = nsys_db.Db(memcpy_db(tmp_path))
    try:
        names = nsys._memcpys(db)["name"].to_list()
    finally:
        db.close()
    assert names == ["Memcpy HtoD (Pinned -> Unknown)"]


def test_db_scalar_binds_its_parameters(tmp_path: Path):
    db = nsys_db.Db(memcpy_db(tmp_path))
    try:
        got = db.scalar(
            "SELECT bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE correlationId = ?", (3,)
        )
    finally:
        db.close()
    assert got == 64


def test_a_damaged_export_names_the_sqlite_problem(tmp_path: Path):
    """Its first two pages (the schema, the start time) read, so the damage shows only when
    ``parse`` reads ``StringIds``, past the opening checks of ``Db``."""
    path = tmp_path / "damaged.sqlite"
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 4096")
    con.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER)")
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1000)")
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, "x" * 200) for i in range(200)])
    con.commit()
    con.close()
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(2 * 4096)
        f.write(b"\xff" * (size - 2 * 4096))
    with pytest.raises(InputError) as caught:
        nsys.parse(path)
    assert caught.value.problem == (
        "SQLite database is truncated or corrupt (database disk image is malformed)"
    )


@pytest.mark.parametrize(("text", "value"), [("3.0", 3), ("-2.0", -2), ("1e3", 1000)])
def test_int_text_reads_integral_float_text(text: str, value: int):
    assert kineto._int_text(text) == value


def test_stage_at_keeps_the_segments_confidence():
    segments = pl.DataFrame(
        {
            "rank": [0],
            "start_ns": [100],
            "end_ns": [200],
            "stage": ["rollout"],
            "role": ["actor"],
            "step": [1],
            "inferred": [True],
            "confidence": pl.Series([0.5], dtype=pl.Float32),
        }
    )
    points = pl.DataFrame({"_row": [0, 1], "rank": [0, 0], "t": [150, 250]})
    got = timeline.stage_at(points, segments).sort("_row")
    assert got["confidence"].to_list() == [0.5, None]
    assert got["seg_step"].to_list() == [1, None]


def test_log_step_stages_without_logs_has_the_stage_column():
    events = pl.DataFrame(
        schema={"kind": pl.String, "name": pl.String, "step": pl.Int32, "start_ns": pl.Int64,
                "end_ns": pl.Int64}
    )
    got = steps.log_step_stages(events, pl.DataFrame({"relation": ["stage"]}))
    assert got.schema == pl.Schema({"step": pl.Int32, "stage": pl.String, "dur": pl.Int64})


@pytest.mark.parametrize(
    ("stated", "flag"),
    [("true", True), (" True ", True), ("false", False), ("1", True), ("0", False), ("yes", None)],
)
def test_config_flag_reads_text_flags(stated: str, flag: bool | None):
    ev = types.SimpleNamespace(config=lambda fact: stated)
    assert guideline_metrics.config_flag(ev, "flag") is flag


def stage_ranges(*rows: tuple[int, str, int, int, int]) -> pl.DataFrame:
    """``(rank, stage, step, start_ns, end_ns)`` rows as the ``stage_ranges`` product."""
    return pl.DataFrame(
        rows, schema=["rank", "stage", "step", "start_ns", "end_ns"], orient="row"
    )


SHARED = pl.DataFrame({"rank": [0, 1], "pool": ["shared", "shared"]})


def test_colocated_placement_says_every_rank_does_everything():
    ranges = stage_ranges(
        (0, "rollout", 1, 0, 100), (1, "rollout", 1, 0, 100),
        (0, "actor_update", 1, 100, 200), (1, "actor_update", 1, 100, 200),
    )
    got = placement.infer_placement(SHARED, ranges)
    assert (got["placement"], got["execution"]) == ("colocated", "sync")
    assert got["evidence"][0] == "every rank (0-1) runs both generation and training stages"


def test_forward_only_stage_during_another_ranks_generation_is_fused():
    """Rank 1 scores (``ref_logprob``, 50…100) while rank 0 still generates step 1 (0…100):
    all 50 ns of it overlap, far past the 5% of fusion."""
    ranges = stage_ranges(
        (0, "rollout", 1, 0, 100), (1, "rollout", 1, 0, 50),
        (1, "ref_logprob", 1, 50, 100), (0, "actor_update", 1, 100, 200),
        (1, "actor_update", 1, 100, 200),
    )
    got = placement.infer_placement(SHARED, ranges)
    assert (got["placement"], got["execution"]) == ("colocated", "stage_fused")
    assert got["evidence"][-1].startswith("forward-only stages run 100% of their time")


def test_hosts_by_vm_leaves_out_empty_host_names(tmp_path: Path):
    path = tmp_path / "hosts.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, name TEXT, value TEXT)")
    con.executemany(
        "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, ?, ?)",
        [(1 << 48, "Hostname", "node-a"), (2 << 48, "Hostname", ""), (3 << 48, "OS", "Linux")],
    )
    con.commit()
    con.close()
    db = nsys_db.Db(path)
    try:
        got = nsys_procs.hosts_by_vm(db)
    finally:
        db.close()
    assert got == {1: "node-a"}


def test_quality_details_are_ordered_by_step_not_by_their_text():
    """Step 2 before step 10, where the text alone would put ``step 10`` first."""
    facts = pl.DataFrame({"source": [0, 0, 0], "rank": [0, 0, 1], "step": [10, 2, 1]})
    got = quality._details(facts, lambda r: f"rank {r['rank']} step {r['step']}")
    assert got.rows() == [(0, 3, "rank 0 step 2; rank 0 step 10; rank 1 step 1")]


def test_a_collective_inside_weight_sync_has_its_dimension_from_the_stage():
    """No group, layout or kernel name says more, so the stage decides and the table says so."""
    text = {c: pl.String for c in ("group", "pg_desc", "name", "coll", "stage")}
    rows = pl.DataFrame(
        {
            "group": [None, None],
            "pg_desc": [None, None],
            "name": ["nccl:all_reduce"] * 2,
            "coll": ["all_reduce"] * 2,
            "stage": ["weight_sync", "actor_update"],
            "bytes": [64, 64],
        },
        schema={**text, "bytes": pl.Int64},
    )
    pools = pl.DataFrame(schema={"rank": pl.Int64, "pool": pl.String})
    got = dims._dims_for(rows, Options(), pools)
    assert got.select(pl.col("dim").cast(pl.String), "dim_by").row(0) == ("weight_sync", "stage")
    assert got["dim_by"][1] != "stage"


def test_a_part_carved_out_of_its_parent_counts_in_the_step_as_the_parent_does():
    """``timing/gen`` (10 s, in the step) holds a 3 s reward part whose own timer is outside
    the step: carved out, it is 3 s of the step, and the parent keeps 7 s."""
    rows = pl.DataFrame(
        {
            "step": [1, 1],
            "name": ["timing/gen", "timing/reward"],
            "stage": ["rollout", "reward"],
            "label": ["gen", "reward"],
            "composite": [False, False],
            "in_step": [True, False],
            "seconds": [10.0, 3.0],
            "relation": ["stage", "part"],
            "parent": [None, "timing/gen"],
        }
    )
    got, notes = log_steps._stage_rows(rows)
    assert sorted(got.select("name", "in_step", "seconds").rows()) == [
        ("timing/gen", True, 7.0),
        ("timing/reward", True, 3.0),
    ]
    assert notes == []
