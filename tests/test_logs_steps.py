"""The logs-only analysis (analyzer/analyses/log_steps.py) on the real verl PPO log and on
small step tables built here to pin each accounting rule."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parsers
from analyzer.analyses import log_steps
from parsers.events import conform
from taxonomy.profiles import classify, detect, load_profiles

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
VERL_LOG = CORPUS / "logs" / "verl" / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
FIXTURES = Path(__file__).parent / "fixtures" / "logs"
PROFILES = load_profiles()


def analyze(out: parsers.ParsedSource, version: str | None = None) -> log_steps.LogSteps:
    names = out.events["name"].cast(pl.String)
    found = detect(names, out.meta, PROFILES)
    classes = classify(names, "log", found.profile, version or found.version, PROFILES)
    return log_steps.compute(out.events, out.metrics, classes, found.profile.metrics)


def table(steps: dict[int, dict[str, float]]) -> pl.DataFrame:
    rows = [
        {"step": s, "name": n, "start_ns": 0, "end_ns": round(v * 1e9)}
        for s, d in steps.items()
        for n, v in d.items()
    ]
    return conform(pl.DataFrame(rows), kind="log_stage", synthetic_time=True)


def verl_run(
    steps: dict[int, dict[str, float]], version: str, metrics: pl.DataFrame | None = None
) -> log_steps.LogSteps:
    events = table(steps)
    classes = classify(events["name"].cast(pl.String), "log", PROFILES["verl"], version, PROFILES)
    empty = pl.DataFrame(
        schema={"source": pl.UInt32, "step": pl.Int32, "key": pl.String, "value": pl.Float64}
    )
    return log_steps.compute(
        events, metrics if metrics is not None else empty, classes, PROFILES["verl"].metrics
    )


@pytest.fixture(scope="module")
def ppo() -> log_steps.LogSteps:
    return analyze(parsers.parse_file(VERL_LOG))


def step_stages(result: log_steps.LogSteps, step: int) -> dict[str, float]:
    rows = result.stages.filter(pl.col("step") == step)
    return dict(rows.select("label", "seconds").iter_rows())


def test_ppo_step_110_reconciles_with_its_total(ppo):
    step = ppo.steps.filter(pl.col("step") == 110).row(0, named=True)
    assert step["total_s"] == pytest.approx(34.248) and step["total_from"] == "timing_s/step"
    assert step["stages_s"] == pytest.approx(34.242)
    assert step["residual_s"] == pytest.approx(0.006)
    assert step["outside_s"] == 0.0 and step["wall_s"] == pytest.approx(34.248)
    assert step_stages(ppo, 110) == pytest.approx(
        {
            "rollout": 4.163,
            "reward": 0.037,
            "old_logprob": 0.476,
            "values": 0.547,
            "advantage": 0.009,
            "critic_update": 2.282,
            "actor_update": 2.296,
            "evaluation": 6.277,
            "checkpoint": 18.155,
            "other": 0.006,
        }
    )
    shares = ppo.stages.filter(pl.col("step") == 110)["share"].sum()
    assert shares == pytest.approx(1.0)
    assert ppo.notes == []


def test_ppo_every_step_reconciles(ppo):
    assert ppo.steps.height == 335
    assert (
        ppo.steps["residual_s"].min() >= 0.003 - 1e-9
        and ppo.steps["residual_s"].max() <= 0.013 + 1e-9
    )
    assert (ppo.steps["total_s"] == ppo.steps["wall_s"]).all()
    assert ppo.stages.filter(~pl.col("in_step")).height == 0


def test_ppo_step_time_statistics_and_outliers(ppo):
    stats = ppo.stats.row(0, named=True)
    assert (stats["n_steps"], stats["first_step"], stats["last_step"]) == (335, 101, 435)
    assert stats["median_s"] == pytest.approx(10.63)
    assert (stats["min_s"], stats["max_s"]) == (pytest.approx(9.406), pytest.approx(39.674))
    outliers = ppo.steps.filter(pl.col("outlier"))
    eval_steps = {*range(110, 431, 10), 435}
    assert eval_steps <= set(outliers["step"].to_list())
    causes = (
        outliers.filter(pl.col("step").is_in(list(eval_steps)))["outlier_cause"].unique().to_list()
    )
    assert causes == ["checkpoint"]
    wall = ppo.steps["wall_s"]
    mad = (wall - wall.median()).abs().median() * 1.4826
    assert stats["outlier_threshold_s"] == pytest.approx(wall.median() + 3 * mad)
    assert outliers.height == int((wall > stats["outlier_threshold_s"]).sum())


def test_ppo_dominant_stage_and_hidden_weight_sync(ppo):
    dominant = ppo.dominant.row(0, named=True)
    assert dominant["stage"] == "rollout"
    rollout = ppo.stages.filter(pl.col("stage") == "rollout")["seconds"].sum()
    assert dominant["share"] == pytest.approx(rollout / ppo.steps["wall_s"].sum())
    assert 0.3 < dominant["share"] < 0.4
    ws = ppo.weight_sync.row(0, named=True)
    assert ws["status"] == "hidden" and ws["where"] == "timing_s/gen" and ws["share"] is None
    assert "weight_sync" in ppo.needs_trace["analysis"].to_list()


def test_ppo_long_tail_indicators(ppo):
    first = ppo.long_tail.filter(pl.col("step") == 101).row(0, named=True)
    assert first["max_over_mean"] == pytest.approx(256 / 128.648)
    assert first["clip_ratio"] == pytest.approx(0.008)
    summary = ppo.long_tail_summary.row(0, named=True)
    assert summary["n_steps"] == 335
    assert summary["max_clip_ratio"] == pytest.approx(ppo.long_tail["clip_ratio"].max())


def test_v06_testing_and_checkpoint_outside_the_step():
    result = verl_run(
        {
            1: {"timing_s/gen": 5.0, "timing_s/update_actor": 3.0, "timing_s/step": 8.5},
            2: {
                "timing_s/gen": 5.0,
                "timing_s/update_actor": 3.0,
                "timing_s/testing": 4.0,
                "timing_s/save_checkpoint": 2.0,
                "timing_s/step": 8.5,
            },
        },
        "0.6",
    )
    step = result.steps.filter(pl.col("step") == 2).row(0, named=True)
    assert (step["total_s"], step["outside_s"], step["wall_s"]) == (8.5, 6.0, 14.5)
    assert step["residual_s"] == pytest.approx(0.5)
    assert result.stages.filter(pl.col("step") == 2)["share"].sum() == pytest.approx(1.0)
    assert result.notes == []
    assert result.weight_sync["status"].to_list() == ["hidden"]


EXCLUDED_EVAL = {
    1: {"timing_s/gen": 5.0, "timing_s/step": 5.2},
    2: {
        "timing_s/gen": 5.0,
        "timing_s/testing": 4.0,
        "timing_s/save_checkpoint": 2.0,
        "timing_s/step": 5.2,
    },
}
"""Two steps of a log whose step timer leaves step 2's evaluation and checkpoint out."""


def test_numbers_overrule_a_wrong_version_assumption():
    assumed_inside = verl_run(EXCLUDED_EVAL, "0.5")
    assert any("excludes evaluation and checkpoint" in n for n in assumed_inside.notes)
    assert assumed_inside.steps.filter(pl.col("step") == 2)["wall_s"].item() == pytest.approx(11.2)
    inside = {
        1: {"timing_s/gen": 5.0, "timing_s/step": 5.2},
        2: {
            "timing_s/gen": 5.0,
            "timing_s/testing": 4.0,
            "timing_s/save_checkpoint": 2.0,
            "timing_s/step": 11.2,
        },
    }
    assumed_outside = verl_run(inside, "0.6")
    assert any("includes evaluation and checkpoint" in n for n in assumed_outside.notes)
    step = assumed_outside.steps.filter(pl.col("step") == 2).row(0, named=True)
    assert (step["wall_s"], step["outside_s"]) == (pytest.approx(11.2), 0.0)


def test_a_part_moves_its_time_out_of_its_parent():
    result = verl_run(
        {
            1: {
                "timing_s/gen": 10.0,
                "timing_s/reshard": 1.5,
                "timing_s/generate_sequences": 8.0,
                "timing_s/update_actor": 4.0,
                "timing_s/step": 14.2,
            }
        },
        "0.5",
    )
    assert step_stages(result, 1) == pytest.approx(
        {"rollout": 8.5, "weight_sync": 1.5, "actor_update": 4.0, "other": 0.2}
    )
    ws = result.weight_sync.row(0, named=True)
    assert (
        ws["status"] == "measured"
        and ws["share"] == pytest.approx(1.5 / 14.2)
        and ws["where"] == "timing_s/reshard"
    )
    assert "weight_sync" not in result.needs_trace["analysis"].to_list()


def test_parts_longer_than_their_parent_are_capped_and_said():
    result = verl_run(
        {1: {"timing_s/gen": 1.0, "timing_s/reshard": 1.5, "timing_s/step": 1.0}}, "0.5"
    )
    assert step_stages(result, 1) == pytest.approx({"rollout": 0.0, "weight_sync": 1.0})
    assert any("exceed their parent" in n for n in result.notes)


def test_unknown_keys_are_reported_and_never_summed():
    result = verl_run(
        {
            1: {"timing_s/gen": 5.0, "timing_s/fork_filter": 3.0, "timing_s/step": 9.0},
            2: {"timing_s/gen": 5.0, "timing_s/fork_filter": 2.0, "timing_s/step": 8.0},
        },
        "0.8",
    )
    assert result.unclassified.rows() == [(
        "timing_s/fork_filter", 2, 5.0, 2.5, "rollout",
        "{match = '^timing_s/fork_filter$', source = \"log\", stage = \"rollout\", "
        'relation = "stage"}',
    )]
    assert step_stages(result, 1) == pytest.approx({"rollout": 5.0, "other": 4.0})
    assert result.weight_sync["status"].to_list() == ["not_logged"]


def test_outlier_rule_and_cause():
    steps = {
        s: {
            "timing_s/gen": 5.0,
            "timing_s/update_actor": 3.0 + 0.01 * s,
            "timing_s/step": 8.1 + 0.01 * s,
        }
        for s in range(1, 10)
    }
    steps[10] = {"timing_s/gen": 25.0, "timing_s/update_actor": 3.1, "timing_s/step": 28.2}
    result = verl_run(steps, "0.8")
    flagged = result.steps.filter(pl.col("outlier"))
    assert flagged.select("step", "outlier_cause").rows() == [(10, "rollout")]
    assert result.stats["n_outliers"].item() == 1


def test_step_total_from_the_sum_and_composite_labels():
    out = parsers.parse_file(FIXTURES / "areal_stats.log")
    result = analyze(out)
    step = result.steps.filter(pl.col("step") == 2).row(0, named=True)
    assert step["total_from"] == "sum of stage timers" and step["residual_s"] == 0.0
    assert step["total_s"] == pytest.approx(86.55 + 6.11 + 5.93 + 0.29 + 31.02 + 4.20 + 11.4)
    rollout = result.stages.filter((pl.col("step") == 2) & (pl.col("stage") == "rollout")).row(
        0, named=True
    )
    assert (rollout["label"], rollout["composite"]) == ("rollout+reward", True)


def test_long_tail_needs_length_statistics():
    result = verl_run({1: {"timing_s/gen": 5.0, "timing_s/step": 5.0}}, "0.8")
    assert result.long_tail.height == 0
    assert "long_tail" in result.needs_trace["analysis"].to_list()
    assert {"bubbles", "collectives", "critical_path"} <= set(
        result.needs_trace["analysis"].to_list()
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 50.0), st.floats(0.0, 20.0), st.floats(0.0, 5.0), st.floats(0.0, 3.0)
        ),
        min_size=1,
        max_size=6,
    )
)
def test_shares_of_a_step_add_up(durations):
    steps = {}
    for i, (gen, actor, testing, untimed) in enumerate(durations, start=1):
        steps[i] = {
            "timing_s/gen": gen,
            "timing_s/update_actor": actor,
            "timing_s/testing": testing,
            "timing_s/step": gen + actor + untimed,
        }
    result = verl_run(steps, "0.6")
    inside = any("includes evaluation" in n for n in result.notes)
    for i, (gen, actor, testing, untimed) in enumerate(durations, start=1):
        step = result.steps.filter(pl.col("step") == i).row(0, named=True)
        outside = 0.0 if inside else testing
        assert step["wall_s"] == pytest.approx(gen + actor + untimed + outside, abs=1e-6)
        if step["wall_s"] > 0:
            assert result.stages.filter(pl.col("step") == i)["share"].sum() == pytest.approx(
                1.0, abs=1e-6
            )


def test_stage_rows_and_summary_have_one_order_whatever_the_grouping():
    """DeepSpeed-Chat's 'Others' timer and the residual 'other' share step, stage and label; the
    stage rows were sorted by those alone, so the two swapped between runs (the golden reports
    caught it). Every key column now orders them, and ties in seconds are broken by name."""
    ds = CORPUS / "logs" / "deepspeed-chat" / (
        "step3_actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"
    )
    result = analyze(parsers.parse_file(ds))
    keys = ["step", "stage", "label", "composite", "in_step", "keys"]
    ties = result.stages.group_by("step", "stage", "label").len().filter(pl.col("len") > 1)
    assert ties.height > 0  # the case that made the order depend on group_by
    assert result.stages.select(keys).equals(result.stages.select(keys).sort(keys))
    order = ["seconds", "stage", "label"]
    summary = result.stage_summary.select(order)
    assert summary.equals(summary.sort(order, descending=[True, False, False]))
