"""``rlperf compare``: the same metrics side by side, deltas against the first run, the winner.

Two synthetic runs of the same job (colocated vs disaggregated) are compared; every delta must
equal the difference of the numbers computed straight from each run's ground truth (truth.json,
docs/analyses.md), and GPU busy time comes from the real analysis of the real traces.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
from report_truth import RUNS, cli, load_truth, synthetic, synthetic_run, truth_stage_share

from analyzer.ops.compare import TIE_TOLERANCE, compare, default_labels
from analyzer.report.comparison import display

LABELS = ["colocated", "disaggregated"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("synthetic")
    return [synthetic(root, scenario) for scenario in LABELS]


@pytest.fixture(scope="module")
def result(folders):
    return compare([synthetic_run(f) for f in folders], LABELS)


def idle_fractions(truth: dict) -> dict[str, float]:
    window = sum(d["window_ns"] for d in truth["devices"])
    idle: dict[str, int] = defaultdict(int)
    for device in truth["devices"]:
        for cause, ns in device["idle_ns"].items():
            idle[cause] += ns
    return {cause: ns / window for cause, ns in idle.items()}


def stage_time_per_step(truth: dict) -> dict[str, float]:
    """Per stage: Σ over steps of (its time summed over the ranks running it / those ranks), ÷
    steps."""
    per_step: dict[tuple[int, str], int] = defaultdict(int)
    ranks: dict[tuple[int, str], set[int]] = defaultdict(set)
    steps = {row["step"] for row in truth["stage_durations"]}
    for row in truth["stage_durations"]:
        if row["duration_ns"] > 0:
            per_step[row["step"], row["stage"]] += row["duration_ns"]
            ranks[row["step"], row["stage"]].add(row["rank"])
    out: dict[str, float] = defaultdict(float)
    for key, ns in per_step.items():
        out[key[1]] += ns / len(ranks[key]) / len(steps)
    return out


def row(result, metric: str) -> dict:
    found = [r for r in result.table.iter_rows(named=True) if r["metric"] == metric]
    assert len(found) == 1, metric
    return found[0]


def test_idle_deltas_are_the_truths(result, folders):
    a, b = (idle_fractions(load_truth(f)) for f in folders)
    for cause in ("pool_wait", "rollout_tail", "sync_wait", "stage_gap", "weight_sync"):
        r = row(result, f"idle.{cause}")
        assert r["colocated"] == pytest.approx(a[cause], abs=1e-12)
        assert r["delta disaggregated"] == pytest.approx(b[cause] - a[cause], abs=1e-12)
    # a disaggregated pool waits for the other pool; a colocated one never does
    pool_wait = row(result, "idle.pool_wait")
    assert pool_wait["colocated"] == 0 and pool_wait["delta disaggregated"] > 0.2
    assert pool_wait["winner"] == "colocated"


def test_stage_and_busy_deltas_are_the_truths(result, folders):
    ta, tb = (load_truth(f) for f in folders)
    a, b = stage_time_per_step(ta), stage_time_per_step(tb)
    for stage in ("rollout", "actor_update", "weight_sync"):
        r = row(result, f"stage.{stage}")
        assert r["delta disaggregated"] == pytest.approx(b[stage] - a[stage], rel=1e-9)
        close = abs(a[stage] - b[stage]) <= TIE_TOLERANCE * min(a[stage], b[stage])
        assert r["winner"] == (
            "tie" if close else "colocated" if a[stage] < b[stage] else "disaggregated"
        )
    busy = row(result, "overview.gpu_busy_ns")
    expected = [sum(d["busy_ns"] for d in t["devices"]) for t in (ta, tb)]
    assert busy["colocated"] == expected[0]
    assert busy["delta disaggregated"] == expected[1] - expected[0]
    assert busy["change disaggregated"] == pytest.approx((expected[1] - expected[0]) / expected[0])


def test_wins_and_display(result):
    wins = result.wins()
    assert set(wins) == set(LABELS)
    directed = [r for r in result.table.iter_rows(named=True) if r["winner"] not in (None, "tie")]
    assert sum(len(w) for w in wins.values()) == len(directed)
    shown = display(result)
    assert shown.columns == ["metric", "colocated", "disaggregated", "better", "winner"]
    pool = shown.filter(shown["metric"] == "idle (pool_wait)").row(0, named=True)
    assert " (+" in pool["disaggregated"] and pool["disaggregated"].endswith(" pp)")


def test_labels():
    assert default_labels([Path("/a/run1"), Path("/b/run2")]) == ["run1", "run2"]
    assert default_labels([Path("/a/x/run"), Path("/b/y/run")]) == ["x/run", "y/run"]
    assert default_labels([Path("/a/run"), Path("/a/run")]) == ["run", "run #2"]
    with pytest.raises(ValueError):
        compare([], ["a"])


def truth_overview(truth: dict) -> dict[str, float]:
    """The headline numbers (docs/reports.md) a synthetic run's truth.json gives directly."""
    windows = [w["end_ns"] - w["start_ns"] for w in truth["step_windows"]]
    devices, pool = truth["devices"], {r["rank"]: r["pool"] for r in truth["ranks"]}

    def idle(pools: set[str]) -> float:
        mine = [d for d in devices if pool[d["rank"]] in pools]
        return sum(sum(d["idle_ns"].values()) for d in mine) / sum(d["window_ns"] for d in mine)

    work: dict[int, int] = defaultdict(int)
    for d in devices:
        work[d["step"]] += d["productive_busy_ns"]
    depth = {c["step"]: c["length_ns"] for c in truth["critical_path"]}
    return {
        "ranks": len({r["rank"] for r in truth["ranks"] if r["rank"] >= 0}),
        "steps": len(windows),
        "step_time_ns": statistics.median(windows),
        "step_time_max_ns": max(windows),
        "gpu_busy_ns": sum(d["busy_ns"] for d in devices),
        "gpu_step_idle_fraction": 1 - sum(d["busy_ns"] for d in devices)
        / sum(d["window_ns"] for d in devices),
        "idle_fraction": idle({"train", "rollout", "shared"}),
        "trainer_idle_fraction": idle({"train", "shared"}),
        "rollout_idle_fraction": idle({"rollout", "shared"}),
        "weight_sync_share": truth_stage_share(truth, {"weight_sync"}),
        "parallelism": statistics.mean(work[s] / depth[s] for s in depth),
    }


NO_TRUTH = {"gpu_idle_fraction", "exposed_comm_ns", "guideline_errors", "guideline_warnings",
            "finding_errors", "finding_warnings"}
"""Overview metrics truth.json holds no number for (the HTA-sense GPU window, exposed time, the
guideline verdicts and the findings' severities): held to each run's own ``analyze`` report
instead."""

OVERVIEW_REL = 1e-12
"""Measured: every truth-backed overview value and delta of the two runs equals the truth bit for
bit (integer ns sums and their ratios); 1e-12 leaves only float summation order, while one ns
off in a 150 ms window is 7e-9."""


def test_cli_json_overview_is_the_truths(tmp_path: Path, folders):
    """The real analyses through ``rlperf compare``: each run's headline numbers and the deltas
    are the ones its truth.json gives; the rest are each run's own ``analyze`` report."""
    done = cli(
        "compare",
        *map(str, folders),
        *(a for label in LABELS for a in ("--label", label)),
        "--format",
        "json",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["runs"] == LABELS and document["baseline"] == LABELS[0]
    truths = [truth_overview(load_truth(f)) for f in folders]
    reports = []
    for path in folders:
        out = tmp_path / f"{path.name}.json"
        assert (
            cli("analyze", str(path), "--format", "json", "-o", str(out), "--quiet").returncode == 0
        )
        reports.append({r["metric"]: r["value"] for r in json.loads(out.read_text())["overview"]})
    overview = {
        m["metric"].removeprefix("overview."): m
        for m in document["metrics"]
        if m["metric"].startswith("overview.")
    }
    assert set(overview) == set(truths[0]) | NO_TRUTH
    for name, metric in overview.items():
        want = [t[name] for t in truths] if name in truths[0] else [r[name] for r in reports]
        assert all(w is not None for w in want), name
        assert metric["values"] == {
            LABELS[0]: pytest.approx(want[0], rel=OVERVIEW_REL, abs=0),
            LABELS[1]: pytest.approx(want[1], rel=OVERVIEW_REL, abs=0),
        }, name
        assert metric["delta"][LABELS[1]] == pytest.approx(
            want[1] - want[0], rel=OVERVIEW_REL, abs=0
        ), name


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_cli_formats(tmp_path: Path, fmt: str):
    out = tmp_path / f"compare.{fmt}"
    done = cli("compare", str(RUNS / "verl_grpo_colocated"), str(RUNS / "verl_ppo_disaggregated"),
               "--format", fmt, "-o", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "verl_grpo_colocated" in text and "verl_ppo_disaggregated" in text
    assert "wins" in text


def test_cli_bad_usage():
    """One line each, in the form of every other refusal (they were Click's usage box)."""
    done = cli("compare", str(RUNS / "verl_grpo_colocated"), "--quiet")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["rlperf: error: compare: give at least two runs to compare"]
    done = cli(
        "compare", str(RUNS / "verl_grpo_colocated"), str(RUNS / "trl_grpo"), "-l", "a", "--quiet"
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "rlperf: error: --label: 1 given for 2 runs: give one label per run"]


def test_sample_runs_colocated_vs_disaggregated():
    """The real analyses on the real sample runs: a colocated pool idles at the rollout tail and
    never waits for another pool; a disaggregated one waits for the other pool and has no shared
    rollout tail — as the waits each run's harness recorded say."""
    import analyzer

    names = ["verl_grpo_colocated", "verl_ppo_disaggregated"]
    result = compare([analyzer.load([RUNS / n]) for n in names], names)
    recorded = [{w["cause"] for w in load_truth(RUNS / n)["waits"]} for n in names]
    assert recorded == [{"rollout_tail", "weight_sync"}, {"pool_wait", "weight_sync"}]
    for cause in ("rollout_tail", "pool_wait"):
        r = row(result, f"idle.{cause}")
        assert [r[n] > 0 for n in names] == [cause in causes for causes in recorded]
        assert r["winner"] == (names[1] if cause == "rollout_tail" else names[0])
