"""Span traces written by the frameworks themselves: verl's Ray timeline, AReaL's perf_tracer
JSONL and NeMo-RL's trace (fixtures in ``tests/fixtures/logs/``, shaped as those writers emit)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import parsers
from parsers import spans
from parsers.discover import read_head, sniff
from parsers.events import validate

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
KINETO = sorted(
    [*CORPUS.glob("HolisticTraceAnalysis/*.json.gz"), *CORPUS.glob("TraceLens/*.json.gz")]
)


def parse(name: str) -> parsers.ParsedSource:
    out = parsers.parse_file(FIXTURES / name)
    assert out.format == "framework-spans"
    validate(out.events)
    return out


def rows(out: parsers.ParsedSource, name: str) -> pl.DataFrame:
    return out.events.filter(pl.col("name") == name).with_columns(
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e9).alias("s")
    )


def test_ray_timeline_of_a_verl_run():
    out = parse("verl_ray_timeline.json")
    assert out.meta["producer"] == "ray-timeline" and out.meta["framework"] == "verl"
    assert out.meta["time_base"] == "epoch µs from the trace"
    gen = rows(out, "task::WorkerDict.actor_rollout_generate_sequences")
    assert gen.height == 4 and gen["s"].to_list() == pytest.approx([4.1] * 4)
    assert sorted(set(gen["host"].cast(pl.String).to_list())) == ["10.0.0.5", "10.0.0.6"]
    assert gen["start_ns"].min() == 1747897500_000000 * 1000 + 1_000_000_000
    execute = rows(out, "task:execute")
    assert execute["depth"].unique().to_list() == [1]
    assert set(out.events["kind"].cast(pl.String).to_list()) == {"annotation"}
    assert out.warnings == []


def test_areal_perf_tracer_jsonl():
    out = parse("areal_traces-r0.jsonl")
    assert out.meta["producer"] == "areal-perf-tracer" and out.meta["rank"] == 0
    assert out.meta["time_base"].startswith("relative")
    rollout = rows(out, "train.rollout")
    assert rollout["step"].to_list() == [3, 4] and rollout["s"].to_list() == pytest.approx(
        [88.71, 88.71]
    )
    forward = rows(out, "fsdp_engine.forward")
    assert forward["step"].to_list() == [3, 4] and forward["depth"].to_list() == [1, 1]
    marker = out.events.filter(pl.col("kind") == "marker")
    assert marker["name"].cast(pl.String).to_list() == ["step_done", "step_done"]
    assert any("1 unreadable lines" in w and "22" in w for w in out.warnings)


def test_nemo_rl_trace_begin_end_pairs_and_step_spans():
    out = parse("nemo_rl_trace.json")
    assert out.meta["producer"] == "nemo-rl-trace" and out.meta["framework"] == "nemo_rl"
    gen = rows(out, "generation")
    assert gen["step"].to_list() == [1, 2] and gen["s"].to_list() == pytest.approx([61.02, 61.02])
    assert gen["depth"].to_list() == [1, 1]
    sync = rows(out, "transfer_and_update_weights")
    assert sync["depth"].to_list() == [2, 2] and sync["s"].to_list() == pytest.approx([2.91, 2.91])
    samples = rows(out, "sample_rollout")
    assert samples["step"].to_list() == [1, 1, 2, 2] and sorted(
        samples["s"].to_list()
    ) == pytest.approx([30, 30, 55, 55])
    assert rows(out, "step")["step"].to_list() == [1, 2]
    assert any("1 ranges never closed" in w for w in out.warnings)
    assert out.metrics.select("step", "key", "value").rows() == [
        (1, "avg_reward", 0.32),
        (2, "avg_reward", 0.33),
    ]


def complete_spans(text: str) -> int:
    """The ``ph: X`` objects a cut JSON array still holds whole, read by the json module."""
    decoder, at, found = json.JSONDecoder(), text.index("[") + 1, 0
    while True:
        while at < len(text) and text[at] in ", \n\t":
            at += 1
        try:
            item, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return found
        found += item.get("ph") == "X"


def test_a_cut_json_array_keeps_the_events_before_the_cut(tmp_path):
    text = (FIXTURES / "verl_ray_timeline.json").read_text()
    cut = tmp_path / "timeline.json"
    cut.write_text(text[: len(text) // 2])
    out = spans.parse(cut)
    validate(out.events)
    whole = spans.parse(FIXTURES / "verl_ray_timeline.json")
    # exactly the spans complete before the cut (20 of 43), not anywhere in 30-70% of them
    assert whole.events.height == complete_spans(text)
    assert out.events.height == complete_spans(text[: len(text) // 2]) == 20
    assert out.meta["salvaged"] > 0.99
    assert any("cut short" in w for w in out.warnings)


def test_kineto_traces_are_left_to_the_kineto_parser():
    assert len(KINETO) == 12
    for path in KINETO:
        assert spans.sniff(read_head(path), path) == 0, path
        assert sniff(path) == "kineto"


def test_torch_events_merged_into_a_perf_tracer_stream_keep_their_kinds(tmp_path):
    lines = [
        {
            "name": "train.ppo_update",
            "ph": "X",
            "ts": 10,
            "dur": 1000,
            "pid": 1,
            "tid": 2,
            "cat": "compute",
            "args": {"global_step": 5, "rank": 3},
        },
        {
            "name": "aten::mm",
            "ph": "X",
            "ts": 20,
            "dur": 100,
            "pid": 1,
            "tid": 2,
            "cat": "cpu_op",
            "args": {},
        },
        {
            "name": "ampere_sgemm_128x64_tn",
            "ph": "X",
            "ts": 40,
            "dur": 50,
            "pid": 1,
            "tid": 9,
            "cat": "kernel",
            "args": {"device": 0, "stream": 7, "correlation": 88},
        },
        {
            "name": "void gemv()",
            "ph": "X",
            "ts": 60,
            "dur": 5,
            "pid": 1,
            "tid": 9,
            "cat": "kernel",
            "args": {},
        },
    ]
    path = tmp_path / "traces-r3.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert spans.sniff(read_head(path), path) == 85
    out = spans.parse(path)
    validate(out.events)
    kinds = dict(
        out.events.select(
            pl.col("name").cast(pl.String), pl.col("kind").cast(pl.String)
        ).iter_rows()
    )
    assert kinds == {"train.ppo_update": "annotation", "aten::mm": "cpu_op",
                     "ampere_sgemm_128x64_tn": "kernel", "void gemv()": "annotation"}
    kernel = out.events.filter(pl.col("kind") == "kernel")
    assert kernel.select("device", "stream", "corr").row(0) == (0, 7, 88)
    assert out.events.filter(pl.col("name") == "aten::mm")["step"].to_list() == [5]
    assert out.meta["rank"] == 3


def test_not_a_trace_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('[{"name": "a", "ph": "X", "ts": "x", "dur": {"no": 1}}]')
    with pytest.raises(parsers.InputError) as err:
        spans.parse(bad)
    assert "x.json" in str(err.value)


def test_an_instant_at_a_range_start_does_not_lift_the_range_out_of_its_parent(tmp_path):
    """Depth counts the ranges open at a range's start (one starting there included, one ending
    there not); a zero-length event encloses nothing."""
    events = [
        {"name": "step", "ph": "X", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"name": "generate", "ph": "X", "ts": 10, "dur": 10, "pid": 1, "tid": 1},
        {"name": "tick", "ph": "i", "ts": 10, "pid": 1, "tid": 1},
        {"name": "score", "ph": "X", "ts": 20, "dur": 0, "pid": 1, "tid": 1},
        {"name": "update", "ph": "X", "ts": 20, "dur": 30, "pid": 1, "tid": 1},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(events))
    out = spans.parse(path)
    depth = dict(out.events.select(pl.col("name").cast(pl.String), "depth").iter_rows())
    assert depth == {"step": 0, "generate": 1, "tick": 2, "score": 2, "update": 1}
