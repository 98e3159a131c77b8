"""``rlperf compare``: two or more runs side by side."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..ops.compare import compare as compare_runs
from ..ops.compare import default_labels
from ..progress import Steps, load
from ..report.comparison import TEXT_COLUMNS, display
from ..report.files import console, emit_text
from .shared import Debug, Jobs, NoCache, Output, Quiet, RunChoice, Strict, conclude, hold_strict


class CompareFormat(str, Enum):
    text = "text"
    json = "json"
    md = "md"
    html = "html"


def compare(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Two or more runs: each a directory (or one file) of one training job.",
            show_default=False,
        ),
    ],
    label: Annotated[
        list[str] | None,
        typer.Option("--label", "-l", help="A name per run, in order (default: the folder names)."),
    ] = None,
    fmt: Annotated[
        CompareFormat, typer.Option("--format", "-f", help="Output format.")
    ] = CompareFormat.text,
    output: Output = None,
    jobs: Jobs = None,
    no_cache: NoCache = False,
    quiet: Quiet = False,
    run_choice: RunChoice = None,
    strict: Strict = False,
    debug: Debug = False,
) -> None:
    """Compare runs on the same metrics: values side by side, deltas against the first run, and
    which run wins each metric (e.g. verl colocated vs OpenRLHF disaggregated on the same job,
    or before/after a configuration change)."""
    if len(runs) < 2:
        raise typer.BadParameter("give at least two runs to compare")
    labels = list(label or []) or default_labels(runs)
    if len(labels) != len(runs):
        raise typer.BadParameter(
            f"{len(labels)} --label for {len(runs)} runs: give one label per run"
        )
    if len(set(labels)) != len(labels):
        raise typer.BadParameter("labels must differ from each other")
    steps = Steps(quiet)
    loaded = [
        load(
            [path], steps, jobs=jobs, no_cache=no_cache, label=name, run=run_choice, writes=[output]
        )
        for path, name in zip(runs, labels, strict=True)
    ]
    with steps.step("Analyzing"):
        comparison = compare_runs(loaded, labels)
    hold_strict(loaded)
    emit(comparison, fmt.value, output, steps, runs=loaded)
    conclude(loaded)


def emit(comparison, fmt: str, output: Path | None, steps, *, runs=None) -> None:
    if fmt == "json":
        text = json.dumps(comparison.to_json(), indent=2, default=str) + "\n"
    elif fmt == "md":
        from ..report.markdown import render_comparison  # deferred: it loads altair

        text = render_comparison(comparison)
    elif fmt == "html":
        from ..report.html import render_comparison as render_html  # deferred: altair

        with steps.step("Writing the report"):
            text = render_html(comparison, runs=runs)
    else:
        with console(output, 160) as out:
            render_text(comparison, out)
        return
    emit_text(text, output, steps, f"{fmt} comparison")


def render_text(comparison, console: Console) -> None:
    shown = display(comparison)
    table = Table(
        title=f"rlperf compare — deltas against {comparison.labels[0]}",
        title_justify="left",
        show_edge=False,
    )
    for column in shown.columns:
        table.add_column(column, justify="left" if column in TEXT_COLUMNS else "right")
    for row in shown.iter_rows():
        table.add_row(*row)
    console.print(table)
    for name, won in comparison.wins().items():
        console.print(
            f"[bold]{name}[/bold] wins {len(won)}: {', '.join(won) or '–'}", highlight=False
        )
