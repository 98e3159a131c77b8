"""No stage time is ever negative: in any report of any bundled sample, corpus file or generator
run (issue 12).

The cause it guards against: a rank whose stage ranges cross instead of nesting (ranges of
several threads or processes on one rank) had the same instants in two timeline segments, so
the staged time of a step exceeded the step and ``other`` (step time minus staged time) went
negative. The timeline now gives every instant to one range (:mod:`analyzer.classify.innermost`).

Reports are read where the suite already has them: the golden JSON reports of every sample and
corpus file (``tests/test_golden.py`` holds them byte-identical to what the code writes), the
corpus walk's analyses when ``tests/test_corpus_walk.py`` ran in the same session; only inputs
neither covers are analysed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import test_corpus_walk
from test_quality import write, x

import analyzer
from analyzer.classify import innermost
from analyzer.classify.timeline import timeline
from analyzer.model import intervals
from sample_traces.synth import SCENARIOS, generate, preset, verl_nsys
from tests.golden import make

ROOT = Path(__file__).resolve().parents[1]
STAGE_TIME_SECTIONS = (
    "breakdown", "bubbles", "workdepth", "annotations", "log_steps", "log_stages",
    "log_stage_summary", "log_dominant",
)
"""Report sections whose numbers are stage times, their shares, or counts."""
SIGNED = frozenset({"rank", "max_rank", "step", "residual_s"})
"""Fields that may be negative: ranks (-1 is the controller), and a log's step total minus its
timers (negative where the timers overlap; no ``other`` is made of it)."""


def negative_stage_times(doc: dict[str, Any]) -> list[str]:
    """``section.field = value`` for every negative number in the stage-time sections."""
    found = []
    for section in STAGE_TIME_SECTIONS:
        rows = doc.get(section) or []
        for row in rows if isinstance(rows, list) else [rows]:
            for key, value in row.items() if isinstance(row, dict) else ():
                number = isinstance(value, int | float) and not isinstance(value, bool)
                if number and key not in SIGNED and value < 0:
                    found.append(f"{section}.{key} = {value}")
    return found


def analyse(path: Path) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", str(path),
         "--format", "json", "--quiet"],
        capture_output=True, text=True, timeout=test_corpus_walk.TIMEOUT_S, cwd=ROOT,
        env={**os.environ, "RLPERF_NO_CACHE": "1"},
    )
    return done.returncode, done.stdout


def test_no_golden_report_has_a_negative_stage_time() -> None:
    manifest = make.read_manifest()
    checked = {}
    for name in make.inputs():
        if name in manifest["inputs"]:
            checked[name] = negative_stage_times(json.loads(make.read_report(name, "json")))
    samples = {n for n in make.sample_inputs() if n in manifest["inputs"]}
    assert samples and samples <= set(checked)
    assert len(checked) >= (40 if make.CORPUS.is_dir() else len(samples))
    assert {n: bad for n, bad in checked.items() if bad} == {}


def uncovered() -> list[Path]:
    """Inputs without a golden report: corpus files over its size bound, inputs newer than the
    golden files."""
    manifest = make.read_manifest()
    fresh = [p for n, p in make.inputs().items()
             if n not in manifest["inputs"] and n not in manifest["refused"]]
    big = [make.CORPUS / n.removeprefix("corpus/") for n in make.corpus_left_out()]
    return [*fresh, *big]


def test_inputs_the_golden_reports_leave_out_have_no_negative_stage_time() -> None:
    paths = uncovered()
    walked = test_corpus_walk.results() if test_corpus_walk.results.cache_info().currsize else {}
    todo = [p for p in paths if p not in walked]
    with ThreadPoolExecutor(2) as pool:
        done = dict(zip(todo, pool.map(analyse, todo), strict=True))
    for path, result in walked.items():
        if path in paths:
            done[path] = (result.returncode, result.stdout)
    reports = {p: json.loads(out) for p, (status, out) in done.items() if status == 0}
    assert {str(p): negative_stage_times(r) for p, r in reports.items()
            if negative_stage_times(r)} == {}
    assert all(status in (0, 2) for status, _ in done.values())


GENERATED = [
    *((f"{s}", {"scenario": s}) for s in SCENARIOS),
    ("verl nsys layout, gpu", {"layout": {"workers": 3, "steps": 2, "seed": 5}}),
    ("verl nsys layout, cpu", {"layout": {"workers": 5, "steps": 3, "seed": 6, "gpu": False}}),
]


def disjoint(segments: pl.DataFrame) -> bool:
    reach = pl.col("end_ns").cum_max().shift(1).over("rank")
    ordered = segments.sort("rank", "start_ns")
    return ordered.filter(pl.col("start_ns") < reach).height == 0


@pytest.mark.parametrize("spec", [g[1] for g in GENERATED], ids=[g[0] for g in GENERATED])
def test_generator_runs_have_no_negative_stage_time(tmp_path: Path, spec: dict[str, Any]) -> None:
    if "scenario" in spec:
        generate(preset(spec["scenario"], 4, steps=2, seed=21), tmp_path, jobs=1)
        run = analyzer.load([tmp_path], use_cache=False)
    else:
        verl_nsys.write(verl_nsys.Layout(**spec["layout"]), tmp_path)
        run = analyzer.load([tmp_path / "verl_nsys.sqlite"], use_cache=False)
    assert run.breakdown.height > 0
    assert run.breakdown["time_ns"].min() >= 0
    assert disjoint(run.stage_timeline)
    other = run.breakdown.filter(pl.col("stage") == "other")
    assert other.height == run.breakdown.select(pl.struct("step", "rank").n_unique()).item()


def test_stage_ranges_crossing_on_one_rank_are_not_counted_twice(tmp_path: Path) -> None:
    """Three threads of rank 0: ``update_actor`` [0, 10) µs, ``generate_sequences`` [5, 15),
    ``compute_log_prob`` [12, 20). Before, the walk by depth gave both of the last two [12, 15):
    23 µs of stages in a 20 µs span and ``other`` = -3 µs. Each instant now goes to the range
    that started last: 5 + 7 + 8 µs, ``other`` 0."""
    path = write(tmp_path / "rank0.json", [
        x("user_annotation", "ProfilerStep#1", 0, 100),
        x("user_annotation", "update_actor", 0, 10, tid=1),
        x("user_annotation", "generate_sequences", 5, 10, tid=2),
        x("user_annotation", "compute_log_prob", 12, 8, tid=3),
        x("cpu_op", "aten::mm", 1, 2),
    ])
    run = analyzer.load([path], use_cache=False)
    got = {str(r["stage"]): r["time_ns"] for r in run.breakdown.iter_rows(named=True)}
    assert got == {"actor_update": 5_000, "rollout": 7_000, "old_logprob": 8_000, "other": 0}
    assert disjoint(run.stage_timeline)


def brute_owners(ranges: pl.DataFrame) -> dict[tuple[int, int], int]:
    """(rank, instant) → the range owning it: of those covering it, the latest started, then
    the shorter, then the later row (the higher id)."""
    out = {}
    for rank, start, end, rid in ranges.select("rank", "start_ns", "end_ns", "_id").iter_rows():
        for t in range(start, end):
            best = out.get((rank, t))
            key = (start, -end, rid)
            if best is None or key > best[0]:
                out[(rank, t)] = (key, rid)
    return {k: v[1] for k, v in out.items()}


def test_owners_gives_every_instant_to_the_latest_started_range() -> None:
    rng = np.random.default_rng(12)
    for _ in range(150):
        n = int(rng.integers(1, 14))
        start = rng.integers(0, 40, n)
        ranges = pl.DataFrame({
            "_id": np.arange(n, dtype=np.uint32),
            "rank": rng.integers(-1, 2, n).astype(np.int32),
            "start_ns": start.astype(np.int64),
            "end_ns": (start + rng.integers(0, 25, n)).astype(np.int64),
        })
        pieces = innermost.owners(ranges)
        assert disjoint(pieces)
        got = {(r, t): i for i, r, s, e in pieces.iter_rows() for t in range(s, e)}
        assert got == brute_owners(ranges)
        touching = pieces.with_columns(
            (pl.col("start_ns") == pl.col("end_ns").shift(1).over("rank")).alias("t"),
            (pl.col("_id") == pl.col("_id").shift(1).over("rank")).alias("same"),
        )
        assert touching.filter(pl.col("t") & pl.col("same")).height == 0, "pieces not maximal"


def test_nested_ranges_keep_the_depth_walks_answer() -> None:
    """Where ranges nest (one stack per rank), the timeline is the depth walk's, unchanged."""
    ranges = pl.DataFrame({
        "rank": [0, 0, 0, 0, 1, 1],
        "start_ns": [0, 2, 3, 8, 0, 0],
        "end_ns": [10, 6, 5, 9, 4, 2],
        "depth": [0, 1, 2, 1, 0, 1],
        "stage": ["rollout", "weight_sync", "reward", "rollout", "actor_update", "values"],
    }).with_columns(pl.lit(None, pl.String).alias("role"), pl.lit(1).alias("step"),
                    pl.col("stage").alias("name"), pl.lit(False).alias("inferred"))
    got = timeline(ranges).select("rank", "start_ns", "end_ns", pl.col("stage").cast(pl.String))
    assert got.rows() == [
        (0, 0, 2, "rollout"), (0, 2, 3, "weight_sync"), (0, 3, 5, "reward"),
        (0, 5, 6, "weight_sync"), (0, 6, 8, "rollout"), (0, 8, 9, "rollout"),
        (0, 9, 10, "rollout"), (1, 0, 2, "values"), (1, 2, 4, "actor_update"),
    ]
    keyed = ranges.with_row_index("_id")
    owned = innermost.owners(keyed).join(keyed.select("_id", "stage"), on="_id")
    pieces = owned.select("rank", "start_ns", "end_ns", pl.col("stage"))
    assert pieces.sort("rank", "start_ns").rows() == got.rows()
    assert intervals.union_length(owned, by=["rank"]).sort("rank")["length_ns"].to_list() == [10, 4]
