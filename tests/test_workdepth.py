"""Work–depth and the what-if bounds (docs/analyses.md §7) on hand-built products."""

from __future__ import annotations

import polars as pl
import pytest
from product_frames import frame

from analyzer.model import frames
from analyzer.model.run import Run
from parsers.events import empty_events

MS = 1_000_000


def run_with(chain: list[tuple], rollout_ends: list[int], update_productive: list[int]) -> Run:
    """One step [0, 120 ms) on three ranks: ``chain`` as the critical path, rank r's rollout
    ending at ``rollout_ends[r]``, and ``update_productive[r]`` of productive time inside r's
    actor update (which runs [70, 110) ms on every rank)."""
    ranks = range(len(rollout_ends))
    n = len(rollout_ends)
    steps = frame(
        {"step": [1], "start_ns": [0], "end_ns": [120 * MS], "source": ["ProfilerStep"]},
        frames.STEPS,
    )
    rank, stage, start, end = (list(c) for c in zip(*chain, strict=True))
    critical = frame(
        {"step": [1] * len(rank), "rank": rank, "stage": stage, "start_ns": start, "end_ns": end},
        frames.CRITICAL_PATH,
    )
    ranges = frame(
        {
            "rank": [*ranks, *ranks],
            "step": [1] * 2 * n,
            "stage": ["rollout"] * n + ["actor_update"] * n,
            "role": ["rollout"] * n + ["actor"] * n,
            "name": ["gen"] * n + ["update_actor"] * n,
            "start_ns": [0] * n + [70 * MS] * n,
            "end_ns": [*rollout_ends, *[110 * MS] * n],
            "depth": [0] * 2 * n,
            "inferred": [False] * 2 * n,
            "confidence": [1.0] * 2 * n,
        },
        frames.STAGE_RANGES,
    )
    timeline = ranges.select(list(frames.STAGE_TIMELINE))
    states = frame(
        {"rank": [*ranks, *ranks], "step": [1] * 2 * n, "cause": [None] * n + ["sync_wait"] * n,
         "start_ns": [70 * MS] * n + [70 * MS + p for p in update_productive],
         "end_ns": [70 * MS + p for p in update_productive] + [110 * MS] * n},
        frames.DEVICE_STATES,
    )
    bubbles = frame(
        {
            "step": [1] * n,
            "rank": list(ranks),
            "window_ns": [120 * MS] * n,
            "busy_ns": update_productive,
            "productive_ns": update_productive,
            "cause": ["sync_wait"] * n,
            "idle_ns": [40 * MS - p for p in update_productive],
        },
        frames.BUBBLES,
    )
    run = Run(sources=[], events=empty_events(), metrics=pl.DataFrame())
    run.inject(
        steps=steps,
        critical_path=critical,
        stage_ranges=ranges,
        stage_timeline=timeline,
        device_states=states,
        bubbles=bubbles,
    )
    return run


def test_colocated_step_with_a_rollout_tail_and_uneven_updates() -> None:
    run = run_with(
        chain=[(1, "rollout", 0, 70 * MS), (0, "actor_update", 70 * MS, 110 * MS)],
        rollout_ends=[50 * MS, 70 * MS, 60 * MS],
        update_productive=[30 * MS, 20 * MS, 25 * MS],
    )
    row = frames.check(run.workdepth, frames.WORKDEPTH, "workdepth").row(0, named=True)
    assert (row["step"], row["step_ns"], row["depth_ns"], row["work_ns"]) == (
        1,
        120 * MS,
        110 * MS,
        75 * MS,
    )
    assert row["parallelism"] == pytest.approx(75 / 110)
    assert row["async_overlap_bound"] == pytest.approx((70 + 40) / 70)
    assert row["no_tail_step_ns"] == 120 * MS - 10 * MS  # rollout ends at the median rank's 60 ms
    assert row["balanced_dp_step_ns"] == 120 * MS - 5 * MS  # max 30 − mean 25


def test_a_step_whose_path_holds_no_rollout_gains_nothing_from_overlap_or_the_tail() -> None:
    run = run_with(
        chain=[(2, "actor_update", 70 * MS, 110 * MS)],
        rollout_ends=[10 * MS, 60 * MS, 30 * MS],
        update_productive=[20 * MS, 20 * MS, 20 * MS],
    )
    row = run.workdepth.row(0, named=True)
    assert row["async_overlap_bound"] == 1.0
    assert row["no_tail_step_ns"] == row["step_ns"] == row["balanced_dp_step_ns"]
    assert row["depth_ns"] == 40 * MS and row["parallelism"] == pytest.approx(60 / 40)


def test_depth_is_never_less_than_the_busiest_devices_own_work() -> None:
    """A path of one 10 ms range while rank 1's device works 30 ms (its work queued past the
    range): D is the 30 ms the device needed, so W/D is 1.5 over the three ranks' 15+30+0,
    not 4.5."""
    run = run_with(
        chain=[(1, "rollout", 0, 10 * MS)],
        rollout_ends=[10 * MS, 10 * MS, 10 * MS],
        update_productive=[15 * MS, 30 * MS, 0],
    )
    row = run.workdepth.row(0, named=True)
    assert (row["depth_ns"], row["work_ns"]) == (30 * MS, 45 * MS)
    assert row["parallelism"] == pytest.approx(1.5)


def test_one_gpu_whose_graphs_run_long_after_their_launch_has_a_parallelism_of_one() -> None:
    """TraceLens' vLLM piecewise-graph trace (one MI300X): the engine's 26.4 ms step annotation
    ends while its 156 ms of GPU work is still queued (kernels start 146-282 ms after their
    launches). One device cannot hold a parallelism of 5.92, and the stage table's note, which
    read "critical path 26.4 ms" beside a depth of 156 ms, says which path is which."""
    from pathlib import Path

    import analyzer

    trace = (Path(__file__).resolve().parents[2] / "shared" / "corpus" / "TraceLens"
             / "inference" / "vllm_prefilldecode_piecewise__graph_execution.json.gz")
    run = analyzer.load([trace], use_cache=False)
    (path,) = run.critical_path.select("start_ns", "end_ns").rows()
    assert path[1] - path[0] == 26_353_441
    row = run.workdepth.row(0, named=True)
    assert (row["work_ns"], row["depth_ns"], row["parallelism"]) == (156_085_793, 156_085_793, 1.0)
    from analyzer.report.sections import breakdown

    shown = breakdown.section(run)
    assert shown is not None
    assert shown.note == (
        "step 1: critical path through the stage ranges 26.4 ms, set by rank 0 in rollout; a "
        "device's own work in the step is longer, 156 ms (queued after its range closed), and is "
        "the work-depth section's depth D"
    )
