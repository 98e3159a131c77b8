"""``rlperf export --perfetto``: a Chrome-trace JSON for the Perfetto UI and chrome://tracing that
rlperf's own Kineto parser reads back with every rank's events intact, its stage track the stage
timeline (tests/test_perfetto_roundtrip.py: the whole analysis read back)."""

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
from analyzer.ops.perfetto import BUBBLE_TID, STAGE_TID, export
from parsers.events import validate
from parsers.kineto_export import BUBBLE_CATEGORY, STAGE_CATEGORY

GPU = ["kernel", "memcpy", "memset"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("perfetto")
    run = analyzer.load([synthetic(root, "disaggregated")])
    out = root / "trace.json"
    written = export(run, out)
    return run, out, written


def stage_slices(out: Path) -> pl.DataFrame:
    """The stage track as the file holds it: rank (from the header's process table), stage and
    nanosecond bounds (``ts``/``dur`` are µs with three decimals)."""
    document = json.loads(out.read_text())
    base = document["baseTimeNanoseconds"]
    rank_of = {e["pid"]: e["rank"] for e in document["rlperf"]["processes"]}
    rows = [
        {
            "rank": rank_of[e["pid"]],
            "stage": e["name"],
            "start_ns": base + round(e["ts"] * 1000),
            "end_ns": base + round((e["ts"] + e["dur"]) * 1000),
        }
        for e in document["traceEvents"]
        if e.get("cat") == STAGE_CATEGORY
    ]
    return pl.DataFrame(rows).sort("rank", "start_ns")


def test_stage_track_is_the_stage_timeline_and_no_event_when_read(exported):
    """The stages track holds every stage segment to the nanosecond; rlperf's reader skips it
    (the stages are derived again from the exported ranges) and counts no unknown category."""
    run, out, written = exported
    got = stage_slices(out)
    expected = run.stage_timeline.select(
        pl.col("rank").cast(pl.Int64), pl.col("stage").cast(pl.String), "start_ns", "end_ns"
    ).sort("rank", "start_ns")
    assert got.height == written["stage_slices"] == run.stage_timeline.height
    assert got.equals(expected)
    back = parsers.parse_file(out)
    assert back.format == "kineto" and back.warnings == []
    validate(back.events, where=str(out))
    assert back.events.filter(pl.col("tid").is_in([STAGE_TID, BUBBLE_TID])).height == 0
    assert "skipped_categories" not in back.meta


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
    got = stage_slices(out)
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
    b = after.group_by(pl.col("rank").cast(pl.Int64).alias("who"), "kind").agg(summary).sort(
        "who", "kind"
    )
    assert a.equals(b)
    busy_before = (
        gpu_time(run.events)
        .select(pl.col("rank").cast(pl.Int64), "busy_ns", "overlap_ns")
        .sort("rank")
    )
    busy_after = gpu_time(back).select(
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
    before = run.events.filter(pl.col("kind").is_in(kinds))
    after = back.filter(pl.col("kind").is_in(kinds))
    assert sorted(set(before["rank"].to_list())) == [-1, 0, 1, 2]
    assert per_kind(before, "rank").equals(per_kind(after, "rank"))
