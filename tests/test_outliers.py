"""Step outliers: a generator run with one rank stalled in one stage of one step (exact truth),
and the real verl console log of the corpus, its slow steps recomputed here from the raw lines."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import polars as pl
import pytest

import analyzer
from analyzer.analyses import outliers
from analyzer.model import frames
from sample_traces.synth import preset
from sample_traces.synth.slowstep import SlowStep, generate_slow
from taxonomy.steps import StepRules, builtin_rules, load_rules

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
VERL_LOG = CORPUS / "logs" / "verl" / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
SLOW = SlowStep(step=3, stage="actor_update", rank=5, extra_ns=60_000_000)


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[analyzer.Run, dict]:
    out = tmp_path_factory.mktemp("slow")
    truth = generate_slow(preset("disaggregated", 8, seed=5, steps=5), SLOW, out)
    return analyzer.load([out]), truth


def test_the_stalled_step_is_the_one_slow_step(slow_run) -> None:
    run, truth = slow_run
    found = run.step_outliers.filter(pl.col("source") == "trace")
    assert found.filter(pl.col("kind") == "slow")["step"].to_list() == [SLOW.step]
    row = found.filter(pl.col("step") == SLOW.step).row(0, named=True)
    assert row["stage"] == SLOW.stage
    assert row["rank"] == SLOW.rank
    assert row["stage_excess_ns"] == pytest.approx(SLOW.extra_ns, rel=0.02)
    assert row["rank_excess_ns"] == pytest.approx(SLOW.extra_ns, rel=0.02)
    walls = sorted(w["end_ns"] - w["start_ns"] for w in truth["step_windows"])
    assert row["wall_ns"] == pytest.approx(truth["slow_step"]["wall_ns"], rel=0.01)
    assert row["median_ns"] == pytest.approx(statistics.median(walls), rel=0.01)
    assert row["ratio"] == pytest.approx(row["wall_ns"] / row["median_ns"])


def test_without_the_stall_no_step_is_slow(tmp_path: Path) -> None:
    truth = generate_slow(
        preset("disaggregated", 8, seed=5, steps=5), SlowStep(3, "actor_update", 5, 0), tmp_path
    )
    assert truth["slow_step"]["excess_ns"] < 0.05 * truth["slow_step"]["median_other_ns"]
    run = analyzer.load([tmp_path])
    assert run.step_outliers.filter(pl.col("kind") == "slow").height == 0


def test_the_finding_saves_the_excess_spread_over_all_steps(slow_run) -> None:
    run, _ = slow_run
    found = run.outlier_findings
    assert found.schema == frames.FINDING_CANDIDATES
    row = found.filter(pl.col("id") == f"step.slow.trace.{SLOW.stage}").row(0, named=True)
    slow = run.step_outliers.filter((pl.col("source") == "trace") & (pl.col("kind") == "slow"))
    assert row["saving_ns"] == round(slow["excess_ns"].sum() / run.steps.height)
    assert (row["kind"], row["steps"], row["ranks"], row["stage"]) == ("step", "3", "5", SLOW.stage)
    assert "per step on average" in row["saving_basis"]
    assert "step 3" in row["evidence"] and "rank 5" in row["evidence"]


def test_the_section_names_step_stage_and_rank(slow_run) -> None:
    from analyzer.report.sections import outliers as section

    run, _ = slow_run
    built = section.section(run)
    assert built is not None and built.frame is not None
    cells = dict(zip([c.name for c in built.columns], built.rows()[0], strict=True))
    assert (cells["step"], cells["stage"], cells["rank_text"]) == (3, SLOW.stage, "5")


def _raw_steps(path: Path) -> pl.DataFrame:
    """Every `step:N - … timing_s/<key>:<s>` line of the raw log, last statement per step."""
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        step = re.search(r"\bstep:(\d+) - ", line)
        if step is None or "timing_s/step:" not in line:
            continue
        timers = dict(re.findall(r"timing_s/(\w+):([0-9.]+)", line))
        rows += [(int(step[1]), k, float(v)) for k, v in timers.items()]
    frame = pl.DataFrame(rows, schema=["step", "key", "s"], orient="row")
    return frame.unique(["step", "key"], keep="last", maintain_order=True)


def test_the_real_logs_slow_steps_are_the_ones_recomputed_from_its_lines() -> None:
    raw = _raw_steps(VERL_LOG)
    wall = raw.filter(pl.col("key") == "step").sort("step")
    rules = builtin_rules()
    median = wall["s"].median()
    mad = (wall["s"] - median).abs().median()
    first_slow = wall["s"][0] > median + 3 * max(1.4826 * mad, 0.01 * median)
    steady = wall.slice(1) if first_slow else wall
    median = steady["s"].median()
    mad = (steady["s"] - median).abs().median()
    limit = median + rules.k * max(rules.mad_scale * mad, rules.mad_floor * median)
    expected = steady.filter(pl.col("s") > limit)["step"].to_list()
    assert len(expected) > 10

    run = analyzer.load([VERL_LOG])
    found = run.step_outliers.filter(pl.col("source") == "log")
    assert sorted(found.filter(pl.col("kind") == "slow")["step"].to_list()) == expected
    assert found["median_ns"][0] == pytest.approx(median * 1e9)
    # the stage that grew: the timer key most above its own median (0 where absent)
    keys = raw.filter(pl.col("key") != "step").pivot(on="key", index="step", values="s")
    keys = keys.with_columns(pl.exclude("step").fill_null(0.0))
    keys = keys.filter(pl.col("step").is_in(steady["step"].implode()))
    stage_of = {"gen": "rollout", "save_checkpoint": "checkpoint", "testing": "evaluation",
                "update_actor": "actor_update", "update_critic": "critic_update",
                "values": "values", "old_log_prob": "old_logprob", "reward": "reward",
                "adv": "advantage"}
    medians = {k: keys[k].median() for k in stage_of}
    for r in found.filter(pl.col("kind") == "slow").iter_rows(named=True):
        at = keys.filter(pl.col("step") == r["step"]).row(0, named=True)
        grown = max(stage_of, key=lambda k: at[k] - medians[k])
        assert r["stage"] == stage_of[grown], r["step"]
        assert r["stage_excess_ns"] == pytest.approx((at[grown] - medians[grown]) * 1e9, abs=2e6)
    # each finding holds the slow steps where its stage grew most, and says so: the checkpoint
    # finding's "34 of 335 steps" read as if the log had 34 slow steps, where the summary says 40
    checkpoint = [r["step"] for r in found.filter(pl.col("kind") == "slow").iter_rows(named=True)
                  if r["stage"] == "checkpoint"]
    (row,) = run.outlier_findings.filter(pl.col("id") == "step.slow.log.checkpoint").to_dicts()
    assert (f"{len(checkpoint)} of the {len(expected)} slow steps of {wall.height}, those where "
            "checkpoint grew most, from the log") in row["evidence"]
    assert 0 < len(checkpoint) < len(expected)


def test_a_rules_file_that_cannot_be_used_is_one_line_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "steps.toml"
    bad.write_text("[slow]\nk = -1\nmad_scale = 1.4826\nmad_floor = 0.01\n")
    with pytest.raises(ValueError, match=r"steps\.toml: \[slow\] k must be a number"):
        load_rules(bad)
    bad.write_text("[slow]\nk = 3\nmad_scale = 1\nmad_floor = 0\n[warmup]\nleading = 1.5\n")
    with pytest.raises(ValueError, match=r"\[warmup\] leading must be a whole number"):
        load_rules(bad)


def test_warmup_is_only_a_slow_leading_step_and_never_every_step() -> None:
    rules = StepRules(k=3.0, mad_scale=1.4826, mad_floor=0.01, leading=1, always=0)
    walls = pl.DataFrame({"step": [1, 2, 3, 4, 5], "wall": [30.0, 10.0, 10.2, 9.9, 10.1]})
    flags = outliers.flag_steps(walls, rules)
    assert flags["warmup"].to_list() == [True, False, False, False, False]
    assert flags["median"][0] == pytest.approx(10.05)
    late = walls.with_columns(pl.Series("wall", [10.0, 10.2, 30.0, 9.9, 10.1]))
    flags = outliers.flag_steps(late, rules)
    assert flags["warmup"].to_list() == [False] * 5
    assert flags["slow"].to_list() == [False, False, True, False, False]
    always = StepRules(k=3.0, mad_scale=1.4826, mad_floor=0.01, leading=0, always=5)
    assert outliers.flag_steps(walls, always)["warmup"].to_list() == [False] * 5


def test_a_logs_only_run_has_log_rows_only() -> None:
    """The windows of a logs-only run are the log's steps: judged once, as the log's."""
    run = analyzer.load([VERL_LOG])
    assert run.stepping["origin"] == "log"
    found = run.step_outliers
    assert found.height and set(found["source"].to_list()) == {"log"}
    assert found["step"].n_unique() == found.height
    ids = run.outlier_findings["id"].to_list()
    assert ids[0] == "step.slow.log.checkpoint" and all(".log." in i for i in ids)


# --- the profiler's own step -----------------------------------------------------------------

HARNESS = Path(__file__).resolve().parents[1] / "sample_traces" / "runs"


def _log(walls_ms: list[float]) -> tuple[pl.DataFrame, pl.DataFrame]:
    steps = pl.DataFrame({
        "step": list(range(1, len(walls_ms) + 1)), "wall_s": [w / 1e3 for w in walls_ms],
        "warmup": [False] * len(walls_ms), "outlier": [w > 300 for w in walls_ms],
    }, schema_overrides={"step": pl.Int32})
    stages = pl.DataFrame({"step": steps["step"], "label": ["old_logprob"] * steps.height,
                           "seconds": steps["wall_s"]})
    return steps, stages


def test_a_slow_step_right_after_the_traced_steps_is_the_profilers() -> None:
    steps, stages = _log([100, 100, 100, 550, 100])
    assert outliers.log_outliers(steps, stages, [2, 3])["kind"].to_list() == ["profiler"]
    assert outliers.log_outliers(steps, stages, [1, 2])["kind"].to_list() == ["slow"]
    assert outliers.log_outliers(steps, stages)["kind"].to_list() == ["slow"]


@pytest.mark.parametrize("name", ["verl_ppo_disaggregated", "verl_grpo_colocated",
                                  "openrlhf_ppo_disaggregated", "verl_grpo_one_step_off"])
def test_the_harness_runs_profiler_step_is_no_training_finding(name: str) -> None:
    """Every harness run's slowest log step (3.9–9.4× the median) follows its traced steps:
    the workers export their traces after stop_profile. It is one info finding, low
    confidence, with no saving, and no slow-step finding."""
    run = analyzer.load([HARNESS / name])
    traced = run.product("stepping")["steps"]["step"].to_list()
    log = run.step_outliers.filter(pl.col("source") == "log")
    assert log.filter(pl.col("kind") == "profiler")["step"].to_list() == [max(traced) + 1]
    assert log.filter(pl.col("kind") == "slow").height == 0
    found = run.findings
    assert not found["id"].str.starts_with("step.slow.log").any()
    row = found.filter(pl.col("id") == outliers.PROFILER_ID).row(0, named=True)
    assert row["saving_ns"] is None and row["severity"] == "info" and row["confidence"] == "low"
    assert row["steps"] == str(max(traced) + 1) and "profiler writes its trace" in row["evidence"]
    assert found["position"][0] == 1 and found["kind"][0] != "step"
