"""``rlperf compare`` names no winner of step or stage time between runs that did different
work: TraceLens' vLLM decode-only step (device work W 10.7 ms) "won" step time, 19.1 ms
against 308 ms, from a prefill-plus-decode step of 156 ms of work. The shares (idle by cause)
are still ranked, and a change that halves the work is still judged."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_truth import RUNS

import analyzer
from analyzer.ops.compare import WORK, WORK_APART, compare
from analyzer.report.comparison import NOTE

INFERENCE = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "TraceLens" / "inference"

pytestmark = pytest.mark.skipif(not INFERENCE.is_dir(), reason="the shared corpus is not here")


def by_metric(paths: list[Path], labels: list[str]) -> dict[str, dict]:
    result = compare([analyzer.load([p]) for p in paths], labels)
    return {r["metric"]: r for r in result.table.iter_rows(named=True)}


def test_decode_only_against_prefill_and_decode_wins_no_time() -> None:
    paths = [INFERENCE / "vllm_decode_full__graph_execution.json.gz",
             INFERENCE / "vllm_prefilldecode_piecewise__graph_execution.json.gz"]
    found = by_metric(paths, ["decode", "both"])
    work = found[WORK]
    assert (round(work["decode"] / 1e3), round(work["both"] / 1e3)) == (10_718, 156_086)
    assert work["winner"] is None
    verdict = "not comparable (work per step 14.6× apart)"
    for metric in ("overview.step_time_ns", "overview.step_time_max_ns", "stage.rollout"):
        assert found[metric]["winner"] == verdict, metric
    assert found["idle.host_bound"]["winner"] == "both"
    assert found["overview.gpu_step_idle_fraction"]["winner"] == "decode"


def test_runs_of_like_work_are_ranked_by_time() -> None:
    """The harness' disaggregated verl and TRL runs do work within 2× of each other."""
    found = by_metric([RUNS / "verl_ppo_disaggregated", RUNS / "trl_grpo"], ["disagg", "trl"])
    work = found[WORK]
    assert max(work["disagg"], work["trl"]) <= WORK_APART * min(work["disagg"], work["trl"])
    assert found["overview.step_time_ns"]["winner"] == "disagg"


def test_the_footnote_gives_the_factor() -> None:
    assert f"differs more than {WORK_APART:g}×" in NOTE


LOGS = INFERENCE.parents[1] / "logs"
PAIR = INFERENCE.parents[1] / "HolisticTraceAnalysis"
TIMES = ("overview.step_time_ns", "overview.step_time_max_ns")


def test_logs_of_different_workloads_win_no_time() -> None:
    """A verl PPO log of Qwen2.5-7B (prompts up to 512 tokens, 10.6 s steps) "lost" step time to
    a DeepSpeed-Chat log of OPT-1.3B (up to 256, 3.8 s): neither measures its device work, and
    the workloads their configs state differ."""
    found = by_metric([LOGS / "verl", LOGS / "deepspeed-chat"], ["verl", "ds"])
    assert WORK not in found
    assert (round(found[TIMES[0]]["verl"] / 1e7), round(found[TIMES[0]]["ds"] / 1e7)) == (
        1063, 380)
    for metric in TIMES:
        assert found[metric]["winner"] == "not comparable (max_prompt_length 512 vs 256)"


def test_a_trace_against_a_log_wins_no_time(tmp_path: Path) -> None:
    pair = tmp_path / "pair"
    pair.mkdir()
    for name in ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz"):
        (pair / name).symlink_to(PAIR / name)
    found = by_metric([pair, LOGS / "verl"], ["pair", "verl"])
    assert found[WORK]["pair"] > 0 and found[WORK]["verl"] is None
    for metric in TIMES:
        assert found[metric]["winner"] == (
            "not comparable (work per step measured for pair, only stated in a log for verl)")


def test_logs_stating_the_same_workload_are_ranked(tmp_path: Path) -> None:
    """The same verl job's log over steps 101–435 against its steps 110–120 alone: the same
    stated workload, so the shorter median wins."""
    whole = analyzer.load([LOGS / "verl"])
    part = analyzer.load([LOGS / "verl"], options=analyzer.Options(steps="110-120"))
    result = compare([whole, part], ["whole", "part"])
    found = {r["metric"]: r for r in result.table.iter_rows(named=True)}
    median = found[TIMES[0]]
    assert median["part"] > median["whole"] and median["winner"] == "whole"


def test_a_graph_capture_trace_wins_no_idle_or_time() -> None:
    """vLLM's capture trace records capturing its graphs, not serving (analyze gives it no idle
    saving); it "won" idle (other), 0.0% against the replay's 31.3%."""
    replay = INFERENCE / "vllm_decode_full__graph_execution.json.gz"
    capture = next(INFERENCE.glob("vllm_decode_full__capture_traces__*.json.gz"))
    found = by_metric([replay, capture], ["replay", "capture"])
    verdict = "not comparable (graph capture: capture)"
    idle = [m for m in found if m.startswith("idle.")]
    assert "idle.other" in idle and found["idle.other"]["capture"] == 0
    for metric in (*idle, *TIMES, "overview.idle_fraction", "overview.gpu_idle_fraction"):
        assert found[metric]["winner"] == verdict, metric
    assert found["overview.ranks"]["winner"] is None
