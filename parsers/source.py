"""What a parser hands back for one source file."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from .events import empty_events

METRICS_SCHEMA = pl.Schema({
    "source": pl.UInt32(),
    "step": pl.Int32(),
    "key": pl.String(),
    "value": pl.Float64(),
})
"""Per-step scalar metrics a log states (response lengths, memory, MFU, idle ratios, …)."""


RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)
"""A rank a file name states (``rank-3``, ``job_rank_12``, ``Rank3``); the last resort of parsers.
It takes the whole digit run because the parsers range-check the number and count one out of
range (``out_of_range_rank``) instead of losing it."""
RANK_IN_NAME_BOUNDED = re.compile(r"(?i)(?:^|[^a-z])rank[-_]?(\d{1,5})(?:[^0-9]|$)")
"""The same rank for the assembler, which numbers the traces no parser gave a rank and checks no
range: at most five digits, not followed by a sixth (``rank123456`` is an id, not a rank), and a
later ``rank`` in the name is still tried."""

FORMAT_TRAITS: dict[str, str] = {
    "correlation_per_process": "correlation ids are unique per process, not per file (an nsys "
    "report of several processes): a launch links to its GPU work on (correlation id, pid)",
    "session_clock": "times count from the capture's session start, never from the epoch, so the "
    "clock estimate leaves the file's events where they are",
}
"""What a parser module may declare about its format in ``TRAITS`` (a frozenset of these names),
so that the analyzer asks about a property instead of knowing format names."""
CORRELATION_PER_PROCESS = "correlation_per_process"
SESSION_CLOCK = "session_clock"


def empty_metrics() -> pl.DataFrame:
    return pl.DataFrame(schema=METRICS_SCHEMA)


@dataclass
class ParsedSource:
    """One parsed file: its event table, run-level facts, per-step metrics and warnings.

    ``meta`` keys used across parsers (all optional): ``rank``, ``world_size``, ``host``,
    ``pg_config`` (list of ``{pg_name, pg_desc, ranks}``), ``device_properties``, ``framework``,
    ``framework_version``, ``config`` (dict of run configuration the source states),
    ``time_base`` (how absolute time was derived), ``salvaged`` (fraction kept from a cut file),
    ``quality`` (counts of what the parser repaired: see :meth:`tally`).
    """

    path: Path
    format: str
    events: pl.DataFrame = field(default_factory=empty_events)
    meta: dict[str, Any] = field(default_factory=dict)
    metrics: pl.DataFrame = field(default_factory=empty_metrics)
    warnings: list[str] = field(default_factory=list)
    ingested: dict[str, Any] | None = None
    """Read from a dataset: the source's identity record there and the warnings its tables were
    written with, so that ingesting the dataset again keeps them (the file may be gone, or have
    changed, or another parser version may run now) instead of describing the file as it is."""

    def warn(self, message: str) -> None:
        self.warnings.append(f"{self.path.name}: {message}")

    def drop_counted(
        self, frame: pl.DataFrame, rules: Iterable[tuple[str, pl.Expr, str]]
    ) -> pl.DataFrame:
        """``frame`` without the rows each ``(kind, bad, why)`` rule selects, in order; each rule
        that drops rows warns ``N rows {why} were left out`` and tallies them as ``kind``."""
        for kind, bad, why in rules:
            n = int(frame.select(bad.fill_null(False).sum()).item())
            if n:
                self.warn(f"{n} rows {why} were left out")
                self.tally(kind, n)
                frame = frame.filter(~bad.fill_null(False))
        return frame

    def tally(self, kind: str, count: int = 1) -> None:
        """Count ``count`` values the parser dropped, clamped or repaired as ``kind`` (e.g.
        ``clamped_ts``, ``negative_dur``, ``dropped_out_of_range``) into ``meta["quality"]``;
        the data-quality section of every report lists these counts per file."""
        if count:
            quality = self.meta.setdefault("quality", {})
            quality[kind] = int(quality.get(kind, 0)) + int(count)
