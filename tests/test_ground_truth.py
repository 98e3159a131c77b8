"""The analyses recover the ground truth of every synthetic run (docs/analyses.md §3–§7).

The synthetic generator computes its truth from its own true timeline with its own interval
code (sample_traces/synth/truth.py, no analyzer code). Here the analyses run on frames built
from what the traces say — every rank's kernels, copies and NCCL calls as parsed from its
Kineto file, with the truth's clock offsets removed and instances matched by (group, seq) —
plus the truth's stage intervals and step windows, and must give the truth's numbers exactly —
stage durations per rank and step, idle time per device, step and cause, busy and productive
time, collective time and wait by dimension, the critical path's rank, stage and length, the
work. Measured on the 7 runs in both modes: every one of these equals the truth to the
nanosecond (the generator writes ns-exact times and rlperf keeps them), so any tolerance would
only hide a rounding bug. The real CPU runs of the harness (below) have their own, measured
tolerances.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from literal_walk import literal_chain

import analyzer
import parsers
from analyzer.analyses.breakdown import CRITICAL_SLACK_NS, critical_summary
from analyzer.model import frames, intervals
from analyzer.model.run import Run
from parsers.events import empty_events
from sample_traces.synth import generate, preset
from sample_traces.synth.samples import ROOT as COMMITTED_ROOT
from sample_traces.synth.samples import SAMPLES as COMMITTED
from taxonomy.vocab import DIM, POOL, ROLE, STAGE

STAGE_TOL_NS = 1_000_000
REL = 0.02
"""The harness runs' stage-duration contract (docs/analyses.md): within 2% or 1 ms."""

COMMITTED_RUNS: dict[str, Path] = {
    f"{s}-{spec['ranks']}": COMMITTED_ROOT / s for s, spec in COMMITTED.items()
}
"""The committed synthetic samples (test_synth holds them to the generator's output)."""
GENERATED: dict[str, dict[str, Any]] = {
    "disaggregated-16-tp2-pp2": {
        "scenario": "disaggregated",
        "ranks": 16,
        "seed": 3,
        "tp": 2,
        "pp": 2,
    },
    "stage_fused-16": {"scenario": "stage_fused", "ranks": 16, "seed": 5, "steps": 3},
}
"""Two larger layouts (pipeline, expert parallel), generated for the test."""
RUNS = [*COMMITTED_RUNS, *GENERATED]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("synthetic")
    out = dict(COMMITTED_RUNS)
    for name, spec in GENERATED.items():
        spec = dict(spec)
        cfg = preset(spec.pop("scenario"), spec.pop("ranks"), steps=spec.pop("steps", 2), **spec)
        generate(cfg, root / name, jobs=1)
        out[name] = root / name
    return out


def truth_run(folder: Path) -> tuple[Run, dict[str, Any]]:
    """A run whose assembly products are built from the traces (activity, collectives) and the
    truth (steps, pools, stage intervals): only the analyses are under test."""
    t = json.loads((folder / "truth.json").read_text())
    steps = pl.DataFrame(t["step_windows"]).select(
        pl.col("step").cast(pl.Int32), "start_ns", "end_ns", pl.lit("ProfilerStep").alias("source")
    )
    pools = pl.DataFrame(t["ranks"]).select(
        pl.col("rank").cast(pl.Int32),
        pl.col("pool").cast(POOL),
        "host",
        pl.col("device").cast(pl.Int16),
    )
    st = pl.DataFrame(t["stages"]).with_columns(
        pl.col("rank").cast(pl.Int32),
        pl.col("step").cast(pl.Int32),
        pl.col("stage").cast(STAGE),
        pl.col("role").cast(ROLE),
    )
    common = ["rank", "step", "stage", "role"]
    outer = st.select(*common, "name", "start_ns", "end_ns", pl.lit(0, pl.Int16).alias("depth"))
    inner = st.filter(pl.col("worker_name").is_not_null()).select(
        *common, pl.col("worker_name").alias("name"), pl.col("worker_start_ns").alias("start_ns"),
        pl.col("worker_end_ns").alias("end_ns"), pl.lit(1, pl.Int16).alias("depth"),
    )
    flags = [pl.lit(False).alias("inferred"), pl.lit(1.0, pl.Float32).alias("confidence")]
    stage_ranges = pl.concat([outer, inner]).with_columns(flags)
    timeline = (
        outer.with_columns(flags[0]).select(list(frames.STAGE_TIMELINE)).sort("rank", "start_ns")
    )

    dims = {g["pg_name"]: g["dim"] for g in t["config"]["process_groups"]}
    per_rank = []
    for entry in t["ranks"]:
        offset = t["clock_offsets_ns"][str(entry["rank"])]
        events = parsers.parse_file(folder / entry["trace"]).events
        per_rank.append(
            events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).with_columns(
                pl.col("start_ns") - offset, pl.col("end_ns") - offset
            )
        )
    device = pl.concat(per_rank)
    activity = device.select(
        "rank", "device", "stream", pl.col("kind").cast(pl.String), "start_ns", "end_ns",
        pl.lit(None, STAGE).alias("stage"), pl.lit(None, pl.Int32).alias("step"),
        pl.col("coll").is_not_null().alias("is_collective"),
    )
    nccl = device.filter(pl.col("coll").is_not_null()).with_columns(pl.col("pg").cast(pl.String))
    enclosing = timeline.select(
        "rank",
        pl.col("start_ns").alias("_s"),
        pl.col("end_ns").alias("_e"),
        pl.col("stage").alias("_stage"),
    )
    windows = steps.select(pl.col("step").alias("_step"), pl.col("start_ns").alias("_ws"))
    collectives = (
        nccl.with_columns(pl.struct("pg", "seq").rank("dense").cast(pl.Int64).alias("instance"))
        .sort("rank", "start_ns")
        .join_asof(
            enclosing.sort("rank", "_s"),
            left_on="start_ns",
            right_on="_s",
            by="rank",
            check_sortedness=False,
        )
        .sort("start_ns")
        .join_asof(windows.sort("_ws"), left_on="start_ns", right_on="_ws")
        .select(
            "instance",
            "rank",
            pl.col("_step").alias("step"),
            pl.col("coll").cast(pl.String),
            pl.col("pg").replace_strict(dims).cast(DIM).alias("dim"),
            "pg",
            "pg_ranks",
            "group_size",
            "bytes",
            "start_ns",
            "end_ns",
            pl.when(pl.col("start_ns") < pl.col("_e")).then(pl.col("_stage")).alias("stage"),
            pl.lit(True).alias("on_device"),
        )
    )
    for frame, schema, what in (
        (steps, frames.STEPS, "steps"),
        (pools, frames.POOLS, "pools"),
        (stage_ranges, frames.STAGE_RANGES, "stage_ranges"),
        (timeline, frames.STAGE_TIMELINE, "stage_timeline"),
        (activity, frames.ACTIVITY, "activity"),
        (collectives, frames.COLLECTIVE_INSTANCES, "collectives"),
    ):
        frames.check(frame, schema, what)
    run = Run(sources=[], events=empty_events(), metrics=pl.DataFrame())
    run.inject(
        steps=steps,
        pools=pools,
        stage_ranges=stage_ranges,
        stage_timeline=timeline,
        activity=activity,
        collectives=collectives,
        ranks=sorted(e["rank"] for e in t["ranks"] if e["rank"] >= 0),
    )
    return run, t


MODES = ("from_truth", "load")
"""``from_truth``: assembly products built above, so only the analyses are under test;
``load``: ``analyzer.load`` on the trace folder, the whole pipeline (clock offsets included)."""


@pytest.fixture(scope="module")
def runs(synthetic: dict[str, Path]):
    cache: dict[tuple[str, str], tuple[Run, dict[str, Any]]] = {}

    def get(name: str, mode: str) -> tuple[Run, dict[str, Any]]:
        if (name, mode) not in cache:
            folder = synthetic[name]
            if mode == "from_truth":
                cache[(name, mode)] = truth_run(folder)
            else:
                cache[(name, mode)] = (
                    analyzer.load(folder, use_cache=False),
                    json.loads((folder / "truth.json").read_text()),
                )
        return cache[(name, mode)]

    return get


def close(have: pl.Expr, want: pl.Expr) -> pl.Expr:
    """The duration contract: within 2% or 1 ms."""
    return (have - want).abs() <= pl.max_horizontal(pl.lit(STAGE_TOL_NS), REL * want.abs())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", RUNS)
def test_stage_durations_per_rank_and_step(runs, name: str, mode: str) -> None:
    run, t = runs(name, mode)
    got = frames.check(run.breakdown, frames.BREAKDOWN, "breakdown").with_columns(
        pl.col("stage").cast(pl.String)
    )
    want = pl.DataFrame(t["stage_durations"])
    both = got.join(want, on=["rank", "step", "stage"], how="full", coalesce=True)
    assert both.filter(pl.col("time_ns").is_null() | pl.col("duration_ns").is_null()).height == 0
    off = both.filter(pl.col("time_ns") != pl.col("duration_ns"))
    assert off.height == 0, off
    windows = pl.DataFrame(t["step_windows"]).select(
        pl.col("step").cast(pl.Int32), (pl.col("end_ns") - pl.col("start_ns")).alias("w")
    )
    shares = got.join(windows, on="step")
    assert ((shares["share"] - shares["time_ns"] / shares["w"]).abs() < 1e-6).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", RUNS)
def test_idle_by_cause_per_device_and_step(runs, name: str, mode: str) -> None:
    run, t = runs(name, mode)
    got = frames.check(run.bubbles, frames.BUBBLES, "bubbles").with_columns(
        pl.col("cause").cast(pl.String)
    )
    want = pl.DataFrame(
        [
            {
                "rank": d["rank"],
                "step": d["step"],
                "cause": cause,
                "want_idle": idle,
                "want_window": d["window_ns"],
                "want_busy": d["busy_ns"],
                "want_productive": d["productive_busy_ns"],
            }
            for d in t["devices"]
            for cause, idle in d["idle_ns"].items()
        ]
    )
    both = got.join(want, on=["rank", "step", "cause"], how="full", coalesce=True)
    assert both.height == len(t["devices"]) * 7
    assert both.null_count().sum_horizontal().item() == 0
    for have, expect in (
        ("idle_ns", "want_idle"),
        ("busy_ns", "want_busy"),
        ("productive_ns", "want_productive"),
        ("window_ns", "want_window"),
    ):
        off = both.filter(pl.col(have) != pl.col(expect))
        assert off.height == 0, (have, off)
    assert both.filter(pl.col("want_idle") > 0).height >= len(t["devices"])
    assert both.filter(pl.col("cause") == "sync_wait")["idle_ns"].sum() > 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", RUNS)
def test_collectives_by_dimension(runs, name: str, mode: str) -> None:
    run, t = runs(name, mode)
    got = (
        frames.check(run.collectives_by_dim, frames.COLLECTIVES_BY_DIM, "collectives_by_dim")
        .group_by(pl.col("dim").cast(pl.String))
        .agg(pl.col("count", "bytes", "time_ns", "wait_ns", "transfer_ns", "exposed_ns").sum())
    )
    want = pl.DataFrame(t["collectives_by_dim"])
    both = got.join(want, on="dim", how="full", coalesce=True, suffix="_truth")
    assert both.null_count().sum_horizontal().item() == 0, both
    assert (both["count"] == both["count_truth"]).all() and (
        both["bytes"] == both["bytes_truth"]
    ).all()
    for col in ("time_ns", "wait_ns"):
        assert (both[col] == both[f"{col}_truth"]).all(), (col, both)
    assert ((both["transfer_ns"] + both["wait_ns"]) == both["time_ns"]).all()
    assert ((both["exposed_ns"] >= 0) & (both["exposed_ns"] <= both["time_ns"])).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", RUNS)
def test_critical_path_rank_stage_and_length(runs, name: str, mode: str) -> None:
    run, t = runs(name, mode)
    chain = frames.check(run.critical_path, frames.CRITICAL_PATH, "critical_path")
    got = critical_summary(chain).with_columns(pl.col("stage").cast(pl.String))
    want = pl.DataFrame(
        [{k: c[k] for k in ("step", "rank", "stage", "length_ns")} for c in t["critical_path"]]
    )
    both = got.join(want, on="step")
    assert both.height == len(t["critical_path"])
    assert (both["rank"] == both["rank_right"]).all() and (
        both["stage"] == both["stage_right"]
    ).all(), both
    assert (both["depth_ns"] == both["length_ns"]).all(), both
    links = chain.group_by("step").len().sort("step")["len"].to_list()
    assert links == [len(c["chain"]) for c in sorted(t["critical_path"], key=lambda c: c["step"])]
    wd = frames.check(run.workdepth, frames.WORKDEPTH, "workdepth").join(want, on="step")
    assert (wd["depth_ns"] == wd["length_ns"]).all(), wd  # the truth's critical-path length
    assert (wd["parallelism"] > 1).all() and (
        wd["work_ns"] <= wd["step_ns"] * len(t["ranks"])
    ).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", RUNS)
def test_work_is_the_productive_time_of_every_device(runs, name: str, mode: str) -> None:
    run, t = runs(name, mode)
    work = (
        pl.DataFrame([{"step": d["step"], "p": d["productive_busy_ns"]} for d in t["devices"]])
        .group_by("step")
        .agg(pl.col("p").sum())
    )
    both = run.workdepth.join(work, on="step")
    assert both.height == len(t["step_windows"])
    assert (both["work_ns"] == both["p"]).all(), both


# --- the real CPU runs of the sample harness ---------------------------------------------------

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "runs"
STAGED = sorted(
    p.name for p in SAMPLES.iterdir() if (p / "truth.json").is_file() and p.name != "trl_grpo"
)
"""Every sample run whose traces carry stage ranges (TRL's are inferred: tests/test_classify.py)."""


@cache
def sample(name: str) -> tuple[Run, dict[str, Any]]:
    folder = SAMPLES / name
    return analyzer.load([p for p in sorted(folder.iterdir()) if p.is_dir()]), json.loads(
        (folder / "truth.json").read_text()
    )


def traced(t: dict[str, Any]) -> tuple[int, int]:
    """The time every worker's trace covers (the truth knows what happened outside it; a trace
    does not)."""
    windows = [e["profile_window_ns"] for e in t["ranks"] if e["rank"] >= 0]
    return max(w[0] for w in windows), min(w[1] for w in windows)


@pytest.mark.parametrize("name", STAGED)
def test_sample_stage_durations(name: str) -> None:
    """Per rank (the controller too) and traced step: the truth's stage time, within 2% or 1 ms."""
    run, t = sample(name)
    steps = run.steps["step"].to_list()
    want = (
        pl.DataFrame(t["stages"])
        .filter(pl.col("step").is_in(steps))
        .group_by("rank", "step", "stage")
        .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("truth_ns"))
    )
    got = run.breakdown.filter(pl.col("stage") != "other").with_columns(
        pl.col("stage").cast(pl.String)
    )
    both = got.join(
        want.with_columns(pl.col("rank", "step").cast(pl.Int32)),
        on=["rank", "step", "stage"],
        how="full",
        coalesce=True,
    )
    assert both.height >= 8 * len(steps)
    assert both.filter(pl.col("time_ns").is_null() | pl.col("truth_ns").is_null()).height == 0, both
    off = both.filter(~close(pl.col("time_ns"), pl.col("truth_ns")))
    assert off.height == 0, off


WAIT_REL, WAIT_ABS_NS = 0.025, 500_000
"""A harness wait is stamped by the Python harness's clock around its own calls, the trace's by
the profiler, through a clock alignment with its own residual: measured on the five runs, the 23
(rank, step, cause) cells differ by at most 2.2% of themselves (openrlhf, 40 ms waits) or 448 µs
(one 415 µs pool wait of verl_ppo_disaggregated is seen as 22 µs: the wait begins before the
trace's step range does). 2.5% or 0.5 ms is what was measured, not 2% of the step window."""


@pytest.mark.parametrize("name", STAGED)
def test_sample_rollout_tail_and_pool_wait(name: str) -> None:
    """The waits the run's structure explains (rollout tail, pool wait), per rank and step window
    over the time every trace covers, within 2.5% of itself or 0.5 ms. The truth's other entries are
    not this page's causes: its ``weight_sync`` is the whole barrier call, not the idle time inside
    the weight-sync range."""
    run, t = sample(name)
    lo, hi = traced(t)
    windows = run.steps.select("step", pl.max_horizontal("start_ns", pl.lit(lo)).alias("start_ns"),
                               pl.min_horizontal("end_ns", pl.lit(hi)).alias("end_ns"))
    causes = ["rollout_tail", "pool_wait"]
    truth = (
        pl.DataFrame(t["waits"])
        .filter(pl.col("cause").is_in(causes))
        .select(pl.col("rank").cast(pl.Int32), "cause", "start_ns", "end_ns")
    )
    want = intervals.union_length(
        intervals.clip_to_windows(truth, windows), ["rank", "step", "cause"], "truth_ns"
    )
    mine = run.device_states.filter(pl.col("cause").is_in(causes)).with_columns(
        pl.col("cause").cast(pl.String)
    )
    own_window = windows.rename({"start_ns": "_ws", "end_ns": "_we"})
    mine = mine.join(own_window, on="step").with_columns(
        pl.max_horizontal("start_ns", "_ws").alias("start_ns"),
        pl.min_horizontal("end_ns", "_we").alias("end_ns"),
    )
    got = intervals.length(
        mine.filter(pl.col("end_ns") > pl.col("start_ns")), ["rank", "step", "cause"], "idle_ns"
    )
    sizes = run.steps.select("step", (pl.col("end_ns") - pl.col("start_ns")).alias("window_ns"))
    both = got.join(
        want.with_columns(pl.col("step").cast(pl.Int32)),
        on=["rank", "step", "cause"],
        how="full",
        coalesce=True,
    )
    both = both.fill_null(0).join(sizes, on="step")
    assert both["truth_ns"].sum() > 0 and both.height >= 2
    tol = pl.max_horizontal(WAIT_REL * pl.col("truth_ns"), pl.lit(WAIT_ABS_NS))
    off = both.filter((pl.col("idle_ns") - pl.col("truth_ns")).abs() > tol)
    assert off.height == 0, off


@pytest.mark.parametrize("name", STAGED)
def test_sample_critical_path(name: str) -> None:
    """The critical stage, and the critical rank — or, where DP peers finish a stage within the
    walk's slack of each other, a peer of it (the order of such ends is below what the two
    clocks, trace and truth, tell apart)."""
    run, t = sample(name)
    got = critical_summary(run.critical_path)
    workers = [s for s in t["stages"] if s["rank"] >= 0]
    assert got.height == run.steps.height
    for row in got.iter_rows(named=True):
        rows = [
            (s["rank"], s["step"], s["stage"], s["start_ns"], s["end_ns"])
            for s in workers
            if s["step"] == row["step"]
        ]
        chain = literal_chain(rows)
        rank_time: dict[int, int] = {}
        stage_time: dict[str, int] = {}
        for rank, stage, a, b in chain:
            rank_time[rank] = rank_time.get(rank, 0) + b - a
            stage_time[stage] = stage_time.get(stage, 0) + b - a
        stage = max(stage_time, key=lambda k: stage_time[k])
        rank = min(rank_time, key=lambda k: (-rank_time[k], k))
        assert row["stage"] == stage, (row, stage)
        ends = {s[0]: s[4] for s in rows if s[2] == stage}
        assert (
            row["rank"] == rank or abs(ends.get(row["rank"], 0) - ends[rank]) <= CRITICAL_SLACK_NS
        ), (row, rank, ends)
        length = max(c[3] for c in chain) - min(c[2] for c in chain)
        assert abs(row["depth_ns"] - length) <= max(STAGE_TOL_NS, REL * length), (row, length)


GLOO_LAG_PER_CALL_NS = 750_000


@pytest.mark.parametrize("name", [n for n in STAGED if not n.endswith("_nsys")])
def test_sample_collectives_by_dimension(name: str) -> None:
    """Every call of the traced steps, counted once, under the dimension the truth gives it; each
    within the caller's own interval. (Times are not held to 2% here: gloo runs the collective
    on a worker thread some 100–300 µs after the call and the caller wakes after it ends, so the
    truth, taken around the blocking call, is 4–20% longer per dimension than what the trace
    records on these runs: per call, 0.18–0.64 ms, measured; 0.75 ms a call is allowed. The nsys
    capture records no collectives at all: ``-t nvtx,osrt``.)"""
    run, t = sample(name)
    steps = run.steps["step"].to_list()
    want = pl.DataFrame(t["collectives"]).filter(pl.col("step").is_in(steps))
    got = run.collectives_by_dim.group_by(pl.col("dim").cast(pl.String)).agg(
        pl.col("count", "time_ns").sum()
    )
    counts = want.group_by("dim").agg(
        pl.len().alias("truth"), (pl.col("end_ns") - pl.col("start_ns")).sum().alias("truth_ns")
    )
    both = got.join(counts, on="dim", how="full", coalesce=True)
    assert (both["count"] == both["truth"]).all(), both
    short = both["truth_ns"] - both["time_ns"]
    assert ((short >= 0) & (short <= GLOO_LAG_PER_CALL_NS * both["count"])).all(), both
