"""``--ranks`` reaches every product after assembly (docs/assembly.md): the GPU time and
annotation tables, the overview's rank count and GPU busy, and the report's first line, which
once said the selected rank's idle beside both ranks' GPU busy (1.13 s = 548 + 580 ms)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
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
