"""One report section: a titled table whose columns say how to format them, a note, and more
frames behind it for the JSON report. Column formats are names (``duration``, ``percent``,
``bytes``, ``number``, ``bandwidth``, ``text``), so every renderer formats a value the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from ..model.run import Run

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
    name: str = ""
    """Its place in the layout (``analyzer/report/sections``), set when it is built."""
    everything: pl.DataFrame | None = None
    """What the JSON report writes where the table shows only part of it (the guidelines: the
    not-evaluated ones are one line of the note); None: the table's own frame."""
    fold: bool = True
    """Whether a long table folds behind ``<details>`` in Markdown: the headline never does,
    being what a pull-request comment is read for."""

    def shown_columns(self) -> list[Column]:
        """The declared columns, else every column of the frame as text."""
        if self.columns or self.frame is None:
            return self.columns
        return [Column(c, c) for c in self.frame.columns]

    def rows(self) -> list[list[object]]:
        if self.frame is None:
            return []
        return [
            list(r) for r in self.frame.select([c.name for c in self.shown_columns()]).iter_rows()
        ]


def gated(run: Run, title: str, product: str, empty: str) -> pl.DataFrame | Section:
    """``run.<product>`` when it has rows; else a frameless section whose note, ``empty``, says
    what the sources lack, so a report never shows an empty table."""
    frame = run.product(product)
    return frame if frame.height else Section(title, None, note=empty)
