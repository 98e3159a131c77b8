"""``rlperf compare``: a value shares the best when it is within 0.5% of the best value, not of
the largest one (which made 4.67 ms share a best of 3.15 ms beside a run of 346 ms).

The runs: three of HolisticTraceAnalysis's traces (event_sync_trace, the MI250 toy, the
216k-event df_index_resolver) and three sample runs (verl_ppo_disaggregated, trl_grpo,
verl_grpo_colocated)."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_truth import RUNS

import analyzer
from analyzer.ops.compare import _winner, compare

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
HTA = CORPUS / "HolisticTraceAnalysis"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


def rows(paths: list[Path], labels: list[str]) -> dict[str, dict]:
    result = compare([analyzer.load([p]) for p in paths], labels)
    return {r["metric"]: r for r in result.table.iter_rows(named=True)}


def test_a_run_three_times_slower_does_not_share_the_best() -> None:
    """Median steps of 3.15 ms, 9.29 ms and the verl log's 10.6 s: 0.5% of the largest (53 ms)
    put 9.29 ms within reach of the best; 0.5% of the best is 15.8 µs. (mi250's median read
    4.67 ms, 48% slower, with the 49 µs stub after its one step; the HTA trace with df_index
    resolver's 346 ms made the case then.) Three unrelated traces do different work, so the
    comparison itself names no winner of step time (tests/test_compare_work.py)."""
    paths = [HTA / n for n in ("event_sync_trace.json.gz",
                               "mi250_minitoy_train_ROCm6_2_kineto.json.gz")]
    labels = ["sync", "mi250", "log"]
    row = rows([*paths, CORPUS / "logs" / "verl"], labels)["overview.step_time_ns"]
    assert [row[k] for k in labels] == [3_154_000, 9_288_291, 10_630_000_000]
    assert 0.005 * row["log"] > row["mi250"] - row["sync"] > 0.005 * row["sync"]
    assert _winner(row, labels) == "sync"
    traces = rows([*paths, HTA / "df_index_resolver.json.gz"], ["sync", "mi250", "df"])
    assert traces["overview.step_time_ns"]["winner"] == (
        "not comparable (work per step 1342.7× apart)")


def test_half_a_percent_of_the_best_decides() -> None:
    """Median steps of 92.00 ms and 92.51 ms are 0.55% of the best apart: one winner, where 0.5%
    of the third run's 124.6 ms made them share it. Stage "other" at 22.325 ms and 22.330 ms
    (0.02% apart) still shares the best, beside 26.1 ms."""
    paths = [RUNS / "verl_ppo_disaggregated", RUNS / "trl_grpo", RUNS / "verl_grpo_colocated"]
    found = rows(paths, ["disagg", "trl", "coloc"])
    step = found["overview.step_time_ns"]
    assert [step[k] for k in ("disagg", "trl", "coloc")] == [92_003_318, 92_508_306, 124_611_333]
    assert (step["trl"] - step["disagg"]) / step["disagg"] == pytest.approx(0.00549, abs=1e-5)
    assert step["winner"] == "disagg"
    other = found["stage.other"]
    assert [round(other[k] / 1e3) for k in ("disagg", "trl", "coloc")] == [26_053, 22_325, 22_330]
    assert other["winner"] == "trl, coloc"
