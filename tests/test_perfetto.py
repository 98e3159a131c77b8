"""``rlperf export --perfetto``: a Chrome-trace JSON for the Perfetto UI and chrome://tracing that
rlperf's own Kineto parser reads back with the stage tracks intact."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from report_truth import RUNS, cli, load_truth, synthetic

import analyzer
import parsers
from analyzer.analyses.gpu_time import compute as gpu_time
from analyzer.ops.perfetto import BUBBLE_CATEGORY, BUBBLE_TID, STAGE_TID, export
from parsers.events import validate

GPU = ["kernel", "memcpy", "memset"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("perfetto")
    run = analyzer.load([synthetic(root, "disaggregated")])
    out = root / "trace.json"
    written = export(run, out)
    return run, out, written


def test_stage_tracks_load_back_intact(exported):
    run, out, written = exported
    back = parsers.parse_file(out)
    assert back.format == "kineto" and back.warnings == []
    validate(back.events, where=str(out))
    stages = back.events.filter((pl.col("kind") == "annotation") & (pl.col("tid") == STAGE_TID))
    assert stages.height == written["stage_slices"] == run.stage_timeline.height
    expected = run.stage_timeline.select(
        pl.col("rank").cast(pl.Int64).alias("pid"),
        pl.col("stage").cast(pl.String).alias("name"),
        "start_ns",
        "end_ns",
    ).sort("pid", "start_ns")
    got = stages.select("pid", pl.col("name").cast(pl.String), "start_ns", "end_ns").sort(
        "pid", "start_ns"
    )
    assert got.equals(expected)


def merged(stages: pl.DataFrame) -> pl.DataFrame:
    """Back-to-back slices of one stage on one rank joined into one interval."""
    new = (pl.col("stage") != pl.col("stage").shift(1).over("rank")) | (
        pl.col("start_ns") != pl.col("end_ns").shift(1).over("rank")
    )
    return (
        stages.sort("rank", "start_ns").with_columns(new.fill_null(True).cum_sum().alias("_g"))
        .group_by("rank", "stage", "_g").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_g").sort("rank", "start_ns")
    )


def test_stage_tracks_are_the_truths_stages(exported):
    """Independent of rlperf: the exported stage track, read back, is the generator's truth — every
    rank's stage intervals to the nanosecond (measured: exact), the slices split at sub-ranges
    joined again."""
    run, out, _ = exported
    back = parsers.parse_file(out).events
    got = back.filter((pl.col("kind") == "annotation") & (pl.col("tid") == STAGE_TID)).select(
        pl.col("pid").cast(pl.Int64).alias("rank"),
        pl.col("name").cast(pl.String).alias("stage"),
        "start_ns",
        "end_ns",
    )
    truth = load_truth(run.sources[0].path.parent)
    want = pl.DataFrame(truth["stages"]).filter(pl.col("rank") >= 0).select(
        pl.col("rank").cast(pl.Int64), "stage", "start_ns", "end_ns").sort("rank", "start_ns")
    assert want.height > 0 and merged(got).equals(want)


def test_device_work_loads_back_unchanged(exported):
    run, out, _ = exported
    back = parsers.parse_file(out).events
    before = run.events.filter(pl.col("kind").is_in(GPU))
    after = back.filter(pl.col("kind").is_in(GPU))
    summary = [pl.len(), pl.col("bytes").sum(), pl.col("coll").drop_nulls().len().alias("colls"),
               (pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns")]
    a = (
        before.group_by(pl.col("rank").cast(pl.Int64).alias("who"), "kind")
        .agg(summary)
        .sort("who", "kind")
    )
    b = after.group_by(pl.col("pid").alias("who"), "kind").agg(summary).sort("who", "kind")
    assert a.equals(b)
    busy_before = (
        gpu_time(run.events)
        .select(pl.col("rank").cast(pl.Int64), "busy_ns", "overlap_ns")
        .sort("rank")
    )
    busy_after = gpu_time(back.with_columns(pl.col("pid").cast(pl.Int32).alias("rank"))).select(
        pl.col("rank").cast(pl.Int64), "busy_ns", "overlap_ns").sort("rank")
    assert busy_before.equals(busy_after)
    assert groups(before) == groups(after)


def groups(events: pl.DataFrame) -> list[str]:
    return events.filter(pl.col("coll").is_not_null())["pg_ranks"].unique().sort().to_list()


def per_kind(events: pl.DataFrame, who: str) -> pl.DataFrame:
    return (
        events.group_by(pl.col(who).cast(pl.Int64).alias("who"), pl.col("kind").cast(pl.String))
        .len()
        .sort("who", "kind")
    )


def test_trace_viewer_shape(exported):
    run, out, written = exported
    document = json.loads(out.read_text())
    events = document["traceEvents"]
    assert document["baseTimeNanoseconds"] > 0 and document["rlperf"]["stage_tid"] == STAGE_TID
    slices = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and {"name", "cat", "pid", "tid", "ts"} <= set(e) for e in slices)
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"].endswith("_name")
    }
    assert names[(0, None)].startswith("rank 0") and names[(0, STAGE_TID)] == "stages"
    bubbles = [e for e in slices if e["cat"] == BUBBLE_CATEGORY]
    assert len(bubbles) == written["bubble_slices"] > 0 and all(
        e["tid"] == BUBBLE_TID for e in bubbles
    )
    assert any(
        e["name"].startswith("largest bubble: ") and e["cname"] == "terrible" for e in bubbles
    )
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == written["flows"] > 0 and starts.keys() == ends.keys()
    on_track = [e for e in slices if e["tid"] == STAGE_TID]
    for flow in [*starts.values(), *ends.values()]:
        holders = [
            s
            for s in on_track
            if s["pid"] == flow["pid"] and s["ts"] <= flow["ts"] <= s["ts"] + s["dur"]
        ]
        assert [h["name"] for h in holders] == ["weight_sync"], flow
    pools = dict(
        zip(run.pools["rank"].to_list(), run.pools["pool"].cast(pl.String).to_list(), strict=True)
    )
    assert all(pools[s["pid"]] == "train" for s in starts.values())
    assert all(pools[f["pid"]] == "rollout" for f in ends.values())


def test_cli_export_of_a_sample_run(tmp_path: Path):
    source = RUNS / "openrlhf_ppo_disaggregated"
    out = tmp_path / "run.json.gz"
    done = cli("export", str(source), "--perfetto", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "ui.perfetto.dev" in done.stderr
    json.loads(gzip.decompress(out.read_bytes()))
    run = analyzer.load([source])
    back = parsers.parse_file(out).events
    kinds = ["cpu_op", "annotation", "python", "runtime", "marker"]
    before = run.events.filter(pl.col("kind").is_in(kinds) & (pl.col("rank") >= 0))
    after = back.filter(pl.col("kind").is_in(kinds) & (pl.col("tid") != STAGE_TID))
    assert per_kind(before, "rank").equals(per_kind(after, "pid"))
