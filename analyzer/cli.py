"""The ``rlperf`` command line."""

from __future__ import annotations

import sys

import typer

from parsers.errors import InputError

app = typer.Typer(
    name="rlperf",
    help="Trace-driven performance analysis of RL post-training runs (PPO, GRPO, …).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
