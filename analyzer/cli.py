"""The ``rlperf`` command line.

Exit status: 0 ok, 1 an audit failed, 2 bad input or usage (one line naming the file and the
problem; ``--debug`` shows the traceback instead).
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from parsers.errors import InputError

app = typer.Typer(
    name="rlperf",
    help=(
        "Trace-driven performance analysis of RL post-training runs (PPO, GRPO, …).\n\n"
        "Reads PyTorch profiler traces, Nsight Systems exports and framework logs, maps every "
        "event onto RL stages and parallelism, and reports where the GPUs waited."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class Format(str, Enum):
    text = "text"
    json = "json"


Paths = Annotated[
    list[Path],
    typer.Argument(help="Trace files, exports, logs, or directories holding them (searched recursively).", show_default=False),
]
Jobs = Annotated[int | None, typer.Option("--jobs", "-j", help="Parse this many files at once (default: one per core).")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Parse every file again instead of reusing rlperf's cache.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output (for CI logs).")]


@app.command()
def analyze(
    paths: Paths,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = Format.text,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to this file instead of stdout.")] = None,
    jobs: Jobs = None,
    no_cache: NoCache = False,
    quiet: Quiet = False,
) -> None:
    """Analyze one run: per-rank GPU time, idle, communication overlap, time by annotation.

    PATHS may mix PyTorch profiler traces (.json/.json.gz), Nsight Systems exports (.sqlite,
    .nsys-rep with nsys on PATH, nsys stats CSV) and framework logs; formats are told by
    content. Files rlperf cannot read are listed and skipped.
    """
    from .ingest import ingest
    from .run import Run

    found = ingest(paths, jobs=jobs, use_cache=not no_cache)
    run = Run.from_sources(found.sources, unknown=found.unknown, notes=found.notes)
    _emit(run, fmt, output)


@app.command()
def demo(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to this file.")] = None,
) -> None:
    """Analyze the bundled sample traces and print the report."""
    from .ingest import ingest
    from .run import Run
    from .samples import demo_inputs

    inputs = demo_inputs()
    Console(stderr=True).print(f"[dim]rlperf demo: analyzing {', '.join(str(p) for p in inputs)}[/dim]")
    found = ingest(inputs)
    run = Run.from_sources(found.sources, unknown=found.unknown, notes=found.notes)
    _emit(run, Format.text, output)


def _emit(run, fmt: Format, output: Path | None) -> None:
    if fmt is Format.json:
        from .report import json as json_report

        text = json_report.render(run)
        if output:
            output.write_text(text + "\n")
        else:
            sys.stdout.write(text + "\n")
        return
    from .report import text as text_report

    if output:
        with output.open("w") as fh:
            text_report.render(run, Console(file=fh, width=120, color_system=None))
    else:
        text_report.render(run, Console())


def main() -> None:
    """Console entry point: bad input becomes one line on stderr and exit status 2."""
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    try:
        app()
    except InputError as exc:
        if debug:
            raise
        typer.echo(f"rlperf: error: {exc}", err=True)
        raise SystemExit(2) from None
