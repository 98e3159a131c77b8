"""The ``rlperf`` command line: the app and the entry point.

Each command lives in its own module under ``analyzer/commands/`` (what they share in
``analyzer/commands/shared.py``); :data:`COMMANDS` registers them on :data:`app` in help
order. The error contract (docs/errors.md): exit status 0 ok (each warning also one line on
stderr), 1 an audit budget broke, 2 bad input or usage (one line naming the file and the
problem), 3 an internal error (one line naming the analysis; the report is still written with
the failed part marked). ``--debug`` adds the traceback, ``--strict`` makes warnings errors.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, get_args

import typer
from typer.core import TyperArgument, TyperOption

from .commands import analyze, audit, compare, crosscheck, demo, export, ingest, taxonomy
from .commands.shared import BAD_INPUT, CONTRACT, INTERNAL_ERROR, internal_line, say, say_block
from .dataset import recall

app = typer.Typer(
    name="rlperf",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

COMMANDS: tuple[Callable[..., None], ...] = (
    analyze.analyze,
    demo.demo,
    compare.compare,
    audit.audit,
    export.export,
    crosscheck.crosscheck,
    ingest.ingest,
    taxonomy.taxonomy,
)
"""The commands, in the order ``rlperf --help`` lists them: each named after its function, its
help the function's docstring. Add one line (and its module's import) per command."""


def epilog(command: Callable[..., None]) -> str:
    """The examples a command's module lists (``EXAMPLES``), kept as written (``\b``: Click
    does not rewrap the paragraph)."""
    examples = getattr(sys.modules[command.__module__], "EXAMPLES", ())
    return "\b\nExamples:\n" + "\n".join(f"  {e}" for e in examples) if examples else ""


for _command in COMMANDS:
    app.command(epilog=epilog(_command))(_command)


def version() -> str:
    """rlperf's version as the installed package states it."""
    from importlib import metadata  # deferred: it costs more than the rest of --version

    try:
        return metadata.version("rlperf")
    except metadata.PackageNotFoundError:
        return "unknown (not installed as a package)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"rlperf {version()}")
        raise typer.Exit(0)


@app.callback()
def _options(
    show: Annotated[
        bool,
        typer.Option(
            "--version", help="Print rlperf's version and exit.", callback=_show_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Trace-driven performance analysis of RL post-training runs (PPO, GRPO, …).

    Reads PyTorch profiler traces, Nsight Systems exports and framework logs, maps every event
    onto RL stages and parallelism, and reports where the GPUs waited.

    \b
    Examples:
      rlperf analyze runs/job-42/                  the report in the terminal
      rlperf analyze runs/job-42/ -f html -o report.html
      rlperf compare runs/before/ runs/after/      who wins where
      rlperf audit runs/job-42/ --budget b.toml    CI budgets (exit 1: broken)
      rlperf COMMAND --help                        its options and examples
    """


class _PlainArgument(TyperArgument):
    """An argument shown by its metavar alone: ``PATH...``, not ``{paths}...`` and
    ``<list[Path]>`` (Typer's notation for a required list)."""

    def _usage_display_name(self) -> str:
        return self.display_name_raw

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


CHOICES_INLINE = 30
"""Choices longer than this together are listed in the option's help, not beside its name (an
option line stays within 80 columns)."""


def _value_name(param: TyperOption) -> str:
    """What an option's value is called in help: its choices, N, FILE, or its name."""
    annotation = param.type_descriptor.annotation
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        choices = [str(m.value) for m in annotation]
        if len("|".join(choices)) <= CHOICES_INLINE:
            return "|".join(choices)
        param.help = f"{param.help or ''} One of: {', '.join(choices)}.".strip()
        return max(param.opts, key=len).lstrip("-").upper()
    inner = (get_args(annotation) or (annotation,))[0]
    if inner is int:
        return "N"
    if inner is Path:
        return "FILE"
    return max(param.opts, key=len).lstrip("-").upper()


def plain_help(command: Any) -> Any:
    """Every value in ``command``'s help named in words (``--jobs N``, ``--output FILE``,
    ``--format text|json|md``, ``PATH...``) instead of Typer's type notation."""
    for sub in getattr(command, "commands", {}).values():
        for param in sub.params:
            if isinstance(param, TyperArgument):
                name = param.name or "value"
                plural = param.nargs != 1
                singular = name[:-1] if plural and name.endswith("s") else name
                param.metavar = singular.upper() + ("..." if plural else "")
                param.__class__ = _PlainArgument
            elif isinstance(param, TyperOption) and not param.is_flag and param.metavar is None:
                param.metavar = _value_name(param)
    return command


def _shown(exc: typer.TyperException) -> str:
    """What Click would print for a usage error (usage, hint, ``Error: …``), as text."""
    show = getattr(exc, "show", None)
    if show is None:
        return f"Error: {exc.format_message()}"
    shown = io.StringIO()
    show(file=shown)
    return shown.getvalue()


UNUSED_AT_IMPORT = ("rfc3987_syntax",)
"""Modules the command line keeps from being imported. jsonschema (which altair imports to draw
a chart) loads ``rfc3987_syntax`` when it is installed, as Jupyter's ``jsonschema[format-
nongpl]`` installs it, to check IRI formats, and that compiles 38 Earley grammars: ``import
altair`` took 2.37 s with it and 0.36 s with it refused, in the test environment
(python-jsonschema/jsonschema#1428). No command checks an IRI; a module imported before stays
as it is, the refusal ends with the command, and the Python API is untouched."""


def main() -> None:
    """Console entry point: bad input is one line and exit status 2, an unexpected error one
    line naming where it happened and exit status 3; ``--debug`` adds the traceback. The words
    of the command are those a report it keeps is found by next time (analyzer/entry.py)."""
    refused = [name for name in UNUSED_AT_IMPORT if name not in sys.modules]
    for name in refused:
        sys.modules[name] = None  # type: ignore[assignment]  # None: import refused
    recall.ARGV = sys.argv[1:]
    try:
        _run()
    finally:
        recall.ARGV = None
        for name in refused:  # a command run in process leaves the process as it found it
            if sys.modules.get(name, False) is None:
                del sys.modules[name]


def _run() -> None:
    try:
        command = plain_help(typer.main.get_command(app))
        status = command(standalone_mode=False, prog_name="rlperf")
    except typer.TyperException as exc:
        say_block(_shown(exc))
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        say("Aborted!")
        raise SystemExit(1) from None
    except Exception as exc:
        from .model.failures import describe, traceback_text, user_errors  # deferred: polars

        if isinstance(exc, user_errors()):
            line, status = f"rlperf: error: {exc}", BAD_INPUT
        else:
            failure = describe(exc)
            line, status = (
                internal_line(failure.what, failure.module, failure.error),
                INTERNAL_ERROR,
            )
        if CONTRACT.debug:
            say_block(traceback_text(exc))
        (say_block if getattr(exc, "multiline", False) else say)(line)
        raise SystemExit(status) from None
    raise SystemExit(status if isinstance(status, int) else 0)
