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
from collections.abc import Callable

import typer

from .commands import analyze, audit, compare, crosscheck, demo, export, taxonomy
from .commands.shared import BAD_INPUT, CONTRACT, INTERNAL_ERROR, internal_line, say, say_block
from .model.failures import describe, traceback_text, user_errors

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

COMMANDS: tuple[Callable[..., None], ...] = (
    analyze.analyze,
    demo.demo,
    compare.compare,
    audit.audit,
    export.export,
    crosscheck.crosscheck,
    taxonomy.taxonomy,
)
"""The commands, in the order ``rlperf --help`` lists them: each named after its function, its
help the function's docstring. Add one line (and its module's import) per command."""

for _command in COMMANDS:
    app.command()(_command)


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
