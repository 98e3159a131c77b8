"""Report sections: what every renderer (terminal, Markdown, HTML, JSON) shows, in order.

An analysis module contributes a :class:`Section` through ``section(run)``; renderers only lay
sections out. Column formats are names (``duration``, ``percent``, ``bytes``, ``number``,
``text``), so every renderer formats a value the same way.

An analysis that fails with an unexpected error does not take the report down: its section is
marked ``failed: …`` and the failure is recorded on the run (:func:`failures`), so the command
can still write every other section and then exit with the internal-error status
(docs/errors.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from ..failures import Failure, describe, record, user_errors

__all__ = ["Column", "Failure", "Section", "describe", "failures", "record_failure", "sections", "user_errors"]

if TYPE_CHECKING:
    from ..run import Run

REGISTRY: tuple[str, ...] = (
    "analyzer.assemble",
    "analyzer.classify",
    "analyzer.placement",
    "analyzer.analyses.overview",
    "analyzer.analyses.quality",
    "analyzer.analyses.logs",
    "analyzer.analyses.gpu_time",
    "analyzer.analyses.annotations",
    "analyzer.analyses.breakdown",
    "analyzer.analyses.bubbles",
    "analyzer.analyses.sync",
    "analyzer.analyses.workdepth",
    "analyzer.analyses.guidelines",
)
"""Modules with a report section (``section(run)``), in report order."""

FORMATS = ("text", "duration", "percent", "bytes", "number", "bandwidth")


@dataclass(frozen=True)
class Column:
    name: str
    title: str
    format: str = "text"


@dataclass
class Section:
    title: str
    frame: pl.DataFrame | None
    columns: list[Column] = field(default_factory=list)
    note: str = ""
    key: str = ""
    details: dict[str, pl.DataFrame] = field(default_factory=dict)
    """More frames behind the table (per step, statistics, …), written to the JSON report under
    their own keys."""

    def shown_columns(self) -> list[Column]:
        """The declared columns, else every column of the frame as text."""
        if self.columns or self.frame is None:
            return self.columns
        return [Column(c, c) for c in self.frame.columns]

    def rows(self) -> list[list[object]]:
        if self.frame is None:
            return []
        return [list(r) for r in self.frame.select([c.name for c in self.shown_columns()]).iter_rows()]


def record_failure(run: Run, what: str, exc: Exception) -> Failure:
    """Keep ``exc`` on the run as the failure of ``what`` (once, however often it is rebuilt)."""
    return record(run.failures, what, exc)


def failures(run: Run) -> list[Failure]:
    """The failures recorded on ``run``, in the order they happened."""
    return list(run.failures.values())


def sections(run: Run) -> list[Section]:
    """Every section the registered modules contribute, in registry order; a section whose
    analysis fails is marked failed (:func:`record_failure`) and the others still come."""
    out: list[Section] = []
    for name in REGISTRY:
        module = importlib.import_module(name)
        build = getattr(module, "section", None)
        if build is None:
            continue
        key = name.rsplit(".", 1)[-1]
        try:
            section = build(run)
        except user_errors():
            raise
        except Exception as exc:
            section = Section(key.replace("_", " ").capitalize(), None, note=record_failure(run, f"section {key}", exc).marker)
        if section is not None:
            section.key = section.key or key
            out.append(section)
    return out


def gated(run: Run, title: str, product: str, empty: str) -> pl.DataFrame | Section:
    """``run.<product>`` when it has rows; else a frameless section whose note, ``empty``, says
    what the sources lack, so a report never shows an empty table."""
    frame = run.product(product)
    return frame if frame.height else Section(title, None, note=empty)
