"""``--steps`` is a restriction: a selected step's per-step numbers are the whole run's numbers
for that step. On HTA's test trace, work launched in step 1010 runs inside step 1011's window;
the selection kept only the events launched in 1011 and read 122 ms of productive device time,
a 40 ms ``stage_gap`` idle (24.2% of the window, an error-level finding) and a depth D of
123 ms where the whole run reads 160 ms, 2.5 ms and 160 ms."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import analyzer
from analyzer.model.options import Options

TRACE = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "HolisticTraceAnalysis" / (
    "test.json.gz"
)


@pytest.fixture(scope="module")
def whole() -> analyzer.Run:
    return analyzer.load([TRACE], use_cache=False)


@pytest.mark.parametrize("step", [1011, 1014])
def test_a_selected_step_reads_as_in_the_whole_run(whole: analyzer.Run, step: int) -> None:
    one = analyzer.load([TRACE], use_cache=False, options=Options.checked(steps=str(step)))
    of_step = pl.col("step") == step
    assert_frame_equal(one.bubbles, whole.bubbles.filter(of_step))
    assert_frame_equal(one.device_states, whole.device_states.filter(of_step))
    assert_frame_equal(one.workdepth, whole.workdepth.filter(of_step))


def test_the_queued_work_of_step_1011_is_counted(whole: analyzer.Run) -> None:
    one = analyzer.load([TRACE], use_cache=False, options=Options.checked(steps="1011"))
    row = one.workdepth.row(0, named=True)
    assert (row["work_ns"], row["depth_ns"]) == (159_833_000, 159_833_000)
    cause = pl.col("cause") == "stage_gap"
    assert one.bubbles.filter(cause)["idle_ns"].to_list() == [2_497_000]
    launched_before = one.activity.filter(pl.col("step").ne_missing(1011))
    assert launched_before.height == 1_019
    assert launched_before["end_ns"].min() > one.steps["start_ns"][0]
    start, end = whole.steps.filter(pl.col("step") == 1011).select("start_ns", "end_ns").row(0)
    ran_inside = whole.activity.filter((pl.col("end_ns") > start) & (pl.col("start_ns") < end))
    assert ran_inside.group_by("step").len().sort("step").rows() == [(1010, 1_019), (1011, 2_471)]
