"""Where ``-o`` may write: checked before any input is parsed (one line, exit 2), never an input,
and written atomically so a failed write leaves the previous report intact."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from report_truth import one_line_error

from analyzer.report import files
from parsers import InputError

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
LOG = CORPUS / "VERL-Maze" / "verl_demo.log"
BROKEN = '{"traceEvents": 5, "schemaVersion": 1}'
"""A trace that fails to parse: an error about ``-o`` instead proves ``-o`` was checked first."""


def rlperf(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", *args],
        capture_output=True, text=True, timeout=180,
        env={"RLPERF_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "COLUMNS": "1000"},
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    path = tmp_path / "broken.json"
    path.write_text(BROKEN)
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "verl.log").write_bytes(LOG.read_bytes())
    return folder


@pytest.mark.parametrize(
    ("where", "words"),
    [
        ("folder", ("is a directory",)),
        ("empty", ("is a directory",)),
        ("/dev/full", ("/dev/full", "character device")),
        ("under a file", ("cannot be created", "is a regular file, not a folder")),
    ],
)
def test_an_output_that_cannot_take_a_report_is_refused_before_parsing(
    tmp_path: Path, broken: Path, where: str, words: tuple[str, ...]
):
    output = {"folder": str(tmp_path), "empty": "", "/dev/full": "/dev/full",
              "under a file": str(broken / "report.md")}[where]
    line = one_line_error(
        rlperf("analyze", str(broken), "-f", "md", "-o", output, cache=tmp_path / "c"), *words
    )
    assert "traceEvents" not in line and "field type" not in line


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path: Path, run: Path):
    trace = run / "verl.log"
    before = digest(trace)
    hard = tmp_path / "hard.md"
    os.link(trace, hard)
    soft = tmp_path / "soft.md"
    soft.symlink_to(trace)
    for output in (trace, hard, soft):
        line = one_line_error(
            rlperf("analyze", str(trace), "-f", "md", "-o", str(output), cache=tmp_path / "c"),
            str(output),
            "is an input of this run",
        )
        assert ("the same file as" in line) == (output != trace)
    one_line_error(
        rlperf("analyze", str(run), "-o", str(trace), cache=tmp_path / "c"),
        "is an input of this run",
    )
    assert digest(trace) == before


def test_a_new_report_inside_the_run_folder_is_fine(tmp_path: Path, run: Path):
    for _ in range(2):  # the second time the report exists, and is no input: rlperf's own output
        result = rlperf(
            "analyze", str(run), "-f", "json", "-o", str(run / "report.json"), cache=tmp_path / "c"
        )
        assert result.returncode == 0, result.stderr
    assert (run / "report.json").read_text().startswith("{")


@pytest.mark.parametrize(
    "command",
    [
        ["compare", "{run}", "{other}", "-o", "{input}"],
        ["export", "{run}", "--perfetto", "{input}"],
        ["audit", "{run}", "--budget", "{budget}", "--junit", "{input}"],
        ["crosscheck", "{run}", "-o", "{input}"],
    ],
    ids=lambda c: c[0],
)
def test_every_command_that_writes_refuses_an_input(tmp_path: Path, run: Path, command: list[str]):
    other = tmp_path / "other"
    other.mkdir()
    (other / "verl.log").write_bytes(LOG.read_bytes())
    budget = tmp_path / "budget.toml"
    budget.write_text('[[check]]\nmetric = "overview.step_time_ns"\nmax = 1e9\n')
    trace = run / "verl.log"
    before = digest(trace)
    names = {"run": str(run), "other": str(other), "input": str(trace), "budget": str(budget)}
    one_line_error(rlperf(*(part.format(**names) for part in command), cache=tmp_path / "c"),
                   "is an input of this run")
    assert digest(trace) == before


@pytest.mark.parametrize(
    "command", [["taxonomy"], ["demo"], ["audit", "{broken}", "--baseline", "{broken}"]]
)
def test_commands_without_traces_check_their_output_too(
    tmp_path: Path, broken: Path, command: list[str]
):
    flag = "--junit" if command[0] == "audit" else "-o"
    args = [part.format(broken=broken) for part in command]
    one_line_error(rlperf(*args, flag, str(tmp_path), cache=tmp_path / "c"), "is a directory")


def test_png_charts_go_to_a_folder_but_not_under_a_file(tmp_path: Path, broken: Path):
    one_line_error(
        rlperf(
            "analyze", str(broken), "-f", "png", "-o", str(broken / "charts"), cache=tmp_path / "c"
        ),
        "cannot be created",
    )
    line = one_line_error(
        rlperf("analyze", str(broken), "-f", "png", "-o", str(tmp_path), cache=tmp_path / "c")
    )
    # a folder is a valid place for charts: the trace's own error comes next
    assert (
        "field type" in line
    )


def test_a_failed_write_leaves_the_old_report_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    report = tmp_path / "report.md"
    report.write_text("the last good report\n")
    os.chmod(report, 0o640)

    def full_disk(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full_disk)
    with pytest.raises(InputError, match="No space left on device") as caught:
        files.write_text(report, "a new report\n")
    assert caught.value.path == str(report)
    assert report.read_text() == "the last good report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]
    monkeypatch.undo()
    files.write_text(report, "a new report\n")
    assert report.read_text() == "a new report\n" and report.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_a_new_report_has_the_umask_permissions_and_the_umask_is_left_as_it_was(
    tmp_path: Path, mask: int, mode: int
):
    """mkstemp makes the temporary file 0600: a new report gets what the umask gives a new file
    (read through the one helper that also serves the dataset's folders)."""
    previous = os.umask(mask)
    try:
        files.write_text(tmp_path / "report.md", "a report\n")
        assert os.umask(mask) == mask
    finally:
        os.umask(previous)
    assert oct((tmp_path / "report.md").stat().st_mode & 0o777) == oct(mode)


def test_a_report_written_through_a_link_updates_the_file_it_names(tmp_path: Path):
    real = tmp_path / "real.md"
    real.write_text("old\n")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    files.write_text(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
