"""The logs-only analysis through `rlperf analyze`: what a user with only a log gets."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import parsers

ROOT = Path(__file__).resolve().parents[1]
VERL_LOG = ROOT.parent / "shared" / "corpus" / "logs" / "verl" / (
    "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
)


def logged(key: str) -> list[float]:
    """Every value the log prints for ``key`` (one per step), read from its text, not by a
    parser."""
    return [
        float(v)
        for v in re.findall(rf"{re.escape(key)}:([0-9.]+)", VERL_LOG.read_text(errors="replace"))
    ]


def rlperf(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", *args],
        capture_output=True, text=True, timeout=300,
        env={"RLPERF_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "COLUMNS": "160"},
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("logs-report")
    out = tmp / "report.json"
    result = rlperf("analyze", str(VERL_LOG), "-f", "json", "-o", str(out), cache=tmp / "cache")
    assert result.returncode == 0, result.stderr
    return json.loads(out.read_text())


def test_step_statistics_from_the_real_log(report: dict):
    stats = report["log_stats"][0]
    assert (stats["n_steps"], stats["first_step"], stats["last_step"]) == (335, 101, 435)
    assert (
        stats["median_s"]
        == pytest.approx(statistics.median(logged("timing_s/step")), rel=1e-12)
        == 10.63
    )
    step110 = next(s for s in report["log_steps"] if s["step"] == 110)
    assert step110["total_s"] == pytest.approx(34.248) and step110["stages_s"] == pytest.approx(
        34.242
    )
    assert step110["outlier"] and step110["outlier_cause"] == "checkpoint"


def test_dominant_stage_weight_sync_and_long_tail(report: dict):
    dominant = report["log_dominant"][0]
    # measured: equal to the log's own Σ gen ÷ Σ step (0.335983…) to the last bit; 1e-12 is float
    # order
    share = sum(logged("timing_s/gen")) / sum(logged("timing_s/step"))
    assert dominant["stage"] == "rollout" and dominant["share"] == pytest.approx(share, rel=1e-12)
    sync = report["log_weight_sync"][0]
    assert sync["status"] == "hidden" and sync["where"] == "timing_s/gen" and sync["share"] is None
    tail = report["log_long_tail_summary"][0]
    lengths = parsers.parse_file(VERL_LOG).metrics.pivot(
        on="key", index="step", values="value", aggregate_function="last"
    )
    ratio = lengths["response_length/max"] / lengths["response_length/mean"]
    assert tail["n_steps"] == 335 and tail["median_max_over_mean"] == pytest.approx(ratio.median())
    assert (
        tail["max_max_over_mean"] == pytest.approx(ratio.max())
        and 1.9 < tail["median_max_over_mean"] < 2.0
    )
    needs = {row["analysis"] for row in report["log_needs_trace"]}
    assert {"bubbles", "collectives", "critical_path", "weight_sync"} <= needs


def test_guidelines_logs_can_decide_are_decided(report: dict):
    status = {row["id"]: row["status"] for row in report["guidelines"]}
    assert status["G15"] == "violated" and status["G23"] == "violated"
    assert status["G1"] == "passed"
    assert status["G5"] == "not_evaluated"  # this verl version hides weight sync inside gen


def test_text_report_has_the_log_section(tmp_path: Path):
    result = rlperf("analyze", str(VERL_LOG), cache=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "From the framework log" in result.stdout
    assert "101–435 (335 steps)" in result.stdout
