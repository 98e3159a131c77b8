"""The headline numbers stand for a steady step of the run: the median step time leaves a trace's
warm-up steps out (and the report says so), and a capture that records no device work at all
(NVTX ranges only) gets no idle share or W/D, which would read 100% and 0 for any run."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import tomllib

import analyzer
from analyzer.report.sections import overview as overview_section

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "sample_traces" / "runs"
NSYS = RUNS / "verl_ppo_colocated_nsys"


def _truth_windows(run_dir: Path) -> dict[int, float]:
    """Each step's window from the harness truth: first start to last end of the step's ranges
    and stages, on every rank (the definition of docs/assembly.md, Steps), in ms."""
    truth = json.loads((run_dir / "truth.json").read_text())
    bounds: dict[int, list[int]] = {}
    for item in truth["spans"] + truth["stages"]:
        lo_hi = bounds.setdefault(item["step"], [item["start_ns"], item["end_ns"]])
        lo_hi[0] = min(lo_hi[0], item["start_ns"])
        lo_hi[1] = max(lo_hi[1], item["end_ns"])
    return {step: (hi - lo) / 1e6 for step, (lo, hi) in sorted(bounds.items())}


def _is_warmup(first: float, rest: list[float]) -> bool:
    rules = tomllib.loads((ROOT / "taxonomy" / "steps.toml").read_text())["slow"]
    centre = statistics.median(rest)
    mad = statistics.median(abs(x - centre) for x in rest)
    return first > centre + rules["k"] * max(rules["mad_scale"] * mad, rules["mad_floor"] * centre)


@pytest.fixture(scope="module")
def nsys_run() -> analyzer.Run:
    return analyzer.load([NSYS])


def _value(run: analyzer.Run, metric: str) -> float | None:
    row = run.overview.filter(run.overview["metric"] == metric)
    return row["value"][0]


def test_the_median_step_leaves_the_warm_up_step_out(nsys_run: analyzer.Run) -> None:
    windows = _truth_windows(NSYS)
    first, *rest = windows.values()
    assert _is_warmup(first, rest), windows
    expected = statistics.median(rest)
    assert abs(_value(nsys_run, "step_time_ns") / 1e6 - expected) < 0.01
    assert abs(statistics.median(windows.values()) - expected) > 1.0  # the step matters here
    assert _value(nsys_run, "step_time_max_ns") / 1e6 == pytest.approx(first, abs=0.01)


def test_the_headline_says_which_step_it_left_out(nsys_run: analyzer.Run) -> None:
    note = overview_section.section(nsys_run).note
    assert note.startswith("Median step time without warm-up step 1 (see Slow steps).")


def test_a_run_without_warm_up_keeps_every_step() -> None:
    run_dir = RUNS / "verl_ppo_disaggregated"
    windows = _truth_windows(run_dir)
    first, *rest = windows.values()
    assert not _is_warmup(first, rest)
    run = analyzer.load([run_dir])
    steps = run.steps
    lengths = ((steps["end_ns"] - steps["start_ns"]) / 1e6).to_list()
    assert _value(run, "step_time_ns") / 1e6 == pytest.approx(statistics.median(lengths))
    assert not overview_section.section(run).note.startswith("Median step time without")


@pytest.mark.parametrize("name", ["verl_ppo_colocated_nsys", "verl_ppo_multiprocess_nsys"])
def test_an_nvtx_only_capture_gets_no_idle_share_or_parallelism(name: str) -> None:
    run = analyzer.load([RUNS / name])
    assert run.activity.height == 0
    for metric in ("idle_fraction", "trainer_idle_fraction", "rollout_idle_fraction",
                   "parallelism"):
        assert _value(run, metric) is None, metric
    texts = dict(zip(*overview_section.shown(run.overview).select("metric", "text"),
                     strict=True))
    assert texts["idle_fraction"] == "– needs device work in a trace"
    assert _value(run, "weight_sync_share") is not None


def test_a_trace_with_device_work_keeps_its_idle_share() -> None:
    run = analyzer.load([RUNS / "verl_ppo_disaggregated"])
    assert run.activity.height > 0
    assert 0 < _value(run, "idle_fraction") < 1
    assert _value(run, "parallelism") > 0
