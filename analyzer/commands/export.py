"""``rlperf export``: the run as a trace for the Perfetto UI and chrome://tracing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..progress import Steps
from .shared import (
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
    refuse_warnings,
    say,
)

EXAMPLES = (
    'rlperf export runs/job-42/ -o job-42.json.gz   (open at ui.perfetto.dev)',
    'rlperf analyze job-42.json.gz                 (reads back as the same run)',
)
"""Shown under ``rlperf export --help`` (analyzer/cli.py)."""

def export(
    paths: Paths,
    perfetto: Annotated[
        Path,
        typer.Option(
            "--output", "-o", "--perfetto", "-p",
            help="Write the trace JSON here (.json, or .json.gz to compress).",
            show_default=False,
        ),
    ],
    jobs: Jobs = None,
    no_cache: NoCache = False,
    engine: EngineChoice = EngineName.local,
    ray_address: RayAddress = None,
    quiet: Quiet = False,
    run_choice: RunChoice = None,
    strict: Strict = False,
    debug: Debug = False,
) -> None:
    """Export the run for the Perfetto UI (ui.perfetto.dev) and chrome://tracing: every rank a
    process with its events, a stages track, a bubbles track (idle time by cause, the largest
    marked) and weight-sync flow arrows. `rlperf analyze` reads the file back as the same run
    (ranks, streams, process groups, placement, FLOPs and device peaks); what cannot come back
    (framework logs) is a warning.
    """
    from ..ops.perfetto import MERGE_BELOW_NS, losses  # deferred: the pipeline imports polars
    from ..ops.perfetto import export as write_trace  # deferred: polars
    from ..progress import load  # deferred: the pipeline

    steps = Steps(quiet)
    run = load(paths, steps, jobs=jobs, no_cache=no_cache, run=run_choice, writes=[perfetto])
    hold_strict([run])
    refuse_warnings(losses(run))
    with steps.step("Writing the trace"):
        written = write_trace(run, perfetto)
    steps.say(
        f"rlperf: wrote {written['events']:,} events, {written['stage_slices']:,} stage slices, "
        f"{written['bubble_slices']:,} bubble slices ({written['idle_runs']:,} idle runs, "
        f"consecutive ones under {MERGE_BELOW_NS // 1000} µs merged) and "
        f"{written['flows']:,} weight-sync flows to {perfetto} "
        "(open it at ui.perfetto.dev or chrome://tracing)"
    )
    for lost in written["warnings"]:
        say(f"rlperf: warning: {lost}")
    conclude([run])
