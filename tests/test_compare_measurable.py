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


def test_a_number_summed_over_ranks_is_not_won_by_having_fewer_ranks(hta) -> None:
    """Rank 0 alone has 336 ms of exposed communication, the pair 636 ms (rank 0's plus rank
    1's): fewer ranks is not less exposure. Between 2 and 1 ranks every rank-summed number is
    'not comparable' and counts in no run's wins; per-rank shares still compare."""
    exposed = hta["overview.exposed_comm_ns"]
    assert (exposed["pair"], exposed["single"]) == pytest.approx((635.528e6, 336.033e6), rel=1e-5)
    assert exposed["winner"] == "not comparable (2 vs 1 ranks)"
    summed = {m: r["winner"] for m, r in hta.items()
              if m.startswith("exposed.") and r["winner"] is not None}
    assert summed == {"exposed.unknown": "not comparable (2 vs 1 ranks)"}
    result = compare([analyzer.load(PAIR), analyzer.load(PAIR[:1])], ["pair", "single"])
    won = {t for titles in result.wins().values() for t in titles}
    assert not won & {"exposed communication", "exposed comm (group unknown)"}
    assert hta["idle.host_bound"]["winner"] == "pair"


def test_runs_of_one_rank_count_still_have_a_winner_for_summed_numbers() -> None:
    """Rank 1's 299 ms against rank 0's 336 ms: one rank each, so the lower sum wins."""
    same = rows([analyzer.load(PAIR[:1]), analyzer.load(PAIR[1:])], ["rank0", "rank1"])
    assert same["overview.exposed_comm_ns"]["rank1"] == pytest.approx(299.495e6, rel=1e-5)
    assert same["overview.exposed_comm_ns"]["winner"] == "rank1"
