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
from analyzer.assemble.runs import role_stage

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
