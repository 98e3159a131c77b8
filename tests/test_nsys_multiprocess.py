"""verl's multi-process Nsight Systems layout: one report holding the controller and every worker
process, each with its own NVTX ``step N`` ranges and stage ranges (docs/assembly.md, "One
report, many processes").

Measured against two truths: the generator's (``sample_traces/synth/verl_nsys.py``: ranks, step
windows and every stage time exact to the nanosecond) and a real capture
(``sample_traces/runs/verl_ppo_multiprocess_nsys``, the harness under ``nsys profile``: within
1 ms of what each process measured on its own clock).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import analyzer
from analyzer.classify.steps import step_markers
from analyzer.model.run import Run
from sample_traces.synth import verl_nsys

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "sample_traces" / "runs" / "verl_ppo_multiprocess_nsys"
MS = 1_000_000


def synth_run(tmp: Path, **layout: Any) -> tuple[Run, dict[str, Any]]:
    truth = verl_nsys.write(verl_nsys.Layout(**layout), tmp)
    return analyzer.load([tmp / "verl_nsys.sqlite"], use_cache=False), truth


def rank_of_pid(run: Run) -> dict[int, int]:
    rows = run.events.filter(pl.col("kind") == "annotation").group_by("pid").agg(
        pl.col("rank").unique()
    )
    assert (rows["rank"].list.len() == 1).all(), "a process split over ranks"
    return {int(p): int(r[0]) for p, r in rows.iter_rows()}


def stage_times(run: Run) -> dict[tuple[int, int, str], int]:
    return {
        (r["step"], r["rank"], str(r["stage"])): r["time_ns"]
        for r in run.breakdown.iter_rows(named=True)
    }


LAYOUTS = {
    "gpu workers": {"workers": 4, "steps": 3, "seed": 0},
    "cpu-only workers": {"workers": 4, "steps": 3, "seed": 1, "gpu": False},
    "many steps, cpu-only": {"workers": 3, "steps": 12, "seed": 2, "gpu": False},
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=list(LAYOUTS))
def test_the_synthetic_layout_gives_the_true_ranks_steps_and_stage_times_exactly(
    tmp_path: Path, layout: dict[str, Any]
) -> None:
    run, truth = synth_run(tmp_path, **layout)
    assert rank_of_pid(run) == {p["pid"]: p["rank"] for p in truth["processes"]}
    assert run.ranks == list(range(layout["workers"]))
    roles = {p["rank"]: p["role"] for p in truth["processes"]}
    assert roles[-1] == "driver"
    assert run.stepping["origin"] == "step ranges: step N"
    got_steps = run.steps.select("step", "start_ns", "end_ns").to_dicts()
    assert got_steps == truth["steps"]
    want = {(s["step"], s["rank"], s["stage"]): s["time_ns"] for s in truth["stages"]}
    assert stage_times(run) == want
    assert min(want.values()) >= 0


def test_the_controller_keeps_its_timers_and_the_workers_their_methods(tmp_path: Path) -> None:
    run, _ = synth_run(tmp_path, workers=2, steps=2, seed=3)
    names = run.events.filter(pl.col("kind") == "annotation").with_columns(
        pl.col("name").cast(pl.String)
    )
    on_driver = set(names.filter(pl.col("rank") == -1)["name"])
    on_ranks = set(names.filter(pl.col("rank") >= 0)["name"])
    assert {"gen", "adv", "reward", "step 1", "step 2"} <= on_driver
    assert "generate_sequences" not in on_driver
    assert {"generate_sequences", "update_weights", "step 1"} <= on_ranks
    assert not {"gen", "adv", "reward"} & on_ranks
    assert any("the single controller (driver timers and no device work)" in n for n in run.notes)


def _process(pid: int, steps: int, lead_us: int) -> verl_nsys.Process:
    """A CPU-only process timing every step with the driver's names (as if each ran the trainer
    loop): ``step N`` enclosing ``gen``, ``old_log_prob`` and ``update_actor``."""
    ranges: list[tuple[str, int, int, int, str | None]] = []
    t = 100 * MS
    for k in range(1, steps + 1):
        s = t + lead_us * 1000
        ranges += [
            (f"step {k}", k, s, s + 30 * MS, None),
            ("gen", k, s + MS, s + 11 * MS, "rollout"),
            ("old_log_prob", k, s + 12 * MS, s + 17 * MS, "old_logprob"),
            ("update_actor", k, s + 18 * MS, s + 28 * MS, "actor_update"),
        ]
        t += 40 * MS
    return verl_nsys.Process(pid, -1, "python3", ranges, [])


def test_processes_that_all_record_the_driver_timers_are_ranks_not_one_controller(
    tmp_path: Path,
) -> None:
    """Before: every process on the controller (rank -1), "no device traces: logs only", steps
    from rollout waves, and the overlapping ranges of three processes on one rank gave negative
    ``other``. A run has one controller: processes that all look like it are each a rank."""
    path = tmp_path / "alike.sqlite"
    leads = {301: 0, 302: 150, 303: 90}
    procs = [_process(pid, steps=3, lead_us=lead) for pid, lead in leads.items()]
    verl_nsys.write_report(path, procs, "three processes with the driver's timers")
    run = analyzer.load([path], use_cache=False)
    assert run.ranks == [0, 1, 2]
    assert rank_of_pid(run) == {301: 0, 302: 1, 303: 2}
    assert any("processes 301, 302, 303 all record the driver's timers" in n for n in run.notes)
    assert run.stepping["origin"] == "step ranges: step N"
    assert run.steps["step"].to_list() == [1, 2, 3]
    times = stage_times(run)
    for rank in range(3):
        for step in (1, 2, 3):
            assert times[(step, rank, "rollout")] == 10 * MS
            assert times[(step, rank, "old_logprob")] == 5 * MS
            assert times[(step, rank, "actor_update")] == 10 * MS
            assert times[(step, rank, "other")] == 2 * MS
    assert min(times.values()) >= 0


def test_a_single_process_with_the_driver_timers_stays_the_controller(tmp_path: Path) -> None:
    """The rule is about the report's processes, not any one of them: one driver-timed process
    beside a GPU worker is the controller."""
    path = tmp_path / "one.sqlite"
    driver = _process(401, steps=2, lead_us=0)
    worker = _process(402, steps=2, lead_us=50)
    worker.ranges = [
        (n.replace("gen", "generate_sequences").replace("old_log_prob", "compute_log_prob"), *rest)
        for n, *rest in worker.ranges
    ]
    worker.kernels = [(101 * MS, 101 * MS + 5000, 101 * MS + 9000, 102 * MS, 0)]
    verl_nsys.write_report(path, [driver, worker], "a controller and one worker")
    run = analyzer.load([path], use_cache=False)
    assert rank_of_pid(run) == {401: -1, 402: 0}
    assert run.ranks == [0]


def _markers(rows: list[tuple[int, str, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema=["rank", "name", "start_ns", "end_ns"], orient="row"
    ).with_columns(pl.lit("step").alias("relation"), pl.lit("other").alias("stage"))


def test_step_ranges_that_state_their_number_keep_it() -> None:
    """``step 5`` is step 5 on every process (numbering by order would call it 1)."""
    markers, origin = step_markers(
        _markers([(0, "step 5", 0, 10), (0, "step 6", 20, 30), (1, "step 5", 1, 9),
                  (1, "step 6", 21, 29)])
    )
    assert origin == "step ranges: step N"
    assert sorted(markers.select("rank", "step").rows()) == [(0, 5), (0, 6), (1, 5), (1, 6)]


def test_the_controllers_unnumbered_step_takes_the_number_it_overlaps_most() -> None:
    """verl's controller times ``step`` (no number) while its workers mark ``step N``: the
    controller's step starts before its workers' (it dispatches their work), so it takes the
    number of the step range it overlaps most, not of the last one started before it."""
    markers, origin = step_markers(
        _markers([(-1, "step", 0, 100), (-1, "step", 105, 200), (0, "step 1", 10, 101),
                  (0, "step 2", 110, 199), (1, "step 1", 12, 98), (1, "step 2", 111, 190)])
    )
    assert origin == "step ranges: step, step N"
    got = sorted(markers.select("rank", "step", "start_ns").rows())
    assert got == [(-1, 1, 0), (-1, 2, 105), (0, 1, 10), (0, 2, 110), (1, 1, 12), (1, 2, 111)]


# --- the real capture -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def capture() -> tuple[Run, dict[str, Any]]:
    truth = json.loads((CAPTURE / "truth.json").read_text())
    return analyzer.load([CAPTURE]), truth


def _own_time(rows: list[dict[str, Any]]) -> dict[tuple[int, int, str], int]:
    """Per step, rank and stage: each stage interval's length less the stage intervals of the
    same rank nested inside it (innermost decides), plus ``other`` per rank and step."""
    out: dict[tuple[int, int, str], int] = {}
    for r in rows:
        inner = sum(
            q["end_ns"] - q["start_ns"]
            for q in rows
            if q is not r and q["rank"] == r["rank"] and r["start_ns"] <= q["start_ns"]
            and q["end_ns"] <= r["end_ns"]
        )
        key = (r["step"], r["rank"], r["stage"])
        out[key] = out.get(key, 0) + r["end_ns"] - r["start_ns"] - inner
    for step, rank in {(r["step"], r["rank"]) for r in rows}:
        mine = [r for r in rows if (r["step"], r["rank"]) == (step, rank)]
        span = max(r["end_ns"] for r in mine) - min(r["start_ns"] for r in mine)
        staged = sum(v for (s, k, _), v in out.items() if (s, k) == (step, rank))
        out[(step, rank, "other")] = span - staged
    return out


def test_the_capture_holds_the_controller_and_every_worker_in_one_report(capture) -> None:
    run, truth = capture
    assert truth["config"]["worker_steps"] is True
    assert {e["trace"] for e in truth["ranks"]} == {"nsys/report.nsys-rep"}
    assert rank_of_pid(run) == {e["pid"]: e["rank"] for e in truth["ranks"]}
    assert run.ranks == list(range(truth["config"]["world_size"]))
    steps = [s for s in truth["spans"] if s["name"].startswith("step ")]
    assert {(s["rank"], s["name"]) for s in steps} == {
        (r, f"step {k}") for r in range(3) for k in range(1, truth["config"]["steps"] + 1)
    }


def test_the_capture_gives_the_true_steps_within_a_millisecond(capture) -> None:
    run, truth = capture
    assert run.stepping["origin"] == "step ranges: step, step N"
    marks = [*truth["stages"], *(s for s in truth["spans"] if s["name"].split()[0] == "step")]
    want = {
        k: (min(r["start_ns"] for r in marks if r["step"] == k),
            max(r["end_ns"] for r in marks if r["step"] == k))
        for k in range(1, truth["config"]["steps"] + 1)
    }
    got = {r["step"]: (r["start_ns"], r["end_ns"]) for r in run.steps.iter_rows(named=True)}
    assert sorted(got) == sorted(want)
    for k, (start, end) in want.items():
        assert abs(got[k][0] - start) < MS and abs(got[k][1] - end) < MS, k


def test_the_capture_gives_every_stage_time_within_a_millisecond(capture) -> None:
    run, truth = capture
    want = _own_time(truth["stages"])
    got = stage_times(run)
    assert set(got) == set(want)
    off = {k: got[k] - want[k] for k in want if abs(got[k] - want[k]) >= MS}
    assert off == {}
    assert min(got.values()) >= 0


def test_a_helper_process_with_no_device_work_is_not_a_rank() -> None:
    """nvFuser's report1.sqlite: one H200 (device 0) used by pid 50556; pid 50922 made 2 CUDA
    runtime calls (cuModuleGetLoadingMode, cudaGetDeviceProperties) and nothing else. It was
    'numbered 1 by input order' and the run read 2 ranks."""
    run = analyzer.load([ROOT.parent / "shared" / "corpus" / "nvFuser" / "report1.sqlite"])
    assert run.ranks == [0]
    helper = run.events.filter(pl.col("pid") == 50922)
    assert helper.height == 2 and helper["rank"].to_list() == [-1, -1]
    assert any("pid 50922: no device work" in n for n in run.notes)
