"""The findings list (analyzer/analyses/findings.py): on every bundled sample the top finding's
saving per step equals what the sample's ground truth says fixing it would save (within 5%,
derived from truth.json alone); ranking, merging of one problem seen twice, a clean run, a
logs-only run, a failing candidate product, and corpus files."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import analyzer
from analyzer.analyses import findings as fmod
from analyzer.analyses import guidelines as ga
from analyzer.analyses import queued
from analyzer.model import frames, products
from analyzer.report.sections import sections

REPO = Path(__file__).resolve().parents[1]
SYNTH = REPO / "sample_traces" / "synthetic"
RUNS = REPO / "sample_traces" / "runs"
CORPUS = REPO.parent / "shared" / "corpus"


# --- ground truth, from truth.json only ----------------------------------------------------------


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in _union(intervals))


def _clip(intervals: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


def synth_pool_wait(truth: dict[str, Any]) -> float:
    """The smaller pool's mean pool wait per device and step (what overlapping saves)."""
    pool = {r["rank"]: r["pool"] for r in truth["ranks"]}
    steps = len(truth["step_windows"])
    means = []
    for name in ("rollout", "train"):
        ranks = [r for r, p in pool.items() if p == name]
        total = sum(d["idle_ns"]["pool_wait"] for d in truth["devices"] if d["rank"] in ranks)
        means.append(total / (len(ranks) * steps))
    return min(means)


def synth_idle(cause: str):
    def mean(truth: dict[str, Any]) -> float:
        devices = truth["devices"]
        return sum(d["idle_ns"][cause] for d in devices) / len(devices)

    return mean


def synth_update_comm(truth: dict[str, Any]) -> float:
    """DP/FSDP collective time minus its sync wait per participating device and step: the
    generator runs no compute beside these collectives (blocking gathers hold the compute
    cursor; the non-blocking reduce-scatter overlaps only the next chunk's gather)."""
    dims = ("dp", "fsdp")
    ranks = {r for g in truth["config"]["process_groups"] if g["dim"] in dims for r in g["ranks"]}
    rows = [c for c in truth["collectives_by_dim"] if c["dim"] in dims]
    steps = len(truth["step_windows"])
    return sum(c["time_ns"] - c["wait_ns"] for c in rows) / (len(ranks) * steps)


def harness_stage_gap(truth: dict[str, Any]) -> float:
    """Per rank and profiled step: the span from its first to its last stage range of the step
    less every stage range and every wait the run's structure explains (pool wait, rollout
    tail), i.e. the gaps between stages; mean over devices and steps."""
    steps = truth["config"]["profiled_steps"]
    ranks = [r["rank"] for r in truth["ranks"] if r["rank"] >= 0]
    total = 0
    for rank in ranks:
        mine = [s for s in truth["stages"] if s["rank"] == rank]
        covered = [(s["start_ns"], s["end_ns"]) for s in mine]
        covered += [(w["start_ns"], w["end_ns"]) for w in truth["waits"] if w["rank"] == rank]
        for step in steps:
            own = [s for s in mine if s["step"] == step]
            lo, hi = min(s["start_ns"] for s in own), max(s["end_ns"] for s in own)
            total += (hi - lo) - _length(_clip(covered, lo, hi))
    return total / (len(ranks) * len(steps))


def harness_pool_wait(truth: dict[str, Any]) -> float:
    """The smaller pool's pool wait per device and step over the profiled steps: each wait
    clipped to the union of the profiled steps' windows (first to last stage range of the
    step, any rank), which one-step-off overlaps — a wait inside two windows is counted once,
    and one that ends in step N+1's rollout still happened during the steps analysed."""
    steps = truth["config"]["profiled_steps"]
    windows = [(min(s["start_ns"] for s in truth["stages"] if s["step"] == n),
                max(s["end_ns"] for s in truth["stages"] if s["step"] == n)) for n in steps]
    means = []
    for ranks in truth["config"]["pools"].values():
        waits = [(w["start_ns"], w["end_ns"]) for w in truth["waits"]
                 if w["cause"] == "pool_wait" and w["rank"] in ranks]
        inside = [c for lo, hi in _union(windows) for c in _clip(waits, lo, hi)]
        means.append(sum(e - s for s, e in inside) / (len(ranks) * len(steps)))
    return min(means)


# The problem the truth says is the largest, and how it says so. The ids are the finding's
# problem (taxonomy/findings.toml): the guideline leads the merged finding when violated.
TRUTH = {
    SYNTH / "colocated": ({"G16", "comm.exposed.update"}, synth_update_comm),
    SYNTH / "disaggregated": ({"G18", "bubble.pool_wait"}, synth_pool_wait),
    SYNTH / "one_step_off": ({"G18", "bubble.pool_wait"}, synth_pool_wait),
    RUNS / "verl_grpo_one_step_off": ({"G18", "bubble.pool_wait"}, harness_pool_wait),
    SYNTH / "stage_fused": ({"G24", "bubble.stage_gap"}, synth_idle("stage_gap")),
    RUNS / "openrlhf_ppo_disaggregated": ({"G24", "bubble.stage_gap"}, harness_stage_gap),
    RUNS / "verl_grpo_colocated": ({"G24", "bubble.stage_gap"}, harness_stage_gap),
    RUNS / "verl_ppo_colocated_nsys": ({"G24", "bubble.stage_gap"}, harness_stage_gap),
    RUNS / "verl_ppo_disaggregated": ({"G24", "bubble.stage_gap"}, harness_stage_gap),
    RUNS / "verl_ppo_multiprocess_nsys": ({"G24", "bubble.stage_gap"}, harness_stage_gap),
}
# trl_grpo is left out: its committed truth records no collective calls, and its top finding
# is its exposed gloo communication (16.6 ms per rank and step). The harness now records the
# Python collectives (truth.paired_collectives, tested below) for the next regeneration; DDP's
# gradient all-reduce (24 of the 98 gloo calls) runs in its C++ reducer and stays unrecorded.
TRACE_KINDS = ("guideline", "bubble", "what-if", "sync", "communication")
"""rlperf's own trace-derived candidates; the slow-step candidates (outlier_findings, from the
log's step timers) are checked against their own generator truth in tests/test_outliers.py."""


def top_traced(run: analyzer.Run) -> dict[str, Any]:
    return run.findings.filter(pl.col("kind").is_in(TRACE_KINDS)).row(0, named=True)


@pytest.mark.parametrize("sample", sorted(TRUTH), ids=lambda p: p.name)
def test_top_finding_saves_what_the_truth_says(sample: Path) -> None:
    ids, truth_saving = TRUTH[sample]
    truth = json.loads((sample / "truth.json").read_text())
    top = top_traced(analyzer.load([sample]))
    assert top["id"] in ids
    expected = truth_saving(truth)
    assert expected > 0
    assert top["saving_ns"] == pytest.approx(expected, rel=0.05)
    assert top["position"] >= 1 and top["saving_basis"]


def test_the_truth_largest_problem_of_a_synthetic_run_is_first() -> None:
    """Against every saving the synthetic truth can give, the first finding is the largest."""
    truth = json.loads((SYNTH / "disaggregated" / "truth.json").read_text())
    options = {
        "pool_wait": synth_pool_wait(truth),
        "stage_gap": synth_idle("stage_gap")(truth),
        "sync_wait": synth_idle("sync_wait")(truth),
        "host_bound": synth_idle("host_bound")(truth),
        "rollout_tail": synth_idle("rollout_tail")(truth),
    }
    assert max(options, key=options.__getitem__) == "pool_wait"
    run = analyzer.load([SYNTH / "disaggregated"])
    first = run.findings.row(0, named=True)
    assert first["id"] == "G18" and first["position"] == 1
    assert first["saving_fraction"] == pytest.approx(
        first["saving_ns"] / (run.steps["end_ns"] - run.steps["start_ns"]).mean(), rel=1e-9
    )


# --- ranking and merging -------------------------------------------------------------------------


def cand(fid: str, saving: int | None, severity: str = "warn", kind: str = "bubble",
         stage: str = "", evidence: str = "", on: str = "trace") -> dict[str, Any]:
    return {"id": fid, "kind": kind, "title": fid, "severity": severity, "ranks": "",
            "steps": "", "stage": stage, "evidence": evidence or f"{fid} evidence",
            "saving_ns": saving, "saving_basis": "" if saving is None else f"{fid} basis",
            "measured_on": on, "recommendation": "", "confidence": "medium"}


def frame(*rows: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=frames.FINDING_CANDIDATES, orient="row")


def test_ranked_by_saving_then_severity() -> None:
    out = fmod.rank(frame(cand("a", 5), cand("b", None, "info"), cand("c", 9),
                          cand("d", None, "error"), cand("e", 5)), {"trace": 100.0})
    assert out["id"].to_list() == ["c", "a", "e", "d", "b"]
    assert out["position"].to_list() == [1, 2, 3, 4, 5]
    assert out["saving_fraction"].to_list()[:3] == [0.09, 0.05, 0.05]
    assert out.schema == frames.FINDINGS


def test_a_saving_is_a_share_of_the_steps_it_is_measured_on() -> None:
    """A log candidate's saving is per log step: its share is of the log's mean step, a trace
    candidate's of the trace's; without the source's steps there is no share."""
    out = fmod.rank(frame(cand("t", 50), cand("l", 50, on="log")), {"trace": 100.0, "log": 400.0})
    assert out.select("id", "saving_fraction").rows() == [("t", 0.5), ("l", 0.125)]
    out = fmod.rank(frame(cand("l", 50, on="log")), {"trace": 100.0, "log": None})
    assert out["saving_fraction"].to_list() == [None]


def test_one_problem_seen_twice_is_one_finding() -> None:
    problem = fmod.Problem("rollout_tail", ("G2", "workdepth.no_rollout_tail",
                                            "bubble.rollout_tail"),
                           ("G2", "workdepth.no_rollout_tail", "bubble.rollout_tail"))
    rows = frame(
        cand("bubble.rollout_tail", 900, "info", evidence="idle 0.9"),
        cand("other", 500),
        cand("G2", None, "warn", kind="guideline", evidence="tail_share 40%"),
        cand("workdepth.no_rollout_tail", 400, "info", kind="what-if", stage="rollout",
             evidence="no tail 0.4"),
        cand("other", 7),
    )
    out = fmod.deduplicate(rows, [problem])
    assert out["id"].to_list() == ["G2", "other"]
    merged = out.row(0, named=True)
    assert merged["saving_ns"] == 400
    assert merged["saving_basis"] == "workdepth.no_rollout_tail basis"
    assert merged["severity"] == "warn" and merged["stage"] == "rollout"
    assert merged["evidence"] == "tail_share 40%; no tail 0.4; idle 0.9"
    assert out.row(1, named=True)["saving_ns"] == 500


def test_a_generic_finding_inside_a_stage_is_not_merged() -> None:
    problem = fmod.Problem("host_bound", ("bubble.host_bound", "gpu.host_bound"),
                           ("bubble.host_bound", "gpu.host_bound"))
    rows = frame(cand("gpu.host_bound", 50, kind="gpu", stage="rollout"),
                 cand("bubble.host_bound", 30), cand("gpu.host_bound", 70, kind="gpu"))
    out = fmod.deduplicate(rows, [problem])
    assert out.select("id", "stage", "saving_ns").rows() == [
        ("gpu.host_bound", "rollout", 50), ("bubble.host_bound", "", 30)]


def test_a_problem_names_a_stage_s_generic_finding_as_id_at_stage() -> None:
    """G16 and the exposed communication the generic check finds inside actor_update are one
    problem; the same check inside rollout is rollout's detail and stays."""
    problem = fmod.Problem("update_comm", ("G16", "gpu.exposed_comm@actor_update"), ("G16",))
    rows = frame(cand("G16", 40, kind="guideline"),
                 cand("gpu.exposed_comm", 30, kind="gpu", stage="actor_update"),
                 cand("gpu.exposed_comm", 20, kind="gpu", stage="rollout"))
    out = fmod.deduplicate(rows, [problem])
    assert out.select("id", "stage", "saving_ns").rows() == [
        ("G16", "", 40), ("gpu.exposed_comm", "rollout", 20)]
    assert out["evidence"][0] == "G16 evidence; gpu.exposed_comm evidence"


def test_rules_refuse_a_candidate_in_two_problems(tmp_path: Path) -> None:
    bad = tmp_path / "findings.toml"
    bad.write_text('[[problem]]\nkey="a"\nmembers=["x","y"]\n[[problem]]\nkey="b"\n'
                   'members=["y"]\n')
    with pytest.raises(fmod.FindingRulesError, match="more than one problem: y"):
        fmod.rules(bad)


# --- whole runs ----------------------------------------------------------------------------------


def test_a_run_with_nothing_wrong_has_no_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    run = analyzer.load([SYNTH / "colocated"])
    empty_violations = run.violations.filter(pl.col("status") != "violated")
    run.inject(violations=empty_violations)
    for name in ("bubbles", "workdepth", "weight_sync", "stragglers", "collective_waits",
                 "gpu_findings", "outlier_findings", "efficiency_findings"):
        run.inject(**{name: run.product(name).clear()})
    assert run.findings.height == 0
    section = next(s for s in sections(run) if s.name == "findings")
    assert section.frame is None and section.note.startswith("nothing found to fix")


def test_findings_come_first_in_every_report() -> None:
    run = analyzer.load([SYNTH / "stage_fused"])
    built = sections(run)
    assert built[0].name == "findings" and built[0].key == "findings"
    assert built[0].frame is not None and built[0].frame["position"][0] == 1


def test_a_logs_only_run_ranks_the_log_guidelines() -> None:
    logs = CORPUS / "logs" / "verl"
    if not logs.exists():
        pytest.skip("corpus not present")
    run = analyzer.load([logs])
    found = run.findings
    assert run.failures == {}
    g23 = found.filter(pl.col("id") == "G23").row(0, named=True)
    v = run.violations.filter(pl.col("id") == "G23").row(0, named=True)
    assert g23["measured_on"] == "log"
    assert g23["saving_ns"] == pytest.approx(v["value"] * _log_mean(run), rel=1e-6)
    assert g23["saving_fraction"] == pytest.approx(v["value"], rel=1e-6)
    assert found.filter(pl.col("id") == "G15")["saving_ns"].to_list() == [None]
    assert found["position"].to_list() == list(range(1, found.height + 1))


def test_a_failing_candidate_product_leaves_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**_: Any) -> pl.DataFrame:
        raise ZeroDivisionError("boom")

    registry = dict(products._PROVIDERS)
    registry["gpu_findings"] = replace(registry["gpu_findings"], fn=broken)
    monkeypatch.setattr(products, "_PROVIDERS", registry)
    run = analyzer.load([SYNTH / "stage_fused"])
    found = run.findings
    assert found["id"][0] == "G24"
    assert "findings: gpu_findings" in run.failures
    assert not found["id"].str.starts_with("gpu.").any()
    note = next(s for s in sections(run) if s.name == "findings").note
    assert "failed: internal error" in note and "ZeroDivisionError: boom" in note


def test_a_failing_family_of_its_own_leaves_the_others() -> None:
    run = analyzer.load([SYNTH / "one_step_off"])
    run.inject(bubbles=run.bubbles.drop("idle_ns"))
    found = run.findings
    assert "findings: idle causes" in run.failures
    g5 = found.filter(pl.col("id") == "G5").row(0, named=True)
    assert g5["saving_ns"] == run.weight_sync["time_ns"].mean()
    assert found.filter(pl.col("kind") == "gpu").height > 0


def test_a_product_nobody_provides_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = fmod.rules()
    monkeypatch.setattr(fmod, "rules", lambda: fmod.Rules(
        (*rules.products, "nobody_provides_this"), rules.min_saving_fraction, rules.error,
        rules.warn, rules.problems, rules.share_saving, rules.superseded, rules.finding))
    run = analyzer.load([SYNTH / "stage_fused"])
    assert run.findings.height > 0 and run.failures == {}


@pytest.mark.parametrize("name", ["rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                                  "inference_rank_1.json.gz", "nccl_data.json.gz"])
def test_corpus_traces_give_a_sensible_list(name: str) -> None:
    path = CORPUS / "HolisticTraceAnalysis" / name
    if not path.exists():
        pytest.skip("corpus not present")
    run = analyzer.load([path])
    found = run.findings
    assert run.failures == {}
    assert found.height > 0
    assert found["position"].to_list() == list(range(1, found.height + 1))
    savings = found["saving_ns"].drop_nulls().to_list()
    assert savings == sorted(savings, reverse=True)
    assert found["severity"].is_in(["info", "warn", "error"]).all()
    assert found["confidence"].is_in(["low", "medium", "high"]).all()


def _log_mean(run: analyzer.Run) -> float:
    """The log's mean step without its warm-up and profiler steps (not steady steps)."""
    left_out = run.step_outliers.filter(
        (pl.col("source") == "log") & pl.col("kind").is_in(["warmup", "profiler"]))["step"]
    log = run.log_steps.filter(~pl.col("step").is_in(left_out.implode()))
    return float(log["wall_s"].mean()) * 1e9


@pytest.mark.parametrize("sample", [*sorted(p for p in SYNTH.iterdir() if p.is_dir()),
                                    *sorted(p for p in RUNS.iterdir() if p.is_dir())],
                         ids=lambda p: p.name)
def test_every_saving_share_is_of_its_own_steps_and_at_most_one(sample: Path) -> None:
    """A log-measured saving (slow log steps) over the log's mean step, a trace one over the
    trace's: once log savings were divided by the trace's median step (111–240%)."""
    run = analyzer.load([sample])
    found = run.findings.filter(pl.col("saving_ns").is_not_null())
    trace_mean = float((run.steps["end_ns"] - run.steps["start_ns"]).mean())
    base = {"trace": trace_mean, "log": _log_mean(run) if run.log_steps.height else None}
    for r in found.iter_rows(named=True):
        assert r["saving_fraction"] == pytest.approx(r["saving_ns"] / base[r["measured_on"]],
                                                     rel=1e-9), r["id"]
    assert (found["saving_fraction"] <= 1).all()
    assert found["measured_on"].is_in(["trace", "log"]).all()


def test_the_trl_truth_writer_pairs_collective_calls_across_ranks() -> None:
    """The n-th Python collective of each rank is one instance; a rank's wait is from its entry
    to the last member's; its step the rank's step at entry."""
    from sample_traces.harness.truth import paired_collectives

    ranks = [
        {"rank": 0, "steps": [{"step": 1, "start_ns": 0}, {"step": 2, "start_ns": 100}],
         "collectives": [{"coll": "all_gather", "index": 0, "start_ns": 10, "end_ns": 40},
                         {"coll": "broadcast", "index": 1, "start_ns": 120, "end_ns": 130}]},
        {"rank": 1, "steps": [{"step": 1, "start_ns": 0}, {"step": 2, "start_ns": 100}],
         "collectives": [{"coll": "all_gather", "index": 0, "start_ns": 30, "end_ns": 41},
                         {"coll": "broadcast", "index": 1, "start_ns": 105, "end_ns": 131}]},
    ]
    rows = paired_collectives(ranks)
    assert [(r["rank"], r["instance"], r["step"], r["wait_ns"]) for r in rows] == [
        (0, 0, 1, 20), (1, 0, 1, 0), (1, 1, 2, 15), (0, 1, 2, 0)]
    assert paired_collectives([{"rank": 0, "steps": []}]) == []


# --- corpus regressions: what a new user was told (issue 13) -------------------------------------

TRACELENS = CORPUS / "TraceLens"
SGLANG_DECODE = TRACELENS / "sglang_Qwen3-8B_decode.json.gz"
CAPTURE = TRACELENS / "inference" / (
    "vllm_decode_full__capture_traces__graph_capture_rank_0.1773709742341309550.pt.trace.json.gz")
CUDA_GRAPHS = "enforce_eager=False"


def _corpus(*paths: Path, run: int | None = None) -> analyzer.Run:
    if not all(p.exists() for p in paths):
        pytest.skip("corpus not present")
    return analyzer.load(list(paths), run=run)


def _note(run: analyzer.Run) -> str:
    return next(s for s in sections(run) if s.title == "Findings").note or ""


def test_a_graph_capture_trace_gets_no_idle_saving_and_one_finding_that_says_why() -> None:
    """A vLLM capture trace opened with 'GPUs idle … 100%' and 'use CUDA graphs': the idle
    candidates (58.4 ms host-bound, 57.5 ms idle gaps) measure capture, not serving."""
    found = _corpus(CAPTURE).findings
    assert found.filter(pl.col("id").is_in(list(fmod.rules().capture_drops))).height == 0
    capture = found.filter(pl.col("id") == "trace.graph_capture").row(0, named=True)
    assert capture["position"] == 1 and capture["saving_ns"] is None
    assert "421 launches captured" in capture["evidence"]
    assert "58.4 ms" in capture["evidence"]
    assert not found["recommendation"].str.contains(CUDA_GRAPHS).any()


@pytest.mark.parametrize(("name", "idle", "lag"), [
    ("vllm_decode_full__graph_execution.json.gz", "2.41 ms", "7.83 ms"),
    ("vllm_prefilldecode_piecewise__graph_execution.json.gz", "26.4 ms", "149 ms"),
])
def test_a_trace_that_replays_cuda_graphs_is_not_told_to_use_them(name: str, idle: str,
                                                                  lag: str) -> None:
    """vLLM graph replays: the host-bound idle (2.41 ms, 12.6%, the top finding at error) was
    the host's stage range before the first recorded GPU work, which started 7.83 ms after its
    launch returned (a 1.54 ms hipGraphLaunch among them): the host ran ahead, nothing to save."""
    found = _corpus(TRACELENS / "inference" / name).findings
    host = found.filter(pl.col("id") == "bubble.host_bound").row(0, named=True)
    assert host["saving_ns"] is None and host["severity"] == "info"
    assert host["title"] == "GPU idle inside stages, not waiting for a launch (the host ran ahead)"
    assert (f"host_bound idle = {idle} per device and step" in host["evidence"]
            and f"{idle} before rank 0's first recorded GPU work, which started {lag} after its "
                "launch returned" in host["evidence"])
    assert host["recommendation"].startswith("Nothing to cut on the host")
    assert not found["recommendation"].str.contains(CUDA_GRAPHS).any()


def test_host_bound_idle_with_its_work_queued_saves_only_the_wait_for_a_launch() -> None:
    """HTA's sampled rank 0: of 271 ms host-bound idle per step, 154 ms had its closing work
    launched long before (fbgemm kernels launched at 378 ms ran at 434 ms); 116 ms is saved."""
    found = _corpus(CORPUS / "HolisticTraceAnalysis" / "sampled_rank-0.json.gz").findings
    host = found.filter(pl.col("id") == "bubble.host_bound").row(0, named=True)
    assert host["saving_ns"] == pytest.approx(116.48e6, rel=0.001)
    assert "271 ms per device and step" in host["evidence"]
    assert "154 ms of it not waiting for a launch" in host["evidence"]
    assert "the GPU waited for a launch 116 ms" in host["evidence"]


def test_an_inference_trace_gets_no_training_advice() -> None:
    """sglang decode (rollout-only, an engine's trace) was told 'more DataLoader workers'."""
    run = _corpus(SGLANG_DECODE)
    assert fmod.workload(run.sources, run.placement, run.profile).kind == "inference"
    advice = " ".join(run.findings["recommendation"].to_list())
    assert "DataLoader" not in advice and "pin_memory" not in advice
    assert "micro-batch" not in advice


def test_one_gap_queued_behind_a_stream_wait_is_one_finding_without_a_saving() -> None:
    """sglang decode: one 463 ms gap was findings 1-3 (host-bound 464 ms, idle gaps 463 ms),
    then one sync finding saving 463 ms; but a 463 ms hipMemcpyWithStream covers it while
    resolve_future_token_ids_kernel, launched after a hipStreamWaitEvent, waits 463 ms to
    start: the host waited for the GPU, which waited for another stream. One info finding says
    so, with no saving (tests/test_gpu_findings.py checks the numbers on the prefill trace)."""
    found = _corpus(SGLANG_DECODE).findings
    sync = found.filter(pl.col("id") == "gpu.sync_blocking").row(0, named=True)
    assert sync["saving_ns"] is None and sync["severity"] == "info"
    assert "hipMemcpyWithStream" in sync["evidence"]
    assert "463 ms of it with launched work queued" in sync["evidence"]
    assert "queued behind a stream wait event (hipStreamWaitEvent" in sync["evidence"]
    idle = ["bubble.host_bound", "gpu.host_bound", "gpu.idle_gaps"]
    assert found.filter(pl.col("id").is_in(idle)).height == 0


@pytest.mark.parametrize(("path", "lacks"), [
    (CORPUS / "VERL-Maze" / "verl_demo.log", "no step recorded and no trace (logs only)"),
    (CORPUS / "alpa" / "report1.nsys-rep", "no step recorded and no GPU kernel in the trace"),
])
def test_inputs_with_nothing_to_analyse_say_what_they_lack(path: Path, lacks: str) -> None:
    run = _corpus(path)
    assert run.findings.height == 0
    note = _note(run)
    assert note.startswith(f"nothing to analyse: {lacks}")
    assert "nothing found to fix" not in note


def test_the_rl_insight_stubs_have_nothing_to_analyse() -> None:
    run = _corpus(CORPUS / "rl-insight", run=1)
    assert _note(run).startswith("nothing to analyse: no step recorded and no GPU kernel")


@pytest.mark.parametrize(("path", "window_s"), [
    (CORPUS / "nvFuser" / "report1.sqlite", 7.32),
    (CORPUS / "nsys-ai" / "h100_2gpu_1s.sqlite", None),
])
def test_without_steps_a_saving_is_of_the_whole_trace(path: Path, window_s: float | None) -> None:
    """No steps: 'Saving/step 3.16 s' was a whole-trace saving with no share; now it says so
    and its share is of the trace window (first to last event of the ranks)."""
    run = _corpus(path)
    assert run.steps.height == 0
    ranked = run.events.filter(pl.col("rank") >= 0)
    window = float(ranked["end_ns"].max() - ranked["start_ns"].min())
    if window_s is not None:
        assert window / 1e9 == pytest.approx(window_s, abs=0.005)
    saved = run.findings.filter(pl.col("saving_ns").is_not_null())
    assert saved.height > 0
    for r in saved.iter_rows(named=True):
        assert r["saving_basis"].startswith("saving (whole trace, ")
        assert r["saving_fraction"] == pytest.approx(r["saving_ns"] / window, rel=1e-9)
    assert "saving (whole trace)" in _note(run)


def test_checkpointing_seen_by_a_guideline_and_the_slow_steps_is_one_finding() -> None:
    """verl log: G23 (2.67 s) and 'Slow steps: checkpoint grew' (2.62 s) were two findings."""
    found = _corpus(*sorted((CORPUS / "logs" / "verl").glob("*.log"))).findings
    assert found.filter(pl.col("id") == "step.slow.log.checkpoint").height == 0
    g23 = found.filter(pl.col("id") == "G23").row(0, named=True)
    assert g23["position"] == 1 and g23["saving_ns"] == pytest.approx(2.667e9, rel=0.001)
    assert "checkpoint" in g23["evidence"] and "slow:" in g23["evidence"]


def test_the_world_group_of_pure_dp_is_the_dp_finding() -> None:
    """nccl_data (2 ranks of DDP, one group, default_pg): 'World-group communication is not
    hidden' (13.1 ms per step) and G16's 'Overlap DP/FSDP gradient …' were two findings of one
    all-reduce. Its world group is its DP group, as compare reads it: one finding, G16's, with
    the saving of the exposed transfer."""
    run = _corpus(CORPUS / "HolisticTraceAnalysis" / "nccl_data.json.gz")
    waits = run.collective_waits
    assert waits["dim"].cast(pl.String).unique().to_list() == ["world"]
    ids = run.findings["id"].to_list()
    assert "comm.exposed.world" not in ids and "comm.exposed.update" not in ids
    g16 = run.findings.filter(pl.col("id") == "G16").row(0, named=True)
    assert g16["title"] == "Overlap DP/FSDP gradient and parameter communication with compute"
    transfer = waits.filter(pl.col("step").is_not_null()).select(
        (pl.col("exposed_ns") - pl.col("wait_ns")).clip(lower_bound=0).sum())
    assert g16["saving_ns"] <= transfer.item() / run.steps.height
    assert g16["saving_ns"] == pytest.approx(13.1e6, rel=0.01)


def test_overlapping_savings_say_so() -> None:
    """mi250_minitoy: host-bound 83.8% and idle gaps 71.4% of its one step (the 49 µs stub
    after it left out) are the same idle time in part."""
    run = _corpus(CORPUS / "HolisticTraceAnalysis" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    found = run.findings
    assert found["id"].to_list()[:2] == ["bubble.host_bound", "gpu.idle_gaps"]
    assert found["saving_fraction"].to_list()[:2] == pytest.approx([0.838, 0.714], abs=0.001)
    assert found["evidence"][1].endswith("overlaps finding 1 (the same GPU idle time, counted "
                                         "by another bound)")
    assert "overlaps finding" not in found["evidence"][0]
    assert "Savings overlap and do not add up." in _note(run)


def test_a_rank_whose_first_gpu_work_has_no_launch_is_not_behind() -> None:
    """The first GPU work decides whether a rank ran behind its host, matched to a launch or
    not: a kernel without a launch call (1-2 µs) came before one queued 500 µs, so the 1 µs of
    host-bound idle before it is a wait for the host, not the device's unrecorded past."""
    events = pl.DataFrame({
        "rank": [0, 0, 0], "kind": ["kernel", "kernel", "runtime"], "stream": [7, 7, -1],
        "corr": [1, 2, 2], "start_ns": [1_000, 500_000, 50], "end_ns": [2_000, 501_000, 100],
    })
    runs = pl.DataFrame({"rank": [0], "start_ns": [0], "end_ns": [1_000]})
    wait = queued.split(runs, events, 100_000)
    assert (wait.waited_ns, wait.queued_ns, wait.behind_ns) == (1_000, 0, 0)


NCCL_DATA = CORPUS / "HolisticTraceAnalysis" / "nccl_data.json.gz"


def test_plain_ddp_training_gets_no_controller_advice_for_its_stage_gaps() -> None:
    """HTA's nccl_data (plain DDP, ProfilerStep#4-6, no RL stage or driver): the forward pass
    is no stage, so its idle is stage_gap (91.6 ms/step, 41.2%), and it was told 'Batch the
    controller's remote calls, keep large tensors off the object store'."""
    run = _corpus(NCCL_DATA)
    gap = run.findings.filter(pl.col("id") == "bubble.stage_gap").row(0, named=True)
    assert gap["saving_ns"] == pytest.approx(91.56e6, rel=0.001)
    assert gap["title"] == "Devices idle between the recognised stages"
    advice = gap["recommendation"]
    assert "controller's" not in advice and "object store" not in advice
    assert "no controller recorded (framework generic, no driver range)" in gap["evidence"]
    assert "most of it in ## forward ## (90.3 ms per device and step, 98.6% of this idle)" \
        in gap["evidence"]
    assert not fmod.workload(run.sources, run.placement, run.profile,
                             run.product("stage_ranges"), fmod.rules().controllers).controller


def test_a_controller_run_keeps_the_dispatch_advice() -> None:
    """verl's driver ranges: its stage gaps are dispatch time, advice about the controller."""
    run = analyzer.load([RUNS / "verl_grpo_colocated"])
    work = fmod.workload(run.sources, run.placement, run.profile, run.product("stage_ranges"))
    assert work.controller and work.framework == "verl"
    assert fmod.rules().advice("bubble.stage_gap", work).startswith("Batch the controller's")


def test_the_controller_frameworks_are_g24s() -> None:
    g24 = ga.load_catalogue()["G24"]
    assert fmod.rules().controllers == frozenset(g24.applies_to.frameworks)


RANK34 = CORPUS / "HolisticTraceAnalysis" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def test_overlapping_collectives_on_one_rank_count_once() -> None:
    """rank-34 (CPU-only gloo) runs two all-reduces at once on two threads inside its one
    step: their exposed time is the union of the two calls, not their sum (344 ms in a 210 ms
    step before), so the saving stays within the step."""
    with gzip.open(RANK34, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    (step,) = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    calls = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("name") == "gloo:all_reduce" and e.get("ph") == "X" and lo <= e["ts"] < hi]
    assert len(calls) == 2
    union_us = _length(_union(calls))
    assert union_us < sum(b - a for a, b in calls)
    found = analyzer.load([RANK34]).product("findings")
    row = found.filter(pl.col("id") == "comm.exposed.unknown").row(0, named=True)
    assert row["saving_ns"] / 1e3 == pytest.approx(union_us, abs=1)
    assert row["saving_fraction"] <= 1
    assert row["title"] == "Unattributed communication is not hidden behind compute"
    assert "UNKNOWN" not in " ".join(found["title"].to_list())
