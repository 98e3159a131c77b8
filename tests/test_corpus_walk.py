"""Every file of the real corpus, and every corpus folder, through the real command line on its
own: exit 0 with a JSON report (each stderr line a warning that the report also lists, no
failed analysis, no NaN or infinity, every share and fraction in [0, 1]), or exit 2 with one
line naming the input — never a traceback, never another status (docs/errors.md).

A folder holding several separate runs is refused with exit 2 and a listing of the runs, one per
line, then how to choose one: that is the one multi-line error. The runs go through a small pool
of processes (each file is a fresh interpreter), so the walk takes about as long as the slowest
few files rather than their sum.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest
from test_followups_10 import assert_bounded

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
TIMEOUT_S = 300
WORKERS = 3
FILES = sorted(p for p in CORPUS.rglob("*") if p.is_file()) if CORPUS.is_dir() else []
FOLDERS = sorted({CORPUS, *(p for p in CORPUS.rglob("*") if p.is_dir())}) if CORPUS.is_dir() else []
RUNS_LISTING = re.compile(
    r"rlperf: error: (?P<path>.+): (?P<n>\d+) separate runs found \(.+\); rlperf analyses one run "
    r"at a time\n"
    r"(?P<runs>(?:  run \d+: .+\n)+)"
    r"choose one with --run K .+\n?"
)


def name(path: Path) -> str:
    return str(path.relative_to(CORPUS.parent))


@cache
def results() -> dict[Path, subprocess.CompletedProcess]:
    """Every corpus file and folder analysed on its own (computed once, a few at a time)."""
    env = {**os.environ, "RLPERF_NO_CACHE": "1"}
    env.pop("GITHUB_ACTIONS", None)

    def analyse(path: Path) -> subprocess.CompletedProcess:
        command = [
            sys.executable,
            "-c",
            "from analyzer.cli import main; main()",
            "analyze",
            str(path),
            "--format",
            "json",
            "--quiet",
        ]
        try:
            return subprocess.run(
                command, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT, env=env
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, -1, "", f"timed out after {TIMEOUT_S} s")

    paths = [*FILES, *FOLDERS]
    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(zip(paths, pool.map(analyse, paths), strict=True))


def check_outcome(path: Path, done: subprocess.CompletedProcess, *, listing_allowed: bool) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 2), f"exit {done.returncode}: {done.stderr}"
    lines = done.stderr.splitlines()
    if done.returncode == 2:
        assert done.stdout == ""
        listed = RUNS_LISTING.fullmatch(done.stderr) if listing_allowed else None
        if listed:
            assert listed["path"] == str(path)
            assert int(listed["n"]) >= 2 and len(listed["runs"].splitlines()) == int(listed["n"])
            return
        assert len(lines) == 1, done.stderr
        # the input, or a file inside it
        assert lines[0].startswith(f"rlperf: error: {path}"), lines[
            0
        ]
        return
    report = assert_bounded(done.stdout)
    assert report["failures"] == []
    warned = [line.removeprefix("rlperf: warning: ") for line in lines]
    assert all(line.startswith("rlperf: warning: ") for line in lines), done.stderr
    assert warned == report["warnings"]


@pytest.mark.skipif(not FILES, reason="the shared corpus is not next to the repository")
def test_the_walk_covers_the_whole_corpus():
    assert len(FILES) >= 40 and len(FOLDERS) >= 10
    assert {p.suffix for p in FILES} >= {".gz", ".sqlite", ".nsys-rep", ".log", ".csv", ".md"}


@pytest.mark.parametrize("path", FILES, ids=name)
def test_each_corpus_file_on_its_own(path: Path):
    done = results()[path]
    check_outcome(path, done, listing_allowed=False)


@pytest.mark.parametrize("path", FOLDERS, ids=name)
def test_each_corpus_folder(path: Path):
    check_outcome(path, results()[path], listing_allowed=True)
