"""Parsers: one module per input format, each turning one source file into the event table.

Parsers know formats, not stages: they normalise what a file says into the columns of
:mod:`parsers.events` and leave every interpretation to ``taxonomy`` and ``analyzer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .discover import Discovery, discover, parser_for, sniff
from .errors import InputError
from .reading import UNNAMED, not_regular

if TYPE_CHECKING:
    from .events import EVENT_SCHEMA, validate
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


def __getattr__(name: str) -> Any:
    """The event contract's names, imported on first use: they import polars, which a command
    that reads no trace (``rlperf --help``, a kept report) does without."""
    if name in ("EVENT_SCHEMA", "validate"):
        from . import events  # deferred: polars

        return getattr(events, name)
    if name == "ParsedSource":
        from .source import ParsedSource  # deferred: polars

        return ParsedSource
    raise AttributeError(f"module 'parsers' has no attribute {name!r}")


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
