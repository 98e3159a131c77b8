"""Several ``-o`` of one ``rlperf analyze``: one analysis, each report in the format its file's
suffix names and byte for byte the report a command writing it alone gives; ``-o r.json``
alone writes JSON; what cannot be meant is refused before anything is read (docs/cli.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from report_truth import RUNS, cli, one_line_error, rlperf

import analyzer.progress
from analyzer.dataset import products, recall

RUN = RUNS / "trl_grpo"


def fresh(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return cli(*args, env={"RLPERF_CACHE_DIR": str(cache)})


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many runs the command loaded (each load is one analysis)."""
    seen: list[int] = []
    real = analyzer.progress.load_run

    def counted(*args, **kwargs):
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(analyzer.progress, "load_run", counted)
    return seen


def test_one_analysis_writes_each_report_as_the_command_writing_it_alone(
    tmp_path: Path, capsys, loads: list[int]
) -> None:
    together = {fmt: tmp_path / f"all.{ext}" for fmt, ext in
                (("text", "txt"), ("json", "json"), ("md", "md"), ("html", "html"))}
    words = [w for path in together.values() for w in ("-o", str(path))]
    status, _, err = rlperf(capsys, "analyze", str(RUN), *words, "-q")
    assert status == 0, err
    assert len(loads) == 1
    for fmt in ("json", "md", "html"):
        assert f"rlperf: wrote the {fmt} report to {together[fmt]}" in err
    for fmt, path in together.items():
        alone = tmp_path / f"alone.{fmt}"
        assert rlperf(capsys, "analyze", str(RUN), "-f", fmt, "-o", str(alone), "-q")[0] == 0
        assert path.read_bytes() == alone.read_bytes(), fmt
        assert len(path.read_bytes()) > 10_000, fmt
    assert len(loads) == 5
    assert json.loads(together["json"].read_text())["overview"]


@pytest.mark.parametrize(("name", "starts"), [("r.json", "{"), ("r.md", "# "),
                                               ("r.HTML", "<!doctype html>"), ("r.out", "rlperf")])
def test_one_output_takes_the_format_its_suffix_names(
    tmp_path: Path, capsys, name: str, starts: str
) -> None:
    out = tmp_path / name
    assert rlperf(capsys, "analyze", str(RUN), "-o", str(out), "-q")[0] == 0
    assert out.read_text().lstrip().startswith(starts), out.read_text()[:200]


def test_an_explicit_format_wins_over_the_suffix(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.json"
    assert rlperf(capsys, "analyze", str(RUN), "-f", "text", "-o", str(out), "-q")[0] == 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(out.read_text())
    assert out.read_text().startswith("rlperf")


@pytest.mark.parametrize(
    ("outputs", "fmt", "words"),
    [
        (["a.json", "b.out"], None, ("b.out", "names no report format", ".html")),
        (["a.json", "./a.json"], None, ("a.json", "named by -o twice")),
        (["a.json", "link.md"], None, ("link.md", "named by -o twice")),
        (["a.json", "b.md"], "json", ("--format", "leave --format out")),
    ],
)
def test_outputs_that_cannot_be_meant_are_refused_before_reading(
    tmp_path: Path, outputs: list[str], fmt: str | None, words: tuple[str, ...]
) -> None:
    """The input is missing: an error about ``-o`` instead says ``-o`` was checked first."""
    (tmp_path / "a.json").write_text("earlier")
    (tmp_path / "link.md").symlink_to(tmp_path / "a.json")
    args = [w for o in outputs for w in ("-o", o)] + (["-f", fmt] if fmt else [])
    done = subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", "missing.json",
         *args, "-q"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={"RLPERF_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
    )
    one_line_error(done, *words)
    assert (tmp_path / "a.json").read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "link.md"]


def test_a_dataset_keeps_no_report_of_several_outputs(tmp_path: Path) -> None:
    """A kept report is one command's one file; several go the long way each time, and the
    console entry point's words never answer them."""
    ds = tmp_path / "ds"
    assert fresh("ingest", str(RUN), "-o", str(ds), "-q", cache=tmp_path / "c").returncode == 0
    a, b = tmp_path / "a.json", tmp_path / "b.md"
    for _ in range(2):
        done = fresh("analyze", str(ds), "-o", str(a), "-o", str(b), "-q", cache=tmp_path / "c")
        assert done.returncode == 0, done.stderr
    assert products.reports(ds) == []
    alone = tmp_path / "alone.json"
    done = fresh("analyze", str(ds), "-o", str(alone), "-q", cache=tmp_path / "c")
    assert done.returncode == 0 and alone.read_bytes() == a.read_bytes()
    assert len(products.reports(ds)) == 1
    for argv in (["analyze", str(ds), "-o", str(a), "-o", str(b)],
                 ["analyze", str(ds), "-o", str(a), f"-o{b}"],
                 ["analyze", str(ds), "-o", str(a), "-qo", str(b)]):
        assert recall.words(argv) is None, argv
    assert recall.words(["analyze", str(ds), "-o", str(a), "-q"]) is not None
