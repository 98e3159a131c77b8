"""One number per concept: every weight-sync number of the disaggregated sample's report has its
own name, the headline equals its definition computed here from the raw traces, and leaving the
warm-up step out of a log's summary names the stage a steady step spends most on."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

import analyzer
from analyzer.report.sections import logs as log_section
from analyzer.report.sections import outliers as outlier_section
from analyzer.report.sections import sync as sync_section
from tests.test_outliers import _raw_steps

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "runs"
DISAGG = SAMPLES / "verl_ppo_disaggregated"
WARM_LOG = SAMPLES / "verl_ppo_colocated_nsys" / "logs" / "verl_console.log"
VERL_STAGE = {"gen": "rollout", "reward": "reward", "old_log_prob": "old_logprob",
              "ref": "ref_logprob", "values": "values", "adv": "advantage",
              "update_critic": "critic_update", "update_actor": "actor_update",
              "update_weights": "weight_sync", "save_checkpoint": "checkpoint",
              "testing": "evaluation"}


@pytest.fixture(scope="module")
def disagg() -> analyzer.Run:
    return analyzer.load([DISAGG])


def _percent_after(label: str, text: str) -> float:
    found = re.search(re.escape(label) + r"[^%]*?(\d+(?:\.\d+)?)%", text)
    assert found, label
    return float(found[1]) / 100


def test_each_weight_sync_number_has_its_own_name(disagg) -> None:
    sync = sync_section.section(disagg)
    logs = log_section.section(disagg)
    assert sync is not None and logs is not None
    names = [sync_section.HEADLINE, sync_section.PER_STEP, sync_section.LOG_TIMER]
    assert len(set(names)) == len(names)
    overview = disagg.overview.filter(pl.col("metric") == "weight_sync_share")["value"][0]
    assert _percent_after(sync_section.HEADLINE, sync.note) == pytest.approx(overview, abs=5e-4)
    per_step = dict(
        (int(s), float(p) / 100)
        for s, p in re.findall(r"step (\d+) [\d.]+ ms = ([\d.]+)%", sync.note)
    )
    expected = dict(disagg.weight_sync.select("step", "share").iter_rows())
    assert per_step == pytest.approx(expected, abs=5e-4)
    log_share = disagg.log_weight_sync["share"][0]
    assert _percent_after(sync_section.LOG_TIMER, sync.note) == pytest.approx(log_share, abs=5e-4)
    assert "log weight-sync timer share of the log's step time" in logs.note
    assert _percent_after("log weight-sync timer share", logs.note) == pytest.approx(
        log_share, abs=5e-4
    )
    # no bare "weight sync: N%" left that does not say which number it is
    assert not re.search(r"weight sync: \d", sync.note + logs.note)


def _ranges(path: Path, name: str) -> list[tuple[int, int]]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    base = doc.get("baseTimeNanoseconds", 0)
    return [
        (base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
        for e in doc["traceEvents"]
        if e.get("name") == name and e.get("ph") == "X"
    ]


def _union_within(spans: list[tuple[int, int]], lo: int, hi: int) -> int:
    cut = sorted((max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi)
    total, end = 0, lo
    for a, b in cut:
        a = max(a, end)
        if b > a:
            total, end = total + b - a, b
    return total


def test_the_headline_weight_sync_share_is_its_definition(disagg) -> None:
    """Σ over steps of the time some rank (or the controller) is inside a weight-sync range
    (``update_weights``), within the step window, ÷ Σ step time; the ranges read from the raw
    Kineto files here, the step windows those the report's step time is made of."""
    spans = [s for f in sorted(DISAGG.glob("profile/**/*.json.gz"))
             for s in _ranges(f, "update_weights")]
    windows = disagg.steps.select("start_ns", "end_ns").rows()
    syncing = sum(_union_within(spans, a, b) for a, b in windows)
    expected = syncing / sum(b - a for a, b in windows)
    headline = disagg.overview.filter(pl.col("metric") == "weight_sync_share")["value"][0]
    assert headline == pytest.approx(expected, rel=0.01)
    assert headline == pytest.approx(0.097, abs=0.001)


def _dominant(stages: pl.DataFrame) -> str:
    return stages.group_by("stage").agg(pl.col("s").sum()).sort("s", descending=True)["stage"][0]


def test_leaving_out_the_warm_up_step_names_the_steady_dominant_stage() -> None:
    raw = _raw_steps(WARM_LOG)
    # this verl version times checkpoint and validation outside timing_s/step: a step's wall
    # time is the three together
    wall = (
        raw.filter(pl.col("key").is_in(["step", "save_checkpoint", "testing"]))
        .group_by("step").agg(pl.col("s").sum()).sort("step")
    )
    median = wall["s"].median()
    mad = (wall["s"] - median).abs().median()
    first = wall.row(0, named=True)
    assert first["s"] > median + 3 * max(1.4826 * mad, 0.01 * median)  # the first step is slow
    stages = raw.filter(pl.col("key").is_in(list(VERL_STAGE))).with_columns(
        pl.col("key").replace_strict(VERL_STAGE).alias("stage")
    )
    with_warmup = _dominant(stages)
    steady = _dominant(stages.filter(pl.col("step") != first["step"]))
    assert steady != with_warmup

    run = analyzer.load([WARM_LOG])
    assert run.log_dominant["stage"][0] == steady
    assert run.log_steps.filter(pl.col("warmup"))["step"].to_list() == [first["step"]]
    assert run.log_steps.height == wall.height  # kept in the per-step table
    rest = wall.filter(pl.col("step") != first["step"])["s"]
    assert run.log_stats["median_s"][0] == pytest.approx(rest.median())
    ratio = first["s"] / rest.median()
    said = f"step {first['step']} excluded as warm-up: {ratio:.1f}× the median"
    assert said in log_section.section(run).note
    assert any(said in n for n in outlier_section.warmup_notes(run.step_outliers))
