"""``rlperf compare``: two or more runs side by side."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parsers.errors import InputError, printable

from ..progress import Steps
from ..report.files import console, emit_text
from .shared import (
    Debug,
    EngineChoice,
    EngineName,
    Jobs,
    NoCache,
    Output,
    Quiet,
    RayAddress,
    Strict,
    conclude,
    hold_strict,
)

if TYPE_CHECKING:
    import polars as pl
    from rich.console import Console

    from ..model.run import Run

CompareRun = Annotated[
    str | None,
    typer.Option(
        "--run",
        help="For each input that holds several separate runs, compare this one: its number as "
             "listed, or a path or file-name prefix of its files (an input of one run is that "
             "run).",
    ),
]


class CompareFormat(str, Enum):
    text = "text"
    json = "json"
    md = "md"
    html = "html"


EXAMPLES = (
    'rlperf compare runs/colocated/ runs/disaggregated/',
    'rlperf compare runs/a/ runs/b/ -l before -l after --format html -o cmp.html',
    'rlperf compare runs/a/ runs/a/        (a run against itself: the noise)',
)
"""Shown under ``rlperf compare --help`` (analyzer/cli.py)."""

FILE_WIDTH = 160
"""The comparison table's width in a file (-o) when --width does not say."""

CompareWidth = Annotated[
    int | None,
    typer.Option(
        "--width",
        min=40,
        max=1000,
        help="Terminal table width in columns (default: the terminal's, else COLUMNS, else 80; "
        f"{FILE_WIDTH} in a file).",
    ),
]


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
    engine: EngineChoice = EngineName.local,
    ray_address: RayAddress = None,
    quiet: Quiet = False,
    run_choice: CompareRun = None,
    strict: Strict = False,
    width: CompareWidth = None,
    debug: Debug = False,
) -> None:
    """Compare runs on the same metrics: values side by side, each run's change against the first,
    and which run wins each metric (e.g. verl colocated vs OpenRLHF disaggregated on the same job,
    or before/after a configuration change)."""
    from ..ops.compare import compare as compare_runs  # deferred: the pipeline imports polars

    if len(runs) < 2:
        raise InputError("compare", "give at least two runs to compare")
    labels = checked_labels(list(label or []), runs)
    steps = Steps(quiet)
    loaded = [
        load_input(
            path, steps, run_choice, jobs=jobs, no_cache=no_cache,
            label=f"{name} (run {i}/{len(runs)})", writes=[output],
        )
        for i, (path, name) in enumerate(zip(runs, labels, strict=True), start=1)
    ]
    with steps.step("Analyzing"):
        comparison = compare_runs(loaded, labels)
    hold_strict(loaded)
    emit(comparison, fmt.value, output, steps, runs=loaded, width=width)
    conclude(loaded)


def load_input(path: Path, steps: Steps, choice: str | None, **options: Any) -> Run:
    """One input of the comparison. ``--run`` chooses among the runs of an input that holds
    several; an input holding one run is that run whatever ``--run`` says (a dataset, made of
    one run, beside the folder it came from). A choice an input of several runs lacks names that
    input and its runs. Only when the choice fits no run of the input is it read a second time."""
    from ..assemble.runs import RunsError  # deferred: polars
    from ..progress import load  # deferred: the pipeline

    try:
        return load([path], steps, run=choice, **options)
    except InputError as error:
        if choice is None or error.path != "--run":
            raise
        if not error.problem.startswith("no run"):
            raise InputError(path, f"--run: {error.problem}") from None
    try:
        return load([path], steps, run=None, **options)
    except RunsError as several:
        count = len(several.runs)
        raise InputError(
            path,
            f"holds {count} runs (1-{count}), none of them --run {choice}: choose one of them "
            "with --run (its number as rlperf analyze lists them, or a path or file-name prefix "
            "of its files)",
        ) from None


def checked_labels(given: list[str], runs: list[Path]) -> list[str]:
    """The user's ``--label`` values, one per run and all different; without any, labels made
    from the paths (the same path twice is numbered, so a run compares with itself)."""
    from ..ops.compare import default_labels  # deferred: the pipeline imports polars

    if not given:
        return default_labels(runs)
    if len(given) != len(runs):
        raise InputError("--label", f"{len(given)} given for {len(runs)} runs: give one label "
                         "per run")
    repeated = sorted({x for x in given if given.count(x) > 1})
    if repeated:
        raise InputError("--label", f"{printable(repeated[0])!r} is given twice: each run needs "
                         "its own label")
    return given


def emit(
    comparison, fmt: str, output: Path | None, steps, *, runs=None, width: int | None = None
) -> None:
    from ..report.html import render_comparison as render_html  # deferred: it loads altair
    from ..report.markdown import render_comparison  # deferred: the renderers import polars

    if fmt == "json":
        text = json.dumps(comparison.to_json(), indent=2, default=str) + "\n"
    elif fmt == "md":
        text = render_comparison(comparison)
    elif fmt == "html":
        with steps.step("Writing the report"):
            text = render_html(comparison, runs=runs)
    elif output is None and width is not None:
        from rich.console import Console  # deferred: rlperf --help does without rich

        render_text(comparison, Console(width=width))
        return
    else:
        with console(output, width or FILE_WIDTH) as out:
            render_text(comparison, out)
        return
    emit_text(text, output, steps, f"{fmt} comparison")


def render_text(comparison, console: Console) -> None:
    """The table, stacked into several when it is wider than the console (each repeats the
    metric column; no header is cut), then who wins where and the footnote."""
    from rich.table import Table  # deferred: rlperf --help does without rich

    from ..report.comparison import NOTE, TEXT_COLUMNS, display, wins_line  # deferred: polars

    shown = display(comparison)
    parts = stacked(shown, console.width)
    for i, columns in enumerate(parts, start=1):
        part = f" ({i}/{len(parts)})" if len(parts) > 1 else ""
        table = Table(
            title=f"rlperf compare — changes against {comparison.labels[0]}{part}",
            title_justify="left",
            show_edge=False,
        )
        for column in columns:
            table.add_column(
                column,
                justify="left" if column in TEXT_COLUMNS else "right",
                no_wrap=column not in ("metric", "winner"),
                max_width=widest(shown, "winner") if column == "winner" else None,
            )
        for row in shown.select(columns).iter_rows():
            table.add_row(*row)
        console.print(table)
    for name, won in comparison.wins().items():
        console.print(wins_line(name, won), highlight=False, markup=False)
    console.print(NOTE, highlight=False, markup=False)


PADDING = 3
"""What one column of a rich table adds to its widest cell (padding and the rule)."""


def widest(shown: pl.DataFrame, column: str) -> int:
    """The column's widest cell; a winner cell that names several runs (``a, b``) wraps after
    each name, so its widest name."""
    from rich.cells import cell_len  # deferred: rlperf --help does without rich

    def width(value: str) -> int:
        if column != "winner":
            return cell_len(value)
        return max(cell_len(name) + 1 for name in value.split(", "))

    return max([cell_len(column), *(width(v) for v in shown[column].to_list())])


def stacked(shown: pl.DataFrame, width: int) -> list[list[str]]:
    """The columns split into tables of at most ``width`` characters, each led by ``metric``
    (which wraps if it must); one table when everything fits."""
    natural = {c: widest(shown, c) + PADDING for c in shown.columns}
    lead = min(natural["metric"], max(width // 3, 12))
    parts: list[list[str]] = [["metric"]]
    used = lead
    for column in shown.columns[1:]:
        if used + natural[column] > width and len(parts[-1]) > 1:
            parts.append(["metric"])
            used = lead
        parts[-1].append(column)
        used += natural[column]
    return parts
