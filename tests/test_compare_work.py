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
