"""rl-insight's verl profiler headers (corpus/rl-insight, PROVENANCE.md): per-role profiling
windows of one verl job — the actor's ``ray::WorkerDict`` (``actor_compute_log_prob``,
``actor_update``) and one agent-loop rollout replica's vLLM worker ``VLLM::Worker_TP0``
(``agent_loop_rollout_replica_0``). Each test holds what the files themselves state."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import analyzer
from analyzer.assemble.ingest import ingest
from analyzer.assemble.runs import RunsError, group, role_stage

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RL_INSIGHT = CORPUS / "rl-insight"
ROLLOUT = RL_INSIGHT / (
    "agent_loop_rollout_replica_0__huawei_372640.1771730291744166997.pt.trace.json.gz"
)
ACTOR = RL_INSIGHT / "actor_compute_log_prob__prof_rank-0_031847.json.gz"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


def _process_names(path: Path) -> list[str]:
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    return [e["args"]["name"] for e in events if e.get("name") == "process_name"]


# --- the rollout engine's worker ---------------------------------------------------------------


def test_the_vllm_worker_process_is_the_rollout_engine() -> None:
    """The rollout header records one ``aten::lift_fresh`` and no engine op; its process calls
    itself ``VLLM::Worker_TP0`` (vLLM's process title for tensor-parallel worker 0). It was read
    as the ``generic`` framework; the title names the vLLM engine, a rollout process."""
    assert _process_names(ROLLOUT) == ["VLLM::Worker_TP0"]
    run = analyzer.load([ROLLOUT])
    assert run.profile["name"] == "vllm"
    assert role_stage("VLLM::Worker_TP0") == "rollout"
    assert role_stage("VLLM::EngineCore_DP0") == "rollout"
    assert role_stage("agent_loop_rollout_replica_0") == "rollout"


def test_the_actor_worker_process_names_verl() -> None:
    """``ray::WorkerDict.actor_rollout_compute_log_prob`` is verl's fused Ray worker: the actor
    headers (no annotation at all) are verl's, not ``generic``."""
    assert _process_names(ACTOR) == ["ray::WorkerDict.actor_rollout_compute_log_prob"]
    assert analyzer.load([ACTOR]).profile["name"] == "verl"


# --- the span of a run -------------------------------------------------------------------------

DAY_NS = 86_400 * 10**9


def _trace_span_ns(path: Path) -> tuple[int, int]:
    """The ``PyTorch Profiler (0)`` span (category ``Trace``) on the epoch clock, in ns."""
    with gzip.open(path) as f:
        doc = json.load(f)
    span = next(e for e in doc["traceEvents"] if e.get("cat") == "Trace")
    start = doc["baseTimeNanoseconds"] + round(span["ts"] * 1000)
    return start, start + round(span["dur"] * 1000)


def _shifted(path: Path, target: Path, ns: int) -> Path:
    """``path`` with its base time moved by ``ns``: the same capture taken at another time."""
    with gzip.open(path) as f:
        doc = json.load(f)
    doc["baseTimeNanoseconds"] += ns
    target.write_text(json.dumps(doc))
    return target


def test_a_run_lasts_its_profiler_window() -> None:
    """The rollout header's one operator lasts 1.987 µs; its profiler's ``Trace`` span, 10.08 s.
    The run's window was the operator's (listed 'for 1.99 µs'); it is the profiler's."""
    start, end = _trace_span_ns(ROLLOUT)
    assert end - start == 10_083_720_389
    runs, _ = group(list(ingest([ROLLOUT]).sources))
    assert [g.window for g in runs] == [(start, end)]


def test_the_run_listing_says_the_profiler_window(tmp_path: Path) -> None:
    """The rollout header beside the same capture a day later: two runs, each listed for the
    10.1 s its profiler ran, from the span's start (03:17:59, not the operator's 03:18:02)."""
    later = _shifted(ROLLOUT, tmp_path / "later.json", DAY_NS)
    with pytest.raises(RunsError) as caught:
        analyzer.load([ROLLOUT, later])
    lines = str(caught.value).splitlines()
    assert lines[1].endswith("kineto; rank 0; 2026-02-22 03:17:59 UTC for 10.1 s"), lines
    assert lines[2].endswith("kineto; rank 0; 2026-02-23 03:17:59 UTC for 10.1 s"), lines


# --- one job's per-role profiling windows are one run --------------------------------------------

QUARTER_NS = 7_889_238 * 10**9
"""Kineto's ``baseTimeNanoseconds`` is the start of the 3-month interval the process started in
(libkineto ChromeTraceBaseTime: ``floor<_trimonths>(now)``): every trace of that quarter has it."""
ACTOR_1 = RL_INSIGHT / "actor_compute_log_prob__prof_rank-1_031847.json.gz"
ROLLOUT_1 = RL_INSIGHT / (
    "agent_loop_rollout_replica_0__huawei_372640.1771730370159969000.pt.trace.json.gz"
)


def _names(paths: list[Path]) -> list[list[str]]:
    sources = list(ingest(paths).sources)
    runs, _ = group(sources)
    return [sorted(sources[i].path.name for i in g.indexes) for g in runs]


def _moved(path: Path, target: Path, us: float) -> Path:
    """``path`` with every event ``us`` later, same base time: the same process's next window."""
    with gzip.open(path) as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] += us
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc))
    return target


def test_the_base_time_is_a_quarter_not_a_job() -> None:
    """All six files state 1767189312000000000 ns: 2025-12-31 13:55:12 UTC, 224 × 7,889,238 s,
    the quarter's start Kineto rounds every trace to. Shared by any run of those months, it tells
    no job apart; it only rules out traces of another quarter."""
    bases = set()
    for path in RL_INSIGHT.glob("*.json.gz"):
        with gzip.open(path) as f:
            bases.add(json.load(f)["baseTimeNanoseconds"])
    assert bases == {1_767_189_312_000_000_000} and 1_767_189_312_000_000_000 % QUARTER_NS == 0


def test_the_role_windows_of_one_verl_job_are_one_run() -> None:
    """verl profiled the rollout replica (03:17:59, 10.08 s) and then the actor (03:18:47, 10.08
    s): 38 s apart, so they were refused as '2 separate runs'. Their files are role folders of
    one profiler folder (flattened to ``<role>__`` prefixes), so they are one run of ranks 0-1,
    each rank used by both roles in turn; the actor_update files are copies, read once."""
    run = analyzer.load([RL_INSIGHT])
    assert run.ranks == [0, 1]
    assert sorted(s.path.name for s in run.sources) == [
        ACTOR.name, ACTOR_1.name, ROLLOUT.name, ROLLOUT_1.name,
    ]
    assert run.profile["name"] == "verl"
    assert run.steps.height == 0
    note = next(n for n in run.notes if "profiling windows" in n)
    assert note.startswith(
        "one run of 2 roles' profiling windows: agent_loop_rollout_replica_0 (rollout, ranks "
        "0-1); actor_compute_log_prob (old_logprob, ranks 0-1)."
    )
    rollout_end = _trace_span_ns(ROLLOUT)[1]
    with gzip.open(ACTOR) as f:
        doc = json.load(f)
    actor_start = doc["baseTimeNanoseconds"] + round(min(
        e["ts"] for e in doc["traceEvents"] if e.get("ph") in ("X", "i")) * 1000)
    assert (actor_start - rollout_end) / 1e9 == pytest.approx(38.04, abs=0.01)
    assert "38 s between the windows was recorded by no profiler" in note
    assert sum("a copy of" in w for w in run.warnings) == 2


def test_the_same_roles_next_window_is_another_run(tmp_path: Path) -> None:
    """The rollout replica's window again 10 min later (same base time, same folder): a
    profiler schedule that saves rank 0 twice. One role's two windows are two runs."""
    later = _moved(ROLLOUT, tmp_path / "agent_loop_rollout_replica_0__later.json", 600e6)
    first = tmp_path / ROLLOUT.name
    first.write_bytes(ROLLOUT.read_bytes())
    assert _names([tmp_path]) == [[first.name], [later.name]]


def test_roles_of_two_profiler_folders_are_two_runs(tmp_path: Path) -> None:
    """The rollout and actor windows under two different profiler folders: nothing ties them."""
    for folder, path in (("a", ROLLOUT), ("b", ACTOR)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / path.name).write_bytes(path.read_bytes())
    assert len(_names([tmp_path])) == 2


def test_roles_hours_apart_are_two_runs(tmp_path: Path) -> None:
    """The actor's window moved 2 h later, same folder and base time: beyond one step's reach."""
    (tmp_path / ROLLOUT.name).write_bytes(ROLLOUT.read_bytes())
    _moved(ACTOR, tmp_path / ACTOR.name.replace(".gz", ""), 7200e6)
    assert len(_names([tmp_path])) == 2


def test_two_roles_on_one_rank_at_once_are_two_runs(tmp_path: Path) -> None:
    """The actor's window moved onto the rollout's: both roles' rank 0 at the same time is two
    processes, not one device used in turn."""
    (tmp_path / ROLLOUT.name).write_bytes(ROLLOUT.read_bytes())
    shift = (_trace_span_ns(ROLLOUT)[0] - 1_771_730_327_315_462_515) / 1000
    _moved(ACTOR, tmp_path / ACTOR.name.replace(".gz", ""), shift)
    with pytest.raises(RunsError) as caught:
        analyzer.load([tmp_path])
    assert "rank 0 in two roles' captures at once" in str(caught.value).splitlines()[0]
