"""The ``rlperf`` command line: the app, the options commands share, and the entry point.

Each command lives in its own module under ``analyzer/commands/`` and registers itself on
:data:`app`; :data:`COMMANDS` lists them in help order. Exit status: 0 ok, 1 an audit failed,
2 bad input or usage (one line naming the file and the problem; ``--debug`` shows the
traceback instead).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated

import typer

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

COMMANDS: tuple[str, ...] = (
    "analyzer.commands.analyze",
    "analyzer.commands.demo",
    "analyzer.commands.compare",
    "analyzer.commands.audit",
    "analyzer.commands.export",
    "analyzer.commands.crosscheck",
    "analyzer.commands.taxonomy",
)
"""Command modules, in the order ``rlperf --help`` lists them. Add one line per module."""

Paths = Annotated[
    list[Path],
    typer.Argument(help="Trace files, exports, logs, or directories holding them (searched recursively).", show_default=False),
]
Jobs = Annotated[int | None, typer.Option("--jobs", "-j", help="Parse this many files at once (default: one per core).")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Parse every file again instead of reusing rlperf's cache.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output (for CI logs).")]
Output = Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")]
GuidelinesFile = Annotated[Path | None, typer.Option(
    "--guidelines", help="A guideline file merged over the catalogue: thresholds, texts, enabled = false, your own guidelines (docs/guidelines.md).")]

Framework = Annotated[str | None, typer.Option(
    "--framework", help="Classify with this framework's profile (verl, openrlhf, trl, nemo_rl, slime, areal, roll, …) instead of detecting it.")]
StepSelection = Annotated[str | None, typer.Option("--steps", help="Only these training steps, e.g. 3-5,8.")]
RankSelection = Annotated[str | None, typer.Option("--ranks", help="Only these ranks, e.g. 0-7 (the controller and logs stay).")]
RunChoice = Annotated[str | None, typer.Option(
    "--run", help="When the inputs hold several separate runs (rlperf lists them and stops), analyse this one: its number as listed, or a path prefix of its files.")]
RulesFile = Annotated[Path | None, typer.Option(
    "--rules", help="Your own name → stage rules (TOML, docs/profiles.md), tried before the framework profile's.")]
LayoutSpec = Annotated[str | None, typer.Option(
    "--layout", help="Rank layout of the training pool for collectives whose group has no description: degrees and/or order, e.g. tp=2,pp=4 or dp-tp-pp,tp=2 (default Megatron's tp-cp-ep-dp-pp).")]


def main() -> None:
    """Console entry point: bad input becomes one line on stderr and exit status 2."""
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    from taxonomy.collectives import CollectiveRulesError
    from taxonomy.guidelines import GuidelineError
    from taxonomy.profiles import ProfileError

    try:
        app()
    except (InputError, ProfileError, GuidelineError, CollectiveRulesError) as exc:
        if debug:
            raise
        typer.echo(f"rlperf: error: {exc}", err=True)
        raise SystemExit(2) from None


for _module in COMMANDS:
    importlib.import_module(_module)
