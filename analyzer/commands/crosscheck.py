"""``rlperf crosscheck``: Holistic Trace Analysis beside rlperf on the same traces."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated

import polars as pl
import typer
from rich.console import Console
from rich.table import Table

from ..ops.crosscheck import METRICS, REASONS, load_hta
from ..ops.crosscheck import crosscheck as run_crosscheck
from ..progress import Steps, load
from ..report.files import console, emit_text
from .shared import (
    Debug,
    EngineChoice,
    EngineName,
    Jobs,
    NoCache,
    Output,
    Paths,
    Quiet,
    RayAddress,
    RunChoice,
    Strict,
    conclude,
    hold_strict,
)


class CrossFormat(str, Enum):
    text = "text"
    json = "json"


EXAMPLES = (
    'rlperf crosscheck runs/job-42/profile/',
    'rlperf crosscheck runs/job-42/ --format json -o hta.json',
)
"""Shown under ``rlperf crosscheck --help`` (analyzer/cli.py)."""

def crosscheck(
    paths: Paths,
    fmt: Annotated[
        CrossFormat, typer.Option("--format", "-f", help="Output format.")
    ] = CrossFormat.text,
    output: Output = None,
    jobs: Jobs = None,
    no_cache: NoCache = False,
    engine: EngineChoice = EngineName.local,
    ray_address: RayAddress = None,
    quiet: Quiet = False,
    run_choice: RunChoice = None,
    strict: Strict = False,
    debug: Debug = False,
) -> None:
    """Run HTA (pip install 'rlperf[hta]') on the run's PyTorch profiler traces and print its
    temporal breakdown and comm/compute overlap beside rlperf's, with the differences and how
    much of them each known definitional difference explains."""
    load_hta()
    steps = Steps(quiet)
    run = load(paths, steps, jobs=jobs, no_cache=no_cache, run=run_choice, writes=[output])
    hold_strict([run])
    traces = sum(s.format == "kineto" for s in run.sources)
    with steps.step("Running HTA", total=traces) as advance:
        result = run_crosscheck(run, progress=advance)
    if fmt.value == "json":
        emit_text(
            json.dumps(result.to_json(), indent=2, default=str) + "\n",
            output,
            steps,
            "json cross-check",
        )
    else:
        with console(output, 140) as out:
            render_text(result, out)
    conclude([run])


def render_text(result, console: Console) -> None:
    titles = dict(METRICS)
    for rank in sorted(result.table["rank"].unique().to_list()):
        rows = result.table.filter(pl.col("rank") == rank)
        table = Table(title=f"rank {rank}: rlperf vs HTA", title_justify="left", show_edge=False)
        for column in ("metric", "rlperf", "HTA", "difference", "explained", "unexplained", ""):
            table.add_column(column, justify="left" if column in ("metric", "") else "right")
        for row in rows.iter_rows(named=True):
            unit = "" if row["metric"] == "overlap_pct" else " µs"
            table.add_row(
                titles[row["metric"]],
                *(
                    _num(row[c], unit)
                    for c in ("rlperf", "hta", "difference", "explained", "unexplained")
                ),
                "agree" if row["agree"] else "DIFFERS",
            )
        console.print(table)
        for reason, effect in (
            result.reasons.filter(pl.col("rank") == rank).select("reason", "effect_us").iter_rows()
        ):
            console.print(
                f"  known reason [bold]{reason}[/bold] "
                f"({effect:+,.1f} µs of idle): {REASONS[reason]}",
                highlight=False,
            )
    for problem in result.problems:
        console.print(f"[yellow]{problem}[/yellow]", highlight=False)
    console.print(
        "[dim]rlperf: its own definitions (docs/analyses.md "
        "§6). explained: the part of the difference the "
        "known reasons account for; unexplained: what "
        "remains (agree = within 1% of the GPU window).[/dim]",
        highlight=False,
    )


def _num(value: float | None, unit: str) -> str:
    return "–" if value is None else f"{value:,.1f}{unit}"
