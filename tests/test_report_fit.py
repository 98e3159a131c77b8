"""The report a person reads (issue 13, items 5, 6, 8): the terminal report fits 80 columns on
every sample run and a few corpus files (no line wider, no header cut, no number wrapped), long
lists are one counted line (a 128-rank run, 5,000 skipped files), every format follows the one
layout with no heading twice, and the HTML's colours, stage-share bars and tables read right."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import polars as pl
import pytest
from report_truth import REPO, RUNS, cli
from rich.cells import cell_len
from rich.console import Console

import analyzer
from analyzer.model.units import cell
from analyzer.report import browser, charts, html, markdown, text
from analyzer.report import json as json_report
from analyzer.report.fit import plan, span
from analyzer.report.sections import FIGURES, LAYOUT, SOURCES, Section, sections
from taxonomy.vocab import CAUSE_COLORS, IDLE_COLOR, STAGE_COLORS

CORPUS = REPO.parent / "shared" / "corpus"
SAMPLES = sorted(p for kind in ("runs", "synthetic")
                 for p in (REPO / "sample_traces" / kind).iterdir() if p.is_dir())
CORPUS_FILES = [
    CORPUS / "HolisticTraceAnalysis" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    CORPUS / "nsys-ai" / "h100_2gpu_1s.sqlite",
    CORPUS / "logs" / "verl",
    CORPUS / "rl-insight" / "actor_update__prof_rank-0_031904.json.gz",
]


def rendered(run, width: int = 80, *, verbose: bool = False) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    text.render(run, console, verbose=verbose)
    return console.export_text()


def assert_fits(run, report: str, width: int = 80) -> None:
    """No line wider than ``width``; every word of every column title whole in the report (a
    cut header reads ``wei…``); every number of every shown row whole on one line."""
    lines = report.splitlines()
    too_wide = [line for line in lines if cell_len(line) > width]
    assert not too_wide, too_wide[:3]
    words = set(re.findall(r"\S+", report))
    for section in sections(run):
        if section.frame is None or section.frame.height == 0:
            continue
        columns = section.shown_columns()
        rows = section.rows()[: text.ROWS]
        cells = [[cell(v, c.format) for v, c in zip(r, columns, strict=True)] for r in rows]
        laid = text.fitted(columns, cells, width, numbered=section.name in text.NUMBERED)
        titled = columns[laid.keys:] if laid.kind == "stacked" else columns  # keys lead a block
        if laid.kind == "stacked":  # a block leaves out the fields its record has no value for
            shown = cells[: text.shown_rows(laid)]
            titled = [c for c in titled
                      if any(r[columns.index(c)] not in ("", "–") for r in shown)]
        for column in titled:
            for word in column.title.split():
                assert word in words, f"{section.title}: header {column.title!r} cut"
        for row in rows[: text.shown_rows(laid)]:
            for value, column in zip(row, columns, strict=True):
                if column.format != "text" and value is not None:
                    number = cell(value, column.format)
                    assert any(number in line for line in lines), (section.title, number)


@pytest.fixture(scope="module", params=SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def sample(request):
    return analyzer.load([request.param])


def test_every_sample_run_fits_80_columns(sample):
    assert_fits(sample, rendered(sample))


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_corpus_files_fit_80_columns(path: Path):
    if not path.exists():
        pytest.skip("the corpus is not beside this checkout")
    run = analyzer.load([path])
    assert_fits(run, rendered(run))


def test_columns_80_and_width_80_give_the_same_fitting_report(tmp_path: Path):
    """Through the command line: COLUMNS=80 on stdout (a CI log) and --width 80 into a file
    (whose default would be 120) print the same report, every line within 80."""
    run = RUNS / "verl_ppo_disaggregated"
    piped = cli("analyze", str(run), "--quiet", env={"COLUMNS": "80"})
    assert piped.returncode == 0, piped.stderr
    out = tmp_path / "r.txt"
    done = cli("analyze", str(run), "--quiet", "--width", "80", "-o", str(out),
               env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert out.read_text() == piped.stdout
    assert max(cell_len(line) for line in piped.stdout.splitlines()) <= 80
    wide = cli("analyze", str(run), "--quiet", "--width", "160")
    assert max(cell_len(line) for line in wide.stdout.splitlines()) > 80


@pytest.fixture(scope="module")
def ranks128(tmp_path_factory):
    from sample_traces.synth import generate, preset

    folder = tmp_path_factory.mktemp("r128")
    generate(preset("disaggregated", 128, steps=2, seed=0), folder, jobs=1, level=1)
    return analyzer.load([folder])


def test_a_128_rank_run_prints_a_bounded_report(ranks128):
    """128 sources and per-rank tables of 128 rows: the sources are one line with the count
    per format, each long table its first ROWS rows and a counted line (was 745 lines)."""
    report = rendered(ranks128)
    lines = report.splitlines()
    assert_fits(ranks128, report)
    assert len(lines) < 650
    assert "Sources: 128 files: 128 kineto (ranks 0-127)" in report
    assert not any(line.startswith(" rank-5.synthetic") for line in lines)
    cut = [line for line in lines if re.match(r"… \d+ more rows? \(--verbose", line)]
    hidden = [n for n in map(rows_hidden, sections(ranks128)) if n]
    assert len(cut) == len(hidden) >= 3
    assert [int(line.split()[1]) for line in cut] == hidden
    full = rendered(ranks128, verbose=True)
    assert not re.search(r"more rows? \(--verbose", full)
    assert len(full.splitlines()) > 2 * len(lines)


def rows_hidden(section: Section, width: int = 80) -> int:
    """How many of ``section``'s rows the terminal leaves out at ``width``."""
    if section.frame is None:
        return 0
    columns = section.shown_columns()
    cells = [[cell(v, c.format) for v, c in zip(r, columns, strict=True)]
             for r in section.rows()[: text.ROWS]]
    laid = text.fitted(columns, cells, width, numbered=section.name in text.NUMBERED)
    return max(0, section.frame.height - text.shown_rows(laid))


def test_five_thousand_skipped_files_are_one_line(tmp_path: Path):
    folder = tmp_path / "run"
    folder.mkdir()
    log = RUNS / "trl_grpo" / "logs"
    for path in log.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    junk = folder / "junk"
    junk.mkdir()
    for n in range(5000):
        (junk / f"note-{n:04d}.bin").write_bytes(b"\x00\x01not a trace")
    run = analyzer.load([folder])
    assert len(run.unknown) == 5000
    report = rendered(run)
    skipped = [line for line in report.splitlines() if "skipped" in line]
    assert len(skipped) == 1
    assert "skipped 5,000 files not in a format rlperf reads, e.g." in report.replace("\n", " ")
    alone = rendered(analyzer.load([RUNS / "trl_grpo" / "logs"]))
    assert len(report.splitlines()) <= len(alone.splitlines()) + 3  # one line, wrapped at 80
    assert len(rendered(run, 400, verbose=True).splitlines()) > 5000


# --- one order and no heading twice -----------------------------------------------------------


def headings(run) -> dict[str, list[str]]:
    md = markdown.render(run)
    page = html.render(run)
    plain = rendered(run, 200)
    titles = [s.title for s in sections(run)]
    return {
        "md": re.findall(r"^## (.+)$", md, flags=re.M),
        "html": re.findall(r"<h2>(.+?)</h2>", page),
        "text": [t for t in re.findall(r"^(\S.*?)(?::.*)?$", plain, flags=re.M) if t in titles],
    }


@pytest.mark.parametrize("name", ["verl_ppo_disaggregated", "trl_grpo"])
def test_every_format_follows_the_layout_and_no_heading_repeats(name: str):
    run = analyzer.load([RUNS / name])
    found = sections(run)
    order = [s.title for s in found]
    seen = headings(run)
    for fmt, heads in seen.items():
        assert len(heads) == len(set(heads)), (fmt, heads)
        assert [h for h in heads if h in order] == order, fmt
    figures = [f.title for f in charts.figures(run) if not f.needs]
    for fmt in ("md", "html"):
        heads = seen[fmt]
        assert heads[-1] == "Sources"
        names = [n for n, _ in LAYOUT]
        before = {s.title for s in found if names.index(s.name) < names.index(FIGURES)}
        if figures:
            first_figure = heads.index(figures[0])
            assert all(heads.index(t) < first_figure for t in before), fmt
            assert heads.index("Guidelines") < first_figure
    keys = [k for k in json.loads(json_report.render(run)) if k != "schema"]
    section_keys = [s.key for s in found]
    assert [k for k in keys if k in section_keys] == section_keys
    assert keys.index("sources") > keys.index(section_keys[-1]) and keys[-1] == "failures"
    assert LAYOUT[-1][0] == SOURCES


def test_a_logs_only_run_lists_the_figures_it_cannot_draw_once_in_user_words():
    run = analyzer.load([RUNS / "trl_grpo" / "logs"])
    assert all(f.needs for f in charts.figures(run))
    for document in (markdown.render(run), html.render(run), rendered(run, 120)):
        assert "product '" not in document and "(product" not in document
        assert "found nothing to show" not in document
    assert markdown.render(run).count(charts.NOT_DRAWN) == 1
    assert html.render(run).count(html.esc(charts.NOT_DRAWN)) == 1
    md = markdown.render(run)
    assert "- Stage share per step: needs step and stage ranges in a trace" in md


def test_the_headline_table_has_no_audit_path_column_but_json_keeps_the_names():
    run = analyzer.load([RUNS / "verl_ppo_disaggregated"])
    for document in (markdown.render(run), html.render(run), rendered(run, 120)):
        assert "audit path" not in document.lower()
    overview = json.loads(json_report.render(run))["overview"]
    assert {r["metric"] for r in overview} >= {"step_time_ns", "weight_sync_share"}


def test_a_missing_metric_says_what_to_provide():
    run = analyzer.load([RUNS / "trl_grpo" / "logs"])
    report = rendered(run, 120)
    assert "product" not in report
    busy = next(line for line in report.splitlines() if "GPU busy" in line)
    assert "needs GPU activity in a trace" in busy


# --- HTML: colours, stage share, tables that fit ------------------------------------------------


def test_idle_causes_never_wear_a_stage_colour():
    stage = {c.lower() for c in STAGE_COLORS.values()}
    cause = {c.lower() for c in CAUSE_COLORS.values()}
    assert not stage & cause
    assert IDLE_COLOR.lower() not in stage | cause
    assert len(cause) == len(CAUSE_COLORS)


def test_stage_share_bars_reach_one_hundred_percent_with_the_idle_part():
    run = analyzer.load([RUNS / "verl_ppo_disaggregated"])
    figure = charts.stage_share(run)
    wide = figure.table
    assert wide is not None and wide.columns[-1] == charts.IDLE
    stages = [c for c in wide.columns if c != "step"]
    totals = wide.select(pl.sum_horizontal(stages).alias("t"))["t"].to_list()
    assert totals == pytest.approx([1.0] * wide.height, abs=1e-9)
    idle = wide[charts.IDLE].to_list()
    assert all(0.1 < x < 0.2 for x in idle), idle  # the bars stopped at 85.7% and 87.5%
    spec = json.dumps(figure.spec())
    assert IDLE_COLOR in spec
    bubbles = json.dumps(charts.bubble_causes(run).spec())
    assert not any(c in bubbles for c in STAGE_COLORS.values())


PROBE = (
    "<script>addEventListener('load',()=>{const w=innerWidth;const t=[...document."
    "querySelectorAll('table')];const r=Math.max(...t.map(x=>x.getBoundingClientRect().right));"
    "const s=t.filter(x=>x.parentElement.scrollWidth>x.parentElement.clientWidth+1).length;"
    "document.body.setAttribute('data-probe',Math.round(r)+'/'+s+'/'+w+'/'+t.length);});"
    "</script></body>"
)


@pytest.mark.skipif(browser.chromium() is None, reason="needs Chromium")
def test_every_html_table_fits_a_1400_px_page(tmp_path: Path):
    """Measured in Chromium: no table reaches past the window or scrolls inside its box (the
    guideline table's recommendations and the wide per-step tables wrap instead)."""
    run = analyzer.load([RUNS / "verl_ppo_disaggregated"])
    page = tmp_path / "r.html"
    page.write_text(html.render(run).replace("</body>", PROBE))
    drawn = browser.render(page, width=1400)
    found = re.search(r'data-probe="(\d+)/(\d+)/(\d+)/(\d+)"', drawn.dom)
    assert found, "the probe did not run"
    right, scrolling, window, tables = map(int, found.groups())
    assert window == 1400 and tables >= 8
    assert right <= window and scrolling == 0


# --- the fitting rules ---------------------------------------------------------------------------


def test_a_table_that_fits_keeps_its_titles_on_one_line():
    laid = plan(["rank", "busy time"], [["0", "1"], ["3 ms", "4 ms"]], [True, False], 80)
    assert laid.kind == "table" and [w for _, w in laid.parts[0]] == [4, 9]


def test_a_wide_numeric_table_splits_repeating_its_key_and_never_cuts_a_title():
    titles = ["rank", *(f"cause number {n}" for n in range(12))]
    columns = [["0", "1"], *([["12.5 ms", "3 ms"]] * 12)]
    laid = plan(titles, columns, [True, *[False] * 12], 80)
    assert laid.kind == "split" and len(laid.parts) >= 2
    for part in laid.parts:
        assert part[0][0] == 0
        assert span([w for _, w in part]) <= 80
        assert all(w >= len("number") and w >= len("12.5 ms") for _, w in part[1:])
    shown = sorted(i for part in laid.parts for i, _ in part[1:])
    assert shown == list(range(1, 13))


def test_long_text_wraps_in_one_column_or_the_table_stacks():
    detail = " ".join(["word"] * 40)
    one = plan(["fact", "value", "detail"], [["steps"], ["2"], [detail]], [True] * 3, 80)
    assert one.kind == "table"
    widths = dict(one.parts[0])
    assert widths[0] == 5 and widths[1] == 5 and span(list(widths.values())) <= 80
    many = plan([f"t{n}" for n in range(5)], [[detail]] * 5, [True] * 5, 80)
    assert many.kind == "stacked"


def test_a_stacked_record_wraps_its_values_under_themselves():
    section = Section(
        "Guidelines",
        pl.DataFrame({"id": ["G4"], "a": ["x " * 60], "b": ["y " * 60], "c": ["z " * 60]}),
    )
    console = Console(width=60, record=True, color_system=None, file=io.StringIO())
    text._section(section, console)
    lines = console.export_text().splitlines()
    assert lines[1:3] == ["Guidelines", "G4"]
    assert lines[3].startswith("  a  x x") and lines[4].startswith("     x x")
    assert max(len(line) for line in lines) <= 60


WORD_PROBE = (
    "<script>addEventListener('load',()=>{let words=0,split=[];"
    "for(const td of document.querySelectorAll('td')){const w=document.createTreeWalker(td,"
    "NodeFilter.SHOW_TEXT);let n;while((n=w.nextNode())){"
    "for(const m of n.data.matchAll(/[^\\s-]+/g))"
    "{if(m[0].length>LONG)continue;words++;const r=document.createRange();r.setStart(n,m.index);"
    "r.setEnd(n,m.index+m[0].length);const tops=new Set([...r.getClientRects()].map("
    "x=>Math.round(x.top)));if(tops.size>1)split.push(m[0]);}}}"
    "document.body.setAttribute('data-words',"
    "words+'/'+split.length+'/'+split.slice(0,5).join(' '));});</script></body>"
).replace("LONG", str(html.LONG_TOKEN))


@pytest.mark.skipif(browser.chromium() is None, reason="needs Chromium")
def test_no_ordinary_word_is_split_across_lines_in_an_html_table(tmp_path: Path):
    """Measured in Chromium at 1,400 px: every word of a table cell up to ``LONG_TOKEN``
    characters sits on one line (``overflow-wrap: anywhere`` drew "Communicatio n" and
    "actor_up date" in the findings while the page had room); only longer tokens (kernel
    names, lists of steps) break, at their separators; a hyphen is a break as in any text."""
    run = analyzer.load([RUNS / "verl_ppo_disaggregated"])
    page = tmp_path / "r.html"
    page.write_text(html.render(run).replace("</body>", WORD_PROBE))
    drawn = browser.render(page, width=1400)
    found = re.search(r'data-words="(\d+)/(\d+)/([^"]*)"', drawn.dom)
    assert found, "the probe did not run"
    words, split = int(found.group(1)), int(found.group(2))
    assert words > 1000
    assert split == 0, found.group(3)


def test_only_long_words_get_break_opportunities():
    assert html.breakable("actor_update · rank 0") == "actor_update · rank 0"
    kernel = "ncclDevKernel_AllGather_RING_LL_Sum_bf16(ncclDevKernelArgsStorage<4096ul>)"
    cut = html.breakable(kernel)
    assert cut.replace("<wbr>", "") == html.esc(kernel)
    assert max(len(p) for p in cut.split("<wbr>")) <= html.LONG_TOKEN + len("&lt;&gt;") * 2
    assert html.breakable("a" * 60).count("<wbr>") == 2


def test_the_demo_summary_fits_80_columns_with_whole_headers() -> None:
    """``rlperf demo`` printed its per-run table with rich's own squeezing: ``roll…``,
    ``weig…``, ``erro…``, ``warn…`` at 80 columns."""
    from types import SimpleNamespace

    from rich.console import Console

    from analyzer.commands import demo

    labels = ["verl colocated", "OpenRLHF disaggregated"]
    metrics = [m for m, _ in demo.HIGHLIGHTS]
    units = {"overview.step_time_ns": "ns", "overview.guideline_errors": "count",
             "overview.guideline_warnings": "count"}
    table = pl.DataFrame({
        "metric": metrics,
        "unit": [units.get(m, "fraction") for m in metrics],
        labels[0]: [125e6, 0.595, 0.049, 0.0, 0.123, 1.0, 5.0],
        labels[1]: [78.7e6, 0.753, 0.0, 0.261, 0.056, 0.0, 5.0],
    })
    console = Console(width=80, record=True, force_terminal=False)
    demo.highlights("Real tiny runs", SimpleNamespace(table=table, labels=labels), console)
    out = console.export_text()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    for _, title in demo.HIGHLIGHTS:
        assert all(word in out for word in title.split()), title
    assert "125 ms" in out and "75.3%" in out
