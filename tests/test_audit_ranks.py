"""``rlperf audit --baseline``: a baseline of other ranks. HolisticTraceAnalysis's sampled
rank 1 alone against the report of the pair it is one of (2 of 128 ranks): its exposed
communication, summed over ranks, is not 52.9% better, it is half the ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import analyzer
from analyzer.ops import audit
from analyzer.report import json as json_report

HTA = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "HolisticTraceAnalysis"
PAIR = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]

pytestmark = pytest.mark.skipif(not HTA.is_dir(), reason="the shared corpus is not here")


@pytest.fixture(scope="module")
def outcomes() -> dict[str, audit.Outcome]:
    baseline, document = (
        json.loads(json_report.render(analyzer.load(paths))) for paths in (PAIR, PAIR[1:])
    )
    result = audit.audit(document, audit.regression_checks(baseline), baseline)
    return {o.check.path.text: o for o in result.outcomes}


def test_a_value_summed_over_ranks_is_not_compared_with_other_ranks(outcomes) -> None:
    """636 ms over 2 ranks against 299 ms over 1 passed as −52.9%; now it fails (the check's
    default for a value it cannot read) and says why."""
    exposed = outcomes["overview.exposed_comm_ns"]
    assert exposed.baseline == pytest.approx(635_528_000)
    assert exposed.value == pytest.approx(299_495_000, rel=1e-3)
    assert exposed.status == "fail"
    assert exposed.message == (
        "not comparable: the run has 1 rank, the baseline 2, and the value is summed over ranks"
    )


def test_every_other_comparison_says_the_ranks_differ(outcomes) -> None:
    """Idle of all devices, 53.2% against 54.9%, still passes, with the ranks named."""
    idle = outcomes["overview.idle_fraction"]
    assert idle.status == "pass"
    assert idle.value == pytest.approx(0.532, abs=5e-4)
    assert idle.baseline == pytest.approx(0.549, abs=5e-4)
    assert idle.message == "the run has 1 rank, the baseline 2"
