"""``--ranks`` reaches every product after assembly (docs/assembly.md): the GPU time and
annotation tables, the overview's rank count and GPU busy, and the report's first line, which
once said the selected rank's idle beside both ranks' GPU busy (1.13 s = 548 + 580 ms)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from report_truth import cli

import analyzer
from analyzer.model.options import Options

HTA = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "HolisticTraceAnalysis"
PAIR = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]


def test_the_selected_ranks_are_the_only_ones_in_the_gpu_and_annotation_tables() -> None:
    both = analyzer.load(PAIR, use_cache=False)
    one = analyzer.load(PAIR, use_cache=False, options=Options.checked(ranks="1"))
    assert both.gpu_time["rank"].to_list() == [0, 1]
    assert one.gpu_time["rank"].to_list() == [1]
    assert one.gpu_time.row(0) == both.gpu_time.filter(pl.col("rank") == 1).row(0)
    assert set(one.annotations["rank"]) == {1}
    assert one.annotations.height == both.annotations.filter(pl.col("rank") == 1).height
    overview = dict(one.overview.select("metric", "value").iter_rows())
    assert overview["ranks"] == 1
    assert overview["gpu_busy_ns"] == both.gpu_time.filter(pl.col("rank") == 1)["busy_ns"].item()
    assert overview["gpu_busy_ns"] == 580_050_000
    assert one.ranks == [0, 1]  # the run's ranks, which --ranks is checked against


def test_the_first_line_says_which_ranks_are_analysed() -> None:
    done = cli("analyze", *map(str, PAIR), "--ranks", "1", "-q", "--no-cache")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "rlperf — 2 sources, 2 ranks (rank 1 analysed)"
    report = json.loads(cli("analyze", *map(str, PAIR), "--ranks", "1", "-q", "-f", "json",
                            "--no-cache").stdout)
    assert [r["rank"] for r in report["gpu_time"]] == [1]


def test_steps_say_that_the_whole_trace_tables_are_not_narrowed() -> None:
    """nccl_data, --steps 5: the GPU time (158 ms busy over 661 ms) stays the whole trace's,
    and the report says so under both tables rather than beside a step-5 W of 49.7 ms."""
    trace = HTA / "nccl_data.json.gz"
    done = cli("analyze", str(trace), "--steps", "5", "-q", "--no-cache", "--width", "400")
    assert done.returncode == 0, done.stderr
    assert ("As in HTA's breakdown, each rank's whole trace: --steps does not narrow this table "
            "(nor the overview's GPU busy and GPU idle).") in done.stdout
    assert "Each rank's whole trace: --steps does not narrow this table." in done.stdout
    plain = cli("analyze", str(trace), "-q", "--no-cache", "--width", "400")
    assert "does not narrow" not in plain.stdout


def test_steps_reach_a_logs_timers_and_metrics() -> None:
    """verl's log, --steps 130: the checkpoint-and-evaluation share is step 130's (19.36 s of
    checkpoint and 7.11 s of testing in a 37.60 s step, 70.4%), not the 335 steps' 20.0%, and
    the MFU is the mean over that one step."""
    log = HTA.parent / "logs" / "verl"
    run = analyzer.load([log], use_cache=False, options=Options.checked(steps="130"))
    assert run.log_steps["step"].to_list() == [130]
    assert run.metrics["step"].drop_nulls().unique().to_list() == [130]
    g23 = run.violations.filter(pl.col("id") == "G23").row(0, named=True)
    assert g23["value"] == pytest.approx((19.363 + 7.113) / 37.603, abs=1e-3)
    assert "(timing_s/save_checkpoint, timing_s/testing), 1 step)" in g23["evidence"]
    whole = analyzer.load([log], use_cache=False)
    assert whole.log_steps.height == 335
