"""The ``rlperf`` command line: the app, the options commands share, and the entry point.

Each command lives in its own module under ``analyzer/commands/`` and registers itself on
:data:`app`; :data:`COMMANDS` lists them in help order. The error contract (docs/errors.md):
exit status 0 ok (each warning also one line on stderr), 1 an audit budget broke, 2 bad input
or usage (one line naming the file and the problem), 3 an internal error (one line naming the
analysis; the report is still written with the failed part marked). ``--debug`` adds the
traceback, ``--strict`` makes warnings errors.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from parsers.errors import InputError, printable

if TYPE_CHECKING:
    from .model.run import Run

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


BAD_INPUT = 2
INTERNAL_ERROR = 3
"""Exit status of an unexpected error inside rlperf (docs/errors.md): CI tells it from a broken
budget (1) and from bad input (2)."""


@dataclass
class Contract:
    """What ``--debug`` and ``--strict`` asked for in this process (set while options parse)."""

    debug: bool = False
    strict: bool = False


CONTRACT = Contract()


def _setter(name: str):
    def callback(value: bool) -> bool:
        setattr(CONTRACT, name, value)
        return value

    return callback


Debug = Annotated[bool, typer.Option(
    "--debug", help="On an error, also print the traceback (for a bug report).", callback=_setter("debug"))]
Strict = Annotated[bool, typer.Option(
    "--strict", help="Treat every warning as an error: exit status 2 naming the first one.", callback=_setter("strict"))]


def hold_strict(runs: Iterable[Run]) -> None:
    """Under ``--strict``, the first warning of ``runs`` as an InputError (exit status 2)."""
    if not CONTRACT.strict:
        return
    found = [w for run in runs for w in run.warnings]
    if found:
        raise InputError("--strict", f"warning treated as an error: {found[0]} ({len(found)} warning(s) in all)")


def conclude(runs: Iterable[Run]) -> None:
    """After the output is written: each warning as one line on stderr, each internal error as
    one line naming the analysis that failed, then exit status 3 if there was one."""
    from .report.sections import failures

    found = []
    for run in runs:
        for warning in run.warnings:
            say(f"rlperf: warning: {warning}")
        found += failures(run)
    for failure in found:
        if CONTRACT.debug:
            say_block(failure.traceback)
        say(internal_line(failure.what, failure.module, failure.error))
    if found:
        raise typer.Exit(INTERNAL_ERROR)


def say(line: str) -> None:
    """``line`` on stderr as one line, escaped (:func:`printable`): every stderr message of the
    CLI goes through here, so no name from an input or a rules file can break the line or drive
    the terminal."""
    typer.echo(printable(line), err=True)


def say_block(text: str) -> None:
    """A text of several lines (a traceback, Click's usage error) on stderr, each line escaped."""
    for line in text.rstrip("\n").split("\n"):
        say(line)


def internal_line(what: str, module: str, error: str) -> str:
    named = f"{what} ({module})" if what != module else module
    hint = "" if CONTRACT.debug else "; rerun with --debug for the traceback"
    return printable(f"rlperf: internal error in {named}: {error}{hint}")


def _shown(exc: typer.TyperException) -> str:
    """What Click would print for a usage error (usage, hint, ``Error: …``), as text."""
    show = getattr(exc, "show", None)
    if show is None:
        return f"Error: {exc.format_message()}"
    shown = io.StringIO()
    show(file=shown)
    return shown.getvalue()


def main() -> None:
    """Console entry point: bad input is one line and exit status 2, an unexpected error one
    line naming where it happened and exit status 3; ``--debug`` adds the traceback."""
    try:
        status = app(standalone_mode=False)
    except typer.TyperException as exc:
        say_block(_shown(exc))
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        say("Aborted!")
        raise SystemExit(1) from None
    except Exception as exc:
        from .model.failures import describe, traceback_text, user_errors

        if isinstance(exc, user_errors()):
            line, status = f"rlperf: error: {exc}", BAD_INPUT
        else:
            failure = describe(exc)
            line, status = internal_line(failure.what, failure.module, failure.error), INTERNAL_ERROR
        if CONTRACT.debug:
            say_block(traceback_text(exc))
        (say_block if getattr(exc, "multiline", False) else say)(line)
        raise SystemExit(status) from None
    raise SystemExit(status if isinstance(status, int) else 0)


for _module in COMMANDS:
    importlib.import_module(_module)
