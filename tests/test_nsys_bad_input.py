"""Bad Nsight Systems input → one line naming the file and the problem, exit status 2."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import parsers
from parsers import nsys, nsys_stats
from parsers.errors import InputError

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
PIPIT = CORPUS / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
REPORT = CORPUS / "nvFuser" / "report1.nsys-rep"


def one_line_error(path: Path, parse=parsers.parse_file) -> str:
    with pytest.raises(InputError) as err:
        parse(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message[len(str(path)) + 2 :]


def test_text_file_named_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "capture.sqlite"
    bad.write_text("this is not a database\n")
    assert parsers.sniff(bad) is None
    assert "not a format rlperf reads" in one_line_error(bad)
    assert one_line_error(bad, nsys.parse) == "not an SQLite database (the file header is wrong)"


def test_sqlite_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    other = tmp_path / "optuna.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE trials (id INTEGER, value REAL)")
    con.execute("INSERT INTO trials VALUES (1, 0.5)")
    con.commit()
    con.close()
    assert parsers.sniff(other) is None
    assert "not a format rlperf reads" in one_line_error(other)
    assert "not an Nsight Systems export" in one_line_error(other, nsys.parse)


@pytest.mark.parametrize("keep", [4096, 65536, 800_000])
def test_truncated_export(tmp_path: Path, keep: int) -> None:
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(PIPIT.read_bytes()[:keep])
    problem = one_line_error(cut, nsys.parse)
    assert "truncated or corrupt" in problem or "not an Nsight Systems export" in problem
    if parsers.sniff(cut) == "nsys-sqlite":
        assert one_line_error(cut) == problem


def test_report_without_nsys_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "nsys CLI, which is not on PATH" in one_line_error(REPORT)


def test_csv_without_a_stats_table(tmp_path: Path) -> None:
    bad = tmp_path / "notes_nvtxpptrace.csv"
    bad.write_text("a,b,c\n1,2,3\n")
    assert "no nsys stats CSV table" in one_line_error(bad, nsys_stats.parse)


def test_stats_csv_with_broken_numbers(tmp_path: Path) -> None:
    bad = tmp_path / "x_nvtxpptrace.csv"
    text = (CORPUS / "pipit" / "trace.csv").read_text().splitlines()
    bad.write_text("\n".join([text[0], text[1].replace("982845927", "9,82845927x"), *text[2:]]) + "\n")
    assert "cannot read" in one_line_error(bad)


@pytest.mark.parametrize("suffix", [".sqlite", ".nsys-rep"])
def test_cli_exit_status_two_with_one_line(tmp_path: Path, suffix: str) -> None:
    """``rlperf analyze`` on a bad export: one line naming the file, exit status 2."""
    bad = tmp_path / f"capture{suffix}"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100 if suffix == ".sqlite" else b"not a report")
    run = subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", str(bad)],
        capture_output=True, text=True, timeout=120, check=False, cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "RLPERF_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlperf: error: {bad}: ")
