"""A trace without a wall clock is not joined to a run on time evidence it does not have
(docs/assembly.md, "Run identity"). A Kineto file without ``baseTimeNanoseconds`` (times from
0) overlaps nothing and so fits any run whose ranks it does not repeat: fitting is no evidence.
It joins a run only when its file name is a member's with the rank changed — one job's rank
files — and the run listing says so; otherwise it is a run of its own."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import analyzer
from analyzer.assemble.ingest import ingest
from analyzer.assemble.runs import RunsError, choose, group

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
KINETO = CORPUS / "HolisticTraceAnalysis" / "nccl_data.json.gz"
"""Rank 0 of a 2-rank NCCL job, 2024-05-23, times relative to ``baseTimeNanoseconds``."""
NSYS = CORPUS / "nsys-ai" / "h100_2gpu_1s.sqlite"
"""An unrelated 2-GPU nsys export of 2026-05-24 that states no rank."""
PIPIT = CORPUS / "pipit"


NSYS_START_NS = 1_779_630_170_333_241_428
KINETO_START_NS = 1_716_423_322_416_788_066
"""First event of each (epoch ns): a shift of the trace's base time by their difference lays
it over the export's window."""


def kineto_copy(target: Path, *, clock: bool, rank: int = 0, shift_ns: int = 0) -> Path:
    """The corpus trace as ``target``, without its wall clock unless ``clock`` (then moved by
    ``shift_ns``), stating ``rank``."""
    with gzip.open(KINETO, "rt") as f:
        trace = json.load(f)
    trace["baseTimeNanoseconds"] += shift_ns
    if not clock:
        del trace["baseTimeNanoseconds"]
    trace["distributedInfo"]["rank"] = rank
    with gzip.open(target, "wt") as f:
        json.dump(trace, f)
    return target


def runs_of(*paths: Path) -> list[list[str]]:
    sources = ingest(list(paths)).sources
    runs, _ = group(sources)
    return [[sources[i].path.name for i in r.indexes] for r in runs]


def listing(*paths: Path) -> list[str]:
    with pytest.raises(RunsError) as caught:
        choose(ingest(list(paths)).sources, None, paths)
    return str(caught.value).splitlines()


def test_a_trace_without_a_wall_clock_is_not_glued_to_an_unrelated_capture(
    tmp_path: Path,
) -> None:
    """The new user's folder: the 2024 trace without its base time and the 2026 nsys export.
    Before, the trace fitted the export alone (rank 0 against none stated) and joined it: one
    run of 2 sources that analyze counted as 3 ranks."""
    cut = kineto_copy(tmp_path / "cut.json.gz", clock=False)
    shutil.copyfile(NSYS, tmp_path / NSYS.name)
    assert ingest([cut]).sources[0].meta["time_base"] == "unknown (relative)"
    assert runs_of(tmp_path) == [["h100_2gpu_1s.sqlite"], ["cut.json.gz"]]
    assert listing(tmp_path) == [
        f"{tmp_path}: 2 separate runs found (a trace without a wall clock that nothing ties to "
        "another run); rlperf analyses one run at a time",
        "  run 1: h100_2gpu_1s.sqlite: nsys-sqlite; no rank stated; "
        "2026-05-24 13:42:50 UTC for 0.969 s",
        "  run 2: cut.json.gz: kineto; rank 0; no wall-clock time",
        "choose one with --run K (K as listed above, or a path or file-name prefix of the "
        "run's files)",
    ]


@pytest.mark.skipif(not PIPIT.is_dir(), reason="the shared corpus is not next to the repository")
def test_the_pipit_folder_holds_two_unrelated_captures() -> None:
    """PROVENANCE.md: the .sqlite is MPI rank 0 of a saxpy run (2023), trace.csv an ``nsys
    stats`` NVTX report of an n-body app (2022) with session-relative times. Before, the CSV
    joined the saxpy run for fitting it."""
    assert runs_of(PIPIT) == [["saxpy-mpi-cuda_nsys_perlmutter0.sqlite"], ["trace.csv"]]


def test_rank_files_of_one_job_are_tied_by_their_names(tmp_path: Path) -> None:
    """``job_rank-1`` has no wall clock; its name is ``job_rank-0``'s with the rank changed and it
    states rank 1: one job's rank files, one run, and the listing says what tied them. Under
    another name, or in another folder, nothing ties it."""
    kineto_copy(tmp_path / "job_rank-0.json.gz", clock=True, rank=0)
    kineto_copy(tmp_path / "job_rank-1.json.gz", clock=False, rank=1)
    shutil.copyfile(NSYS, tmp_path / NSYS.name)
    assert runs_of(tmp_path) == [["job_rank-0.json.gz", "job_rank-1.json.gz"], [NSYS.name]]
    lines = listing(tmp_path)
    assert lines[0].startswith(f"{tmp_path}: 2 separate runs found (time windows that do not ")
    # 0.713 s: from the profiler's own 'PyTorch Profiler (0)' span, which starts 29 ms before
    # the first event kept, to the last (d6cdfe1); the events alone span 0.684 s
    assert lines[1] == (
        "  run 1: job_rank-0.json.gz, job_rank-1.json.gz: 2 kineto; ranks 0-1; "
        "2024-05-23 00:15:22 UTC for 0.713 s; no wall clock: job_rank-1.json.gz grouped by its "
        "file name (rank 1 beside job_rank-0.json.gz)"
    )

    other = tmp_path / "elsewhere"
    other.mkdir()
    (tmp_path / "job_rank-1.json.gz").rename(other / "job_rank-1.json.gz")
    assert runs_of(tmp_path, other) == [
        ["job_rank-0.json.gz"], [NSYS.name], ["job_rank-1.json.gz"]
    ]
    (other / "job_rank-1.json.gz").rename(tmp_path / "second.json.gz")
    assert runs_of(tmp_path) == [["job_rank-0.json.gz"], [NSYS.name], ["second.json.gz"]]


def test_a_name_whose_rank_is_not_the_one_the_trace_holds_ties_nothing(tmp_path: Path) -> None:
    """``job_rank-1.json.gz`` that states rank 2 in its ``distributedInfo``: it repeats no rank
    of ``job_rank-0``, but its name is not its rank, so it is no rank file of that job."""
    kineto_copy(tmp_path / "job_rank-0.json.gz", clock=True, rank=0)
    kineto_copy(tmp_path / "job_rank-1.json.gz", clock=False, rank=2)
    assert runs_of(tmp_path) == [["job_rank-0.json.gz"], ["job_rank-1.json.gz"]]


def test_ingest_says_which_ranks_the_files_state_and_which_analyze_numbers(
    tmp_path: Path,
) -> None:
    """Rank 0 of a Kineto trace laid over the nsys export's window (one run), the export
    stating no rank: the dataset holds rank 0 as stated, analyze numbers the export's two GPUs
    1-2. Ingest said "(rank 0)" and analyze "3 ranks"; now ingest says analyze decides the rest."""
    folder = tmp_path / "in"
    folder.mkdir()
    kineto_copy(folder / "x.json.gz", clock=True, shift_ns=NSYS_START_NS - KINETO_START_NS)
    shutil.copyfile(NSYS, folder / NSYS.name)
    out = tmp_path / "ds"
    done = subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", "ingest", str(folder),
         "-o", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "rlperf: wrote the dataset of 2 sources (rank 0, and 1 trace stating none: analyze "
        f"decides its ranks) to {out}"
    )
    assert analyzer.load([out]).ranks == [0, 1, 2]
