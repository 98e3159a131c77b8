"""What the ``rlperf`` commands share: the options several take, the error contract's exit
statuses, ``--debug``/``--strict`` and the one way a message reaches stderr.

Apart from :mod:`analyzer.cli` (the app, which imports every command) so that a command imports
this module, never the app that lists it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parsers.errors import InputError, printable

from ..model.units import plural

if TYPE_CHECKING:
    from ..model.run import Run

Paths = Annotated[
    list[Path],
    typer.Argument(
        help="Trace files, exports, logs, or directories holding them (searched recursively).",
        show_default=False,
    ),
]


def _at_least_one(value: int | None) -> int | None:
    """--jobs below 1 is one line naming the option (Click's range error prints the usage)."""
    if value is not None and value < 1:
        raise InputError("--jobs", f"must be at least 1 (got {value})")
    return value


Jobs = Annotated[
    int | None,
    typer.Option(
        "--jobs", "-j", help="Parse this many files at once (default: one per core).",
        callback=_at_least_one,
    ),
]


class EngineName(str, Enum):
    local = "local"
    ray = "ray"


def _choose_engine(value: EngineName) -> EngineName:
    _choose(value is EngineName.local, engine=value.value, quiet=CONTRACT.quiet)
    return value


def _choose_address(value: str | None) -> str | None:
    _choose(value is None, address=value, given=True)
    return value


def _choose(default: bool, **part: Any) -> None:
    """Set one part of the engine choice (:func:`analyzer.engines.choose`). A default needs
    no setting while the engines are not imported (their choice starts at the defaults), so a
    command that parses nothing (a kept report read back) does not import them."""
    if default and "analyzer.engines" not in sys.modules:
        return
    from .. import engines  # deferred: the engines import the parsers and polars

    engines.choose(**part)


EngineChoice = Annotated[
    EngineName,
    typer.Option(
        "--engine",
        help="Where files are parsed: local (processes on this machine) or ray (tasks on a Ray "
             "cluster: docs/ray.md, pip install 'rlperf[ray]').",
        callback=_choose_engine,
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="The Ray cluster for --engine ray: auto (the one this machine is in), HOST:PORT or "
             "ray://HOST:10001 (default: $RAY_ADDRESS, else a Ray started for this run).",
        callback=_choose_address,
    ),
]


NoCache = Annotated[
    bool,
    typer.Option("--no-cache", help="Parse every file again instead of reusing rlperf's cache."),
]


def _choose_quiet(value: bool) -> bool:
    """Kept for the engine's own lines (starting a local Ray): handed to the engines when they
    are imported, by this callback or by ``--engine``'s, whichever Click runs last."""
    CONTRACT.quiet = value
    _choose(True, quiet=value)
    return value


Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="No progress output (for CI logs).", callback=_choose_quiet
    ),
]
Output = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
]
GuidelinesFile = Annotated[
    Path | None,
    typer.Option(
        "--guidelines",
        help="A guideline file merged over the catalogue: thresholds, texts, enabled = false, your "
             "own guidelines (docs/guidelines.md).",
    ),
]

Framework = Annotated[
    str | None,
    typer.Option(
        "--framework",
        help="Classify with this framework's profile (verl, openrlhf, trl, nemo_rl, slime, areal, "
             "roll, …) instead of detecting it.",
    ),
]
StepSelection = Annotated[
    str | None, typer.Option("--steps", help="Only these training steps, e.g. 3-5,8.")
]
RankSelection = Annotated[
    str | None,
    typer.Option("--ranks", help="Only these ranks, e.g. 0-7 (the controller and logs stay)."),
]
RunChoice = Annotated[
    str | None,
    typer.Option(
        "--run",
        help="When the inputs hold several separate runs (rlperf lists them and stops), analyse "
             "this one: its number as listed, or a path or file-name prefix of its files.",
    ),
]
RulesFile = Annotated[
    Path | None,
    typer.Option(
        "--rules",
        help="Your own name → stage rules (TOML, docs/profiles.md), "
             "tried before the framework profile's.",
    ),
]
LayoutSpec = Annotated[
    str | None,
    typer.Option(
        "--layout",
        help="Rank layout of the training pool for collectives whose group has no description: "
             "degrees and/or order, e.g. tp=2,pp=4 or "
             "dp-tp-pp,tp=2 (default Megatron's tp-cp-ep-dp-pp).",
    ),
]


BAD_INPUT = 2
INTERNAL_ERROR = 3
"""Exit status of an unexpected error inside rlperf (docs/errors.md): CI tells it from a broken
budget (1) and from bad input (2)."""


@dataclass
class Contract:
    """What ``--debug`` and ``--strict`` asked for in this process (set while options parse)."""

    debug: bool = False
    strict: bool = False
    quiet: bool = False


CONTRACT = Contract()


def _setter(name: str):
    def callback(value: bool) -> bool:
        setattr(CONTRACT, name, value)
        return value

    return callback


Debug = Annotated[
    bool,
    typer.Option(
        "--debug",
        help="On an error, also print the traceback (for a bug report).",
        callback=_setter("debug"),
    ),
]
Strict = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Treat every warning as an error: exit status 2 naming the first one.",
        callback=_setter("strict"),
    ),
]
SourcesStrict = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Treat every warning of reading the sources and choosing the run as an error: "
        "exit status 2 naming the first one. What the analysis warns of, analyze --strict "
        "judges.",
        callback=_setter("strict"),
    ),
]
"""``ingest``'s ``--strict``: it assembles and analyses no run (it holds no source's events),
so the warnings it can judge are those of parsing and of choosing the run."""


def hold_strict(runs: Iterable[Run]) -> None:
    """Under ``--strict``, the first warning of ``runs`` as an InputError (exit status 2)."""
    refuse_warnings([w for run in runs for w in run.warnings])


def refuse_warnings(warnings: list[str]) -> None:
    """Under ``--strict``, the first of ``warnings`` as an InputError (exit status 2)."""
    if CONTRACT.strict and warnings:
        raise InputError(
            "--strict",
            f"warning treated as an error: {warnings[0]} "
            f"({plural(len(warnings), 'warning')} in all)",
        )


SAME_WARNING_SHOWN = 3
"""Warnings that differ only in the source they name are shown one by one up to this many; past
it, the first and a count of the others (a dataset of 1,024 stale sources: one line, not 1,024)."""


def say_warnings(warnings: list[str], names: Iterable[str]) -> None:
    """Each warning as one line on stderr, except that warnings alike but for the source they
    name (one of ``names``) past :data:`SAME_WARNING_SHOWN` are said once with the others
    counted and named; the report still lists every one."""
    known = {n for n in names if n}
    groups: dict[str, list[tuple[str, str]]] = {}
    for warning in warnings:
        name = next((t for t in re.split(r"[\s:,()]+", warning) if t in known), "")
        template = warning.replace(name, "\0", 1) if name else warning
        groups.setdefault(template, []).append((warning, name))
    for alike in groups.values():
        if len(alike) <= SAME_WARNING_SHOWN or not alike[0][1]:
            for warning, _ in alike:
                say(f"rlperf: warning: {warning}")
            continue
        others = [n for _, n in alike[1:]]
        listed = ", ".join(others[:SAME_WARNING_SHOWN])
        listed += ", …" if len(others) > SAME_WARNING_SHOWN else ""
        say(f"rlperf: warning: {alike[0][0]} (and the same for "
            f"{plural(len(others), 'more source')}: {listed})")


def conclude(runs: Iterable[Run]) -> None:
    """After the output is written: each warning as one line on stderr, each internal error as
    one line naming the analysis that failed, then exit status 3 if there was one."""
    from ..report.sections import failures  # deferred: the report imports the pipeline

    found = []
    for run in runs:
        say_warnings(list(run.warnings), (s.path.name for s in run.sources))
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
