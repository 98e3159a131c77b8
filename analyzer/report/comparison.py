"""A comparison of runs as report cells: what the Markdown, HTML and terminal renderings of
``rlperf compare`` and ``rlperf demo`` show.

The comparison itself (metrics, deltas, winners) is computed by ``analyzer.ops.compare``, which
sits to the right of the report layer; its presentation lives here and receives the comparison
as an argument (anything shaped like :class:`Compared`).
"""

from __future__ import annotations

from typing import Protocol

import polars as pl

from ..model.units import cell, unit_format
from .section import Column

NOTE = (
    "stage time: per step, on the ranks that run the stage; idle: share of all devices' step "
    "windows; exposed comm: collective time no computation hides, summed over ranks "
    "(docs/reports.md)."
)
"""The footnote under every comparison table: what its metrics measure."""

TEXT_COLUMNS = ("metric", "path", "better", "winner")
"""Columns of :func:`display` that are words (left-aligned); the others are numbers."""


class Compared(Protocol):
    """What a renderer reads of ``analyzer.ops.compare.Comparison``."""

    labels: list[str]
    table: pl.DataFrame

    def wins(self) -> dict[str, list[str]]: ...


def display(comparison: Compared) -> pl.DataFrame:
    """The table as report cells (strings): values in their unit, signed deltas and changes."""
    labels = comparison.labels
    rows = []
    for row in comparison.table.iter_rows(named=True):
        fmt = unit_format(row["unit"])
        out = {"metric": row["title"], "path": row["metric"]}
        out |= {label: cell(row[label], fmt) for label in labels}
        for label in labels[1:]:
            delta, change = row[f"delta {label}"], row[f"change {label}"]
            shown = cell(delta, fmt)
            if fmt == "percent":
                shown = shown.replace("%", " pp")
            out[f"Δ {label}"] = _signed(shown, delta)
            out[f"Δ% {label}"] = _signed(cell(change, "percent"), change)
        out["better"] = row["better"] if row["better"] in ("lower", "higher") else ""
        out["winner"] = row["winner"] or ""
        rows.append(out)
    deltas = [c for label in labels[1:] for c in (f"Δ {label}", f"Δ% {label}")]
    columns = ["metric", "path", *labels, *deltas, "better", "winner"]
    return pl.DataFrame(rows, schema=dict.fromkeys(columns, pl.String))


def _signed(text: str, value: float | None) -> str:
    return f"+{text}" if value is not None and value > 0 else text


def display_columns(shown: pl.DataFrame) -> list[Column]:
    """Columns of :func:`display`'s table: text on the left, pre-formatted numbers on the right."""
    return [Column(c, c, "text" if c in TEXT_COLUMNS else "preformatted") for c in shown.columns]
