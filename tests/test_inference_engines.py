"""Inference-engine traces (issue 12, item 2): vLLM and SGLang serving traces are rollout-only
runs with the engine named, engine steps whose windows hold their GPU work, a prefill/decode
split, graph replays linked to their launches and graph-capture traces flagged; the generator's
graph replays (sample_traces/synth/graphs.py) are attributed to their launches exactly."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import analyzer
from analyzer.analyses.engine import engine_steps, phase_split
from analyzer.cli import app
from parsers import kineto
from sample_traces.synth import graphs

ROOT = Path(__file__).resolve().parents[1]
TRACELENS = ROOT.parent / "shared" / "corpus" / "TraceLens"
INFERENCE = TRACELENS / "inference"
FILES = {
    "vllm_decode_full__graph_execution.json.gz": ("vllm", False),
    "vllm_prefilldecode_piecewise__graph_execution.json.gz": ("vllm", False),
    "vllm_decode_full__capture_traces__graph_capture_rank_0.1773709742341309550.pt.trace.json.gz":
        ("vllm", True),
    "sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz": ("sglang", False),
    "sglang_decode__capture_traces__bs_32_rank0.json.gz": ("sglang", True),
    "../sglang_Qwen3-8B_decode.json.gz": ("sglang", False),
}
REPLAYS = [f for f, (_, capture) in FILES.items() if not capture]


def _path(name: str) -> Path:
    path = (INFERENCE / name).resolve()
    if not path.is_file():
        pytest.skip(f"corpus file {name} is not present")
    return path


def _raw(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _expected_batch(events: list[dict]) -> dict[str, int]:
    """Prefill/decode requests and tokens from the raw annotations, by the documented rule,
    computed here without rlperf: the execute_… annotation, else SGLang's step[…], else the
    graph capture's batch."""
    names = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    for name in names:
        m = re.match(r"execute_\d+_context_(\d+)\(sq(\d+)sk\d+.*_generation_(\d+)\(sq(\d+)sk", name)
        if m:
            p, pt, d, dt = map(int, m.groups())
            return {"prefill_requests": p, "prefill_tokens": pt,
                    "decode_requests": d, "decode_tokens": dt}
    for name in names:
        m = re.match(r"capture_(\d+)_(DECODE|FULL)$", name)
        if m:
            n = int(m.group(1))
            return {"prefill_requests": 0, "prefill_tokens": 0,
                    "decode_requests": n, "decode_tokens": n}
    raise AssertionError("no batch name in the trace")


@pytest.fixture(scope="module")
def runs() -> dict[str, analyzer.Run]:
    return {name: analyzer.load([_path(name)]) for name in FILES}


@pytest.mark.parametrize("name", list(FILES))
def test_serving_trace_is_a_rollout_only_run_of_its_engine(runs, name):
    run = runs[name]
    engine, _ = FILES[name]
    assert run.profile["name"] == engine
    assert run.placement["placement"] == "rollout_only"
    assert run.placement["execution"] is None
    assert "rollout-only" in run.placement["evidence"][0]
    stages = set(run.stage_ranges["stage"].cast(pl.String).unique().to_list())
    assert stages == {"rollout"}


@pytest.mark.parametrize("name", list(FILES))
def test_prefill_decode_split_matches_the_raw_annotations(runs, name):
    run = runs[name]
    expected = _expected_batch(_raw(_path(name)))
    per_step = engine_steps(run.ranges, run.steps)
    assert per_step.height == 1
    row = per_step.row(0, named=True)
    assert {k: row[k] for k in expected} == expected
    pre, dec = expected["prefill_requests"] > 0, expected["decode_requests"] > 0
    assert row["phase"] == ("mixed" if pre and dec else "prefill" if pre else "decode")
    split = phase_split(per_step)
    assert split["phase"].to_list() == [row["phase"]]
    window = run.steps.row(0, named=True)
    assert split["time_ns"][0] == row["step_ns"] == window["end_ns"] - window["start_ns"]
    assert split["share"][0] == 1.0


def test_known_splits():
    """The figures the corpus files hold (vLLM piecewise: 9 prefill requests of 8155 tokens and
    37 decode requests in one mixed step; SGLang: 15 prefill requests of 15360 tokens)."""
    run = analyzer.load([_path("vllm_prefilldecode_piecewise__graph_execution.json.gz")])
    row = engine_steps(run.ranges, run.steps).row(0, named=True)
    assert (row["phase"], row["prefill_requests"], row["prefill_tokens"],
            row["decode_requests"]) == ("mixed", 9, 8155, 37)
    run = analyzer.load([_path("sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz")])
    row = engine_steps(run.ranges, run.steps).row(0, named=True)
    assert (row["phase"], row["prefill_requests"], row["prefill_tokens"]) == ("prefill", 15, 15360)


@pytest.mark.parametrize("name", REPLAYS)
def test_engine_step_window_holds_the_gpu_work_it_launched(runs, name):
    """The step runs from the batch annotation's start to the end of the last GPU row launched
    in it (raw: every launch of these one-step files is inside the annotation)."""
    events = _raw(_path(name))
    step = next(e for e in events if e.get("cat") == "user_annotation"
                and e["name"].startswith("execute_"))
    gpu_end = max(e["ts"] + e["dur"] for e in events
                  if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    window = runs[name].steps.row(0, named=True)
    assert abs((window["end_ns"] - window["start_ns"]) - (gpu_end - step["ts"]) * 1000) <= 2


@pytest.mark.parametrize("name", REPLAYS)
def test_replayed_kernels_link_to_their_graph_launch(name):
    events = _raw(_path(name))
    launches = {e["args"]["correlation"] for e in events
                if e.get("cat") == "cuda_runtime" and e["name"].endswith("GraphLaunch")}
    replayed = sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                   and e.get("args", {}).get("correlation") in launches)
    parsed = kineto.parse(_path(name))
    if not launches:
        assert "graph_replay" not in parsed.meta
        return
    assert parsed.meta["graph_replay"] == {
        "launches": len(launches), "kernels": replayed, "linked_by_time": 0,
    }
    assert replayed > 300


@pytest.mark.parametrize("name", list(FILES))
def test_capture_traces_are_flagged_and_replays_are_not(name):
    _, capture = FILES[name]
    events = _raw(_path(name))
    captured = sum(1 for e in events if e.get("cat") == "cuda_runtime"
                   and e["name"].endswith("StreamBeginCapture"))
    parsed = kineto.parse(_path(name))
    assert bool(parsed.meta.get("graph_capture")) is capture is (captured > 0)
    flagged = [w for w in parsed.warnings if "graph capture" in w]
    assert len(flagged) == (1 if capture else 0)


def _reports(path: Path, tmp: Path) -> dict[str, str]:
    out = {}
    runner = CliRunner()
    for fmt in ("text", "json", "md", "html"):
        target = tmp / f"report.{fmt}"
        result = runner.invoke(app, ["analyze", str(path), "-q", "-f", fmt, "-o", str(target)])
        assert result.exit_code == 0, result.output
        out[fmt] = target.read_text()
    return out


def test_capture_flag_and_split_in_every_format(tmp_path):
    name = "sglang_decode__capture_traces__bs_32_rank0.json.gz"
    for fmt, text in _reports(_path(name), tmp_path).items():
        flat = " ".join(text.split())
        assert "graph capture" in flat.lower(), fmt
        assert "rollout_only" in flat, fmt
        assert "Inference engine: prefill and decode" in flat or '"engine"' in flat, fmt
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["engine_graphs"][0]["graph_capture"] is True
    assert doc["engine_graphs"][0]["captured_launches"] == 544
    assert doc["engine"][0]["phase"] == "decode" and doc["engine"][0]["captured"] == 1


def test_replay_report_is_not_flagged(tmp_path):
    text = _reports(_path("vllm_decode_full__graph_execution.json.gz"), tmp_path)["json"]
    doc = json.loads(text)
    assert not any("graph capture" in w for w in doc["warnings"])
    assert doc["engine_graphs"] == [{
        "file": "vllm_decode_full__graph_execution.json.gz", "graph_launches": 1,
        "replayed": 421, "linked_by_time": 0, "graph_capture": False, "captured_launches": 0,
    }]


# --- generator truth ----------------------------------------------------------------------------


@pytest.mark.parametrize("replay_corr", [True, False])
def test_generated_graph_replays_are_attributed_to_their_launch_exactly(tmp_path, replay_corr):
    trace, facts = graphs.write(tmp_path, seed=3, steps=7, replay_corr=replay_corr)
    truth = json.loads(facts.read_text())["graphs"]
    parsed = kineto.parse(trace)
    rows = parsed.events.filter(pl.col("kind") == "kernel").select("start_ns", "corr").sort(
        "start_ns"
    )
    want = pl.DataFrame(truth["rows"]).select("start_ns", "corr").sort("start_ns")
    assert rows.height == want.height == sum(truth["launches"].values()) + sum(
        1 for r in truth["rows"] if not r["replayed"]
    )
    assert rows["corr"].to_list() == want["corr"].to_list()
    replayed = sum(truth["launches"].values())
    assert parsed.meta["graph_replay"] == {
        "launches": len(truth["launches"]), "kernels": replayed,
        "linked_by_time": 0 if replay_corr else replayed,
    }
    assert parsed.meta.get("quality", {}).get("graph_kernels_linked_by_time", 0) == (
        0 if replay_corr else replayed
    )


def test_generated_engine_steps_equal_the_truth(tmp_path):
    trace, facts = graphs.write(tmp_path, seed=5, steps=6, replay_corr=False)
    truth = json.loads(facts.read_text())["graphs"]["steps"]
    run = analyzer.load([trace])
    assert run.profile["name"] == "vllm" and run.placement["placement"] == "rollout_only"
    per_step = engine_steps(run.ranges, run.steps)
    got = per_step.select("phase", "prefill_requests", "prefill_tokens", "decode_requests",
                          "decode_tokens").to_dicts()
    assert got == [{k: s[k] for k in got[0]} for s in truth]
    assert run.steps["start_ns"].to_list() == [s["start_ns"] for s in truth]
    assert run.steps["end_ns"].to_list() == [s["end_ns"] for s in truth]
    split = phase_split(per_step)
    assert split["steps"].to_list() == [
        sum(s["phase"] == p for s in truth) for p in split["phase"].to_list()
    ]


def test_generated_capture_is_flagged(tmp_path):
    trace, facts = graphs.write(tmp_path, capture=True)
    truth = json.loads(facts.read_text())["graphs"]
    parsed = kineto.parse(trace)
    assert parsed.meta["graph_capture"] == {
        "captures": truth["captures"], "captured_launches": truth["captured_launches"],
    }
    assert "graph_replay" not in parsed.meta


# --- training is not inference --------------------------------------------------------------------


def test_training_sample_is_not_an_inference_run():
    run = analyzer.load([ROOT / "sample_traces" / "synthetic" / "colocated"])
    assert not run.profile["profile"].engine
    assert run.placement["placement"] == "colocated"
    assert not any("graph capture" in w for w in run.warnings)
