"""Tests that kill surviving mutants of the report sections and headline numbers
(analyzer/report/sections/, analyzer/analyses/overview.py; docs/mutation.md).

The sections' headers are the report's contract (docs/reports.md): a column whose key is not in
its frame prints empty, a duration shown without its format prints raw nanoseconds, a missing
title prints "None". The headline idle fractions are checked against the synthetic generator's
own truth (sample_traces/synth, no analyzer code), which they equal to rounding.
"""

from __future__ import annotations

import json
from functools import cache

import polars as pl
import pytest

import analyzer
from analyzer.analyses.overview import _ratio
from analyzer.model.run import Run
from analyzer.report.sections import sections
from parsers.events import empty_events
from sample_traces.synth.samples import ROOT

DISAGGREGATED = ROOT / "disaggregated"

HEADERS = {
    "data_quality": [
        ("file", "file", "text"),
        ("title", "problem", "text"),
        ("count", "count", "number"),
        ("detail", "detail", "text"),
    ],
    "gpu_time": [
        ("rank", "rank", "text"),
        ("gpu_window_ns", "GPU window", "duration"),
        ("busy_ns", "busy", "duration"),
        ("idle_ns", "idle", "duration"),
        ("idle_fraction", "idle %", "percent"),
        ("comm_ns", "comm", "duration"),
        ("compute_ns", "compute", "duration"),
        ("overlap_fraction", "comm overlapped", "percent"),
    ],
    "annotations": [
        ("rank", "rank", "text"),
        ("name", "annotation", "text"),
        ("count", "count", "text"),
        ("time_ns", "time", "duration"),
        ("share", "share of trace", "percent"),
    ],
    "breakdown": [
        ("step", "step", "text"),
        ("stage", "stage", "text"),
        ("ranks", "ranks", "number"),
        ("mean_ns", "mean", "duration"),
        ("max_ns", "max", "duration"),
        ("max_rank", "slowest rank", "text"),
        ("share", "max share of step", "percent"),
        ("critical_ns", "on critical path", "duration"),
    ],
    "sync": [
        ("dim", "dim", "text"),
        ("coll", "collective", "text"),
        ("count", "count", "number"),
        ("bytes", "bytes", "bytes"),
        ("time_ns", "time", "duration"),
        ("exposed_ns", "exposed", "duration"),
        ("wait_ns", "wait", "duration"),
        ("transfer_ns", "transfer", "duration"),
        ("busbw_gbps", "bus bw", "bandwidth"),
    ],
    "workdepth": [
        ("step", "step", "text"),
        ("step_ns", "step time", "duration"),
        ("work_ns", "work W (device time)", "duration"),
        ("depth_ns", "depth D", "duration"),
        ("parallelism", "W/D", "number"),
        ("async_overlap_bound", "async overlap ×", "number"),
        ("no_tail_step_ns", "step w/o rollout tail", "duration"),
        ("balanced_dp_step_ns", "step w/ balanced DP", "duration"),
    ],
}


@cache
def disaggregated() -> Run:
    return analyzer.load(sorted(DISAGGREGATED.glob("*.gz")), use_cache=False)


@pytest.mark.parametrize("key", sorted(HEADERS))
def test_each_section_has_its_documented_headers_and_every_column_is_in_its_frame(key: str) -> None:
    found = {s.key: s for s in sections(disaggregated())}
    section = found[key]
    assert [(c.name, c.title, c.format) for c in section.columns] == HEADERS[key]
    assert section.frame is not None and section.frame.height > 0
    assert {c.name for c in section.columns} <= set(section.frame.columns)


def test_headline_idle_fractions_are_the_generators_per_pool() -> None:
    """idle / window summed over every (device, step) of the pool, from truth.json's devices."""
    truth = json.loads((DISAGGREGATED / "truth.json").read_text(encoding="utf-8"))

    def fraction(ranks: set[int]) -> float:
        rows = [d for d in truth["devices"] if d["rank"] in ranks]
        return sum(sum(d["idle_ns"].values()) for d in rows) / sum(d["window_ns"] for d in rows)

    pools = truth["config"]["pools"]
    got = dict(disaggregated().overview.select("metric", "value").iter_rows())
    assert got["trainer_idle_fraction"] == pytest.approx(fraction(set(pools["train"])), rel=1e-12)
    assert got["rollout_idle_fraction"] == pytest.approx(fraction(set(pools["rollout"])), rel=1e-12)
    assert got["idle_fraction"] == pytest.approx(fraction(set(range(8))), rel=1e-12)
    assert got["gpu_busy_ns"] == sum(d["busy_ns"] for d in truth["devices"])


def test_a_product_without_the_columns_a_headline_needs_leaves_that_headline_empty() -> None:
    """Products injected into a run (a test, a run rebuilt from a report) need not hold every
    column; the headline built on a missing one is unknown, not a crash or a number."""
    run = Run(sources=[], events=empty_events(), metrics=pl.DataFrame())
    run.inject(
        gpu_time=pl.DataFrame({"rank": [0], "gpu_window_ns": [100]}),
        collectives_by_dim=pl.DataFrame({"dim": ["dp"]}),
        bubbles=pl.DataFrame({"step": [1], "rank": [0], "idle_ns": [5]}),
    )
    got = dict(run.overview.select("metric", "value").iter_rows())
    assert [
        got[k] for k in ("gpu_busy_ns", "gpu_idle_fraction", "exposed_comm_ns", "idle_fraction")
    ] == [None] * 4


def test_an_idle_fraction_of_no_window_is_unknown_not_a_division_by_zero() -> None:
    assert _ratio(pl.DataFrame({"window_ns": [0, 0], "idle_ns": [0, 0]})) is None
    assert _ratio(pl.DataFrame({"window_ns": [300, 100], "idle_ns": [100, 0]})) == 0.25
