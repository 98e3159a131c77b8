"""A new user's fourth pass over the overview and the guidelines on real files: a step list whose
count had no noun (``134 (1)``), a GPU idle that read 0% beside 100% idle, a trace without steps
whose findings spoke of savings per step and a critical path, a TPU log whose guidelines named
GPUs and a placement the run section did not show, and ~100 lines of "not evaluated" on a trace
that is not an RL run. Each test holds one of them to the numbers the files give."""

from __future__ import annotations

from pathlib import Path

import pytest

import analyzer
from analyzer.report.sections import sections
from analyzer.report.sections.placement import summary

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
INFERENCE = CORPUS / "TraceLens" / "inference"
SGLANG_CAPTURE = INFERENCE / "sglang_decode__capture_traces__bs_32_rank0.json.gz"
TPU_LOG = CORPUS / "logs" / "verl-tpu" / "chrisytz-verl_ppo_xla-tpu_verl_demo.log"
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
    critical path', 'Saving/step 921 ms' and a note about savings per step."""
    run = analyzer.load([NSYS_1S])
    assert run.steps.height == 0 and run.log_steps.height == 0
    found = next(s for s in sections(run) if s.title == "Findings")
    assert found.frame is not None and found.frame["saving_ns"][0] == 920_872_841
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
