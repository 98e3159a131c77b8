"""The committed sample runs are what they claim: real traces whose ranges, collectives, pools and
logs agree with the ground truth the harness measured (sample_traces/runs/*/truth.json)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import parsers
from parsers.events import COLLECTIVES, validate
from taxonomy.vocab import DIMENSIONS, IDLE_CAUSES, POOLS, ROLES, STAGE_NAMES

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "sample_traces" / "runs"
SCENARIOS = sorted(p.name for p in RUNS.iterdir() if (p / "truth.json").is_file())
KINETO = [s for s in SCENARIOS if s != "trl_grpo" and not s.endswith("_nsys")]
SIZE_BUDGET = 10 * 1024 * 1024
TOL_NS = 1_000_000
"""Analyzer contract: a stage's duration within 2% or 1 ms of the truth."""


def truth(name: str) -> dict[str, Any]:
    return json.loads((RUNS / name / "truth.json").read_text())


def annotations(path: Path) -> pl.DataFrame:
    src = parsers.parse_file(path)
    validate(src.events, where=str(path))
    return src.events.filter(pl.col("kind") == "annotation").with_columns(
        pl.col("name").cast(pl.String)
    )


def within(row: dict[str, Any], window: list[int]) -> bool:
    return window[0] <= row["start_ns"] and row["end_ns"] <= window[1]


def test_the_expected_runs_are_committed_within_budget() -> None:
    assert set(SCENARIOS) >= {
        "verl_grpo_colocated",
        "verl_ppo_disaggregated",
        "verl_grpo_one_step_off",
        "openrlhf_ppo_disaggregated",
        "verl_ppo_colocated_nsys",
        "trl_grpo",
    }
    total = sum(f.stat().st_size for f in RUNS.rglob("*") if f.is_file())
    assert 100_000 < total <= SIZE_BUDGET


@pytest.mark.parametrize("name", SCENARIOS)
def test_truth_is_self_consistent(name: str) -> None:
    t = truth(name)
    cfg = t["config"]
    assert (t["format"], t["synthetic"], t["generator"], t["scenario"]) == (
        "rlperf-truth/1", False, "sample_traces/harness", name)
    assert cfg["algorithm"] in ("grpo", "ppo") and cfg["placement"] in (
        "colocated",
        "disaggregated",
    )
    assert cfg["world_size"] == len({*cfg["pools"]["rollout"], *cfg["pools"]["train"]})
    assert t["clock"]["source"] == "time.time_ns"
    for entry in t["ranks"]:
        assert entry["pool"] in POOLS
        assert (RUNS / name / entry["trace"]).is_file()
    for log in t["logs"]:
        assert (RUNS / name / log).stat().st_size > 0
    for s in t["stages"]:
        assert s["start_ns"] < s["end_ns"]
        assert s["stage"] in STAGE_NAMES and s["role"] in ROLES
        assert 1 <= s["step"] <= cfg["steps"]
    starts = [s["start_ns"] for s in t["stages"]]
    assert starts == sorted(starts)
    for w in t["waits"]:
        assert w["cause"] in IDLE_CAUSES and w["start_ns"] < w["end_ns"]
    for c in t["collectives"]:
        assert c["coll"] in COLLECTIVES and c["dim"] in DIMENSIONS and c["bytes"] >= 0

    per_step: dict[int, set[str]] = defaultdict(set)
    for s in t["stages"]:
        per_step[s["step"]].add(s["stage"])
    need = {"rollout", "reward", "ref_logprob", "actor_update"}
    if cfg["style"] != "trl":
        need |= {"old_logprob", "advantage", "weight_sync"}
    if cfg["algorithm"] == "ppo":
        need |= {"values", "critic_update"}
    every = cfg["checkpoint_every"]
    assert set(range(every, cfg["steps"] + 1, every)) <= set(cfg["checkpoint_steps"])
    for step in range(1, cfg["steps"] + 1):
        assert per_step[step] >= need, (step, need - per_step[step])
        assert ("checkpoint" in per_step[step]) == (step in cfg["checkpoint_steps"])

    n_seq = cfg["prompts_per_step"] * cfg["group_size"]
    by_step: dict[int, list[int]] = defaultdict(list)
    for r in t["responses"]:
        by_step[r["step"]] += r["lengths"]
    assert sorted(by_step) == list(range(1, cfg["steps"] + 1))
    lengths = [n for ls in by_step.values() for n in ls]
    assert all(len(ls) == n_seq for ls in by_step.values())
    assert min(lengths) >= 1
    assert max(lengths) <= cfg["max_new_tokens"]
    assert len(set(lengths)) > 5, "lengths should vary naturally"


@pytest.mark.parametrize("name", [s for s in SCENARIOS if s != "trl_grpo"])
def test_steps_follow_the_algorithm_order(name: str) -> None:
    """On every rank, stages of one step run in dependency order."""
    t = truth(name)
    order = ["rollout", "old_logprob", "ref_logprob", "values", "critic_update", "actor_update",
             "checkpoint"]
    rows = defaultdict(list)
    for s in t["stages"]:
        if s["rank"] >= 0 and s["stage"] in order:
            rows[(s["rank"], s["step"])].append(s)
    for key, ss in rows.items():
        ss = sorted(ss, key=lambda s: s["start_ns"])
        seq = [order.index(s["stage"]) for s in ss]
        assert seq == sorted(seq), key
        for a, b in pairwise(ss):
            assert a["end_ns"] <= b["start_ns"], key


@pytest.mark.parametrize("name", KINETO)
def test_every_truth_range_is_in_its_rank_trace(name: str) -> None:
    """Each stage (and composite span) of a profiled step is a range of the same name in that
    rank's Kineto trace, enclosing the truth interval, with the same duration (2% or 1 ms)."""
    t = truth(name)
    profiled = set(t["config"]["profiled_steps"])
    for entry in t["ranks"]:
        ann = annotations(RUNS / name / entry["trace"])
        mine = [s for s in [*t["stages"], *t["spans"]] if s["rank"] == entry["rank"]]
        checked = 0
        for s in mine:
            if s["step"] not in profiled:
                continue
            hits = ann.filter((pl.col("name") == s["name"]) & (pl.col("start_ns") <= s["start_ns"])
                              & (pl.col("end_ns") >= s["end_ns"]))
            assert hits.height == 1, (entry["rank"], s["step"], s["name"])
            dur = hits["end_ns"][0] - hits["start_ns"][0]
            truth_dur = s["end_ns"] - s["start_ns"]
            # measured: at most 0.75 ms off (verl_ppo_disaggregated's update_weights), so 1.3x
            assert abs(dur - truth_dur) <= max(TOL_NS, 0.02 * truth_dur)
            checked += 1
        assert checked >= 3, entry


def test_nsys_capture_holds_every_range_on_its_process() -> None:
    name = next(s for s in SCENARIOS if s.endswith("_nsys"))
    t = truth(name)
    export = RUNS / name / t["ranks"][0]["export"]
    assert (RUNS / name / t["ranks"][0]["trace"]).suffix == ".nsys-rep"
    ann = annotations(export)
    for entry in t["ranks"]:
        mine = ann.filter(pl.col("pid") == entry["pid"])
        for s in [x for x in [*t["stages"], *t["spans"]] if x["rank"] == entry["rank"]]:
            hits = mine.filter((pl.col("name") == s["name"]) & (pl.col("start_ns") <= s["start_ns"])
                               & (pl.col("end_ns") >= s["end_ns"]))
            assert hits.height == 1, (entry["rank"], s["step"], s["name"])


@pytest.mark.parametrize("name", KINETO)
def test_collectives_of_the_truth_are_in_the_traces(name: str) -> None:
    """gloo in torch 2.13 writes no record_param_comms: a collective is a ``c10d::<op>`` CPU op on
    the calling thread plus a ``gloo:<op>`` annotation on a gloo worker thread, without group
    arguments; the groups are only in distributedInfo.pg_config."""
    t = truth(name)
    profiled = set(t["config"]["profiled_steps"])
    desc = {
        "dp": "mesh_dp",
        "weight_sync": "openrlhf" if t["config"]["style"] == "openrlhf" else "weight_sync",
    }
    kinds_seen = set()
    for entry in [e for e in t["ranks"] if e["rank"] >= 0]:
        src = parsers.parse_file(RUNS / name / entry["trace"])
        groups = {(g["pg_desc"], g["ranks"]) for g in src.meta["pg_config"]}
        ev = src.events.filter(pl.col("coll").is_not_null()).with_columns(
            pl.col("name").cast(pl.String), pl.col("coll").cast(pl.String))
        for c in t["collectives"]:
            if c["rank"] != entry["rank"] or c["step"] not in profiled:
                continue
            assert (desc.get(c["dim"], ""), c["pg_ranks"]) in groups or c["coll"] == "barrier"
            calls = ev.filter(
                (pl.col("kind") == "cpu_op")
                & (pl.col("coll") == c["coll"])
                & (pl.col("start_ns") >= c["start_ns"])
                & (pl.col("end_ns") <= c["end_ns"])
            )
            assert calls.height == 1, (entry["rank"], c)
            assert calls["name"][0].startswith("c10d::")
            kinds_seen.add((c["coll"], c["dim"]))
        assert ev.filter(pl.col("name").str.starts_with("gloo:")).height > 0
    expected = {("all_reduce", "dp"), ("barrier", "weight_sync")}
    expected.add(
        ("all_gather" if t["config"]["placement"] == "colocated" else "broadcast", "weight_sync")
    )
    assert kinds_seen >= expected


def test_one_step_off_overlaps_rollout_with_training() -> None:
    """Rollout of step k+1 (rollout pool) runs while the train pool works on step k, in the
    truth and in the traces' own timestamps."""
    name = "verl_grpo_one_step_off"
    t = truth(name)
    cfg = t["config"]
    ro_ranks, tr_ranks = set(cfg["pools"]["rollout"]), set(cfg["pools"]["train"])
    for k in range(1, cfg["steps"]):
        gen = [
            s
            for s in t["stages"]
            if s["stage"] == "rollout" and s["step"] == k + 1 and s["rank"] >= 0
        ]
        train = [s for s in t["stages"] if s["rank"] in tr_ranks and s["step"] == k]
        assert gen and all(g["rank"] in ro_ranks for g in gen)
        overlap = sum(max(0, min(g["end_ns"], s["end_ns"]) - max(g["start_ns"], s["start_ns"]))
                      for g in gen for s in train)
        assert overlap > 0.3 * sum(g["end_ns"] - g["start_ns"] for g in gen), k
    by_rank = {
        e["rank"]: annotations(RUNS / name / e["trace"]) for e in t["ranks"] if e["rank"] >= 0
    }
    gen = pl.concat([by_rank[r].filter(pl.col("name") == "generate_sequences") for r in ro_ranks])
    upd = pl.concat([by_rank[r].filter(pl.col("name").is_in(["compute_log_prob", "update_actor"]))
                     for r in tr_ranks])
    pairs = gen.join(upd, how="cross").filter(
        (pl.col("start_ns") < pl.col("end_ns_right"))
        & (pl.col("start_ns_right") < pl.col("end_ns"))
    )
    assert pairs.height >= 2


@pytest.mark.parametrize(
    "name", [s for s in SCENARIOS if truth(s)["config"]["placement"] == "disaggregated"]
)
def test_disaggregated_pools_are_disjoint(name: str) -> None:
    t = truth(name)
    ro, tr = set(t["config"]["pools"]["rollout"]), set(t["config"]["pools"]["train"])
    assert ro and tr and not ro & tr
    worker = [s for s in t["stages"] if s["rank"] >= 0]
    assert {s["rank"] for s in worker if s["stage"] == "rollout"} == ro
    train_stages = {
        "old_logprob",
        "ref_logprob",
        "values",
        "critic_update",
        "actor_update",
        "checkpoint",
    }
    assert {s["rank"] for s in worker if s["stage"] in train_stages} == tr
    assert {e["pool"] for e in t["ranks"] if e["rank"] in ro} == {"rollout"}
    assert {e["pool"] for e in t["ranks"] if e["rank"] in tr} == {"train"}
    sync = {
        int(r)
        for c in t["collectives"]
        if c["coll"] == "broadcast"
        for r in c["pg_ranks"].split(",")
    }
    assert sync & ro and sync & tr, "weight sync spans both pools"
    names = {
        e["rank"]: set(annotations(RUNS / name / e["trace"])["name"])
        for e in t["ranks"]
        if e["rank"] >= 0
    }
    gen_name = next(s["name"] for s in worker if s["stage"] == "rollout")
    upd_name = next(s["name"] for s in worker if s["stage"] == "actor_update")
    assert all(gen_name in names[r] and upd_name not in names[r] for r in ro)
    assert all(upd_name in names[r] and gen_name not in names[r] for r in tr)


@pytest.mark.parametrize("name", [s for s in SCENARIOS if s != "trl_grpo"])
def test_waits_sit_where_the_run_structure_puts_them(name: str) -> None:
    t = truth(name)
    own = defaultdict(list)
    for s in t["stages"]:
        own[s["rank"]].append(s)
    causes = {w["cause"] for w in t["waits"]}
    assert "weight_sync" in causes
    assert (
        "pool_wait" if t["config"]["placement"] == "disaggregated" else "rollout_tail"
    ) in causes
    for w in t["waits"]:
        inside = [
            s
            for s in own[w["rank"]]
            if s["start_ns"] <= w["start_ns"] and w["end_ns"] <= s["end_ns"]
        ]
        if w["cause"] == "weight_sync":
            assert [s["stage"] for s in inside] == ["weight_sync"]
        else:
            assert not inside, w


def test_trl_run_has_no_stage_annotations_but_real_steps_and_collectives() -> None:
    t = truth("trl_grpo")
    assert t["config"]["style"] == "trl" and t["config"]["annotated"] is False
    stage_names = {s["name"] for s in t["stages"]}
    assert {"GRPOTrainer.transformers.generate", "GRPOTrainer.compute_loss"} <= stage_names
    for entry in t["ranks"]:
        src = parsers.parse_file(RUNS / "trl_grpo" / entry["trace"])
        assert src.meta["rank"] == entry["rank"]
        names = set(src.events["name"].cast(pl.String))
        assert not names & stage_names
        assert {f"ProfilerStep#{k - 1}" for k in t["config"]["profiled_steps"]} <= names
        colls = set(src.events.filter(pl.col("coll").is_not_null())["coll"].cast(pl.String))
        assert {"all_reduce", "all_gather"} <= colls
        window = entry["profile_window_ns"]
        for s in t["stages"]:
            if (
                s["rank"] == entry["rank"]
                and s["step"] in t["config"]["profiled_steps"]
                and s["stage"] != "checkpoint"
            ):
                assert within(s, window), s


def _log_timers(path: Path) -> pl.DataFrame:
    src = parsers.parse_file(path)
    validate(src.events, where=str(path))
    return src.events.filter(pl.col("kind") == "log_stage").select(
        pl.col("name").cast(pl.String), "step", (pl.col("end_ns") - pl.col("start_ns")).alias("dur")
    )


@pytest.mark.parametrize("name", [s for s in SCENARIOS if truth(s)["config"]["style"] == "verl"])
def test_verl_log_states_the_driver_timers(name: str) -> None:
    t = truth(name)
    timers = _log_timers(RUNS / name / t["logs"][0])
    driver = [s for s in [*t["stages"], *t["spans"]] if s["rank"] == -1]
    assert len(driver) > 10
    for s in driver:
        hit = timers.filter(
            (pl.col("name") == f"timing_s/{s['name']}") & (pl.col("step") == s["step"])
        )
        assert hit.height == 1, (s["step"], s["name"])
        # the harness prints its timers in seconds with 9 decimals: measured 0 ns off on every
        # driver timer (1 µs was allowed, room for a seconds-to-ns conversion that truncates)
        assert hit["dur"][0] == s["end_ns"] - s["start_ns"], (s["step"], s["name"])


def test_openrlhf_log_states_the_four_timers() -> None:
    t = truth("openrlhf_ppo_disaggregated")
    timers = _log_timers(RUNS / "openrlhf_ppo_disaggregated" / t["logs"][0])
    driver = {
        (s["step"], s["name"]): s["end_ns"] - s["start_ns"]
        for s in [*t["stages"], *t["spans"]]
        if s["rank"] == -1
    }
    for step in range(1, t["config"]["steps"] + 1):
        for key in ("generation", "make_experience", "ppo_train", "broadcast"):
            hit = timers.filter((pl.col("name") == f"timing/{key}") & (pl.col("step") == step))
            # 9 decimals, as above
            assert hit.height == 1 and hit["dur"][0] == driver[(step, key)], (
                step,
                key,
            )


def test_trl_trainer_state_is_read_as_a_trl_log() -> None:
    src = parsers.parse_file(RUNS / "trl_grpo" / "logs" / "trainer_state.json")
    assert src.format == "trl-log"
    steps = set(src.metrics["step"].to_list())
    assert steps >= set(range(1, truth("trl_grpo")["config"]["steps"] + 1))


def test_harness_runs_a_short_scenario_end_to_end(tmp_path: Path) -> None:
    """A real two-rank colocated GRPO run (two steps, one profiled) writes traces that match."""
    from sample_traces.harness.run import run_scenario
    from sample_traces.harness.scenarios import SCENARIOS as HARNESS

    sc = replace(HARNESS["verl_grpo_colocated"], name="mini", steps=2, profiled_steps=(2,),
                 prompts_per_step=2, max_new_tokens=12)
    doc = run_scenario(sc, tmp_path / "mini")
    assert {s["stage"] for s in doc["stages"] if s["step"] == 2} >= {
        "rollout",
        "actor_update",
        "checkpoint",
    }
    for entry in doc["ranks"]:
        ann = annotations(tmp_path / "mini" / entry["trace"])
        assert doc["clock"]["per_rank"][str(entry["rank"])]["matched"] >= 5
        assert set(ann["name"]) >= {
            s["name"] for s in doc["stages"] if s["rank"] == entry["rank"] and s["step"] == 2
        }
