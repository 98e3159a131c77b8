"""``rlperf crosscheck``: Holistic Trace Analysis beside rlperf on the same traces."""

from __future__ import annotations

import json
from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from parsers.errors import InputError

from ..model.units import cell, duration, plural
from ..progress import Steps
from ..report.files import console, emit_text
from .analyze import Width, report_width

if TYPE_CHECKING:
    from rich.console import Console
from .shared import (
    CONTRACT,
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
    say,
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
    width: Width = None,
    strict: Strict = False,
    debug: Debug = False,
) -> None:
    """Run HTA (pip install 'rlperf[hta]') on the run's PyTorch profiler traces and print its
    temporal breakdown and comm/compute overlap beside rlperf's, with the differences and how
    much of them each known definitional difference explains. A trace holding several ranks
    (rlperf's own export of a run) is not cross-checked: HTA reads a file as one rank."""
    from ..ops.crosscheck import crosscheck as run_crosscheck  # deferred: polars, the pipeline
    from ..ops.crosscheck import load_hta, not_comparable  # deferred: polars
    from ..progress import load  # deferred: the pipeline

    load_hta()
    steps = Steps(quiet)
    run = load(paths, steps, jobs=jobs, no_cache=no_cache, run=run_choice, writes=[output])
    hold_strict([run])
    skip = not_comparable(list(paths))
    hold_skipped(skip)
    traces = sum(s.format == "kineto" for s in run.sources)
    with steps.step("Running HTA", total=traces) as advance:
        result = run_crosscheck(run, progress=advance, skip=skip)
    if fmt.value == "json":
        emit_text(
            json.dumps(result.to_json(), indent=2, default=str) + "\n",
            output,
            steps,
            "json cross-check",
        )
    elif output is None and width is not None:
        from rich.console import Console  # deferred: rlperf --help does without rich

        render_text(result, Console(width=width))
    else:
        with console(output, report_width(width)) as out:
            render_text(result, out)
    for why in skip.values():
        say(f"rlperf: warning: {why}")
    conclude([run])


def hold_skipped(skip: dict[str, str]) -> None:
    """Under ``--strict``, a source left out of the cross-check is an error (exit status 2)."""
    if CONTRACT.strict and skip:
        first = next(iter(skip.values()))
        raise InputError("--strict", f"warning treated as an error: {first} "
                         f"({plural(len(skip), 'source')} not cross-checked)")


COLUMNS = (
    ("metric", "metric", "text"),
    ("rlperf", "rlperf", "preformatted"),
    ("hta", "HTA", "preformatted"),
    ("difference", "difference", "preformatted"),
    ("explained", "explained", "preformatted"),
    ("unexplained", "unexplained", "preformatted"),
    ("verdict", "verdict", "text"),
)
"""The table per rank (name, title, format of a ``report.section.Column``): numbers formatted here
(durations, percentages, signed differences), laid out by the terminal report's fitting (whole,
split or stacked; no header cut)."""


def render_text(result, console: Console) -> None:
    import polars as pl  # deferred: rlperf --help does without it
    from rich.text import Text  # deferred: rlperf --help does without rich

    from ..ops.crosscheck import METRICS, REASONS, VERDICTS  # deferred: polars
    from ..report.fit import wrap  # deferred: the renderers import polars
    from ..report.section import Column  # deferred: polars
    from ..report.text import plain, table  # deferred: polars

    columns = [Column(*c) for c in COLUMNS]
    titles = dict(METRICS)
    for rank in sorted(result.table["rank"].unique().to_list()):
        rows = result.table.filter(pl.col("rank") == rank)
        console.print(plain(f"rank {rank}: rlperf vs HTA", "bold"))
        cells = [
            [titles[row["metric"]], *_values(row), row["verdict"]]
            for row in rows.iter_rows(named=True)
        ]
        table(columns, cells, console)
        for reason, effect in (
            result.reasons.filter(pl.col("rank") == rank).select("reason", "effect_us").iter_rows()
        ):
            line = f"known reason {reason} ({_signed(effect * 1e3)} of idle): {REASONS[reason]}"
            console.print(Text("\n".join(wrap(line, console.width, initial="  ", indent="    "))))
        console.print()
    for problem in result.problems:
        console.print(plain(problem, "yellow"))
    verdicts = "; ".join(f"{k}: {v}" for k, v in VERDICTS.items())
    console.print(plain(
        "rlperf: its own definitions (docs/analyses.md §6). explained: the part of the "
        "difference the known reasons account for; unexplained: what remains. Tolerance: 1% of "
        f"the GPU window, 1 point of overlap. {verdicts}.", "dim",
    ))


def _values(row: dict) -> list[str]:
    """rlperf, HTA and the three differences of one row in the metric's unit."""
    if row["metric"] == "overlap_pct":
        return [
            *(_overlap(row[c]) for c in ("rlperf", "hta")),
            *(_points(row[c]) for c in ("difference", "explained", "unexplained")),
        ]
    return [
        *(cell(None if row[c] is None else row[c] * 1e3, "duration") for c in ("rlperf", "hta")),
        *(_signed(None if row[c] is None else row[c] * 1e3)
          for c in ("difference", "explained", "unexplained")),
    ]


def _signed(ns: float | None) -> str:
    text = duration(ns)
    return f"+{text}" if ns is not None and ns > 0 and duration(ns) != "0 ns" else text


def _overlap(pct: float | None) -> str:
    return cell(None if pct is None else pct / 100, "percent")


def _points(points: float | None) -> str:
    """A difference of two percentages, in percentage points."""
    if points is None:
        return "–"
    return f"{points:+.1f} points" if round(points, 1) else "0.0 points"
