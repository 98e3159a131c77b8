"""``rlperf demo``: the bundled sample runs compared, as one HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..model.units import cell, unit_format
from ..progress import Steps
from ..report.files import check_output, write_text
from ..samples import demo_groups
from .shared import Debug, Quiet

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_OUTPUT = Path("rlperf-demo.html")
HIGHLIGHTS = (
    ("overview.step_time_ns", "step"),
    ("overview.idle_fraction", "idle"),
    ("idle.rollout_tail", "rollout tail"),
    ("idle.pool_wait", "pool wait"),
    ("overview.weight_sync_share", "weight sync"),
    ("overview.guideline_errors", "errors"),
    ("overview.guideline_warnings", "warnings"),
)
"""The few numbers the terminal shows per sample run; the HTML report has everything."""


EXAMPLES = (
    'rlperf demo',
    'rlperf demo -o demo.html --quiet',
)
"""Shown under ``rlperf demo --help`` (analyzer/cli.py)."""

def demo(
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the HTML report.")
    ] = DEFAULT_OUTPUT,
    quiet: Quiet = False,
    debug: Debug = False,
) -> None:
    """Analyze the bundled sample runs (verl colocated, disaggregated and one-step-off; OpenRLHF
    disaggregated; GPU-shaped synthetic runs of the three placements) and write one
    self-contained HTML report comparing them, each run's full report below its comparison."""
    from rich.console import Console  # deferred: rlperf --help does without rich

    from ..ops.compare import compare  # deferred: the pipeline imports polars
    from ..progress import load  # deferred: the pipeline
    from ..report.html import Page, add_comparison, esc  # deferred: it loads altair

    check_output(output)
    steps = Steps(quiet)
    title = "rlperf demo: the sample runs side by side"
    page = Page(title)
    page.add(f"<h1>{esc(title)}</h1>")
    for heading, found in demo_groups():
        runs = [load([path], steps, label=label) for label, path in found]
        with steps.step(f"Analyzing: {heading}"):
            comparison = compare(runs, [label for label, _ in found])
            page.add(f"<h2>{esc(heading)}</h2>")
            add_comparison(page, comparison, runs, level=3)
        if not quiet:
            highlights(heading, comparison, Console())
    with steps.step("Writing the report"):
        written = write_text(output, page.render())
    steps.say(
        f"rlperf demo: wrote the report to {written.resolve()} "
        "— open it in a browser (it works offline)"
    )


def highlights(heading: str, comparison, console: Console) -> None:
    """One row per run: the headline numbers of the comparison, formatted as the reports do and
    fitted to the terminal as the analyze report is (no header cut at 80 columns)."""
    from ..report import text as text_report  # deferred: the renderers import polars
    from ..report.section import Column  # deferred: with the renderers

    rows = {r["metric"]: r for r in comparison.table.iter_rows(named=True)}
    shown = [(m, t) for m, t in HIGHLIGHTS if m in rows]
    columns = [Column("run", "run"), *(Column(m, t, "number") for m, t in shown)]
    cells = []
    for label in comparison.labels:
        line = [label]
        for metric, _ in shown:
            row = rows[metric]
            fmt = unit_format(row["unit"])
            value = row[label]
            line.append(cell(int(value) if fmt == "number" and value is not None else value, fmt))
        cells.append(line)
    console.print(f"[bold]{heading}[/bold]")
    text_report.table(columns, cells, console)
