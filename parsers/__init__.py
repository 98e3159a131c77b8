"""Parsers: one module per input format, each turning one source file into the event table.

Parsers know formats, not stages: they normalise what a file says into the columns of
:mod:`parsers.events` and leave every interpretation to ``taxonomy`` and ``analyzer``.
"""

from __future__ import annotations

from pathlib import Path

from .discover import Discovery, discover, parser_for, sniff
from .errors import InputError
from .events import EVENT_SCHEMA, validate
from .reading import UNNAMED, not_regular
from .source import ParsedSource

__all__ = [
    "EVENT_SCHEMA",
    "Discovery",
    "InputError",
    "ParsedSource",
    "discover",
    "parse_file",
    "sniff",
    "validate",
]


def parse_file(path: str | Path, fmt: str | None = None, source: int = 0) -> ParsedSource:
    """Parse one file (format sniffed from its content unless given)."""
    path = Path(path)
    problem = not_regular(path)
    if problem:
        raise InputError(path, problem)
    fmt = fmt or sniff(path)
    if fmt is None:
        raise InputError(path, "not a format rlperf reads (no parser recognised its content)")
    try:
        return parser_for(fmt).parse(path, source=source)
    except InputError as exc:
        if exc.path != UNNAMED:
            raise
        raise InputError(path, exc.problem) from None
