"""Placement and execution mode, inferred from which ranks run which stages when, on every
sample run (real CPU runs and synthetic GPU-shaped runs) against the configuration the ground
truth records; and the run summary section that reports them."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from test_assemble import (
    CPU_SCENARIOS,
    SYNTHETIC,
    sample_run,
    synth_dir,  # noqa: F401  (fixture)
    synth_run,
    truth_of,
)

from analyzer.classify.placement import infer_placement
from analyzer.model import frames
from analyzer.report.sections.placement import section
from taxonomy.vocab import EXECUTION_MODES, PLACEMENTS


@pytest.mark.parametrize("name", CPU_SCENARIOS)
def test_cpu_runs(name: str) -> None:
    facts, cfg = sample_run(name).placement, truth_of(name)["config"]
    assert (facts["placement"], facts["execution"]) == (cfg["placement"], cfg["execution"]), facts[
        "evidence"
    ]
    assert facts["placement"] in PLACEMENTS and facts["execution"] in EXECUTION_MODES
    assert len(facts["evidence"]) >= 2


@pytest.mark.parametrize("scenario", SYNTHETIC)
def test_synthetic_runs(synth_dir: Path, scenario: str) -> None:  # noqa: F811
    run, t = synth_run(synth_dir, scenario)
    facts = run.placement
    assert (facts["placement"], facts["execution"]) == (
        t["config"]["placement"],
        t["config"]["execution"],
    ), facts["evidence"]
    assert facts["pools"]["rollout"] == (
        t["config"]["pools"]["rollout"] if t["config"]["placement"] == "disaggregated" else []
    )


def ranges(rows: list[tuple[int, str, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "rank": r,
                "step": 1,
                "stage": s,
                "role": None,
                "name": s,
                "start_ns": a,
                "end_ns": b,
                "depth": 0,
                "inferred": False,
                "confidence": 1.0,
            }
            for r, s, a, b in rows
        ]
    ).cast(frames.STAGE_RANGES)


def pools(assign: dict[int, str]) -> pl.DataFrame:
    return pl.DataFrame(
        {"rank": list(assign), "pool": list(assign.values()), "host": "h", "device": 0}
    ).cast(frames.POOLS)


def test_split_placement_actor_and_critic_on_disjoint_ranks() -> None:
    rows = [(r, "rollout", 0, 100) for r in range(4)] + [
        (0, "actor_update", 200, 300),
        (1, "actor_update", 200, 300),
        (2, "critic_update", 200, 290),
        (3, "critic_update", 200, 290),
    ]
    facts = infer_placement(pools(dict.fromkeys(range(4), "shared")), ranges(rows))
    assert facts["placement"] == "split" and "disjoint" in facts["evidence"][0]


def test_async_when_weights_land_during_generation() -> None:
    rows = [(0, "rollout", 0, 1000), (0, "weight_sync", 400, 450), (1, "actor_update", 100, 900)]
    facts = infer_placement(pools({0: "rollout", 1: "train"}), ranges(rows))
    assert (facts["placement"], facts["execution"]) == ("disaggregated", "async")


def test_no_stages_no_guess() -> None:
    facts = infer_placement(pools({0: "shared"}), frames.empty(frames.STAGE_RANGES))
    assert facts["placement"] is None and "needs stages" in facts["evidence"][0]


@pytest.mark.parametrize("name", ["verl_ppo_disaggregated", "trl_grpo"])
def test_run_summary_section(name: str) -> None:
    run = sample_run(name)
    sec = section(run)
    facts = dict(zip(sec.frame["fact"].to_list(), sec.frame["value"].to_list(), strict=True))
    cfg = truth_of(name)["config"]
    assert facts["placement"] == cfg["placement"] and facts["execution mode"] == cfg["execution"]
    assert facts["ranks"] == str(cfg["world_size"])
    assert facts["framework"] == name.split("_")[0]
    assert "clock alignment" in facts and "steps" in facts
    assert ("driver" in facts) == name.startswith("verl")


def test_step_list_says_how_many_unless_the_numbers_count_themselves():
    from analyzer.report.sections.placement import number_ranges

    assert number_ranges([134]) == "134 (1 step)"
    assert number_ranges([1]) == "1"
    assert number_ranges([1, 2]) == "1–2"
    assert number_ranges([0, 1]) == "0–1 (2 steps)"
    assert number_ranges([3, 4]) == "3–4 (2 steps)"
    assert number_ranges([1, 2, 3, 7, 9, 10]) == "1–3, 7, 9–10 (6 steps)"
