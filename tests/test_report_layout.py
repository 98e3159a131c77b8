"""What a new user saw wrong in the layout and wording of the reports (issue 13, items 6–8 and
the smaller list): each problem measured on the run where it was seen, through the code that
prints it."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from report_truth import REPO, RUNS, cli
from rich.cells import cell_len
from rich.console import Console

import analyzer
from analyzer.model.units import plural
from analyzer.report import fit, text
from analyzer.report.section import Column, Section
from analyzer.report.sections import placement as placement_section

CORPUS = REPO.parent / "shared" / "corpus"


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=REPO
    )


# --- item 7: a Markdown report loads no chart library -------------------------------------------


AFTER_MAIN = (
    "import sys\nfrom analyzer.cli import main\n"
    "try:\n    main()\nfinally:\n    print('altair loaded:', 'altair' in sys.modules)\n"
)


def test_a_markdown_report_never_imports_altair(tmp_path):
    """md shows each figure as its table: the seconds of altair's import were spent on charts it
    never drew (11–15 s against 3.4 s for text)."""
    out = tmp_path / "r.md"
    done = _python(AFTER_MAIN, "analyze", str(RUNS / "verl_ppo_disaggregated"), "-f", "md",
                   "--quiet", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "altair loaded: False" in done.stdout
    assert "## Stage share per step" in out.read_text()


def test_an_html_report_still_draws_its_charts(tmp_path):
    out = tmp_path / "r.html"
    done = _python(AFTER_MAIN, "analyze", str(RUNS / "verl_ppo_disaggregated"), "-f", "html",
                   "--quiet", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "altair loaded: True" in done.stdout
    assert out.read_text().count('class="chart"') >= 4


def test_png_without_output_is_refused_before_reading_anything(tmp_path):
    """The usage error comes before any parsing: a missing input is not even looked at, and
    neither altair nor the trace parsers' work is paid for."""
    done = _python(AFTER_MAIN, "analyze", str(tmp_path / "no-such-run"), "-f", "png", "--quiet")
    assert done.returncode == 2
    assert "--format png: writes image files" in done.stderr
    assert "no-such-run" not in done.stderr
    assert "altair loaded: False" in done.stdout


# --- terminal layout: lists, titles, name/value tables -------------------------------------------


def _printed(section, width: int = 80) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    text._section(section, console)
    return console.export_text()


STEPS = [*range(110, 440, 10), 435]
WHERE = "checkpoint · steps " + ",".join(map(str, STEPS))
"""The findings "Where" of the verl log (``…,350,360,3`` / ``70,380,…`` at 80 columns)."""


def _numbers_whole(report: str) -> None:
    found = [int(n) for n in re.findall(r"\d+", report)]
    assert set(STEPS) <= set(found), sorted(set(STEPS) - set(found))


def test_a_stacked_step_list_breaks_between_steps():
    frame = pl.DataFrame({"place": [1], "title": ["Slow steps: checkpoint grew"], "where": [WHERE]})
    report = _printed(Section("Findings", frame, name="findings"))
    _numbers_whole(report)
    assert max(cell_len(line) for line in report.splitlines()) <= 80


def test_a_step_list_in_a_table_cell_breaks_between_steps():
    frame = pl.DataFrame({"stage": ["checkpoint"], "steps": [WHERE]})
    report = _printed(Section("Slow", frame, columns=[Column("stage", "stage"),
                                                      Column("steps", "steps")]), 60)
    _numbers_whole(report)
    assert max(cell_len(line) for line in report.splitlines()) <= 60


def test_a_number_with_thousands_separators_is_never_broken():
    assert fit.wrap("took 1,234,567 µs of 9,876,543 µs", 10) == [
        "took", "1,234,567", "µs of", "9,876,543", "µs"]


def test_a_wrapped_title_keeps_its_indent():
    """verl-tpu: "…engine memory before" then ``training`` alone at column 0."""
    title = "In colocated mode, free or offload the KV cache and engine memory before training"
    frame = pl.DataFrame({"place": [1], "title": [title], "where": ["all"]})
    lines = _printed(Section("Findings", frame, name="findings")).splitlines()
    assert lines[2].startswith("1. In colocated mode")
    assert lines[3] == "   training"


def test_a_two_column_headline_table_stays_a_table():
    """The headline numbers of a logs-only run stacked into ``ranks (devices)`` / ``value 0``
    blocks because a name and a "needs …" value were both long; the value wraps instead."""
    values = ["0", "– needs a weight-sync range in a trace or a weight-sync timer in a log"]
    frame = pl.DataFrame({"metric": ["ranks (devices)", "guideline violations: error"],
                          "value": values})
    columns = [Column("metric", "metric"), Column("value", "value")]
    for width in (80, 60, 40):
        report = _printed(Section("Headline numbers", frame, columns=columns), width)
        lines = report.splitlines()
        assert any("┃" in line for line in lines), (width, report)
        assert max(cell_len(line) for line in lines) <= width
        if width >= 60:
            assert any(line.startswith(" guideline violations: error │ – needs") for line in lines)
        assert "  value  " not in report


def test_a_long_name_beside_a_long_detail_keeps_the_name_whole():
    """Only the widest text column wraps when that is enough (the run section's facts)."""
    laid = fit.plan(["fact", "value", "detail"],
                    [["version assumed"], ["101–435 (335)"], ["x " * 60]],
                    [True, True, True], 80)
    assert laid.kind == "table"
    widths = dict(laid.parts[0])
    assert widths[0] == len("version assumed") and widths[1] == len("101–435 (335)")


def test_plurals_agree_with_their_count():
    assert [plural(1, "device"), plural(2, "device"), plural(1, "launch"), plural(3, "launch"),
            plural(0, "gap"), plural(1_024, "call")] == [
        "1 device", "2 devices", "1 launch", "3 launches", "0 gaps", "1,024 calls"]


# --- audit fits the width ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("audit") / "base.json"
    done = cli("analyze", str(RUNS / "verl_ppo_disaggregated"), "-f", "json", "-o", str(path),
               "--quiet")
    assert done.returncode == 0, done.stderr
    return path


def test_audit_fits_columns_and_keeps_each_verdict_with_its_name(baseline):
    """Was 120–133 characters a line whatever COLUMNS said."""
    run = str(RUNS / "verl_grpo_colocated")
    narrow = cli("audit", run, "--baseline", str(baseline), "--quiet", env={"COLUMNS": "80"})
    assert narrow.returncode == 1
    lines = narrow.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    wide = cli("audit", run, "--baseline", str(baseline), "--quiet", "--width", "400")
    checks = [line for line in wide.stdout.splitlines() if line.startswith(("  PASS", "  FAIL"))]
    assert len(checks) == 10 and max(cell_len(line) for line in checks) > 100
    verdicts = [line.split()[0] for line in lines if line.startswith(("  PASS", "  FAIL"))]
    assert verdicts == [line.split()[0] for line in checks]
    assert " ".join(" ".join(lines).split()) == " ".join(" ".join(wide.stdout.split()).split())


# --- compare: names that read one way, 0 where 0 is known ----------------------------------------


def test_no_compare_row_reads_like_the_percentage_points_of_the_note():
    """``exposed comm (pp)`` beside a note saying "(pp)" means percentage points."""
    from analyzer.ops.compare import DIM_TITLES
    from analyzer.report.comparison import NOTE
    from taxonomy.vocab import DIMENSIONS

    assert "(pp)" in NOTE
    assert set(DIM_TITLES) == set(DIMENSIONS)
    assert DIM_TITLES["pp"] == "PP group"
    assert not any(t.lower() in ("pp", "dp", "tp") for t in DIM_TITLES.values())


def test_exposed_communication_is_zero_when_a_trace_with_kernels_has_no_collective():
    """0 where kernels were recorded and none is a collective; null where none was: a host op
    alone (rl-insight's run 1) cannot show a collective that ran."""
    from analyzer.analyses.overview import compute

    empty = pl.DataFrame(schema={"dim": pl.String, "exposed_ns": pl.Int64})
    kernel = pl.DataFrame({"rank": [0], "kind": ["kernel"], "start_ns": [0], "end_ns": [5]})
    host = kernel.with_columns(pl.lit("cpu_op").alias("kind"))
    found = [
        dict(compute({"collectives_by_dim": empty, "activity": a}).select("metric", "value")
             .iter_rows())["exposed_comm_ns"]
        for a in (kernel, host, kernel.clear())
    ]
    assert found == [0.0, None, None]


NSYS = CORPUS / "nsys-ai"


@pytest.mark.skipif(not NSYS.exists(), reason="the corpus is not beside this checkout")
def test_compare_shows_zero_exposed_communication_and_no_group_for_a_run_without_collectives():
    """h100_2gpu_1s records kernels and no collective: 0 ns in all, – in every group (it has
    none), where each group read 0 ns and could win."""
    done = cli("compare", str(NSYS / "mfu_2gpu_before.sqlite"), str(NSYS / "h100_2gpu_1s.sqlite"),
               "-f", "json", "--quiet")
    assert done.returncode == 0, done.stderr
    rows = {r["metric"]: r for r in json.loads(done.stdout)["metrics"]}
    total = rows["overview.exposed_comm_ns"]["values"]
    assert total["mfu_2gpu_before.sqlite"] > 1e6 and total["h100_2gpu_1s.sqlite"] == 0
    dims = [r for m, r in rows.items() if m.startswith("exposed.")]
    assert dims and all(r["values"]["h100_2gpu_1s.sqlite"] is None for r in dims)
    assert all("(pp)" not in r["title"] for r in rows.values())


def test_a_logs_only_run_leaves_exposed_communication_unknown():
    run = analyzer.load([RUNS / "trl_grpo" / "logs"])
    overview = run.overview
    value = dict(zip(overview["metric"], overview["value"], strict=True))
    assert value["exposed_comm_ns"] is None


# --- the run section's wording ----------------------------------------------------------------


def test_the_run_section_names_no_zero_hosts_and_gives_the_median_step_as_a_duration():
    trace = analyzer.load([CORPUS / "HolisticTraceAnalysis" / "nccl_data.json.gz"])
    facts = {r["fact"]: r for r in placement_section.summary(trace).to_dicts()}
    assert facts["ranks"]["detail"] == "host not recorded in the traces"
    assert "median 222 ms" in facts["steps"]["detail"]
    log = analyzer.load([CORPUS / "logs" / "verl"])
    steps = {r["fact"]: r for r in placement_section.summary(log).to_dicts()}["steps"]
    assert "median 10.6 s" in steps["detail"] and "10630" not in steps["detail"]


def test_help_and_the_text_report_never_import_altair():
    done = _python(AFTER_MAIN, "analyze", "--help")
    assert done.returncode == 0 and "altair loaded: False" in done.stdout
    done = _python(AFTER_MAIN, "analyze", str(RUNS / "trl_grpo" / "logs"), "--quiet")
    assert done.returncode == 0 and "altair loaded: False" in done.stdout
