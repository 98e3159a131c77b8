"""A kept report found again by the command's words before Typer is imported
(analyzer/dataset/recall.py): the same bytes and lines as the long way, and the long way for
anything it cannot be sure of."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.dataset import products, recall
from parsers.discover import DATASET_MANIFEST

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "sample_traces" / "synthetic" / "disaggregated" / "rank-0.synthetic.pt.trace.json.gz"
MARK = "import sys; from analyzer.entry import main; main()"
PROBE = (
    "import atexit, sys; atexit.register(lambda: print('TYPER', 'typer' in sys.modules, "
    "file=sys.stderr)); " + MARK
)


def rlperf(*args: str, cwd: Path) -> tuple[int, bool, str]:
    """A fresh ``rlperf ARGS`` (the console entry point): status, whether Typer was imported,
    stderr without that line."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), "RLPERF_CACHE_DIR":
                          str(cwd / "cache")},
    )
    lines = done.stderr.splitlines()
    typer = [line for line in lines if line.startswith("TYPER ")]
    assert len(typer) == 1, done.stderr
    rest = "\n".join(line for line in lines if not line.startswith("TYPER "))
    return done.returncode, typer[0] == "TYPER True", rest


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / TRACE.name).write_bytes(TRACE.read_bytes())
    status, _, err = rlperf("ingest", "src", "-o", "ds", "-q", cwd=tmp_path)
    assert status == 0, err
    return tmp_path / "ds"


def lines(dataset: Path) -> list[str]:
    folder = dataset / recall.PRODUCTS / recall.LINES
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_the_same_words_are_answered_without_typer(dataset: Path) -> None:
    cwd = dataset.parent
    status, typer, first = rlperf("analyze", "ds", "-f", "json", "-o", "a.json", cwd=cwd)
    assert (status, typer) == (0, True), first
    assert len(lines(dataset)) == 1
    status, typer, again = rlperf("analyze", "ds", "-f", "json", "-o", "b.json", cwd=cwd)
    assert (status, typer) == (0, False), again
    assert (cwd / "b.json").read_bytes() == (cwd / "a.json").read_bytes()
    assert again == first.replace("a.json", "b.json")
    assert again.splitlines()[0] == "rlperf: wrote the json report to b.json"
    status, typer, text = rlperf("analyze", "ds", "--output=c.txt", cwd=cwd)
    assert (status, typer) == (0, True), text
    status, typer, text_again = rlperf("analyze", "ds", "--output=d.txt", cwd=cwd)
    assert (status, typer) == (0, False)
    assert (cwd / "d.txt").read_bytes() == (cwd / "c.txt").read_bytes()
    assert text_again == text.replace("c.txt", "d.txt")
    assert text_again.splitlines()[0] == "rlperf: wrote the text report to d.txt"
    assert len(lines(dataset)) == 2


def test_an_output_of_another_suffix_is_a_report_of_its_own_format(dataset: Path) -> None:
    """The suffix says the format when -f does not: a report kept for ``-o a.txt`` is not
    the answer to ``-o b.json`` (a text report in b.json), nor a JSON one to ``-o c.md``."""
    cwd = dataset.parent
    assert rlperf("analyze", "ds", "-o", "a.txt", cwd=cwd)[:2] == (0, True)
    status, typer, err = rlperf("analyze", "ds", "-o", "b.json", cwd=cwd)
    assert (status, typer) == (0, True), err
    assert err.splitlines()[0] == "rlperf: wrote the json report to b.json"
    assert (cwd / "b.json").read_text().startswith("{")
    status, typer, _ = rlperf("analyze", "ds", "-o", "c.md", cwd=cwd)
    assert (status, typer) == (0, True)
    assert (cwd / "c.md").read_text().startswith("# ")
    assert rlperf("analyze", "ds", "-o", "d.json", cwd=cwd)[:2] == (0, False)
    assert (cwd / "d.json").read_bytes() == (cwd / "b.json").read_bytes()
    assert len(lines(dataset)) == 3


def test_what_it_cannot_be_sure_of_goes_the_long_way(dataset: Path) -> None:
    cwd = dataset.parent
    assert rlperf("analyze", "ds", "-f", "json", "-o", "a.json", cwd=cwd)[:2] == (0, True)
    # an output spelled otherwise than pathlib prints it, or in a folder not there yet
    for output in ("./b.json", "new/b.json", "x/../b.json"):
        status, typer, err = rlperf("analyze", "ds", "-f", "json", "-o", output, cwd=cwd)
        assert (status, typer) == (0, True), (output, err)
        assert (cwd / output).read_bytes() == (cwd / "a.json").read_bytes()
    # inside the dataset: refused, in one line, by the long way's check
    status, typer, err = rlperf("analyze", "ds", "-f", "json", "-o", "ds/r.json", cwd=cwd)
    assert (status, typer) == (2, True)
    assert err.startswith("rlperf: error: ds/r.json: is inside the dataset")
    assert not (dataset / "r.json").exists()
    # a source touched since ingest: the long way's stale check judges it
    source = cwd / "src" / TRACE.name
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    status, typer, _ = rlperf("analyze", "ds", "-f", "json", "-o", "c.json", cwd=cwd)
    assert (status, typer) == (0, True)
    assert (cwd / "c.json").read_bytes() == (cwd / "a.json").read_bytes()
    # --no-cache: computed again
    assert rlperf("analyze", "ds", "-f", "json", "-o", "d.json", "--no-cache", cwd=cwd)[:2] == (
        0, True)


def test_another_manifest_or_code_finds_no_line(dataset: Path, monkeypatch) -> None:
    shown = ["analyze", str(dataset), "-o", "\0output"]
    manifest = (dataset / DATASET_MANIFEST).read_bytes()
    key = recall._key(manifest, shown)
    assert recall._key(manifest + b" ", shown) != key
    assert recall._key(manifest, [*shown, "-q"]) != key
    monkeypatch.setenv("COLUMNS", "100")
    assert recall._key(manifest, shown) != key
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(recall, "_code", "other code")
    assert recall._key(manifest, shown) != key


def test_words_name_one_dataset_and_one_output(dataset: Path) -> None:
    ds = str(dataset)
    assert recall.words(["analyze", ds, "-o", "r.json", "-q"]) == (
        ds, "r.json", ["analyze", ds, "-o", "\0output.json", "-q"])
    assert recall.words(["analyze", "--output=r.MD", "-f", "md", ds]) == (
        ds, "r.MD", ["analyze", "--output=\0output.md", "-f", "md", ds])
    assert recall.words(["analyze", ds]) is None  # stdout: nothing is kept
    assert recall.words(["analyze", ds, "-o", "a", "-o", "b"]) is None
    assert recall.words(["analyze", ds, ds, "-o", "a"]) is None
    assert recall.words(["analyze", str(dataset.parent), "-o", "a"]) is None  # not a dataset
    assert recall.words(["compare", ds, "-o", "a"]) is None


def test_a_command_run_in_process_writes_no_line(dataset: Path, tmp_path: Path) -> None:
    import typer

    from analyzer.cli import app

    assert recall.ARGV is None
    command = typer.main.get_command(app)
    command(["analyze", str(dataset), "-f", "json", "-o", str(tmp_path / "r.json"), "-q"],
            standalone_mode=False)
    assert (dataset / products.PRODUCTS).is_dir()
    assert lines(dataset) == []


def test_the_names_are_the_datasets() -> None:
    assert recall.MANIFEST == DATASET_MANIFEST
    assert recall.code_version() == recall.code_version(fresh=True)
