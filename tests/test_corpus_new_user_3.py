"""A new user's third pass over real files nobody here wrote: two verl logs of different runs
read as copies of each other (one silently dropped), a three-way comparison that called a shared
best a tie, a host-bound finding that named a stage's time "its GPU window", and a ``--layout``
that could not fit the run accepted without a word. Each test holds one of them to the numbers
and lines the files themselves give."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from report_truth import rlperf

import analyzer
from analyzer.assemble.ingest import ingest
from analyzer.assemble.runs import RunsError, choose, group
from analyzer.model.units import duration
from analyzer.ops.compare import compare, default_labels

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
TPU_LOG = CORPUS / "logs" / "verl-tpu" / "chrisytz-verl_ppo_xla-tpu_verl_demo.log"
MAZE_LOG = CORPUS / "VERL-Maze" / "verl_demo.log"
HTA = CORPUS / "HolisticTraceAnalysis"
PAIR = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
"""HTA's one 2-rank job (ranks 0 and 1 of a world of 128, the same second)."""
THREE = [HTA / n for n in ("event_sync_trace.json.gz",
                           "mi250_minitoy_train_ROCm6_2_kineto.json.gz", "nccl_data.json.gz")]
"""Two traces without a collective (exposed communication 0) and NCCL's test trace."""

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


@pytest.fixture()
def mixed(tmp_path: Path) -> Path:
    """The two verl logs in one folder, as the user had them."""
    for log in (TPU_LOG, MAZE_LOG):
        shutil.copyfile(log, tmp_path / log.name)
    return tmp_path


# --- 1. copies are the same capture, not the same amount of nothing ----------------------------


def test_two_logs_without_events_or_clock_are_two_runs_not_copies(mixed: Path) -> None:
    """937,732 B of a TPU run that stops in its first rollout and 26,697 B of a GPU run that
    crashes at line 264: neither has an event, a metric row or a wall clock, which made their
    fingerprints equal and the second "a copy of" the first. They are two runs (their stated
    batch sizes, 128 and 256, disagree), each with its own warning."""
    assert [(mixed / p.name).stat().st_size for p in (TPU_LOG, MAZE_LOG)] == [937_732, 26_697]
    sources = list(ingest([mixed], use_cache=False).sources)
    assert [(s.events.height, s.metrics.height) for s in sources] == [(0, 0), (0, 0)]
    assert [s.meta["train_batch_size"] for s in sources] == [128, 256]
    runs, reasons = group(sources)
    assert [[sources[i].path.name for i in r.indexes] for r in runs] == [
        [TPU_LOG.name], [MAZE_LOG.name]
    ]
    assert reasons == ["log configurations that disagree"]
    assert not any("a copy of" in w for s in sources for w in s.warnings)
    with pytest.raises(RunsError) as caught:
        choose(sources, None, [mixed])
    assert str(caught.value).splitlines()[0].endswith(
        "2 separate runs found (log configurations that disagree); "
        "rlperf analyses one run at a time"
    )


def test_the_crashed_maze_log_keeps_its_warning(mixed: Path, capsys) -> None:
    status, out, err = rlperf(capsys, "analyze", str(mixed), "--run", "verl_demo", "--no-cache")
    assert status == 0, err
    assert out.startswith("rlperf — 1 source, 0 ranks")
    assert ("warning: verl_demo.log: no step record: the run failed before its first step "
            "(traceback at line 264)") in " ".join(out.split())
    assert TPU_LOG.name not in out
    assert "a copy of" not in out + err


def test_the_tpu_log_is_a_run_of_the_corpus_logs() -> None:
    """``--run chrisytz`` over the corpus' logs and VERL-Maze answered "no run has a file under
    'chrisytz'": the TPU log had been dropped as a copy of the Maze log."""
    sources = list(ingest([CORPUS / "logs", CORPUS / "VERL-Maze"], use_cache=False).sources)
    picked, notes = choose(sources, "chrisytz", [CORPUS / "logs", CORPUS / "VERL-Maze"])
    assert [s.path.name for s in picked] == [TPU_LOG.name]
    assert notes == [
        "run 4 of 4 separate runs in the input (--run chrisytz); the others are not analysed"
    ]


def test_a_byte_copy_of_a_log_is_still_read_once(tmp_path: Path) -> None:
    shutil.copyfile(MAZE_LOG, tmp_path / "a.log")
    shutil.copyfile(MAZE_LOG, tmp_path / "b.log")
    sources = list(ingest([tmp_path], use_cache=False).sources)
    runs, reasons = group(sources)
    assert [r.indexes for r in runs] == [[0]] and reasons == []
    assert "b.log: a copy of a.log (same ranks, events and time window); read once" in (
        sources[0].warnings
    )


def test_a_meta_whose_keys_cannot_be_ordered_still_tells_copies(tmp_path: Path) -> None:
    """The digest reads the meta as JSON with sorted keys; a dict keyed by ranks and names at
    once cannot be sorted, and must neither raise nor hide a copy."""
    for name in ("a.log", "b.log"):
        shutil.copyfile(MAZE_LOG, tmp_path / name)
    sources = list(ingest([tmp_path], use_cache=False).sources)
    for s in sources:
        s.meta["mixed"] = {0: "rank", "name": 1}
        s.warnings.clear()
    runs, _ = group(sources)
    assert [r.indexes for r in runs] == [[0]]
    assert sources[0].warnings == [
        "b.log: a copy of a.log (same ranks, events and time window); read once"
    ]


# --- 2. compare: "tie" is every run; a shared best names the runs --------------------------------


@pytest.fixture(scope="module")
def three():
    return compare([analyzer.load([p]) for p in THREE], default_labels(THREE))


def _row(result, metric: str) -> dict:
    return result.table.filter(result.table["metric"] == metric).row(0, named=True)


def test_two_of_three_sharing_the_best_are_named_not_a_tie(three) -> None:
    sync, mi250, nccl = three.labels
    exposed = _row(three, "overview.exposed_comm_ns")
    assert [exposed[k] for k in (sync, mi250)] == [0.0, 0.0] and exposed[nccl] > 0
    assert exposed["winner"] == f"{sync}, {mi250}"
    errors = _row(three, "overview.guideline_errors")
    # event_sync_trace has no RL stage: no guideline is evaluated, so it has no count to win with
    assert [errors[k] for k in three.labels] == [None, 0.0, 0.0] and errors["winner"] == "tie"
    step = _row(three, "overview.step_time_ns")
    # mi250's 9.288 ms is its one step: the 49 µs stub after it, where the profiler stopped, is
    # left out (it made the median 4.67 ms)
    assert [step[k] for k in three.labels] == [3_154_000, 9_288_291, 222_442_191]
    # three unrelated traces: their work per step is 352× apart, so no step time wins
    assert step["winner"] == "not comparable (work per step 352.2× apart)"
    wins = three.wins()
    assert all("step time (median)" not in titles for titles in wins.values())
    assert all("exposed communication" not in titles for titles in wins.values())


def test_two_runs_sharing_the_best_are_a_tie() -> None:
    pair = THREE[:2]
    result = compare([analyzer.load([p]) for p in pair], default_labels(pair))
    assert _row(result, "overview.exposed_comm_ns")["winner"] == "tie"


# --- 3. the host-bound finding says which window it measured -----------------------------------


def test_host_bound_in_a_stage_names_the_stage_not_the_gpu_window(capsys) -> None:
    """The most host-bound rank is rank 1 (rank 0's gaps with launched work queued are not the
    host's): its GPU window is 1.23 s (gpu_time); 887 ms is its time in actor_update, which the
    stage row's evidence once called "its GPU window"."""
    run = analyzer.load(PAIR)
    window = run.gpu_time.filter(run.gpu_time["rank"] == 1)["gpu_window_ns"].item()
    assert duration(window) == "1.23 s"
    rows = run.gpu_findings.filter(run.gpu_findings["id"] == "gpu.host_bound")
    evidence = dict(zip(rows["stage"].to_list(), rows["evidence"].to_list(), strict=True))
    assert "rank 1: " in evidence[""]
    assert "293 ms in 245 gaps ≥ 10 µs = 23.8% of its GPU window (1.23 s)" in evidence[""]
    assert "= 28.0% of its time in actor_update (887 ms)" in evidence["actor_update"]
    status, out, err = rlperf(capsys, "analyze", *map(str, PAIR), "--no-cache", "-q")
    assert status == 0, err
    assert "(887 ms)" in out and "GPU window (887 ms)" not in " ".join(out.split())


# --- 4. --layout that cannot fit the run is refused ----------------------------------------------


@pytest.mark.parametrize(
    ("layout", "need"),
    [("tp=3", "a multiple of 3"), ("tp=4", "a multiple of 4"), ("tp=2,pp=2", "a multiple of 4"),
     ("dp=4", "exactly 4")],
)
def test_a_layout_that_cannot_fit_two_ranks_is_refused(layout: str, need: str, capsys) -> None:
    status, out, err = rlperf(capsys, "analyze", *map(str, PAIR), "--layout", layout,
                              "--no-cache", "-q")
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"rlperf: error: --layout: {layout} needs {need} ranks in the pool it describes, but "
        "the run has 2 ranks; give degrees that fit, or leave --layout out"
    ]


def test_a_layout_that_fits_is_used(capsys) -> None:
    status, _, err = rlperf(capsys, "analyze", *map(str, PAIR), "--layout", "tp=2",
                            "--no-cache", "-q")
    assert status == 0, err


def test_ingest_tells_the_two_logs_apart_from_what_its_workers_said(mixed: Path, capsys) -> None:
    """``rlperf ingest`` chooses the run from each worker's statement, without the sources'
    tables: the same two runs, the same reason."""
    status, _, err = rlperf(capsys, "ingest", str(mixed), "-o", str(mixed / "ds"), "-q",
                            "--no-cache")
    assert status == 2
    assert err.splitlines()[:3] == [
        f"rlperf: error: {mixed}: 2 separate runs found (log configurations that disagree); "
        "rlperf analyses one run at a time",
        f"  run 1: {TPU_LOG.name}: verl-log; verl log; no wall-clock time",
        f"  run 2: {MAZE_LOG.name}: verl-log; verl log; no wall-clock time",
    ]


def test_ingesting_logs_says_a_log_has_no_rank(capsys, tmp_path: Path) -> None:
    """Was '(no rank stated)', as for a trace that should state one."""
    status, _, err = rlperf(capsys, "ingest", str(TPU_LOG), "-o", str(tmp_path / "one"))
    assert status == 0, err
    assert err.splitlines()[-1] == (
        f"rlperf: wrote the dataset of 1 source (logs only: a log has no rank) to "
        f"{tmp_path / 'one'}"
    )
    logs = [CORPUS / "logs" / "deepspeed-chat", CORPUS / "logs" / "verl"]
    status, _, err = rlperf(capsys, "ingest", *map(str, logs), "--run", "1",
                            "-o", str(tmp_path / "two"))
    assert status == 0, err
    assert "source (logs only: a log has no rank)" in err.splitlines()[-1]


def test_a_run_no_guideline_judges_has_no_violation_count(three, capsys) -> None:
    """HTA's event_sync_trace: 26 guidelines, none evaluated (no RL stage). Its "0 violations"
    won compare against runs that were judged, as alpa's report2 did; now the count is "–"."""
    run = analyzer.load([THREE[0]])
    assert run.violations["status"].unique().to_list() == ["not_evaluated"]
    assert run.violations.height == 26
    rows = run.overview.filter(run.overview["metric"].str.starts_with("guideline_"))
    assert rows["value"].to_list() == [None, None]
    warnings = _row(three, "overview.guideline_warnings")
    assert [warnings[k] for k in three.labels] == [None, 0.0, 1.0]
    # nccl judged G13 as well (passed), mi250 could not: its one warning is G16, which both judged
    assert warnings["winner"] == three.labels[1]
    status, text, _ = rlperf(capsys, "analyze", str(THREE[0]), "--format", "md", "--quiet")
    assert status == 0
    assert ("| guideline violations: error | – needs a guideline evaluated (RL stage times from a "
            "trace or a log) |") in text


def test_parallelism_says_it_needs_stages_where_the_trace_has_device_work(capsys) -> None:
    """TraceLens' Qwen1.5 trace: 45.6 ms of GPU busy, one ProfilerStep, no stage range. W/D read
    "– needs device work in a trace", which it has; what it lacks is a critical path through
    stages."""
    trace = THREE[0].parents[1] / "TraceLens" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    run = analyzer.load([trace])
    busy = run.overview.filter(run.overview["metric"] == "gpu_busy_ns")["value"].item()
    assert round(busy / 1e6, 1) == 45.6
    status, text, _ = rlperf(capsys, "analyze", str(trace), "--format", "md", "--quiet")
    assert status == 0
    assert ("| parallelism W/D (mean) | – needs stage ranges and device work in a trace (D is the "
            "critical path through the stages) |") in text
