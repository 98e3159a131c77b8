"""Tests for the survivors of the seed-3 mutation sample (docs/mutation.md), each on a tiny input
built here whose right answer is worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from test_logs_steps import EXCLUDED_EVAL, verl_run

import analyzer
from analyzer.analyses import log_steps, overview
from analyzer.assemble import build
from analyzer.assemble import ingest as ingest_module
from analyzer.assemble.runs import group
from analyzer.classify import steps
from parsers import InputError, ParsedSource, kineto
from parsers.events import conform

MS = 1_000_000
EPOCH = 1_780_000_000 * 10**9
"""2026-05-28, a wall-clock time every window here starts after."""


def test_the_evidence_boundary_of_a_total_that_excludes_the_checkpoint(monkeypatch) -> None:
    """Exact binary tolerances (0.25 s, no share) so the boundary is met exactly: step 2's total
    4.75 s is the other stages (5 s) minus the tolerance, once its 1 s of testing is taken out,
    so the total still fits a step that excludes the evaluation (the check is inclusive)."""
    monkeypatch.setattr(log_steps, "TOLERANCE_S", 0.25)
    monkeypatch.setattr(log_steps, "TOLERANCE_SHARE", 0.0)
    result = verl_run(
        {
            1: {"timing_s/gen": 5.0, "timing_s/step": 5.0},
            2: {"timing_s/gen": 5.0, "timing_s/testing": 1.0, "timing_s/step": 4.75},
        },
        "0.5",
    )
    assert any("excludes evaluation and checkpoint" in n for n in result.notes)
    step = result.steps.filter(pl.col("step") == 2).row(0, named=True)
    assert (step["total_s"], step["outside_s"]) == (4.75, 1.0)


def test_a_flip_keeps_the_other_stages_inside_the_step() -> None:
    """After the evaluation and checkpoint are moved out of step 2, its generation (5 s) still
    counts inside: the stage sum is 5 s, the residual 0.2 s of the 5.2 s total."""
    result = verl_run(EXCLUDED_EVAL, "0.5")
    step = result.steps.filter(pl.col("step") == 2).row(0, named=True)
    assert step["stages_s"] == pytest.approx(5.0)
    assert step["residual_s"] == pytest.approx(0.2)
    inside = result.stages.filter(pl.col("step") == 2).select("stage", "in_step")
    assert dict(inside.iter_rows())["rollout"] is True


def bubbles(*rows: tuple[int, int, int, int]) -> pl.DataFrame:
    """(step, rank, window ms, idle ms); the window is repeated on each cause row of a device."""
    return pl.DataFrame(
        [(s, r, w * MS, i * MS) for s, r, w, i in rows],
        schema={"step": pl.Int32, "rank": pl.Int32, "window_ns": pl.Int64, "idle_ns": pl.Int64},
        orient="row",
    )


def metric(frame: pl.DataFrame, name: str) -> float | None:
    return frame.filter(pl.col("metric") == name)["value"].item()


def test_the_idle_headline_is_idle_over_the_devices_windows() -> None:
    """Rank 0 (rollout): 100 ms window, 30 + 10 ms idle; rank 1 (train): 50 ms, 5 ms idle."""
    found = overview.compute(
        {
            "bubbles": bubbles((1, 0, 100, 30), (1, 0, 100, 10), (1, 1, 50, 5)),
            "pools": pl.DataFrame({"rank": [0, 1], "pool": ["rollout", "train"]}),
            "stage_ranges": pl.DataFrame({"rank": [0, 1], "stage": ["rollout", "actor_update"]}),
        }
    )
    assert metric(found, "idle_fraction") == pytest.approx(45 / 150)
    assert metric(found, "rollout_idle_fraction") == pytest.approx(40 / 100)
    assert metric(found, "trainer_idle_fraction") == pytest.approx(5 / 50)


def test_a_pool_no_rank_runs_the_stages_of_has_no_idle_share() -> None:
    """Ranks with no stage range are the shared pool, which counted in both pools: HTA's
    event_sync_trace (no stage, no placement) read 98.4% idle in a train and a rollout pool.
    A pool's share needs its stages on its ranks; a colocated rank running both has both."""
    windows = bubbles((1, 0, 100, 30), (1, 1, 100, 50))
    shared = pl.DataFrame({"rank": [0, 1], "pool": ["shared", "shared"]})
    bare = overview.compute({"bubbles": windows, "pools": shared})
    assert metric(bare, "idle_fraction") == pytest.approx(0.4)
    assert metric(bare, "rollout_idle_fraction") is None
    assert metric(bare, "trainer_idle_fraction") is None
    colocated = overview.compute({
        "bubbles": windows, "pools": shared,
        "stage_ranges": pl.DataFrame({"rank": [0, 1], "stage": ["rollout", "actor_update"]}),
    })
    assert metric(colocated, "rollout_idle_fraction") == pytest.approx(0.4)
    assert metric(colocated, "trainer_idle_fraction") == pytest.approx(0.4)
    only_rollout = overview.compute({
        "bubbles": windows, "pools": shared,
        "stage_ranges": pl.DataFrame({"rank": [0], "stage": ["rollout"]}),
    })
    assert metric(only_rollout, "rollout_idle_fraction") == pytest.approx(0.4)
    assert metric(only_rollout, "trainer_idle_fraction") is None


def test_the_weight_sync_headline_is_its_share_of_the_steps() -> None:
    found = overview.compute(
        {
            "weight_sync": pl.DataFrame({"time_ns": [3 * MS, 2 * MS]}),
            "steps": pl.DataFrame({"start_ns": [0, 100 * MS], "end_ns": [100 * MS, 200 * MS]}),
        }
    )
    assert metric(found, "weight_sync_share") == pytest.approx(5 / 200)


def trace(tmp_path: Path, name: str, rank: int, host: str, start: int) -> ParsedSource:
    events = conform(
        {"kind": ["kernel"], "name": ["k"], "start_ns": [start], "end_ns": [start + MS],
         "device": [rank], "stream": [7], "host": [host]},
        rank=rank,
    )
    return ParsedSource(tmp_path / name, "kineto", events=events, meta={"rank": rank})


def unaligned(tmp_path: Path, hosts: tuple[str, str]) -> dict[str, int]:
    parsed = [trace(tmp_path, f"rank{r}.json", r, h, EPOCH) for r, h in enumerate(hosts)]
    found = build(parsed).data_quality.filter(pl.col("check") == "clock_unaligned")
    return dict(found.select("file", "count").iter_rows())


def test_unaligned_clocks_matter_only_across_hosts(tmp_path: Path) -> None:
    """Two ranks with no collective to match: on one host they share its clock (nothing to
    report); on two hosts each rank's clock is unchecked, one row per file."""
    assert unaligned(tmp_path, ("node1", "node1")) == {}
    assert unaligned(tmp_path, ("node1", "node2")) == {
        "rank0.json": 1, "rank1.json": 1, "(all files)": 2
    }


def test_a_parse_is_cached_under_the_names_it_is_read_back_by(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
         "args": {"device": 0, "stream": 7}},
    ]}))
    first = ingest_module.ingest([path], use_cache=True).sources[0]
    hit = ingest_module._cache_get(path, "kineto", 0)
    assert hit is not None
    assert hit.events.equals(first.events)


def test_no_input_path_is_one_line_saying_so() -> None:
    with pytest.raises(InputError, match=r"^\.: no input paths given$"):
        analyzer.load([])


def log(tmp_path: Path, start: int) -> ParsedSource:
    events = conform(
        {"kind": ["log_stage"], "name": ["timing_s/gen"], "start_ns": [start],
         "end_ns": [start + MS], "step": [1]},
        rank=-1,
    )
    return ParsedSource(tmp_path / "train.log", "verl-log", events=events)


def test_a_log_joins_the_capture_it_is_nearest_to(tmp_path: Path) -> None:
    """Two captures that both state rank 0 (two runs), 2 h apart, and a log starting with the
    second: both are within the log slack, the nearer start wins."""
    hour = 3_600 * 10**9
    sources = [
        trace(tmp_path, "a.json", 0, "node1", EPOCH),
        trace(tmp_path, "b.json", 0, "node1", EPOCH + 2 * hour),
        log(tmp_path, EPOCH + 2 * hour + MS),
    ]
    runs, _ = group(sources)
    assert [r.indexes for r in runs] == [[0], [1, 2]]


def test_rollout_ranges_that_touch_are_one_wave() -> None:
    """[0, 10) and [10, 20) leave no gap: one wave; [25, 30) starts the second."""
    rollout = pl.DataFrame({"start_ns": [0, 10, 25], "end_ns": [10, 20, 30]})
    waves = steps._waves(rollout)
    assert waves.select("step", "start_ns", "end_ns").rows() == [(1, 0, 25), (2, 25, 25)]


def test_a_wrong_type_beside_a_number_out_of_range_names_the_event(tmp_path: Path) -> None:
    """A chunk with one number doubles cannot hold (1e999) goes the slow path, event by event;
    there a name that is a number is the error, at its own index."""
    path = tmp_path / "trace.json"
    good = '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}'
    huge = '{"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1e999, "dur": 1}'
    wrong = '{"ph": "X", "cat": "cpu_op", "name": 5, "pid": 1, "tid": 1, "ts": 3, "dur": 1}'
    path.write_text('{"traceEvents": [' + ", ".join([good, huge, wrong]) + "]}")
    with pytest.raises(InputError) as caught:
        kineto.parse(path)
    assert str(caught.value) == (
        f"{path}: unexpected field type: Expected `str`, got `int` - at `$.traceEvents[2].name`"
    )
