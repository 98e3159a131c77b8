"""``--ranks`` narrows what is reported (docs/cli.md): the GPU time and annotation tables, the
overview's rank count and GPU busy, and the report's first line, which once said the selected
rank's idle beside both ranks' GPU busy (1.13 s = 548 + 580 ms); the cross-rank products still
see every rank, so a selected rank's figures are those of the run without ``--ranks``."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from report_truth import cli

import analyzer
from analyzer.engines.local import LocalEngine
from analyzer.engines.per_rank import DatasetShards, sharded
from analyzer.model import products
from analyzer.model.options import Options
from analyzer.model.products import provides
from tests.test_per_rank import ingested

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


def test_the_ranks_analysed_are_one_product() -> None:
    """What the overview counts, the GPU-time section's "not shown" and the first line read."""
    assert analyzer.load(PAIR, use_cache=False).selected_ranks == [0, 1]
    one = analyzer.load(PAIR, use_cache=False, options=Options.checked(ranks="1-5"))
    assert one.selected_ranks == [1] and one.ranks == [0, 1]


@pytest.fixture
def rows_per_rank(monkeypatch: pytest.MonkeyPatch) -> str:
    """A rank-local product declared as a new one would be, reading nothing but its events."""
    monkeypatch.setattr(products, "_PROVIDERS", dict(products._PROVIDERS))

    @provides("_rows_per_rank", per_rank=True)
    def rows(events: pl.DataFrame) -> pl.DataFrame:
        return events.group_by("rank", maintain_order=True).len().sort("rank")

    return "_rows_per_rank"


def test_a_new_rank_local_product_gets_the_selected_ranks_events(rows_per_rank: str) -> None:
    """Its provider does nothing about --ranks: the run gives it rank 1's events (1 rank of
    the pair's 2), while the data-quality products still read both ranks' files."""
    both = analyzer.load(PAIR, use_cache=False)
    one = analyzer.load(PAIR, use_cache=False, options=Options.checked(ranks="1"))
    assert both.product(rows_per_rank)["rank"].to_list() == [0, 1]
    assert one.product(rows_per_rank).rows() == both.product(rows_per_rank).filter(
        pl.col("rank") == 1).rows()
    assert set(one.event_names["rank"]) == {0, 1}
    assert_frame_equal(one.event_names, both.event_names)


def test_a_dataset_run_selects_the_ranks_in_its_rank_calls(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, rows_per_rank: str
) -> None:
    """Read from a dataset, the products come from one call per rank partition: the same
    selection, applied in the same place, gives the same tables as the sources' run."""
    ds = ingested(capsys, tmp_path, "HTA sampled ranks 0 and 1")
    options = Options.checked(ranks="1")
    run = sharded(analyzer.load([ds], options=options), [ds], LocalEngine())
    assert isinstance(run.shards, DatasetShards) and len(run.shards.partitions) == 2
    direct = analyzer.load(PAIR, use_cache=False, options=options)
    for name in ("gpu_time", "annotations", "event_names", "event_checks", rows_per_rank):
        assert_frame_equal(run.product(name), direct.product(name), check_exact=True)
    assert run.gpu_time["rank"].to_list() == run.product(rows_per_rank)["rank"].to_list() == [1]
    assert set(run.event_names["rank"]) == {0, 1}
    assert len(run.shards.ran) == 2


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


COLOCATED = Path(__file__).resolve().parents[1] / "sample_traces" / "runs" / "verl_grpo_colocated"
SYNC_SUMS = ("count", "time_ns", "exposed_ns", "wait_ns", "transfer_ns")


def _json(*args: str) -> dict:
    done = cli("analyze", *args, "-q", "-f", "json", "--no-cache")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _sync_sums(report: dict) -> dict[tuple[str, str], tuple[int, ...]]:
    return {(r["dim"], r["coll"]): tuple(r[k] for k in SYNC_SUMS) for r in report["sync"]}


@pytest.mark.parametrize("paths", [PAIR, [COLOCATED]], ids=["hta_pair", "verl_grpo_colocated"])
def test_a_selected_ranks_figures_are_its_figures_in_the_whole_run(paths: list[Path]) -> None:
    """Waits, collectives and step windows are every rank's whatever --ranks selects (a rank
    waits for partners not selected): each rank's idle row is the unselected run's, the
    collectives table of each rank adds up to the whole run's, and the stragglers of a
    selection are the run's rows of its ranks. The HTA pair's rank 0 once showed 0 ns of sync
    wait, 396 ms of transfer and 548 ms productive; it waits 9.88 ms for rank 1."""
    args = list(map(str, paths))
    whole = _json(*args)
    alone = {r: _json(*args, "--ranks", str(r)) for r in (0, 1)}
    for rank, report in alone.items():
        assert report["bubbles"] == [b for b in whole["bubbles"] if b["rank"] == rank]
    parts = [_sync_sums(alone[0]), _sync_sums(alone[1])]
    assert parts[0].keys() == parts[1].keys() == _sync_sums(whole).keys() != set()
    for key, total in _sync_sums(whole).items():
        assert tuple(map(sum, zip(parts[0][key], parts[1][key], strict=True))) == total, key
    both = analyzer.load(paths, use_cache=False)
    for rank in (0, 1):
        one = analyzer.load(paths, use_cache=False, options=Options.checked(ranks=str(rank)))
        assert_frame_equal(one.stragglers, both.stragglers.filter(pl.col("rank") == rank))
    if paths == PAIR:
        rank0 = alone[0]["bubbles"][0]
        assert (rank0["sync_wait"], rank0["productive_ns"]) == (9_882_000, 537_774_000)
        # its 10 SendRecv kernels are all_gather, all_reduce and all_to_all calls (their host
        # ranges, tests/test_collective_kinds.py): 396.199 ms, 336.033 exposed, 9.882 waited
        assert {k: v for k, v in parts[0].items() if v[0]} == {
            ("dp", "all_gather"): (2, 106_140_000, 106_140_000, 1_376_000, 104_764_000),
            ("dp", "all_reduce"): (4, 107_656_000, 68_430_000, 3_907_000, 103_749_000),
            ("unknown", "all_to_all"): (4, 182_403_000, 161_463_000, 4_599_000, 177_804_000),
        }
        assert both.stragglers.rows() == [(1, 9_882_000, 5)]


def test_a_report_does_not_say_an_unselected_rank_has_no_kernels(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Each rank of the HTA pair ran 10 NCCL kernels; the idle section once told --ranks 0 that
    rank 1 "has no kernels, copies or memsets (a CPU-only capture)", and the reverse. Read from
    a dataset, the selected rank's figures are the same."""
    for rank in (0, 1):
        done = cli("analyze", *map(str, PAIR), "--ranks", str(rank), "-q", "--no-cache",
                   "--width", "400")
        assert done.returncode == 0, done.stderr
        assert "Idle time by cause" in done.stdout
        assert "no kernels" not in done.stdout
    ds = ingested(capsys, tmp_path, "HTA sampled ranks 0 and 1")
    via = _json(str(ds), "--ranks", "0")
    direct = _json(*map(str, PAIR), "--ranks", "0")
    assert via["bubbles"] == direct["bubbles"] and via["bubbles"][0]["sync_wait"] == 9_882_000
    assert via["sync"] == direct["sync"]
