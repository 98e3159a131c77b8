"""The Markdown report (tables that render in a pull request) and the PNG charts (vl-convert)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import polars as pl
import pytest
from report_truth import RUNS, cli, load_truth, synthetic, synthetic_run

from analyzer.model.units import cell
from analyzer.report import charts, markdown, png

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    return synthetic_run(synthetic(tmp_path_factory.mktemp("synthetic"), "disaggregated"))


def tables(text: str) -> list[list[str]]:
    """Every GFM table of ``text``, as its lines."""
    found, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(current)
            current = []
    return found + ([current] if current else [])


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").replace("\\|", "\0").split("|")]


def test_markdown_tables_are_well_formed(run):
    text = markdown.render(run, title="disaggregated")
    assert text.startswith("# disaggregated\n")
    found = tables(text)
    assert len(found) >= 7
    for table in found:
        width = len(cells(table[0]))
        assert set(table[1].replace("|", "").replace(":", "")) == {"-"}, table[1]
        assert all(len(cells(line)) == width for line in table), table[0]


def test_markdown_shows_the_numbers_of_each_figure(run):
    text = markdown.render(run)
    for figure in charts.figures(run):
        assert f"## {figure.title}" in text
    idle = (
        run.bubbles.group_by("cause").agg(pl.col("idle_ns").sum()).sort("idle_ns", descending=True)
    )
    windows = (
        run.bubbles.group_by("step", "rank").agg(pl.col("window_ns").first())["window_ns"].sum()
    )
    top_cause, top_ns = idle.row(0)
    assert (
        f"| {top_cause} | {cell(top_ns, 'duration')} | {cell(top_ns / windows, 'percent')} |"
        in text
    )
    step_ns = run.overview.filter(pl.col("metric") == "step_time_ns")["value"].item()
    assert f"| step time (median) | {cell(step_ns, 'duration')} |\n" in text


def test_markdown_says_what_a_missing_product_needs(tmp_path: Path):
    out = tmp_path / "r.md"
    done = cli(
        "analyze", str(RUNS / "trl_grpo" / "logs"), "--format", "md", "-o", str(out), "--quiet"
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "## Per-rank timeline by stage" not in text, "one list, not a heading per figure"
    assert f"_{charts.NOT_DRAWN}_" in text
    assert "- Per-rank timeline by stage: needs step and stage ranges in a trace" in text
    assert "product '" not in text


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_png_writes_every_drawable_chart(run, tmp_path: Path):
    written = png.render(run, tmp_path / "report.png")
    expected = [f.key for f in charts.figures(run) if f.chart is not None]
    assert [p.name for p in written] == [f"report-{k}.png" for k in expected]
    for path in written:
        width, height = png_size(path)
        assert width >= 300 and height >= 100


def test_png_needs_an_output(tmp_path: Path):
    done = cli("analyze", str(RUNS / "verl_ppo_disaggregated"), "--format", "png", "--quiet")
    assert done.returncode == 2 and "-o" in done.stderr and "Traceback" not in done.stderr


def test_sources_list_every_rank_a_file_holds(tmp_path: Path):
    """One nsys export holds both ranks of the colocated run: every format's sources table says
    so."""
    folder = RUNS / "verl_ppo_colocated_nsys"
    ranks = ",".join(str(r["rank"]) for r in load_truth(folder)["ranks"] if r["rank"] >= 0)
    assert ranks == "0,1"
    for fmt in ("md", "text"):
        out = tmp_path / f"report.{fmt}"
        done = cli("analyze", str(folder), "--format", fmt, "-o", str(out), "--quiet")
        assert done.returncode == 0, done.stderr
        row = next(line for line in out.read_text().splitlines() if "report.sqlite" in line)
        assert [c for c in re.split(r"[|│]", row) if c.strip()][-1].strip() == ranks, row


SCRIPT = "<script>alert(1)</script>"


def hostile_trace(root: Path, name: str = "script>.json", annotation: str = SCRIPT) -> Path:
    """A real trace in a folder named ``<script>alert(1)<`` (so its path reads
    ``<script>alert(1)</script>.json``), with an annotation named ``<script>alert(1)</script>``."""
    import gzip
    import json

    trace = json.loads(
        gzip.decompress(
            (CORPUS / "HolisticTraceAnalysis" / "event_sync_trace.json.gz").read_bytes()
        )
    )
    step = next(e for e in trace["traceEvents"] if e.get("name") == "ProfilerStep#100")
    trace["traceEvents"].append({**step, "name": annotation})
    folder = root / "<script>alert(1)<"
    folder.mkdir()
    (folder / name).write_text(json.dumps(trace))
    return folder


def test_markdown_escapes_html_and_table_syntax_from_input_names():
    assert (
        markdown.escape("<b>a|b</b> & `c`\nd\x1b[31m")
        == "&lt;b&gt;a\\|b&lt;/b&gt; &amp; \\`c\\`<br>d\\x1b[31m"
    )
    # a backslash cannot unescape a pipe
    assert cells("| " + markdown.escape("a\\|b") + " |") == [
        "a\\\\\0b"
    ]


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_reports_show_hostile_names_as_text(tmp_path: Path, fmt: str):
    folder = hostile_trace(tmp_path)
    out = tmp_path / f"report.{fmt}"
    done = cli("analyze", str(folder), "-f", fmt, "-o", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "alert(1)" in text
    assert SCRIPT not in text and "<script>alert" not in text
    shown = text.replace("<wbr>", "")  # a long name may break in an HTML cell; it is still text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown
    if fmt == "md":
        shown = [t for t in tables(text) if any("alert(1)&lt;/script" in line for line in t)]
        assert shown and all(len({len(cells(line)) for line in t}) == 1 for t in shown)


def test_the_terminal_report_takes_markup_and_escapes_in_names_as_text(tmp_path: Path):
    folder = hostile_trace(tmp_path, name="\x1b[31mred[bold].json", annotation="step[/dim]x")
    done = cli("analyze", str(folder), "--quiet", env={"COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    assert "\\x1b[31mred[bold].json" in done.stdout and "\x1b" not in done.stdout
    assert "step[/dim]x" in done.stdout


def test_a_folder_of_links_is_titled_by_its_own_name(tmp_path: Path):
    """The Markdown and HTML title named the folder the links point into
    (``rlperf: HolisticTraceAnalysis``) for a folder ``pair/`` of links to two of its files."""
    pair = tmp_path / "pair"
    pair.mkdir()
    name = "sampled_rank-0.json.gz"
    (pair / name).symlink_to(CORPUS / "HolisticTraceAnalysis" / name)
    done = cli("analyze", str(pair), "-f", "md", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "# rlperf: pair"
