"""rl-insight's verl profiler headers (corpus/rl-insight, PROVENANCE.md): per-role profiling
windows of one verl job — the actor's ``ray::WorkerDict`` (``actor_compute_log_prob``,
``actor_update``) and one agent-loop rollout replica's vLLM worker ``VLLM::Worker_TP0``
(``agent_loop_rollout_replica_0``). Each test holds what the files themselves state."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import analyzer
from analyzer.assemble.ingest import ingest
from analyzer.assemble.runs import RunsError, group, role_stage

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RL_INSIGHT = CORPUS / "rl-insight"
ROLLOUT = RL_INSIGHT / (
    "agent_loop_rollout_replica_0__huawei_372640.1771730291744166997.pt.trace.json.gz"
)
ACTOR = RL_INSIGHT / "actor_compute_log_prob__prof_rank-0_031847.json.gz"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


def _process_names(path: Path) -> list[str]:
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    return [e["args"]["name"] for e in events if e.get("name") == "process_name"]


# --- the rollout engine's worker ---------------------------------------------------------------


def test_the_vllm_worker_process_is_the_rollout_engine() -> None:
    """The rollout header records one ``aten::lift_fresh`` and no engine op; its process calls
    itself ``VLLM::Worker_TP0`` (vLLM's process title for tensor-parallel worker 0). It was read
    as the ``generic`` framework; the title names the vLLM engine, a rollout process."""
    assert _process_names(ROLLOUT) == ["VLLM::Worker_TP0"]
    run = analyzer.load([ROLLOUT])
    assert run.profile["name"] == "vllm"
    assert role_stage("VLLM::Worker_TP0") == "rollout"
    assert role_stage("VLLM::EngineCore_DP0") == "rollout"
    assert role_stage("agent_loop_rollout_replica_0") == "rollout"


def test_the_actor_worker_process_names_verl() -> None:
    """``ray::WorkerDict.actor_rollout_compute_log_prob`` is verl's fused Ray worker: the actor
    headers (no annotation at all) are verl's, not ``generic``."""
    assert _process_names(ACTOR) == ["ray::WorkerDict.actor_rollout_compute_log_prob"]
    assert analyzer.load([ACTOR]).profile["name"] == "verl"


# --- the span of a run -------------------------------------------------------------------------

DAY_NS = 86_400 * 10**9


def _trace_span_ns(path: Path) -> tuple[int, int]:
    """The ``PyTorch Profiler (0)`` span (category ``Trace``) on the epoch clock, in ns."""
    with gzip.open(path) as f:
        doc = json.load(f)
    span = next(e for e in doc["traceEvents"] if e.get("cat") == "Trace")
    start = doc["baseTimeNanoseconds"] + round(span["ts"] * 1000)
    return start, start + round(span["dur"] * 1000)


def _shifted(path: Path, target: Path, ns: int) -> Path:
    """``path`` with its base time moved by ``ns``: the same capture taken at another time."""
    with gzip.open(path) as f:
        doc = json.load(f)
    doc["baseTimeNanoseconds"] += ns
    target.write_text(json.dumps(doc))
    return target


def test_a_run_lasts_its_profiler_window() -> None:
    """The rollout header's one operator lasts 1.987 µs; its profiler's ``Trace`` span, 10.08 s.
    The run's window was the operator's (listed 'for 1.99 µs'); it is the profiler's."""
    start, end = _trace_span_ns(ROLLOUT)
    assert end - start == 10_083_720_389
    runs, _ = group(list(ingest([ROLLOUT]).sources))
    assert [g.window for g in runs] == [(start, end)]


def test_the_run_listing_says_the_profiler_window(tmp_path: Path) -> None:
    """The rollout header beside the same capture a day later: two runs, each listed for the
    10.1 s its profiler ran, from the span's start (03:17:59, not the operator's 03:18:02)."""
    later = _shifted(ROLLOUT, tmp_path / "later.json", DAY_NS)
    with pytest.raises(RunsError) as caught:
        analyzer.load([ROLLOUT, later])
    lines = str(caught.value).splitlines()
    assert lines[1].endswith("kineto; rank 0; 2026-02-22 03:17:59 UTC for 10.1 s"), lines
    assert lines[2].endswith("kineto; rank 0; 2026-02-23 03:17:59 UTC for 10.1 s"), lines
