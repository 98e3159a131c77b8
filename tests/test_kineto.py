"""The Kineto parser on every PyTorch-profiler trace of the real corpus (2022–2026 writers)."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parsers
from parsers import kineto
from parsers.events import validate

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
HTA = CORPUS / "HolisticTraceAnalysis"
TRACELENS = CORPUS / "TraceLens"
ALL = sorted([*HTA.glob("*.json.gz"), *TRACELENS.glob("*.json.gz")])


def raw_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_corpus_is_there():
    assert len(ALL) == 12


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_corpus_trace_parses_and_validates(path: Path):
    parsed = parsers.parse_file(path)
    assert parsed.format == "kineto"
    validate(parsed.events, where=path.name)
    assert parsed.events.height > 0


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_gpu_event_counts_equal_the_file(path: Path):
    """Every kernel, copy and memset of the file becomes exactly one row."""
    raw = raw_events(path)
    cats = {
        "kernel": ("kernel", "Kernel"),
        "memcpy": ("gpu_memcpy", "Memcpy"),
        "memset": ("gpu_memset", "Memset"),
    }
    events = parsers.parse_file(path).events
    for kind, names in cats.items():
        expected = sum(1 for e in raw if e.get("ph") == "X" and e.get("cat") in names)
        assert events.filter(pl.col("kind") == kind).height == expected, kind


def test_baseTimeNanoseconds_makes_absolute_time():
    path = HTA / "nccl_data.json.gz"
    # the file's decimals, exactly
    doc = json.loads(
        gzip.decompress(path.read_bytes()), parse_float=Decimal
    )
    base = doc["baseTimeNanoseconds"]
    earliest = min(e["ts"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
    events = parsers.parse_file(path).events
    first = events.filter(pl.col("kind") == "kernel")["start_ns"].min()
    assert first == base + int((earliest * 1000).to_integral_value())
    assert parsers.parse_file(path).meta["time_base"] == "baseTimeNanoseconds"


def test_display_time_unit_ns_is_still_microseconds():
    """rank-0.Apr_03 says displayTimeUnit "ns" but its ts are epoch µs with decimals."""
    parsed = parsers.parse_file(HTA / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    assert parsed.meta["display_time_unit"] == "ns"
    assert parsed.meta["time_base"] == "epoch microseconds"
    starts = parsed.events["start_ns"]
    # 2024-04-04 in epoch ns, not 1000× off
    assert 1.7121e18 < starts.min() < 1.7122e18


def test_old_capitalised_categories_and_lowercase_external_id():
    events = parsers.parse_file(HTA / "inference_rank_1.json.gz").events
    kernels = events.filter(pl.col("kind") == "kernel")
    runtime = events.filter(pl.col("kind") == "runtime")
    assert kernels.height == 4 and runtime.height == 8
    assert set(kernels["corr"]) <= set(runtime["corr"])
    assert kernels["ext_id"].drop_nulls().len() == 4
    assert kernels["device"].unique().to_list() == [0] and kernels["stream"].unique().to_list() == [
        7
    ]


def test_string_pids_and_empty_pid_instants_do_not_break_columns():
    events = parsers.parse_file(HTA / "inference_rank_1.json.gz").events
    assert events["pid"].null_count() == 0 and events["tid"].null_count() == 0


def test_rocm_trace_reads_hip_calls_and_string_args():
    parsed = parsers.parse_file(HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    events = parsed.events
    assert (
        events.filter(pl.col("kind") == "runtime")["name"]
        .cast(pl.String)
        .str.starts_with("hip")
        .all()
    )
    copies = events.filter(pl.col("kind") == "memcpy")
    assert copies.height == 2 and copies["device"].unique().to_list() == [2]
    assert parsed.meta["rank"] == -1


def test_rank_from_distributed_info_else_file_name(tmp_path: Path):
    assert (
        parsers.parse_file(HTA / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz").meta["rank"] == 34
    )
    doc = json.loads(gzip.decompress((HTA / "event_sync_trace.json.gz").read_bytes()))
    del doc["distributedInfo"]
    named = tmp_path / "job_rank-7.pt.trace.json"
    named.write_text(json.dumps(doc))
    parsed = parsers.parse_file(named)
    assert parsed.meta["rank"] == 7 and parsed.meta["rank_from"] == "file name"
    assert parsed.events["rank"].unique().to_list() == [7]


def test_collective_metadata_from_record_param_comms_and_kernels():
    parsed = parsers.parse_file(HTA / "nccl_data.json.gz")
    events = parsed.events
    kernels = events.filter((pl.col("kind") == "kernel") & pl.col("coll").is_not_null())
    assert set(kernels["coll"].cast(pl.String)) == {"all_reduce", "broadcast"}
    assert kernels["pg_desc"].cast(pl.String).unique().to_list() == ["default_pg"]
    assert kernels["pg_ranks"].unique().to_list() == ["0,1"]
    assert kernels["group_size"].unique().to_list() == [2]
    comms = events.filter(
        (pl.col("name") == "record_param_comms") & (pl.col("coll") == "all_reduce")
    )
    # bytes = max(in, out) nelems × dtype size, checked against the raw args
    raw = [
        e
        for e in raw_events(HTA / "nccl_data.json.gz")
        if e.get("name") == "record_param_comms" and e["args"].get("Collective name") == "allreduce"
    ]
    expected = sorted(max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) * 4 for e in raw)
    assert sorted(comms["bytes"].to_list()) == expected
    assert parsed.meta["pg_config"][0]["pg_desc"] == "default_pg"
    assert parsed.meta["nccl_version"] == "2.17.1"


def test_old_nccl_kernel_names_without_args_get_coll():
    events = parsers.parse_file(HTA / "test.json.gz").events
    colls = events.filter(pl.col("kind") == "kernel").group_by("coll").len().drop_nulls("coll")
    assert set(colls["coll"].cast(pl.String)) == {"send_recv", "all_reduce"}


def test_profiler_steps_are_numbered():
    events = parsers.parse_file(HTA / "test.json.gz").events
    steps = events.filter(pl.col("step").is_not_null())
    assert sorted(steps["step"].to_list()) == list(range(1009, 1015))


def test_depth_counts_nesting_on_a_thread():
    events = parsers.parse_file(HTA / "nccl_data.json.gz").events
    steps = events.filter(pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#"))
    assert steps["depth"].unique().to_list() == [0]
    depth = dict(
        events.filter(pl.col("kind") == "annotation")
        .group_by(pl.col("name").cast(pl.String))
        .agg(pl.col("depth").max())
        .iter_rows()
    )
    assert depth["## forward ##"] == 1 and depth["Optimizer.step#SGD.step"] == 2
    assert depth["nccl:broadcast"] == 3
    assert depth["nccl:all_reduce"] == 0  # on the autograd thread, outside any step range
    assert events.filter(pl.col("kind") == "kernel")["depth"].unique().to_list() == [0]


def test_event_order_does_not_change_the_table(tmp_path: Path):
    doc = json.loads(gzip.decompress((HTA / "sampled_rank-1.json.gz").read_bytes()))
    base = parsers.parse_file(HTA / "sampled_rank-1.json.gz").events
    doc["traceEvents"] = doc["traceEvents"][::-1]
    shuffled = tmp_path / "sampled_rank-1.json"
    shuffled.write_text(json.dumps(doc))
    again = parsers.parse_file(shuffled).events
    key = ["kind", "start_ns", "end_ns", "pid", "tid", "depth"]
    assert base.sort(key).select(key).equals(again.sort(key).select(key))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["kernel", "cpu_op", "user_annotation", "cuda_runtime", "gpu_memcpy"]),
            st.floats(min_value=0, max_value=1e9, allow_nan=False),
            st.floats(min_value=0, max_value=1e6, allow_nan=False),
            st.integers(min_value=-1, max_value=2**70),
        ),
        min_size=1,
        max_size=40,
    ),
    st.booleans(),
)
def test_property_any_event_mix_validates(tmp_path_factory, rows, with_base):
    events = [
        {
            "ph": "X",
            "cat": cat,
            "name": f"n{i}",
            "pid": 0 if cat in ("kernel", "gpu_memcpy") else 11,
            "tid": 7,
            "ts": ts,
            "dur": dur,
            "args": {"correlation": i, "External id": big, "bytes": 8},
        }
        for i, (cat, ts, dur, big) in enumerate(rows)
    ]
    doc = {"traceEvents": events, "schemaVersion": 1}
    if with_base:
        doc["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    path = tmp_path_factory.mktemp("prop") / "t.json"
    path.write_text(json.dumps(doc))
    parsed = kineto.parse(path)
    validate(parsed.events)
    assert parsed.events.height == len(rows)
    assert (parsed.events["end_ns"] >= parsed.events["start_ns"]).all()
    too_big = sum(1 for r in rows if r[3] >= 2**63)
    assert parsed.events["ext_id"].null_count() == too_big
