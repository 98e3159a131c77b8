"""The data-parallel guidelines judge data-parallel work only.

HTA's sampled pair under ``--layout tp=2`` has only tensor-parallel collectives (2 ranks, no DP
degree left), and G14 still asked to balance "DP ranks" (13.1%, saving 23.2 ms a step) while G16
counted the TP all-reduces as exposed DP communication (21.3%).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from conftest import CORPUS

import analyzer
from taxonomy.vocab import TRAIN_STAGES

SAMPLED = [CORPUS / "HolisticTraceAnalysis" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
COLOCATED = Path(__file__).resolve().parents[1] / "sample_traces" / "synthetic" / "colocated"


def _guideline(run: analyzer.Run, gid: str) -> dict:
    return run.violations.filter(pl.col("id") == gid).row(0, named=True)


def _update_calls(run: analyzer.Run, dims: set[str]) -> int:
    """Collective calls of ``dims`` inside the update stages of a step, counted from the
    collectives table (the guideline reads the activity table)."""
    calls = run.collectives.filter(
        pl.col("dim").cast(pl.String).is_in(sorted(dims))
        & pl.col("stage").cast(pl.String).is_in(list(TRAIN_STAGES))
        & pl.col("step").is_not_null()
    )
    return calls.select("rank", "start_ns", "end_ns").unique().height


def test_a_layout_of_tensor_parallel_ranks_has_no_dp_guideline_to_break() -> None:
    plain = analyzer.load(SAMPLED)
    assert _guideline(plain, "G14")["status"] == "violated"
    plain_g16 = _guideline(plain, "G16")
    assert plain_g16["value"] > 0.1 and "left out" not in plain_g16["evidence"]

    tp = analyzer.load(SAMPLED, options=analyzer.Options(layout="tp=2"))
    assert set(tp.collectives["dim"].cast(pl.String)) == {"tp"}
    g14 = _guideline(tp, "G14")
    assert g14["status"] == "not_evaluated"
    assert g14["evidence"] == ("needs DP groups (the collectives are tp, none DP: ranks of other "
                               "dimensions do different or identical work by design)")
    g16 = _guideline(tp, "G16")
    left_out = _update_calls(tp, {"tp"})
    assert left_out == 13
    assert g16["value"] == 0 and g16["status"] == "passed"
    assert (f"{left_out} collective calls of tp left out; no DP/FSDP collectives inside the "
            "updates") in g16["evidence"]


def test_sequence_parallel_all_to_alls_are_not_dp_communication() -> None:
    """The generator's colocated run: FSDP over 8 ranks with Ulysses SP 2, whose all-to-alls in
    the update are not what G16 asks to overlap."""
    run = analyzer.load([COLOCATED])
    g16 = _guideline(run, "G16")
    sp = _update_calls(run, {"sp"})
    assert sp == 128
    assert f"{sp} collective calls of sp left out" in g16["evidence"]
    assert _update_calls(run, {"tp", "pp", "cp", "ep"}) == 0
