"""Run identity: sources of separate runs are never merged silently (docs/assembly.md, "Run
identity"). Each mixed case found on real inputs is refused with the runs listed, or split, and
every bundled sample — traces, logs, a controller, an nsys export of one run — stays one run."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path

import polars as pl
import pytest

import analyzer
from analyzer.assemble.ingest import ingest
from analyzer.assemble.runs import LOG_SLACK_NS, RunsError, choose, content, group, rows_sum
from parsers import InputError, ParsedSource

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
SAMPLES = sorted(p for p in (ROOT / "sample_traces" / "runs").iterdir() if p.is_dir())
SYNTHETIC = sorted(p for p in (ROOT / "sample_traces" / "synthetic").iterdir() if p.is_dir())
RL_INSIGHT = CORPUS / "rl-insight"
NSYS = CORPUS / "nsys-ai" / "mfu_2gpu_before.sqlite"
HOUR_NS = 3_600_000_000_000


@cache
def parsed(*paths: Path) -> tuple[ParsedSource, ...]:
    return tuple(ingest(list(paths)).sources)


def runs_of(*paths: Path) -> list[list[str]]:
    """The file names of each run found, in the order they are listed."""
    sources = list(parsed(*paths))
    runs, _ = group(sources)
    return [[sources[i].path.name for i in r.indexes] for r in runs]


def refusal(*paths: Path) -> RunsError:
    with pytest.raises(RunsError) as caught:
        choose(list(parsed(*paths)), None, paths)
    return caught.value


def test_a_deepspeed_chat_log_and_a_verl_log_are_two_runs() -> None:
    """The corpus logs folder: DeepSpeed-Chat (2023) and verl (2025) — merged, their steps were
    laid over each other (a median step of 66 million seconds). The verl-TPU log stops before
    its first step and states no time, but its printed config says a world of 1 (one TPU host)
    where the verl GPU run's says 16: a third run, not a part of the verl one."""
    found = runs_of(CORPUS / "logs")
    assert found == [
        ["step3_actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"],
        ["dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"],
        ["chrisytz-verl_ppo_xla-tpu_verl_demo.log"],
    ]
    error = refusal(CORPUS / "logs")
    assert str(error).splitlines()[0].endswith(
        "3 separate runs found (logs of different frameworks; world sizes that disagree); "
        "rlperf analyses one run at a time"
    )
    assert [r.number for r in error.runs] == [1, 2, 3]


def test_rl_insight_holds_one_jobs_role_windows_and_a_copy() -> None:
    """PROVENANCE.md: the ``actor_update__*`` files hold exactly the JSON of the
    ``actor_compute_log_prob__*`` ones (same trace id, pid, events and times): one capture saved
    twice, read once with a warning. What remains is two roles' profiling windows of one verl
    job — the vLLM replica's ``VLLM::Worker_TP0`` (ranks 0-1 of its world of 2, 03:17:59 for
    10.08 s) and the actor's ``ray::WorkerDict`` (ranks 0-1 of its world of 2, from 03:18:47),
    38 s apart: verl's role folders of one profiler folder (``<role>__`` prefixes), one run
    whose ranks each role uses in turn (they were refused as two runs)."""
    found = runs_of(RL_INSIGHT)
    assert found == [
        [
            "actor_compute_log_prob__prof_rank-0_031847.json.gz",
            "actor_compute_log_prob__prof_rank-1_031847.json.gz",
            "agent_loop_rollout_replica_0__huawei_372640.1771730291744166997.pt.trace.json.gz",
            "agent_loop_rollout_replica_0__huawei_372640.1771730370159969000.pt.trace.json.gz",
        ],
    ]
    run = analyzer.load([RL_INSIGHT])
    assert run.ranks == [0, 1] and len(run.sources) == 4
    copies = [w for w in run.warnings if "a copy of" in w]
    assert sorted(copies) == [
        f"actor_update__prof_rank-{r}_031904.json.gz: a copy of "
        f"actor_compute_log_prob__prof_rank-{r}_031847.json.gz "
        "(same ranks, events and time window, although its file-name prefix names actor_update "
        "(actor_update) and the other's file-name prefix actor_compute_log_prob (old_logprob)); "
        "read once"
        for r in (0, 1)
    ]


def test_the_hta_folder_is_nine_separate_captures() -> None:
    """Ten HTA test traces from 2022 to 2025: only ``sampled_rank-0``/``-1`` (ranks 0 and 1 of a
    world of 128, the same second) are one job; every other file is its own day."""
    found = runs_of(CORPUS / "HolisticTraceAnalysis")
    assert len(found) == 9
    assert ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"] in found
    assert all(len(r) == 1 for r in found if "sampled_rank-0.json.gz" not in r)


def test_two_nsys_captures_of_different_days_are_two_runs() -> None:
    """nsys-ai's two exports (two GPUs each, two days apart) made one 4-rank run."""
    assert runs_of(CORPUS / "nsys-ai") == [["h100_2gpu_1s.sqlite"], ["mfu_2gpu_before.sqlite"]]


def _shifted_copy(target: Path, hours: int) -> Path:
    shutil.copyfile(NSYS, target)
    with sqlite3.connect(target) as db:
        db.execute(
            "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?",
            (hours * HOUR_NS,),
        )
    return target


def test_the_same_nsys_session_at_another_time_is_another_run(tmp_path: Path) -> None:
    """One export and the same capture started three hours later: two sessions, two runs of two
    ranks each (merged: ranks 0 and 1 twice)."""
    shutil.copyfile(NSYS, tmp_path / "a.sqlite")
    _shifted_copy(tmp_path / "b.sqlite", 3)
    assert runs_of(tmp_path) == [["a.sqlite"], ["b.sqlite"]]
    run = analyzer.load([tmp_path], run="2")
    assert run.ranks == [0, 1] and [s.path.name for s in run.sources] == ["b.sqlite"]


def test_two_copies_of_one_nsys_capture_are_read_once(tmp_path: Path) -> None:
    """A byte copy is the same capture: one run of its two ranks, not four, with a warning."""
    shutil.copyfile(NSYS, tmp_path / "a.sqlite")
    shutil.copyfile(NSYS, tmp_path / "copy.sqlite")
    run = analyzer.load([tmp_path])
    assert run.ranks == [0, 1] and [s.path.name for s in run.sources] == ["a.sqlite"]
    assert any(w.startswith("copy.sqlite: a copy of a.sqlite") for w in run.warnings)
    single = analyzer.load([NSYS])
    assert run.events.height == single.events.height


def test_the_rows_digest_is_their_hashes_exact_sum_in_any_order() -> None:
    """10 000 rows' 64-bit hashes sum far past 2**64: a UInt64 sum wraps there (polars 2.1) and
    would error or lose digits to a float where another version promoted it."""
    rows = pl.DataFrame({"name": [f"k{i}" for i in range(10_000)], "end_ns": range(10_000)})
    exact = sum(rows.hash_rows(seed=0).to_list())
    assert exact > 1000 * 2**64
    assert rows_sum(rows) == exact
    assert rows_sum(rows.reverse()) == exact
    one = pl.col("end_ns") == 4321
    assert rows_sum(rows.with_columns(end_ns=pl.when(one).then(4322).otherwise("end_ns"))) != exact
    assert rows_sum(rows.head(0)) == 0


def test_a_capture_with_one_row_changed_is_not_a_copy() -> None:
    """The content digest alone tells copies apart (the counts, durations and names kept beside
    it were the rows' again): its rows reordered or renumbered are the capture, one end moved by
    1 ns is another."""
    source = replace(parsed(NSYS)[0], warnings=[])
    events = source.events
    assert events.height == 32_249
    renumbered = pl.lit(7, events["source"].dtype)
    same = replace(source, warnings=[], events=events.reverse().with_columns(source=renumbered))
    one = pl.int_range(pl.len()) == 500
    moved = replace(source, warnings=[], events=events.with_columns(
        end_ns=pl.when(one).then(pl.col("end_ns") + 1).otherwise("end_ns")
    ))
    assert content(same) == content(source) != content(moved)
    runs, reasons = group([source, moved])
    assert [r.indexes for r in runs] == [[0], [1]]
    assert reasons == ["rank 0 in more than one capture"]
    assert source.warnings == moved.warnings == []
    runs, _ = group([source, same])
    assert [r.indexes for r in runs] == [[0]]
    assert source.warnings == [
        f"{NSYS.name}: a copy of {NSYS.name} (same ranks, events and time window); read once"
    ]


def test_two_unrelated_kineto_traces_are_not_ranks_of_one_job() -> None:
    """HTA's NCCL test trace (rank 0, 2024) and TraceLens' SGLang decode (rank 0, 2026)."""
    nccl = CORPUS / "HolisticTraceAnalysis" / "nccl_data.json.gz"
    sglang = CORPUS / "TraceLens" / "sglang_Qwen3-8B_decode.json.gz"
    assert runs_of(nccl, sglang) == [["nccl_data.json.gz"], ["sglang_Qwen3-8B_decode.json.gz"]]
    error = refusal(nccl, sglang)
    assert "time windows that do not overlap" in str(error).splitlines()[0]
    chosen = analyzer.load([nccl, sglang], run=str(sglang))
    assert [s.path.name for s in chosen.sources] == [sglang.name] and chosen.ranks == [0]
    assert set(chosen.events["source"].unique().to_list()) == {0}


def test_overlapping_traces_that_both_state_rank_0_are_two_captures() -> None:
    """TraceLens' two SGLang captures overlap in time (17:14:24) but both are rank 0 of a world
    of 1: not one job's ranks."""
    a = CORPUS / "TraceLens" / "inference" / (
        "sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"
    )
    b = CORPUS / "TraceLens" / "sglang_Qwen3-8B_decode.json.gz"
    assert len(runs_of(a, b)) == 2
    assert "rank 0 in more than one capture" in str(refusal(a, b)).splitlines()[0]


@pytest.mark.parametrize(
    "folder", [*SAMPLES, *SYNTHETIC], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_every_bundled_sample_is_one_run(folder: Path) -> None:
    """Traces of every rank, the controller's trace, logs and nsys exports of one run."""
    inputs = tuple(p for p in sorted(folder.iterdir()) if p.is_dir()) or (folder,)
    sources = list(parsed(*inputs))
    runs, reasons = group(sources)
    assert len(runs) == 1, reasons
    assert runs[0].indexes == list(range(len(sources)))
    assert not any("a copy of" in w for s in sources for w in s.warnings)


def test_a_log_joins_traces_only_when_its_time_allows() -> None:
    """The verl sample's traces (2026) with a real verl log of 2025: the log's wall clock is a
    year off (beyond the ±14 h of an unknown time zone), so it is a run of its own; the
    sample's own log states no time and, the only log there, joins its traces."""
    traces = ROOT / "sample_traces" / "runs" / "verl_ppo_disaggregated" / "profile"
    own_log = traces.parent / "logs"
    foreign = CORPUS / "logs" / "verl"
    assert len(runs_of(traces, own_log)) == 1
    found = runs_of(traces, foreign)
    assert found == [
        ["dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"],
        sorted(p.name for p in traces.rglob("*.json.gz")),
    ]
    sources = list(parsed(traces, foreign))
    log = next(s for s in sources if s.path.parent == foreign)
    trace_start = min(int(s.events["start_ns"].min()) for s in sources if s is not log)
    assert trace_start - int(log.events["end_ns"].max()) > LOG_SLACK_NS


def test_a_choice_that_names_no_run_is_one_error_line() -> None:
    sources = list(parsed(CORPUS / "nsys-ai"))
    wanted = r"^--run: no run 3: the input holds 2 runs \(1-2\); give one of those numbers$"
    with pytest.raises(InputError, match=wanted):
        choose(sources, "3", [CORPUS / "nsys-ai"])
    with pytest.raises(InputError, match="no run has a file under"):
        choose(sources, str(CORPUS / "logs"), [CORPUS / "nsys-ai"])


def rlperf(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", *args],
        capture_output=True, text=True, timeout=300,
        env={"RLPERF_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}, cwd=ROOT,
    )


def test_the_cli_lists_the_runs_and_analyses_the_one_chosen(tmp_path: Path) -> None:
    """Exit 2 with the runs listed and how to choose; ``--run 2`` or a path prefix analyses one."""
    logs = CORPUS / "logs"
    refused = rlperf("analyze", str(logs), "-q", cache=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert lines[0].startswith(
        f"rlperf: error: {logs}: 3 separate runs found (logs of different frameworks; world "
        "sizes that disagree)"
    )
    assert (
        lines[1].startswith("  run 1: deepspeed-chat/step3_actor_opt-1.3b")
        and "deepspeed_chat log" in lines[1]
    )
    assert "~2023-04-18 08:48:01 UTC" in lines[1]
    assert (
        lines[2].startswith("  run 2: verl/dstack-configs")
        and "verl-log; verl log; ~2025-05-22" in lines[2]
    )
    assert lines[3] == (
        "  run 3: verl-tpu/chrisytz-verl_ppo_xla-tpu_verl_demo.log: verl-log; verl log; "
        "no wall-clock time"
    )
    assert lines[4].startswith("choose one with --run K") and len(lines) == 5
    chosen = rlperf("analyze", str(logs), "-q", "-f", "json", "--run", "2", cache=tmp_path)
    assert chosen.returncode == 0, chosen.stderr
    report = json.loads(chosen.stdout)
    assert [Path(s["path"]).parent.name for s in report["sources"]] == ["verl"]
    assert (
        "run 2 of 3 separate runs in the input (--run 2); the others are not analysed"
        in report["notes"]
    )
    by_prefix = rlperf(
        "analyze", str(logs), "-q", "-f", "json", "--run", str(logs / "deep"), cache=tmp_path
    )
    assert by_prefix.returncode == 0, by_prefix.stderr
    assert [Path(s["path"]).parent.name for s in json.loads(by_prefix.stdout)["sources"]] == [
        "deepspeed-chat"
    ]
    wrong = rlperf("analyze", str(logs), "-q", "--run", "5", cache=tmp_path)
    assert (
        wrong.returncode == 2
        and wrong.stderr.strip() == (
            "rlperf: error: --run: no run 5: the input holds 3 runs (1-3); "
            "give one of those numbers"
        )
    )


def test_a_file_name_prefix_chooses_the_run_holding_that_file() -> None:
    """``--run vllm_decode_full`` from another folder: no path starts with it, but file names
    do; a prefix of a path still wins, and a name prefix shared by runs is refused."""
    folder = CORPUS / "TraceLens" / "inference"
    sources = list(parsed(folder))
    chosen, _ = choose(sources, "sglang_prefilldecode", [folder])
    assert [s.path.name for s in chosen] == [
        "sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"
    ]
    with pytest.raises(InputError, match="'vllm' matches runs"):
        choose(sources, "vllm", [folder])


def test_a_role_is_said_to_come_from_where_it_was_read() -> None:
    from analyzer.assemble.runs import folder_role, role_place

    flat = Path("prof/actor_update__prof_rank-0_031904.json.gz")
    nested = Path("prof/actor_update/rank0.json.gz")
    assert (folder_role(flat), role_place(flat)) == ("actor_update", "file-name prefix")
    assert (folder_role(nested), role_place(nested)) == ("actor_update", "folder")
