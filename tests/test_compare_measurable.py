"""``rlperf compare``: a value the run cannot measure is – (null) and never wins, where a 0 won.

The runs: HolisticTraceAnalysis's sampled pair (2 of 128 ranks) and its rank-0 file alone (no
partner to wait for), rl-insight's run 1 (one cpu_op, no device work), alpa's report2 (its
Nsight Systems did not support the driver: kernels may be missing; no kernel recorded) and the
trl_grpo sample run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from report_truth import RUNS

import analyzer
from analyzer.ops.compare import compare

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
HTA = CORPUS / "HolisticTraceAnalysis"
PAIR = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
ALPA = CORPUS / "alpa" / "report2.nsys-rep"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


def rows(runs: list, labels: list[str]) -> dict[str, dict]:
    return {r["metric"]: r for r in compare(runs, labels).table.iter_rows(named=True)}


@pytest.fixture(scope="module")
def hta() -> dict[str, dict]:
    return rows([analyzer.load(PAIR), analyzer.load(PAIR[:1])], ["pair", "single"])


def test_one_rank_has_no_sync_wait(hta) -> None:
    """The pair waits 0.4% of its windows for each other; one rank alone has no partner in the
    trace to wait for: –, where its 0.0% won."""
    wait = hta["idle.sync_wait"]
    assert wait["pair"] == pytest.approx(0.003986, abs=1e-6)
    assert wait["single"] is None and wait["winner"] is None


def test_shares_a_fraction_of_a_point_apart_tie(hta) -> None:
    """Stage gaps of 0.018% and 0.020% (both shown 0.0%) are 0.002 points apart, within 0.5
    points: a tie, where the pair won by 0.5% of its own 0.018%."""
    gap = hta["idle.stage_gap"]
    assert gap["pair"] == pytest.approx(0.000182, abs=1e-6)
    assert gap["single"] == pytest.approx(0.000202, abs=1e-6)
    assert gap["winner"] == "tie"


def test_no_device_work_has_no_exposed_communication() -> None:
    """rl-insight's run 1 records one cpu_op and no device work: its overview's exposed
    communication is null (–), as run 2's (one runtime call) is, where it read 0 ns."""
    run = analyzer.load([CORPUS / "rl-insight"], run=1)
    assert run.activity.filter(run.activity["kind"] == "kernel").height == 0
    values = dict(run.overview.select("metric", "value").iter_rows())
    assert values["exposed_comm_ns"] is None


@pytest.mark.skipif(shutil.which("nsys") is None, reason="reading .nsys-rep needs nsys")
def test_kernels_that_may_be_missing_do_not_win_exposed_communication() -> None:
    """alpa's report2 (no kernel recorded, its Nsight did not support the driver) read 0 ns and
    won against trl_grpo's 94.7 ms, overall and in the all-ranks group."""
    alpa = analyzer.load([ALPA])
    assert any("kernels may be missing" in w for w in alpa.warnings)
    found = rows([alpa, analyzer.load([RUNS / "trl_grpo"])], ["alpa", "trl"])
    total = found["overview.exposed_comm_ns"]
    assert total["alpa"] is None and total["trl"] == pytest.approx(94_713_263)
    assert total["winner"] is None
    assert not [m for m, r in found.items() if m.startswith("exposed.") and r["alpa"] is not None]
