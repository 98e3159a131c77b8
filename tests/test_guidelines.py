"""Guidelines: the catalogue loads and validates, a user file merges on top, every implemented
guideline fires on one run and passes on another, and guidelines without evidence say what
they need.

Trace metrics are tested on hand-built frames (the products they read, injected into a
``Run``) whose numbers are worked out by hand; log metrics on real logs — the verl PPO log of
the corpus and the sample runs — against numbers read from the same files or their truth.json.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from report_truth import truth_stage_share, union_ns

import analyzer
from analyzer.analyses import guidelines as ga
from analyzer.analyses.guideline_evidence import LOG_STAGES, LOG_STEPS, LOG_WEIGHT_SYNC
from analyzer.analyses.guideline_metrics import METRICS
from analyzer.model import frames
from analyzer.model.options import Options
from analyzer.model.run import Run, SourceInfo
from analyzer.report import json as json_report
from analyzer.report.sections import guidelines as guidelines_section
from parsers.errors import InputError
from parsers.events import conform, empty_events
from parsers.source import empty_metrics
from sample_traces.synth import generate, preset
from sample_traces.synth.samples import ROOT as COMMITTED_ROOT
from sample_traces.synth.samples import SAMPLES as COMMITTED
from taxonomy import guidelines as tg

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
VERL_LOG = CORPUS / "logs" / "verl" / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
RUNS = ROOT / "sample_traces" / "runs"
MS = 1_000_000
PREP_STAGES = {"reward", "old_logprob", "ref_logprob", "values"}
"""S2–S5 (docs/guidelines.md G12): the forward-only stages that can hide a rollout tail."""

TRACE_PRODUCTS: dict[str, dict[str, pl.DataType]] = {
    "steps": frames.STEPS,
    "stage_timeline": frames.STAGE_TIMELINE,
    "stage_ranges": frames.STAGE_RANGES,
    "pools": frames.POOLS,
    "activity": frames.ACTIVITY,
    "collectives": frames.COLLECTIVE_INSTANCES,
    "bubbles": frames.BUBBLES,
    "weight_sync": frames.WEIGHT_SYNC,
}
LOG_PRODUCTS = (LOG_STAGES, LOG_STEPS, LOG_WEIGHT_SYNC)


# --- building runs ---------------------------------------------------------------------------


def make_run(
    meta: dict[str, Any] | None = None,
    metrics: list[tuple[int, str, float]] = (),
    events: pl.DataFrame | None = None,
    placement: tuple[str | None, str | None] = (None, None),
    **products: pl.DataFrame,
) -> Run:
    """A run whose products are exactly ``products`` (every other product the guidelines read is
    injected empty), with one source carrying ``meta`` and the logged ``metrics``; the run is a
    verl run unless ``meta`` names another framework (guidelines about RL apply to it)."""
    source = SourceInfo(0, Path("run.log"), "test", -1, {"framework": "verl", **(meta or {})}, [])
    logged = pl.DataFrame(
        [(0, s, k, v) for s, k, v in metrics], schema=empty_metrics().schema, orient="row"
    ) if metrics else empty_metrics()
    run = Run(
        sources=[source], events=events if events is not None else empty_events(), metrics=logged
    )
    for name, schema in TRACE_PRODUCTS.items():
        run.inject(
            **{
                name: frames.check(products.pop(name), schema, name)
                if name in products
                else frames.empty(schema)
            }
        )
    run.inject(**{name: products.pop(name, pl.DataFrame()) for name in LOG_PRODUCTS})
    run.inject(
        placement={"placement": placement[0], "execution": placement[1], "evidence": []},
        aligned=run.events,
    )
    assert not products, f"unknown products {list(products)}"
    return run


def steps(*windows: tuple[int, int]) -> pl.DataFrame:
    """Steps 1, 2, … with the given [start, end) windows in ms."""
    return pl.DataFrame(
        [(i, a * MS, b * MS, "test") for i, (a, b) in enumerate(windows, start=1)],
        schema=frames.STEPS,
        orient="row",
    )


def timeline(*segments: tuple[int, int, str, float, float]) -> pl.DataFrame:
    """(rank, step, stage, start ms, end ms) segments."""
    rows = [(r, s, st, None, st, int(a * MS), int(b * MS), False) for r, s, st, a, b in segments]
    return pl.DataFrame(rows, schema=frames.STAGE_TIMELINE, orient="row")


def stage_ranges(*segments: tuple[int, int, str, float, float]) -> pl.DataFrame:
    rows = [
        (r, s, st, None, st, int(a * MS), int(b * MS), 0, False, 1.0) for r, s, st, a, b in segments
    ]
    return pl.DataFrame(rows, schema=frames.STAGE_RANGES, orient="row")


def pools(**by_rank: tuple[str, str | None]) -> pl.DataFrame:
    rows = [(int(r[1:]), pool, host, int(r[1:])) for r, (pool, host) in by_rank.items()]
    return pl.DataFrame(rows, schema=frames.POOLS, orient="row")


def activity(*rows: tuple[int, int, str, float, float, bool]) -> pl.DataFrame:
    """(rank, step, stage, start ms, end ms, is_collective)."""
    out = [
        (r, r, 7 if c else 0, "kernel", int(a * MS), int(b * MS), st, s, c)
        for r, s, st, a, b, c in rows
    ]
    return pl.DataFrame(out, schema=frames.ACTIVITY, orient="row")


def collectives(*rows: tuple[int, int, str, str, str, str, float, float]) -> pl.DataFrame:
    """(rank, step, coll, dim, pg_ranks, stage, start ms, end ms)."""
    out = [
        (
            i,
            r,
            s,
            coll,
            dim,
            "pg",
            ranks,
            len(ranks.split(",")),
            1024,
            int(a * MS),
            int(b * MS),
            st,
            True,
        )
        for i, (r, s, coll, dim, ranks, st, a, b) in enumerate(rows)
    ]
    return pl.DataFrame(out, schema=frames.COLLECTIVE_INSTANCES, orient="row")


def bubbles(*rows: tuple[int, int, float, str, float]) -> pl.DataFrame:
    """(step, rank, window ms, cause, idle ms)."""
    out = [(s, r, int(w * MS), 0, 0, cause, int(idle * MS)) for s, r, w, cause, idle in rows]
    return pl.DataFrame(out, schema=frames.BUBBLES, orient="row")


def row(run: Run, gid: str) -> dict[str, Any]:
    frame = frames.check(run.violations, frames.VIOLATIONS, "violations")
    return frame.filter(pl.col("id") == gid).row(0, named=True)


def fired(run: Run, gid: str, severity: str, value: float, rel: float = 1e-9) -> dict[str, Any]:
    got = row(run, gid)
    assert (got["status"], got["severity"]) == ("violated", severity), got["evidence"]
    assert got["value"] == pytest.approx(value, rel=rel), got["evidence"]
    return got


def passed(run: Run, gid: str, value: float | None, rel: float = 1e-9) -> dict[str, Any]:
    got = row(run, gid)
    assert (got["status"], got["severity"]) == ("passed", None), got["evidence"]
    if value is None:
        assert got["value"] is None and got["evidence"].startswith("does not apply: ")
    else:
        assert got["value"] == pytest.approx(value, rel=rel), got["evidence"]
    return got


def not_evaluated(run: Run, gid: str, needs: str) -> dict[str, Any]:
    got = row(run, gid)
    assert got["status"] == "not_evaluated" and got["value"] is None and got["severity"] is None
    assert got["evidence"].startswith(
        ("needs ", next(iter(tg.load()[gid].checks)).metric + " needs ")
    )
    assert needs in got["evidence"], got["evidence"]
    return got


def logs_run(*paths: Path) -> Run:
    """A logs-only run, as ``analyzer.load`` builds it."""
    return analyzer.load(list(paths), use_cache=False)


SHARE_REL = 1e-12
"""Measured: G1, G5, G11, G22, G24 and G18 on the five synthetic runs equal the truth's shares bit
for bit (the traces hold the generator's ns, the ratios are of the same integer sums), and G1,
G2, G4, G5, G11 and G23 from the sample logs equal their truth.json's within 3.3e-16. 1e-12 leaves
room only for float summation order; one ns off in a ~150 ms window is 7e-9. The 2% (traces) and
1e-3 (logs) it replaces let G1 (0.44 of a 150 ms step) be 1.3 ms of rollout off, and the 0.02
points of G18 3.5 ms of pool wait a step."""


def truth_share(run_dir: Path, stages: set[str]) -> float:
    """Σ driver time in ``stages`` ÷ Σ wall over all steps, from a sample run's truth.json (the
    wall of a step is its ``step`` span plus driver timers outside it, as in the log)."""
    truth = json.loads((run_dir / "truth.json").read_text())
    spans = {s["step"]: (s["start_ns"], s["end_ns"]) for s in truth["spans"] if s["name"] == "step"}
    driver = [s for s in truth["stages"] if s["rank"] == -1]
    outside = sum(
        s["end_ns"] - s["start_ns"] for s in driver
        if not spans[s["step"]][0] <= s["start_ns"] < spans[s["step"]][1]
    )
    spent = sum(s["end_ns"] - s["start_ns"] for s in driver if s["stage"] in stages)
    return spent / (sum(b - a for a, b in spans.values()) + outside)


# --- the catalogue ---------------------------------------------------------------------------


def test_catalogue_holds_the_26_guidelines_of_the_taxonomy_and_21_are_implemented():
    catalogue = tg.load()
    assert catalogue.ids == [f"G{i}" for i in range(1, 27)]
    implemented = {g.id for g in catalogue.guidelines if g.implemented}
    assert implemented == {f"G{i}" for i in range(1, 27)} - {"G3", "G6", "G7", "G26"}
    assert {"G1", "G2", "G5", "G8", "G10", "G12", "G13", "G14", "G15", "G18"} <= implemented
    for g in catalogue.guidelines:
        assert g.title and g.evidence and g.recommendation and g.source and g.checks
        for c in g.checks:
            assert c.thresholds and c.needs and c.formula
            assert c.heuristic == (g.id != "G1"), g.id  # TAXONOMY §6 marks every threshold but G1's


def test_implemented_checks_and_metric_functions_are_the_same_set():
    catalogue = tg.load()
    assert {c.metric for g in catalogue.guidelines for c in g.checks if c.implemented} == set(
        METRICS
    )


@pytest.mark.parametrize(
    ("gid", "metric", "thresholds"),
    [
        ("G1", "rollout_share", {"info": 0.6}),
        ("G2", "tail_share", {"warn": 0.3}),
        ("G2", "length_ratio", {"warn": 4.0}),
        ("G4", "clip_ratio", {"warn": 0.05}),
        ("G5", "weight_sync_share", {"warn": 0.05, "error": 0.10}),
        ("G10", "old_logprob_share", {"warn": 0.03}),
        ("G13", "pipeline_bubble", {"warn": 0.2}),
        ("G14", "dp_imbalance", {"warn": 0.10}),
        ("G15", "padding_waste", {"warn": 0.2}),
        ("G17", "tp_cross_node", {"error": 0.0}),
        ("G18", "pool_idle", {"warn": 0.2}),
        ("G25", "actor_critic_overlap", {"warn": 0.05}),
    ],
)
def test_thresholds_are_those_of_the_taxonomy(gid, metric, thresholds):
    check = next(c for c in tg.load()[gid].checks if c.metric == metric)
    assert dict(check.thresholds) == thresholds


def test_judging_takes_the_most_severe_level_crossed_in_the_checks_direction():
    weight_sync = tg.load()["G5"].checks[0]
    assert weight_sync.judge(0.03) == (None, 0.05)
    assert weight_sync.judge(0.05) == (None, 0.05)
    assert weight_sync.judge(0.07) == ("warn", 0.05)
    assert weight_sync.judge(0.36) == ("error", 0.10)
    overlap = tg.load()["G25"].checks[0]
    assert overlap.judge(0.01) == ("warn", 0.05) and overlap.judge(0.5) == (None, 0.05)


def test_docs_show_the_catalogue_as_it_is():
    text = (ROOT / "docs" / "guidelines.md").read_text()
    assert tg.markdown() in text, (
        "regenerate: .venv/bin/python -m taxonomy.guidelines (docs/guidelines.md)"
    )


# --- bad catalogue files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[G5\nwarn = 1", "not valid TOML"),
        ("[G5]\ncolour = 'red'", "G5: unknown field 'colour'"),
        (
            "[G5.checks.weight_sync_share]\nwarn = 0.2",
            "G5.checks.weight_sync_share: error 0.1 is below warn 0.2 (direction above)",
        ),
        (
            "[G5.checks.weight_sync_share]\nwarn = 'high'",
            "G5.checks.weight_sync_share.warn must be a finite number, not 'high'",
        ),
        (
            "[G5.checks.weight_sync_share]\nunit = 'percent'",
            "G5.checks.weight_sync_share.unit is 'percent', expected one of fraction",
        ),
        (
            "[G5.checks.weight_sync_share]\nwarn = 'off'\nerror = 'off'",
            "G5.checks.weight_sync_share: needs at least one threshold",
        ),
        ("[U1]\ntitle = 'mine'", "U1: 'evidence' is required"),
        ("['9x']\ntitle = 'x'", "'9x' is not a guideline id"),
        ("[keys]\nseqlen_max = 3", "[keys].seqlen_max must be a list of names"),
    ],
)
def test_a_bad_user_file_is_one_line_naming_it(tmp_path, text, problem):
    user = tmp_path / "mine.toml"
    user.write_text(text)
    with pytest.raises(InputError) as caught:
        ga.load_catalogue(user)
    message = str(caught.value)
    assert message.startswith(f"{user}: ") and "\n" not in message
    assert problem in message


def test_a_user_guideline_must_name_an_implemented_metric(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text(
        "[U1]\ntitle = 't'\nevidence = 'e'\nrecommendation = 'r'\nsource = 's'\n"
        "[U1.checks.gpu_temperature]\nformula = 'f'\nunit "
        "= 'fraction'\ndirection = 'above'\nwarn = 0.5\n"
        "aggregate = 'mean'\nfrom = ['trace']\nneeds = 'n'\n"
    )
    with pytest.raises(
        InputError, match=r"U1\.checks\.gpu_temperature: no such metric is implemented \(known: "
    ):
        ga.load_catalogue(user)


def rlperf(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", "-q", *args],
        capture_output=True, text=True, timeout=300,
        env={"RLPERF_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
    )


def test_rlperf_analyze_takes_a_guideline_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[G15.checks.padding_waste]\nwarn = 0.5\nerror = 0.3\n")
    result = rlperf(tmp_path, str(VERL_LOG), "--guidelines", str(bad))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"rlperf: error: {bad}: G15.checks.padding_waste: "
        "error 0.3 is below warn 0.5 (direction above)"
    ]
    good = tmp_path / "good.toml"
    good.write_text("[G15.checks.padding_waste]\nwarn = 0.8\n[G23]\nenabled = false\n")
    result = rlperf(tmp_path, str(VERL_LOG), "--guidelines", str(good), "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in json.loads(result.stdout)["guidelines"]}
    assert (rows["G15"]["status"], rows["G15"]["threshold"]) == (
        "passed",
        0.8,
    ) and "G23" not in rows
    assert rows["G15"]["value"] == pytest.approx(0.6955, abs=1e-4)


def test_a_missing_user_file_is_one_line(tmp_path):
    with pytest.raises(InputError, match=r"nowhere\.toml: cannot read"):
        ga.load_catalogue(tmp_path / "nowhere.toml")


# --- user files ------------------------------------------------------------------------------


def test_a_user_file_changes_thresholds_drops_guidelines_and_adds_its_own(tmp_path):
    user = tmp_path / "ci.toml"
    user.write_text(
        "[G1.checks.rollout_share]\ninfo = 'off'\nerror = 0.65\n\n"
        "[G5]\nenabled = false\n\n"
        "[U1]\ntitle = 'Rollout under half the step'\nevidence = 'stage times'\n"
        "recommendation = 'shorten generation'\nsource = 'our CI budget'\n"
        "[U1.checks.rollout_share]\nformula = 'T_S1 / T'\nunit = 'fraction'\ndirection = "
        "'above'\nwarn = 0.5\n"
        "aggregate = 'share'\nfrom = ['trace', 'log']\nneeds = 'stage times'\n\n"
        "[keys]\nseqlen_max = ['my/seqlen_max']\n"
    )
    catalogue = ga.load_catalogue(user)
    assert "G5" not in catalogue.ids and catalogue.disabled == ("G5",) and catalogue.ids[-1] == "U1"
    assert catalogue.keys["seqlen_max"] == (
        "my/seqlen_max",
        "global_seqlen/balanced_max",
        "global_seqlen/max",
    )
    run = make_run(
        steps=steps((0, 100)),
        stage_timeline=timeline((0, 1, "rollout", 0, 70), (0, 1, "actor_update", 70, 100)),
    )
    run.options = Options(guidelines=str(user))
    got = fired(run, "G1", "error", 0.7)
    assert got["threshold"] == 0.65
    assert fired(run, "U1", "warn", 0.7)["source"] == "our CI budget"
    assert "G5" not in run.violations["id"].to_list()


# --- stage shares: G1, G5, G10, G11, G22, G23 ----------------------------------------------


def test_g1_rollout_share_from_the_union_of_rollout_ranges_over_ranks():
    fires = make_run(
        steps=steps((0, 100)),
        stage_timeline=timeline(
            (0, 1, "rollout", 0, 40),
            (1, 1, "rollout", 30, 70),
            (0, 1, "actor_update", 70, 100),
            (1, 1, "actor_update", 70, 100),
        ),
    )
    got = fired(fires, "G1", "info", 0.7)
    assert (got["step"], got["start_ns"], got["end_ns"], got["threshold"]) == (1, 0, 100 * MS, 0.6)
    assert got["recommendation"].startswith("Rollout dominates the step")
    passes = make_run(steps=steps((0, 100), (100, 200)), stage_timeline=timeline(
        (0, 1, "rollout", 0, 50), (0, 2, "rollout", 100, 160)))
    got = passed(passes, "G1", 110 / 200)
    assert got["step"] == 2 and "worst step 2: 60%" in got["evidence"]


def test_g1_does_not_apply_to_a_rollout_only_run():
    """An inference engine's trace: its step is all rollout, with GPU work running past the host
    ranges, so a share of the step would be 100% or, read off the host ranges, far less —
    neither says anything about an RL step."""
    serving = make_run(
        steps=steps((0, 100)),
        stage_timeline=timeline((0, 1, "rollout", 0, 9)),
        placement=("rollout_only", None),
    )
    got = passed(serving, "G1", None)
    assert got["evidence"].startswith("does not apply: rollout-only run")


def test_g1_g5_g11_from_real_logs_equal_the_runs_truth():
    disaggregated = logs_run(RUNS / "verl_ppo_disaggregated" / "logs" / "verl_console.log")
    passed(
        disaggregated,
        "G1",
        truth_share(RUNS / "verl_ppo_disaggregated", {"rollout"}),
        rel=SHARE_REL,
    )
    passed(
        disaggregated,
        "G5",
        truth_share(RUNS / "verl_ppo_disaggregated", {"weight_sync"}),
        rel=SHARE_REL,
    )
    prep = {"reward", "old_logprob", "ref_logprob", "values"}
    got = fired(
        disaggregated,
        "G11",
        "warn",
        truth_share(RUNS / "verl_ppo_disaggregated", prep),
        rel=SHARE_REL,
    )
    assert got["value"] == pytest.approx(0.3888, abs=1e-4) and got["start_ns"] is None
    one_step_off = logs_run(RUNS / "verl_grpo_one_step_off" / "logs" / "verl_console.log")
    got = fired(
        one_step_off,
        "G5",
        "error",
        truth_share(RUNS / "verl_grpo_one_step_off", {"weight_sync"}),
        rel=SHARE_REL,
    )
    assert (
        got["value"] == pytest.approx(0.5303, abs=1e-4)
        and "timing_s/sync_rollout_weights" in got["evidence"]
    )


def test_g5_weight_sync_share_from_the_weight_sync_product():
    def run(*times_ms: float) -> Run:
        sync = pl.DataFrame(
            [(i, int(t * MS), 0, None, None) for i, t in enumerate(times_ms, start=1)],
            schema=frames.WEIGHT_SYNC,
            orient="row",
        )
        return make_run(steps=steps((0, 100), (100, 200)), weight_sync=sync)

    got = fired(run(6, 16), "G5", "error", 0.11)
    assert (got["step"], got["threshold"], got["start_ns"]) == (2, 0.10, 100 * MS)
    fired(run(6, 8), "G5", "warn", 0.07)
    passed(run(2, 3), "G5", 0.025)


DSCHAT_LOG = CORPUS / "logs" / "deepspeed-chat" / (
    "step3_actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log")


def test_a_logged_weight_sync_timer_of_zero_is_a_measured_zero_in_the_headline():
    """DeepSpeed-Chat logs 'Gather latency=0.00s (0.00%)' every step: G5 and the log section
    read 0.0% of 475 steps while the headline said '– needs … a weight-sync timer in a log'."""
    if not DSCHAT_LOG.exists():
        pytest.skip("corpus not present")
    run = logs_run(DSCHAT_LOG)
    logged = run.log_weight_sync.row(0, named=True)
    assert (logged["status"], logged["where"]) == ("measured", "Gather latency")
    assert logged["share"] == 0.0
    headline = run.overview.filter(pl.col("metric") == "weight_sync_share").row(0, named=True)
    assert headline["value"] == 0.0
    g5 = run.violations.filter(pl.col("id") == "G5").row(0, named=True)
    assert (g5["status"], g5["value"]) == ("passed", 0.0)


def test_g5_says_where_the_log_hides_weight_sync():
    got = not_evaluated(
        logs_run(VERL_LOG),
        "G5",
        "weight sync happens inside timing_s/gen in this framework version",
    )
    assert got["threshold"] == 0.05


def optimizer_steps(*at_ms: float) -> pl.DataFrame:
    n = len(at_ms)
    return conform(pl.DataFrame({
        "rank": [0] * n, "kind": ["annotation"] * n, "name": ["Optimizer.step#Adam.step"] * n,
        "start_ns": [int(t * MS) for t in at_ms], "end_ns": [int(t * MS) + 1000 for t in at_ms],
    }))


@pytest.mark.parametrize(
    ("optimizer_at", "status"), [((75,), "violated"), ((75, 90), "passed"), ((), "not_evaluated")]
)
def test_g10_old_logprobs_are_judged_only_with_one_update_per_rollout(optimizer_at, status):
    def run(old_ms: float) -> Run:
        segs = [
            (0, 1, "rollout", 0, 50),
            (0, 1, "old_logprob", 50, 50 + old_ms),
            (0, 1, "actor_update", 70, 100),
        ]
        return make_run(
            events=optimizer_steps(*optimizer_at),
            steps=steps((0, 100)),
            stage_timeline=timeline(*segs),
            stage_ranges=stage_ranges(*segs),
        )

    got = row(run(10), "G10")
    assert got["status"] == status
    if status == "violated":
        assert (got["severity"], got["value"]) == ("warn", pytest.approx(0.1)) and "K = 1" in got[
            "evidence"
        ]
    elif status == "passed":
        assert got["evidence"] == (
            "does not apply: K = 2 optimizer steps per rollout (optimizer-step ranges in the "
            "trace's actor update): old log-probs are needed (they take 10% of the step)"
        )
    else:
        assert got["evidence"].startswith("needs K, the optimizer steps per rollout")
    passed(run(2), "G10", 0.02)  # small enough whatever K is


def optimizer_run(rank1_steps_ms: tuple[int, int]) -> Run:
    """Two ranks, each rollout [0, 50), old log-probs [50, 60), actor update [70, 100) ms; rank 0
    steps its optimizer at 75 ms, rank 1 at the two times given."""
    starts = [75 * MS, *(t * MS for t in rank1_steps_ms)]
    marks = conform(
        pl.DataFrame(
            {
                "rank": [0, 1, 1],
                "kind": ["annotation"] * 3,
                "name": ["Optimizer.step#Adam.step"] * 3,
                "start_ns": starts,
                "end_ns": [t + 1000 for t in starts],
            }
        )
    )
    segs = [
        (r, 1, stage, a, b)
        for r in (0, 1)
        for stage, a, b in (("rollout", 0, 50), ("old_logprob", 50, 60), ("actor_update", 70, 100))
    ]
    return make_run(
        events=marks,
        steps=steps((0, 100)),
        stage_timeline=timeline(*segs),
        stage_ranges=stage_ranges(*segs),
    )


def test_g10_k_is_the_most_optimizer_steps_any_rank_takes():
    """Rank 0 steps its optimizer once in the update, rank 1 twice (uneven mini-batches): K = 2,
    so old log-probs are needed (the fewest, 1, would judge them)."""
    run = optimizer_run((75, 90))
    assert "K = 2 optimizer steps per rollout" in passed(run, "G10", None)["evidence"]


def test_g10_an_optimizer_step_at_the_updates_first_instant_is_inside_it():
    """Rank 1's two optimizer steps start at 70 ms, the update's first instant, and at 90 ms:
    both are inside (the range's start is), so K = 2."""
    run = optimizer_run((70, 90))
    assert "K = 2 optimizer steps per rollout" in passed(run, "G10", None)["evidence"]


def test_g10_takes_k_from_the_config_of_a_real_log():
    got = passed(logs_run(VERL_LOG), "G10", None)
    assert (
        "K = 4 optimizer steps per rollout (config: 1 epochs × ⌈256/64⌉ mini-batches)"
        in got["evidence"]
    )
    config = {
        "config": {"actor_rollout_ref": {"actor": {"ppo_epochs": 1, "ppo_mini_batch_size": 256}}},
        "train_batch_size": 256,
    }
    run = make_run(
        meta=config, steps=steps((0, 100)), stage_timeline=timeline((0, 1, "old_logprob", 0, 6))
    )
    assert "config: 1 epochs × ⌈256/256⌉" in fired(run, "G10", "warn", 0.06)["evidence"]


def test_g11_g22_preparation_and_reward_shares():
    run = make_run(
        steps=steps((0, 100)),
        stage_timeline=timeline(
            (0, 1, "reward", 0, 8),
            (1, 1, "old_logprob", 5, 20),
            (1, 1, "ref_logprob", 20, 25),
            (1, 1, "advantage", 25, 40),
        ),
    )
    fired(run, "G11", "warn", 0.25)
    fired(run, "G22", "warn", 0.08)
    calm = make_run(
        steps=steps((0, 100)),
        stage_timeline=timeline((0, 1, "reward", 0, 2), (1, 1, "values", 5, 15)),
    )
    passed(calm, "G11", 0.12)
    passed(calm, "G22", 0.02)


def log_seconds(run: Run, *names: str) -> pl.DataFrame:
    """Per step: seconds of the named log timers, read from the event table."""
    logs = run.events.filter(
        (pl.col("kind") == "log_stage") & pl.col("name").cast(pl.String).is_in(list(names))
    )
    return logs.group_by("step").agg(
        ((pl.col("end_ns") - pl.col("start_ns")).sum() / 1e9).alias("s")
    )


def test_g22_g23_g24_on_the_real_verl_log():
    run = logs_run(VERL_LOG)
    # this verl version counts testing and save_checkpoint inside timing_s/step
    step = float(log_seconds(run, "timing_s/step")["s"].sum())
    passed(run, "G22", float(log_seconds(run, "timing_s/reward")["s"].sum()) / step)
    got = fired(
        run,
        "G23",
        "warn",
        float(log_seconds(run, "timing_s/testing", "timing_s/save_checkpoint")["s"].sum()) / step,
    )
    assert got["value"] == pytest.approx(0.2003, abs=1e-4) and got["step"] == 400
    timers = [
        f"timing_s/{n}"
        for n in (
            "gen",
            "reward",
            "old_log_prob",
            "values",
            "adv",
            "update_critic",
            "update_actor",
            "testing",
            "save_checkpoint",
        )
    ]
    untimed = step - float(log_seconds(run, *timers)["s"].sum())
    passed(run, "G24", untimed / step, rel=1e-6)
    sample = logs_run(RUNS / "verl_ppo_disaggregated" / "logs" / "verl_console.log")
    passed(
        sample, "G23", truth_share(RUNS / "verl_ppo_disaggregated", {"checkpoint"}), rel=SHARE_REL
    )


def test_g23_and_g24_are_not_judged_from_trls_log():
    """TRL's trainer_state.json times no checkpoint or evaluation (its profile names no such
    timer), so G23 cannot read their absence as zero; TRL has no single controller: G24
    (controller dispatch gaps) is not evaluated for it."""
    trl = logs_run(RUNS / "trl_grpo" / "logs" / "trainer_state.json")
    not_evaluated(trl, "G23", "the trl profile names no log timer of them: none is not zero")
    got = row(trl, "G24")
    assert (got["status"], got["value"]) == ("not_evaluated", None)
    assert got["evidence"].startswith("does not apply: no single controller (framework trl;")
    not_evaluated(trl, "G1", "a rollout timer (the log has none)")


# --- rollout tail: G2, G4, G12 ----------------------------------------------------------------


def tail_run(last_end: float, prep: tuple[float, float] | None = None) -> Run:
    segs = [(r, 1, "rollout", 0, end) for r, end in enumerate((40, 42, 44, last_end))]
    if prep:
        segs.append((0, 1, "old_logprob", *prep))
    return make_run(steps=steps((0, 100)), stage_timeline=timeline(*segs))


def test_g2_tail_share_from_the_last_and_median_rank_to_finish_rollout():
    got = fired(tail_run(90), "G2", "warn", (90 - 43) / 90)
    assert (got["rank"], got["start_ns"], got["end_ns"]) == (3, 43 * MS, 90 * MS)
    passed(tail_run(50), "G2", 7 / 50)


def test_g2_length_ratio_and_g4_clip_ratio_from_real_logs_equal_the_response_lengths():
    truth = json.loads((RUNS / "verl_ppo_disaggregated" / "truth.json").read_text())
    cap = truth["config"]["max_new_tokens"]
    lengths = [r["lengths"] for r in sorted(truth["responses"], key=lambda r: r["step"])]
    run = logs_run(RUNS / "verl_ppo_disaggregated" / "logs" / "verl_console.log")
    ratio = sum(max(x) / (sum(x) / len(x)) for x in lengths) / len(lengths)
    passed(run, "G2", ratio, rel=SHARE_REL)
    clipped = sum(sum(v == cap for v in x) / len(x) for x in lengths) / len(lengths)
    got = fired(run, "G4", "warn", clipped, rel=SHARE_REL)
    assert got["step"] == 1 and got["value"] == pytest.approx(0.1042, abs=1e-4)
    clip = [
        float(v)
        for v in re.findall(
            r"response_length/clip_ratio:([0-9.]+)", VERL_LOG.read_text(errors="replace")
        )
    ]
    assert len(clip) == 335
    passed(logs_run(VERL_LOG), "G4", sum(clip) / len(clip), rel=SHARE_REL)  # the log's own numbers
    long_tail = make_run(
        metrics=[(1, "response_length/max", 256.0), (1, "response_length/mean", 50.0)]
    )
    fired(long_tail, "G2", "warn", 5.12)


def test_g12_tail_not_hidden_behind_preparation():
    got = fired(tail_run(90, prep=(60, 70)), "G12", "info", (90 - 43 - 10) / 90)
    assert got["severity"] == "info" and got["rank"] == 3
    passed(tail_run(90, prep=(45, 95)), "G12", 2 / 90)


# --- placement, memory and pools: G8, G18, G25 -------------------------------------------------


def engine_config(freed: bool, placement: str = "colocated") -> dict[str, Any]:
    rollout = {"free_cache_engine": freed, "gpu_memory_utilization": 0.4, "enforce_eager": True}
    return {"placement": placement, "config": {"actor_rollout_ref": {"rollout": rollout}}}


def test_g8_engine_memory_kept_through_training():
    got = fired(make_run(meta=engine_config(False)), "G8", "warn", 0.4)
    assert "free_cache_engine = false" in got["evidence"]
    passed(make_run(meta=engine_config(True)), "G8", 0.0)
    passed(make_run(meta=engine_config(False, "disaggregated")), "G8", None)
    passed(logs_run(VERL_LOG), "G8", 0.0)


def test_g8_without_the_engines_memory_share_says_it_needs_it():
    meta = engine_config(False)
    del meta["config"]["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"]
    not_evaluated(make_run(meta=meta), "G8", "the engine's gpu_memory_utilization")


@pytest.mark.parametrize(
    ("device", "remark"), [(None, True), ("cuda", True), ("tpu", False), ("npu", False)]
)
def test_g8_names_resident_cuda_graphs_only_on_cuda(device: str | None, remark: bool):
    """enforce_eager off keeps captured CUDA graphs resident, on CUDA GPUs; a TPU (XLA) or
    Ascend run has no CUDA graphs to name."""
    meta = engine_config(False)
    meta["config"]["actor_rollout_ref"]["rollout"]["enforce_eager"] = False
    if device:
        meta["device"] = device
    got = fired(make_run(meta=meta), "G8", "warn", 0.4)
    assert ("CUDA graphs are captured" in got["evidence"]) is remark


def test_g18_pool_idle_from_pool_wait_or_logged_idle_ratios():
    split = pools(r0=("rollout", "h"), r1=("train", "h"))
    wait = bubbles(
        (1, 0, 100, "pool_wait", 50), (1, 0, 100, "stage_gap", 5), (1, 1, 100, "pool_wait", 10)
    )
    got = fired(make_run(steps=steps((0, 100)), pools=split, bubbles=wait), "G18", "warn", 0.5)
    assert "step 1: rollout" in got["evidence"]
    calm = bubbles((1, 0, 100, "pool_wait", 10), (1, 1, 100, "pool_wait", 15))
    passed(make_run(steps=steps((0, 100)), pools=split, bubbles=calm), "G18", 0.15)
    colocated = make_run(
        pools=pools(r0=("shared", "h"), r1=("shared", "h")), placement=("colocated", "sync")
    )
    assert "colocated" in passed(colocated, "G18", None)["evidence"]
    not_evaluated(
        make_run(pools=pools(r0=("shared", "h"))), "G18", "separate rollout and training pools"
    )
    train_only = make_run(
        steps=steps((0, 100)),
        pools=pools(r0=("train", "h")),
        bubbles=bubbles((1, 0, 100, "pool_wait", 0)),
    )
    not_evaluated(train_only, "G18", "separate rollout and training pools")


def test_g18_pool_idle_sums_over_the_ranks_of_a_pool():
    """Rollout ranks 0 and 2 with unequal windows (100 and 50 ms) waiting 50 and 5 ms: the pool's
    share is Σ wait / Σ window = 55/150 (the mean of the ranks' shares would be 0.3, the worst
    rank 0.5); the train rank's 10/100 is the smaller pool."""
    split = pools(r0=("rollout", "h"), r1=("train", "h"), r2=("rollout", "h"))
    wait = bubbles(
        (1, 0, 100, "pool_wait", 50), (1, 2, 50, "pool_wait", 5), (1, 1, 100, "pool_wait", 10)
    )
    got = fired(make_run(steps=steps((0, 100)), pools=split, bubbles=wait), "G18", "warn", 55 / 150)
    assert "step 1: rollout" in got["evidence"]
    ratios = [
        (1, "trainer/idle_ratio", 0.31),
        (1, "rollouter/idle_ratio", 0.02),
        (2, "trainer/idle_ratio", 0.25),
    ]
    fired(make_run(metrics=ratios), "G18", "warn", 0.28)
    passed(make_run(metrics=[(1, "trainer/idle_ratio", 0.05)]), "G18", 0.05)


def test_g18_evidence_names_each_steps_worst_pool_in_step_order():
    """Step 1's worst pool is rollout (50/100 against 10/100), step 2's train (40/100 against
    5/100): the evidence lists both, comma-separated, step 1 first; the value is the mean of the
    steps' worst shares, (0.5 + 0.4) / 2."""
    split = pools(r0=("rollout", "h"), r1=("train", "h"))
    wait = bubbles(
        (2, 0, 100, "pool_wait", 5), (2, 1, 100, "pool_wait", 40),
        (1, 0, 100, "pool_wait", 50), (1, 1, 100, "pool_wait", 10),
    )
    run = make_run(steps=steps((0, 100), (100, 200)), pools=split, bubbles=wait)
    got = fired(run, "G18", "warn", 0.45)
    assert "(step 1: rollout, step 2: train)" in got["evidence"]


def test_g25_actor_and_critic_updates_on_disjoint_ranks_should_overlap():
    def run(critic: tuple[int, float, float]) -> Run:
        return make_run(
            steps=steps((0, 100)),
            pools=pools(r0=("train", "h"), r1=("train", "h")),
            stage_timeline=timeline(
                (0, 1, "actor_update", 0, 40), (critic[0], 1, "critic_update", critic[1], critic[2])
            ),
        )

    fired(run((1, 40, 80)), "G25", "warn", 0.0)
    passed(run((1, 20, 60)), "G25", 0.5)
    assert "same ranks" in passed(run((0, 40, 80)), "G25", None)["evidence"]
    no_critic = make_run(
        steps=steps((0, 100)),
        pools=pools(r0=("train", "h")),
        stage_timeline=timeline((0, 1, "actor_update", 0, 40)),
    )
    assert "critic-free" in passed(no_critic, "G25", None)["evidence"]


# --- parallelism: G13, G14, G16, G17 -----------------------------------------------------------


def test_g13_pipeline_bubble_from_first_stage_sends():
    def run(sends: int) -> Run:
        rows = [(4, 1, "send", "pp", "4,6", "actor_update", 10 + i, 10.5 + i) for i in range(sends)]
        rows += [
            (6, 1, "send", "pp", "4,6", "actor_update", 50 + i, 50.5 + i) for i in range(sends)
        ]
        return make_run(steps=steps((0, 100)), collectives=collectives(*rows))

    got = fired(run(2), "G13", "warn", 1 / 3)
    assert (
        got["rank"] == 4
        and "m = 2" in got["evidence"]
        and "assuming one pipeline flush" in got["evidence"]
    )
    passed(run(8), "G13", 1 / 9)
    flat = make_run(
        collectives=collectives((0, 1, "all_reduce", "dp", "0,1", "actor_update", 0, 1))
    )
    assert "pp = 1" in passed(flat, "G13", 0.0)["evidence"]


def test_g13_micro_batches_are_the_fewest_any_first_stage_sends():
    """Two pipelines (4→6, 5→7) whose first stages send unequally, 3 and 2 times: a flush holds
    the micro-batches every pipeline got, m = min = 2, β = 1/(2 + 1) — the max (3) would say 1/4,
    the mean (2.5) 1/3.5. The rank named is the one that sent fewest."""
    rows = [(4, 1, "send", "pp", "4,6", "actor_update", 10 + i, 10.5 + i) for i in range(3)]
    rows += [(5, 1, "send", "pp", "5,7", "actor_update", 10 + i, 10.5 + i) for i in range(2)]
    rows += [(6, 1, "recv", "pp", "4,6", "actor_update", 10 + i, 10.5 + i) for i in range(3)]
    got = fired(
        make_run(steps=steps((0, 100)), collectives=collectives(*rows)), "G13", "warn", 1 / 3
    )
    assert got["rank"] == 5 and "m = 2 " in got["evidence"]


def test_g13_pipeline_bubble_from_a_megatron_config():
    def megatron(mini: int, n: int) -> dict[str, Any]:
        actor = {
            "ppo_mini_batch_size": mini,
            "ppo_micro_batch_size_per_gpu": 1,
            "strategy": "megatron",
            "megatron": {"pipeline_model_parallel_size": 4, "tensor_model_parallel_size": 2},
        }
        return {"world_size": 32, "rollout_n": n, "config": {"actor_rollout_ref": {"actor": actor}}}

    fired(make_run(meta=megatron(4, 1)), "G13", "warn", 3 / 4)  # dp = 4, m = 1
    passed(make_run(meta=megatron(64, 8)), "G13", 3 / 131)  # m = 64·8/4 = 128
    passed(logs_run(VERL_LOG), "G13", 0.0)


def test_g14_dp_imbalance_within_dp_groups():
    def run(busy1: float) -> Run:
        work = activity(
            (0, 1, "actor_update", 0, 10, False),
            (1, 1, "actor_update", 0, busy1, False),
            (0, 1, "actor_update", 10, 12, True),
            (2, 1, "actor_update", 0, 30, False),
        )
        groups = collectives(
            (0, 1, "all_reduce", "dp", "0,1", "actor_update", 10, 12),
            (2, 1, "all_reduce", "tp", "2,3", "actor_update", 0, 1),
        )
        return make_run(steps=steps((0, 100)), activity=work, collectives=groups)

    got = fired(run(14), "G14", "warn", 14 / 12 - 1)
    assert got["rank"] == 1 and "within DP groups" in got["evidence"]
    passed(run(10.5), "G14", 10.5 / 10.25 - 1)


def test_g14_dp_imbalance_of_three_uneven_ranks_is_max_over_mean():
    """Busy 10, 10 and 16 ms in one DP group: max/mean − 1 = 16/12 − 1 = 1/3 (max/median would
    be 0.6, max/min 0.6, mean/min 0.2); the rank named is the busiest."""
    work = activity(
        *((r, 1, "actor_update", 0, busy, False) for r, busy in ((0, 10), (1, 10), (2, 16)))
    )
    group = collectives((0, 1, "all_reduce", "dp", "0,1,2", "actor_update", 20, 21))
    got = fired(
        make_run(steps=steps((0, 100)), activity=work, collectives=group), "G14", "warn", 1 / 3
    )
    assert got["rank"] == 2


def test_g14_dp_imbalance_from_logged_tokens_of_a_real_log():
    run = logs_run(VERL_LOG)
    logged = run.metrics.pivot(on="key", index="step", values="value", aggregate_function="last")
    expected = float(
        (logged["global_seqlen/balanced_max"] / logged["global_seqlen/mean"] - 1).mean()
    )
    passed(run, "G14", expected)
    # step 101 of the same log before balancing: max 4157 against a mean of 3714.25 tokens
    fired(
        make_run(
            metrics=[(101, "global_seqlen/max", 4157.0), (101, "global_seqlen/mean", 3714.25)]
        ),
        "G14",
        "warn",
        4157 / 3714.25 - 1,
    )


def test_g15_padding_waste_of_a_real_verl_run_without_padding_removal():
    run = logs_run(VERL_LOG)
    logged = run.metrics.pivot(on="key", index="step", values="value", aggregate_function="last")
    expected = float(
        (1 - (logged["prompt_length/mean"] + logged["response_length/mean"]) / (512 + 256)).mean()
    )
    got = fired(run, "G15", "warn", expected)
    assert got["value"] == pytest.approx(0.6955, abs=1e-4)
    packed = {"config": {"actor_rollout_ref": {"model": {"use_remove_padding": True}}}}
    passed(make_run(meta=packed), "G15", 0.0)


def test_g16_exposed_communication_in_the_update():
    def run(coll: tuple[float, float]) -> Run:
        work = activity((0, 1, "actor_update", 0, 60, False), (0, 1, "actor_update", *coll, True))
        return make_run(
            steps=steps((0, 100)),
            activity=work,
            stage_timeline=timeline((0, 1, "actor_update", 0, 100)),
        )

    got = fired(run((50, 80)), "G16", "warn", 0.2)
    assert got["rank"] == 0
    passed(run((10, 50)), "G16", 0.0)


def test_g17_tp_groups_across_hosts():
    groups = collectives(
        (0, 1, "all_reduce", "tp", "0,1", "rollout", 0, 1),
        (2, 1, "all_reduce", "tp", "2,3", "rollout", 0, 1),
    )
    split = pools(r0=("shared", "a"), r1=("shared", "a"), r2=("shared", "a"), r3=("shared", "b"))
    got = fired(make_run(collectives=groups, pools=split), "G17", "error", 1.0)
    assert got["rank"] == 2 and "2,3" in got["evidence"]
    together = pools(r0=("shared", "a"), r1=("shared", "a"), r2=("shared", "b"), r3=("shared", "b"))
    passed(make_run(collectives=groups, pools=together), "G17", 0.0)
    wide = {"rollout_tp": 16, "n_gpus_per_node": 8, "world_size": 32}
    fired(make_run(meta=wide), "G17", "error", 2.0)
    passed(logs_run(VERL_LOG), "G17", 0.0)


# --- logged signals: G19, G20, G21 ---------------------------------------------------------------


def test_g19_staleness_lag():
    fired(
        make_run(
            metrics=[
                (1, "version_stats/sample_staleness_theta_avg", 1.5),
                (2, "version_stats/sample_staleness_theta_avg", 2.5),
            ]
        ),
        "G19",
        "warn",
        2.0,
    )
    passed(make_run(metrics=[(1, "Avg Trajectory Age", 0.5)]), "G19", 0.5)
    assert (
        "one_step_off execution"
        in passed(make_run(placement=("disaggregated", "one_step_off")), "G19", 1.0)["evidence"]
    )
    passed(make_run(placement=("colocated", "sync")), "G19", 0.0)
    not_evaluated(
        make_run(placement=("disaggregated", "async")), "G19", "the logged mean staleness"
    )


def test_g20_sync_waiting_for_in_flight_requests():
    def run(*waits: float) -> Run:
        walls = pl.DataFrame(
            {
                "step": [1, 2],
                "wall_s": [10.0, 10.0],
                "total_from": ["timing_s/step"] * 2,
                "stages_s": [9.0, 9.0],
            },
            schema_overrides={"step": pl.Int32},
        )
        timers = conform(pl.DataFrame({
            "kind": ["log_stage"] * 2, "name": ["timing_s/wait_last_valid"] * 2, "step": [1, 2],
            "start_ns": [0, 0], "end_ns": [int(w * 1e9) for w in waits],
        }))
        return make_run(events=timers, log_steps=walls)

    got = fired(run(2.0, 0.5), "G20", "warn", 0.125)
    assert got["step"] == 1 and "timing_s/wait_last_valid" in got["evidence"]
    passed(run(0.5, 0.5), "G20", 0.05)


def test_g9_preemptions_per_request():
    key = "agent_loop/num_preempted/mean"
    got = fired(make_run(metrics=[(1, key, 0.05), (2, key, 0.01)]), "G9", "warn", 0.03)
    assert got["step"] == 1 and "upper bound" in got["evidence"]
    passed(make_run(metrics=[(1, key, 0.0), (2, key, 0.004)]), "G9", 0.002)
    not_evaluated(make_run(metrics=[(1, key, -1.0)]), "G9", "the engine did not report preemptions")


def test_g21_zero_variance_groups_of_the_real_trl_run():
    state = json.loads((RUNS / "trl_grpo" / "logs" / "trainer_state.json").read_text())
    zero = [h["frac_reward_zero_std"] for h in state["log_history"] if "frac_reward_zero_std" in h]
    got = fired(
        logs_run(RUNS / "trl_grpo" / "logs" / "trainer_state.json"),
        "G21",
        "warn",
        sum(zero) / len(zero),
    )
    assert got["value"] == pytest.approx(0.8)
    passed(make_run(metrics=[(1, "frac_reward_zero_std", 0.25)]), "G21", 0.25)


# --- missing evidence --------------------------------------------------------------------------


def test_without_evidence_nothing_passes():
    frame = make_run().violations
    assert frame["status"].unique().to_list() == ["not_evaluated"]
    assert frame["evidence"].str.contains("needs ").all()


def test_a_logs_only_run_says_what_needs_a_trace():
    run = logs_run(VERL_LOG)
    not_evaluated(run, "G12", "(a trace)")
    not_evaluated(run, "G16", "(a trace)")
    not_evaluated(run, "G3", "(not implemented)")
    not_evaluated(run, "G9", "agent_loop/num_preempted/mean")
    statuses = dict(run.violations.select("id", "status").iter_rows())
    decided = {gid for gid, s in statuses.items() if s != "not_evaluated"}
    assert decided == {
        "G1",
        "G2",
        "G4",
        "G8",
        "G10",
        "G11",
        "G13",
        "G14",
        "G15",
        "G17",
        "G18",
        "G22",
        "G23",
        "G24",
        "G25",
    }


def test_the_report_section_lists_violations_first_with_what_to_do():
    run = logs_run(VERL_LOG)
    section = guidelines_section.section(run)
    assert section is not None and section.title == "Guidelines"
    rows = section.rows()
    assert len(rows) == 15 and [r[0] for r in rows[:2]] == ["G15", "G23"]
    assert rows[0][2:4] == ["warn: 69.6% > 20%*", "step 361"] and rows[0][5].startswith(
        "Remove padding"
    )
    assert next(r for r in rows if r[0] == "G1")[2] == "passed: 33.6% < 60%"
    assert next(r for r in rows if r[0] == "G18")[2] == "passed (does not apply)"
    assert all(r[2] != "not evaluated" for r in rows)
    assert all(r[5] is None for r in rows if not r[2].startswith(("warn", "error", "info")))
    assert section.note.startswith(
        "2 violated (0 error, 2 warn, 0 info), 13 passed, 11 not evaluated: "
    )
    assert "G3 (" in section.note or "G3, " in section.note
    document = json_report.summary(run)["guidelines"]
    assert len(document) == 26
    assert document[0]["id"] == "G15" and document[0]["value"] == pytest.approx(0.6955, abs=1e-4)
    assert next(g for g in document if g["id"] == "G3")["result"] == "not evaluated"


# --- end to end on the synthetic GPU-shaped runs, against their truth.json ------------------


GENERATED: dict[str, dict[str, Any]] = {
    "disaggregated-tp4-2gpn": {
        "scenario": "disaggregated",
        "ranks": 16,
        "seed": 3,
        "tp": 4,
        "gpus_per_node": 2,
    },
}
"""Besides the committed synthetic samples: a layout whose TP groups span nodes."""


def truth_idle_share(
    truth: dict[str, Any], cause: str, ranks: set[int] | None = None
) -> dict[int, float]:
    """Per step: Σ idle of ``cause`` ÷ Σ device windows (over ``ranks``, default all)."""
    out = {}
    for w in truth["step_windows"]:
        rows = [
            d
            for d in truth["devices"]
            if d["step"] == w["step"] and (ranks is None or d["rank"] in ranks)
        ]
        out[w["step"]] = sum(d["idle_ns"][cause] for d in rows) / sum(d["window_ns"] for d in rows)
    return out


@pytest.fixture(scope="module", params=[*COMMITTED, *GENERATED])
def synthetic(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Run, dict[str, Any]]:
    """A committed synthetic sample (test_synth holds it to the generator's output), or a run
    generated for the test."""
    if request.param in COMMITTED:
        folder = COMMITTED_ROOT / request.param
        truth = json.loads((folder / "truth.json").read_text())
    else:
        spec = dict(GENERATED[request.param])
        folder = tmp_path_factory.mktemp(request.param)
        truth = generate(
            preset(spec.pop("scenario"), spec.pop("ranks"), steps=2, **spec), folder, jobs=1
        )
    return request.param, analyzer.load([folder], use_cache=False), truth


def test_synthetic_runs_stage_shares_equal_the_truth(synthetic):
    _, run, truth = synthetic
    for gid, stages in (
        ("G1", {"rollout"}),
        ("G5", {"weight_sync"}),
        ("G11", PREP_STAGES),
        ("G22", {"reward"}),
    ):
        assert row(run, gid)["value"] == pytest.approx(
            truth_stage_share(truth, stages), rel=SHARE_REL, abs=0
        ), gid


def test_synthetic_runs_idle_guidelines_equal_the_truth(synthetic):
    _, run, truth = synthetic
    gaps = truth_idle_share(truth, "stage_gap")
    windows = {w["step"]: w["end_ns"] - w["start_ns"] for w in truth["step_windows"]}
    assert row(run, "G24")["value"] == pytest.approx(
        sum(gaps[s] * windows[s] for s in gaps) / sum(windows.values()), rel=SHARE_REL, abs=0
    )
    got = row(run, "G18")
    if truth["config"]["placement"] == "colocated":
        assert got["status"] == "passed" and got["value"] is None
    else:
        pools = truth["config"]["pools"]
        per_pool = [
            truth_idle_share(truth, "pool_wait", set(pools[p])) for p in ("rollout", "train")
        ]
        expected = sum(max(p[s] for p in per_pool) for s in windows) / len(windows)
        assert (got["status"], got["severity"]) == ("violated", "warn") and got[
            "value"
        ] == pytest.approx(expected, rel=SHARE_REL, abs=0)


def test_synthetic_runs_rollout_tail_and_parallel_layout(synthetic):
    _, run, truth = synthetic
    shares, unhidden = [], []
    for w in truth["step_windows"]:
        ends = sorted(
            max(
                s["end_ns"]
                for s in truth["stages"]
                if s["rank"] == r and s["step"] == w["step"] and s["stage"] == "rollout"
            )
            for r in {
                s["rank"]
                for s in truth["stages"]
                if s["step"] == w["step"] and s["stage"] == "rollout"
            }
        )
        start = min(
            s["start_ns"]
            for s in truth["stages"]
            if s["step"] == w["step"] and s["stage"] == "rollout"
        )
        median = (ends[(len(ends) - 1) // 2] + ends[len(ends) // 2]) // 2
        shares.append((ends[-1] - median) / (ends[-1] - start))
        prep = [
            (max(s["start_ns"], median), min(s["end_ns"], ends[-1]))
            for s in truth["stages"]
            if s["step"] == w["step"]
            and s["stage"] in PREP_STAGES
            and s["start_ns"] < ends[-1]
            and s["end_ns"] > median
        ]
        unhidden.append((ends[-1] - median - union_ns(prep)) / (ends[-1] - start))
    # measured: G2 and G12 within 8.7e-7 of these on the five runs (the traces hold µs); 5e-6 leaves
    # 6×
    assert row(run, "G2")["value"] == pytest.approx(sum(shares) / len(shares), abs=5e-6)
    assert row(run, "G12")["value"] == pytest.approx(sum(unhidden) / len(unhidden), abs=5e-6)
    layout = truth["config"]["layout"]
    expected = (layout["pp"] - 1) / (truth["config"]["micro_batches"] + layout["pp"] - 1)
    assert row(run, "G13")["value"] == pytest.approx(expected)
    hosts = {r["rank"]: r["host"] for r in truth["ranks"]}
    spanning = [
        g
        for g in truth["config"]["process_groups"]
        if g["dim"] == "tp" and len({hosts[r] for r in g["ranks"]}) > 1
    ]
    got = row(run, "G17")
    assert got["value"] == len(spanning)
    assert (got["status"], got["severity"]) == (
        ("violated", "error") if spanning else ("passed", None)
    )


def test_no_checkpoint_timer_is_zero_only_where_the_framework_would_log_one(tmp_path: Path):
    """G23 took a log without checkpoint or evaluation timers for a run that did none: right
    for verl, which logs timing_s/save_checkpoint and timing_s/testing when they happen, but
    DeepSpeed-Chat logs no such timer at all, and its 476 steps read 'passed: 0%'."""
    got = not_evaluated(logs_run(DSCHAT_LOG), "G23", "the deepspeed_chat profile names no log "
                        "timer of them: none is not zero")
    assert got["evidence"].startswith("needs a checkpoint + evaluation timer (the log has none")
    quiet = tmp_path / VERL_LOG.name
    quiet.write_text(re.sub(r"timing_s/(save_checkpoint|testing):\S+ ", "",
                            VERL_LOG.read_text()))
    assert "timing_s/save_checkpoint:" not in quiet.read_text()
    zero = passed(logs_run(quiet), "G23", 0.0)
    assert zero["evidence"].startswith("checkpoint_eval_share = 0% (log timers (no timer), ")
    violated = row(logs_run(VERL_LOG), "G23")
    assert violated["status"] == "violated" and violated["value"] == pytest.approx(0.2003, abs=1e-4)
