"""A new user's fourth pass over the overview and the guidelines on real files: a step list whose
count had no noun (``134 (1)``), a GPU idle that read 0% beside 100% idle, a trace without steps
whose findings spoke of savings per step and a critical path, a TPU log whose guidelines named
GPUs and a placement the run section did not show, and ~100 lines of "not evaluated" on a trace
that is not an RL run. Each test holds one of them to the numbers the files give."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import analyzer
from analyzer.report import json as json_report
from analyzer.report.sections import sections
from analyzer.report.sections.placement import summary

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
INFERENCE = CORPUS / "TraceLens" / "inference"
SGLANG_CAPTURE = INFERENCE / "sglang_decode__capture_traces__bs_32_rank0.json.gz"
TPU_LOG = CORPUS / "logs" / "verl-tpu" / "chrisytz-verl_ppo_xla-tpu_verl_demo.log"
ALPA = CORPUS / "alpa" / "report1.nsys-rep"
NSYS_1S = CORPUS / "nsys-ai" / "h100_2gpu_1s.sqlite"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


def _facts(run: analyzer.Run) -> dict[str, str]:
    frame = summary(run)
    return dict(zip(frame["fact"].to_list(), frame["value"].to_list(), strict=True))


def test_a_lone_step_number_says_what_its_count_counts() -> None:
    """SGLang's capture trace: one ProfilerStep numbered 134 read ``134 (1)``."""
    run = analyzer.load([SGLANG_CAPTURE])
    assert run.steps["step"].to_list() == [134]
    assert _facts(run)["steps"] == "134 (1 step)"


def test_a_run_without_steps_speaks_of_no_step_and_no_critical_path() -> None:
    """nsys-ai's 1 s window of two H100s has no step: its top finding read 'Memory copies on the
    critical path', 'Saving/step 921 ms' and a note about savings per step. (Its saving is
    now the 22.4 ms of kernel time the copies could hide behind, tests/test_gpu_findings.py.)"""
    run = analyzer.load([NSYS_1S])
    assert run.steps.height == 0 and run.log_steps.height == 0
    found = next(s for s in sections(run) if s.title == "Findings")
    assert found.frame is not None and found.frame["saving_ns"][0] == 22_444_359
    assert found.frame["title"][0] == "Memory copies with no kernel running: HtoD"
    headers = {c.title for c in found.columns}
    assert "Saving (whole trace)" in headers and "Saving/step" not in headers
    text = " ".join([found.note or "", *found.frame["title"].to_list()])
    assert "per step" not in text and "critical path" not in text
    assert "ranked by the estimated saving (1 with an estimate" in text


def test_a_tpu_log_names_its_placement_and_its_devices_as_the_guidelines_do() -> None:
    """verl on TPU, stopped before step 1: the run section read placement '–' while G8 judged
    the colocated engine memory (20% kept through training), and G17 said '1 GPUs'."""
    run = analyzer.load([TPU_LOG])
    facts = _facts(run)
    assert facts["placement"] == "colocated (config)"
    found = {r["id"]: r for r in run.violations.iter_rows(named=True)}
    assert found["G8"]["value"] == pytest.approx(0.2)
    assert found["G8"]["evidence"].endswith("colocated placement from the config)")
    g17 = found["G17"]["evidence"]
    assert "1 TPU per node, 1 TPU, ranks laid out TP-first" in g17 and "GPU" not in g17


def test_a_log_without_steps_speaks_of_neither_a_step_nor_a_trace() -> None:
    """verl-tpu stopped before step 1 and has no trace: its one finding (G8, no saving) read
    'ranked by the estimated saving per step' and 'the mean step'."""
    found = next(s for s in sections(analyzer.load([TPU_LOG])) if s.title == "Findings")
    assert found.frame is not None and found.frame["saving_ns"].null_count() == 1
    assert {c.title for c in found.columns} >= {"Saving", "Saving %"}
    assert found.note.startswith("1 finding, ranked by the estimated saving (0 with an estimate")
    assert "step" not in found.note and "whole trace" not in found.note


def test_guidelines_not_evaluated_are_one_line_of_the_note_and_all_in_the_json() -> None:
    """alpa's report1 (not an RL run): 26 guidelines, none evaluated, were 26 records of
    'not evaluated' (~100 lines); now one note naming each id by what it needs."""
    run = analyzer.load([ALPA])
    section = next(s for s in sections(run) if s.title == "Guidelines")
    assert section.frame is not None and section.frame.height == 0
    ids = [f"G{n}" for n in range(1, 27)]
    named = re.findall(r"\bG\d+\b", section.note.split(" * heuristic")[0])
    assert sorted(named, key=lambda g: int(g[1:])) == ids
    rl = [*map(str, range(1, 13)), "18", "19", "20", "21", "22", "24", "25", "26"]
    assert "26 not evaluated: " + ", ".join(f"G{n}" for n in rl) + " (does not apply: no RL " \
        in section.note
    assert "; G13 (needs the pipeline degree and micro-batch count" in section.note
    document = json_report.summary(run)["guidelines"]
    assert sorted((g["id"] for g in document), key=lambda g: int(g[1:])) == ids
    assert {g["status"] for g in document} == {"not_evaluated"}


@pytest.mark.parametrize(("name", "hta", "steps", "busy_ns", "window_ns"), [
    ("sglang_decode__capture_traces__bs_32_rank0.json.gz", 9.08e-5, 0.99967, 11_015, 33_716_806),
    ("vllm_prefilldecode_piecewise__graph_execution.json.gz", 0.00243, 0.49273, 156_085_793,
     307_697_688),
])
def test_gpu_idle_says_its_window_and_over_the_steps_agrees_with_idle(
    name: str, hta: float, steps: float, busy_ns: int, window_ns: int
) -> None:
    """'GPU idle (HTA sense)' read 0.0% and 0.2% beside 'idle, all devices' 100% and 49.3%: it
    is HTA's idle over the first to last GPU activity, now titled so, and the same busy time
    over the step windows is its own row, equal to the idle here (no sync wait to tell them
    apart)."""
    run = analyzer.load([INFERENCE / name])
    rows = {r["metric"]: r for r in run.overview.iter_rows(named=True)}
    assert rows["gpu_idle_fraction"]["title"] == "GPU idle, first to last GPU activity (HTA)"
    assert rows["gpu_idle_fraction"]["value"] == pytest.approx(hta, abs=1e-5)
    assert rows["gpu_step_idle_fraction"]["title"] == "GPU idle, step windows"
    assert rows["gpu_step_idle_fraction"]["value"] == pytest.approx(1 - busy_ns / window_ns)
    assert rows["gpu_step_idle_fraction"]["value"] == pytest.approx(steps, abs=1e-5)
    assert rows["gpu_step_idle_fraction"]["value"] <= rows["idle_fraction"]["value"] + 1e-12


def test_without_steps_only_the_hta_gpu_idle_has_a_value() -> None:
    """nsys-ai's stepless window: HTA's idle 0.7% stays; the step-window one says it needs
    steps."""
    run = analyzer.load([NSYS_1S])
    headline = next(s for s in sections(run) if s.title == "Headline numbers").frame
    assert headline is not None
    rows = {r["metric"]: r for r in headline.iter_rows(named=True)}
    assert rows["gpu_idle_fraction"]["value"] == pytest.approx(0.0071, abs=5e-4)
    assert rows["gpu_step_idle_fraction"]["text"].startswith("– needs step ranges in the trace")


def test_guideline_evidence_counts_one_rank_in_the_singular() -> None:
    """HTA's test trace: G16's evidence read 'update-stage activity of 1 ranks'."""
    run = analyzer.load([CORPUS / "HolisticTraceAnalysis" / "test.json.gz"])
    g16 = run.violations.filter(run.violations["id"] == "G16").row(0, named=True)
    assert g16["value"] == pytest.approx(0.109, abs=5e-4)
    assert "(update-stage activity of 1 rank in the trace)" in g16["evidence"]
