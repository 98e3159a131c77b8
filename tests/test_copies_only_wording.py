"""A trace whose device work is only memory copies and memsets (alpa's report1, whose nsys did
not record kernels) said "no GPU kernel" and "idle, all devices: – needs device work" beside a
GPU busy of 116 µs. The empty findings list names the device work there is, with the busy time
the headline shows; the idle rows say what they really lack, a step window."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

import analyzer
from analyzer.report.sections import sections
from analyzer.report.sections.overview import shown, why_not

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
ALPA = CORPUS / "alpa"
NSYS_AI = CORPUS / "nsys-ai" / "h100_2gpu_1s.sqlite"
PER_STEP = ("idle_fraction", "trainer_idle_fraction", "rollout_idle_fraction", "parallelism")
NO_STEP = "– needs step ranges in the trace: it has device work but no step window"
needs_nsys = pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys CLI not installed")


def note(run: analyzer.Run, title: str) -> str:
    return next(s for s in sections(run) if s.title == title).note or ""


def headline(run: analyzer.Run) -> dict[str, str]:
    texts = shown(run.overview, why_not(run)).select("metric", "text")
    return dict(zip(*texts, strict=True))


@needs_nsys
@pytest.mark.parametrize(
    ("name", "busy_ns", "named"),
    [("report1.nsys-rep", 115_583, "memory copies and memsets (116 µs)"),
     ("report2.nsys-rep", 6_912, "memory copies (6.91 µs)")],
)
def test_a_copies_only_trace_says_what_device_work_it_has(
    name: str, busy_ns: int, named: str
) -> None:
    run = analyzer.load([ALPA / name])
    kinds = set(run.activity["kind"].cast(pl.String).unique().to_list())
    assert "kernel" not in kinds and "memcpy" in kinds
    busy = run.overview.filter(pl.col("metric") == "gpu_busy_ns")["value"][0]
    assert busy == busy_ns
    assert note(run, "Findings") == (
        f"nothing to analyse: no step recorded and no GPU kernel in the trace, only {named} — "
        f"{name}: the report records that its Nsight Systems (2022.1.3.3) did not support the "
        "CUDA driver (12.0): CUDA kernels may be missing from it"
    )
    texts = headline(run)
    assert all(texts[m] == NO_STEP for m in PER_STEP), texts
    assert note(run, "Idle time by cause") == NO_STEP.removeprefix("– ")


@pytest.mark.skipif(not NSYS_AI.exists(), reason="corpus not present")
def test_kernels_without_steps_are_not_said_to_lack_device_work() -> None:
    """nsys-ai's 2-GPU export has kernels and no step range: its idle rows needed "device
    work in a trace", which it has."""
    run = analyzer.load([NSYS_AI])
    assert run.steps.height == 0
    assert run.activity.filter(pl.col("kind").cast(pl.String) == "kernel").height > 0
    texts = headline(run)
    assert [texts[m] for m in PER_STEP] == [NO_STEP] * 4
    assert texts["gpu_busy_ns"] != "–"
