"""Start-up kept small (issue 14, item 4): ``rlperf --version``, ``--help``, a command's
``--help`` and a report kept in a dataset read back import none of the heavy libraries nor the
analysis pipeline, each checked in a fresh process (what is imported is the state of
``sys.modules`` when the command has finished, printed by an ``atexit`` hook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "synthetic" / "disaggregated"
HEAVY = ("polars", "numpy", "pyarrow", "altair", "msgspec", "rich")
"""Libraries a command imports only to compute or draw: rich for the progress display and the
terminal report, so help does without it; reading a kept report back says where it wrote with
rich (the same line as the first analysis), and imports nothing else."""
PIPELINE = (
    "analyzer.analyses", "analyzer.assemble", "analyzer.classify", "analyzer.ops",
    "analyzer.engines", "analyzer.dataset.store", "analyzer.report.sections", "parsers.kineto",
)
"""Packages (and what is below them) that a command which computes nothing must not import."""

WRAPPER = """
import atexit, json, sys
heavy, pipeline = json.loads(sys.argv.pop(1)), json.loads(sys.argv.pop(1))
def found():
    names = sorted(sys.modules)
    hit = [m for m in names if m.split(".")[0] in heavy]
    hit += [m for m in names if any(m == p or m.startswith(p + ".") for p in pipeline)]
    print("IMPORTED " + json.dumps(sorted({m.split(".")[0] if m.split(".")[0] in heavy else m
                                            for m in hit})), file=sys.stderr)
atexit.register(found)
sys.argv[0] = "rlperf"
from analyzer.entry import main
main()
"""
"""``rlperf`` as the console script runs it (pyproject.toml: ``analyzer.entry:main``)."""


def rlperf(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    """``rlperf ARGS`` in a fresh interpreter: exit status, the heavy modules and pipeline
    packages it had imported when it ended, and its stderr without that line."""
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, json.dumps(HEAVY), json.dumps(PIPELINE), *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)},
    )
    lines = done.stderr.splitlines()
    marks = [line for line in lines if line.startswith("IMPORTED ")]
    assert len(marks) == 1, done.stderr
    rest = "\n".join(line for line in lines if not line.startswith("IMPORTED "))
    return done.returncode, json.loads(marks[0].removeprefix("IMPORTED ")), rest


@pytest.mark.parametrize(
    "args", [("--version",), ("--help",), ("analyze", "--help"), ("ingest", "--help"),
             ("compare", "--help"), ("taxonomy", "--help")],
)
def test_help_and_version_import_nothing_heavy(args: tuple[str, ...]) -> None:
    status, imported, _ = rlperf(*args)
    assert status == 0
    assert imported == []


def test_the_check_sees_what_a_command_imports(tmp_path: Path) -> None:
    """The empty lists above are not vacuous: a command that computes imports them all."""
    status, imported, err = rlperf("taxonomy", "--part", "roles", "-f", "json",
                                   "-o", str(tmp_path / "t.json"))
    assert status == 0, err
    assert "polars" in imported


def test_a_kept_report_is_read_back_without_the_pipeline(tmp_path: Path) -> None:
    env = {"RLPERF_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "100"}
    ds, first, again = tmp_path / "ds", tmp_path / "first.json", tmp_path / "again.json"
    status, _, err = rlperf("ingest", str(SAMPLE), "-o", str(ds), "-q", env=env)
    assert status == 0, err
    status, imported, err = rlperf("analyze", str(ds), "-f", "json", "-o", str(first), "-q",
                                   env=env)
    assert status == 0, err
    assert {"polars", "analyzer.analyses"} <= set(imported)  # computed: the report is kept
    assert reports(ds) == 1
    status, imported, err_again = rlperf("analyze", str(ds), "-f", "json", "-o", str(again),
                                         "-q", env=env)
    assert status == 0, err_again
    assert imported == []  # found by its words (analyzer/dataset/recall.py): not even rich
    assert again.read_bytes() == first.read_bytes()
    assert err_again == err.replace(str(first), str(again))  # the same lines, warnings too
    assert reports(ds) == 1
    status, imported, err_long = rlperf("analyze", str(ds), "--format", "json", "-o",
                                        str(again), "-q", env=env)
    assert status == 0, err_long
    assert imported == ["rich"]  # other words: Typer reads them and finds the same report
    assert again.read_bytes() == first.read_bytes()
    assert err_long == err_again
    assert reports(ds) == 1


def reports(dataset: Path) -> int:
    """The reports a dataset keeps (``products/lines`` holds the words that find them)."""
    return sum(1 for p in (dataset / "products").iterdir() if p.name != "lines")


def test_a_source_changed_since_ingest_is_judged_by_the_full_check(tmp_path: Path) -> None:
    """A kept report is read back without the parsers only while every source has the size and
    time it was ingested with: a touched source makes the stale check (the parsers) run."""
    env = {"RLPERF_CACHE_DIR": str(tmp_path / "cache")}
    src = tmp_path / "src"
    src.mkdir()
    trace = SAMPLE / "rank-0.synthetic.pt.trace.json.gz"
    copy = src / trace.name
    copy.write_bytes(trace.read_bytes())
    ds, out = tmp_path / "ds", tmp_path / "r.json"
    assert rlperf("ingest", str(src), "-o", str(ds), "-q", env=env)[0] == 0
    assert rlperf("analyze", str(ds), "-f", "json", "-o", str(out), "-q", env=env)[0] == 0
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same bytes, another time
    status, imported, err = rlperf("analyze", str(ds), "-f", "json", "-o", str(out), "-q",
                                   env=env)
    assert status == 0, err
    assert "analyzer.dataset.store" in imported  # the stale check ran (content unchanged)
    assert "analyzer.analyses" not in imported  # and found the kept report still good


def test_an_html_report_does_not_compile_the_iri_grammars(tmp_path: Path) -> None:
    """jsonschema, which altair imports, loads ``rfc3987_syntax`` where it is installed (Jupyter
    installs it; so does this test environment, through HTA's dependencies) and that compiles
    38 grammars, 1.8 s of every command that draws a chart. The command line draws its charts
    without it, and the HTML is the same bytes as with it (analyzer.cli.UNUSED_AT_IMPORT)."""
    from importlib import metadata

    assert metadata.distribution("rfc3987-syntax")  # installed: the case this guards
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print('LOADED', type(sys.modules.get('rfc3987_syntax'))"
             ".__name__, 'altair' in sys.modules, file=sys.stderr))\n"
             "import analyzer.cli as c\n"
             "c.UNUSED_AT_IMPORT = c.UNUSED_AT_IMPORT if sys.argv.pop(1) == 'cli' else ()\n"
             "sys.argv[0] = 'rlperf'\nc.main()\n")
    seen = {}
    for how in ("cli", "unblocked"):
        out = tmp_path / f"{how}.html"
        done = subprocess.run(
            [sys.executable, "-c", probe, how, "analyze", str(SAMPLE), "-q", "-o", str(out)],
            cwd=REPO, capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONPATH": str(REPO), "RLPERF_CACHE_DIR": str(tmp_path / "c")},
        )
        assert done.returncode == 0, done.stderr
        seen[how] = [line for line in done.stderr.splitlines() if line.startswith("LOADED")]
    assert seen == {"cli": ["LOADED NoneType True"], "unblocked": ["LOADED module True"]}
    assert (tmp_path / "cli.html").read_bytes() == (tmp_path / "unblocked.html").read_bytes()


def test_a_command_run_in_process_leaves_the_refusal_behind_it(monkeypatch) -> None:
    """The refusal lasts as long as the command: a test or a notebook that runs ``main`` and then
    imports jsonschema gets its IRI checks."""
    import analyzer.cli as cli

    monkeypatch.delitem(sys.modules, "rfc3987_syntax", raising=False)
    monkeypatch.setattr(sys, "argv", ["rlperf", "--version"])
    with pytest.raises(SystemExit):
        cli.main()
    assert "rfc3987_syntax" not in sys.modules
