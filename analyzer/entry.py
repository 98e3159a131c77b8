"""The ``rlperf`` console entry point: a command whose report a dataset keeps under its very
words is answered before anything else is imported (:mod:`analyzer.dataset.recall`); every other
command goes to the command line (:mod:`analyzer.cli`)."""

from __future__ import annotations

import sys

from .dataset.recall import recall


def main() -> None:
    if recall(sys.argv[1:]):
        raise SystemExit(0)
    from .cli import main as command_line  # deferred: Typer, when no kept report answers

    command_line()
