"""``rlperf audit``: performance budgets for CI (exit 0 pass, 1 a budget failed, 2 bad input,
3 an internal error: CI tells a crash from a regression)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from parsers.errors import InputError

from ..progress import Steps
from ..report.files import check_output, write_text
from .shared import (
    INTERNAL_ERROR,
    Debug,
    EngineChoice,
    EngineName,
    Jobs,
    NoCache,
    Paths,
    Quiet,
    RayAddress,
    RunChoice,
    Strict,
    conclude,
    hold_strict,
    internal_line,
)

EXAMPLES = (
    'rlperf audit runs/job-42/ --budget budget.toml --junit audit.xml',
    'rlperf analyze runs/base/ --format json -o base.json',
    'rlperf audit runs/job-42/ --baseline base.json',
)
"""Shown under ``rlperf audit --help`` (analyzer/cli.py)."""

Width = Annotated[
    int | None,
    typer.Option(
        "--width",
        min=40,
        max=1000,
        help="Width of the summary in columns (default: the terminal's, else COLUMNS, else 80); "
        "a check too long for it continues indented on the next lines.",
    ),
]

def audit(
    paths: Paths,
    budget: Annotated[
        Path | None,
        typer.Option(
            "--budget",
            "-b",
            help="Budget file (TOML): [[check]] metric = PATH, max/min/max_increase/max_decrease.",
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            help="A JSON report of an earlier run (rlperf "
                 "analyze --format json) to hold this run against.",
        ),
    ] = None,
    junit: Annotated[
        Path | None,
        typer.Option("--junit", help="Also write the results as JUnit XML to this file."),
    ] = None,
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
    """Check a run against performance budgets (for CI): weight-sync share <= 5%, trainer idle
    <= 20%, step time at most 10% worse than a baseline, no guideline at error level, ….

    PATHS is the run (traces, logs, directories) or a JSON report written by rlperf analyze
    --format json. Metric paths address that report (docs/reports.md). With --baseline alone,
    every run-summary number is held to 10% of the baseline; without a baseline, max_increase
    and max_decrease are not checked. Exit status 1 when a check fails, 3 on an internal error.
    """
    from rich.console import Console  # deferred: rlperf --help does without rich

    from ..ops import audit as budgets  # deferred: the pipeline imports polars
    from ..progress import load  # deferred: the pipeline
    from ..report import json as json_report  # deferred: the renderers import polars

    if budget is None and baseline is None:
        raise InputError("audit", "needs --budget FILE, --baseline FILE or both (docs/ci.md)")
    check_output(junit)
    checks = budgets.load_budget(budget) if budget else []
    base = budgets.load_report(baseline) if baseline else None
    if base is not None and not checks:
        checks = budgets.regression_checks(base)
    steps = Steps(quiet)
    run = None
    if len(paths) == 1 and budgets.is_report(paths[0]):
        document = budgets.load_report(paths[0])
    else:
        run = load(paths, steps, jobs=jobs, no_cache=no_cache, run=run_choice, writes=[junit])
        with steps.step("Analyzing"):
            document = json.loads(json_report.render(run))
        hold_strict([run])
    subject = ", ".join(str(p) for p in paths)
    result = budgets.audit(document, checks, base, subject=subject)
    lines = budgets.summary_lines(result, width or Console().width)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        lines += budgets.github_annotations(result)
    sys.stdout.write("\n".join(lines) + "\n")
    if junit is not None:
        write_text(junit, budgets.junit_xml(result))
    if run is not None:
        conclude([run])
    elif document.get("failures"):
        for f in document["failures"]:
            typer.echo(
                internal_line(str(f.get("failed")), str(f.get("module")), str(f.get("error"))),
                err=True,
            )
        raise typer.Exit(INTERNAL_ERROR)
    if result.failed:
        raise typer.Exit(1)
