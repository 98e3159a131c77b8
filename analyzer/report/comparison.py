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

MISSING = (
    "– (null in JSON): the run cannot measure the metric, so it takes no part in the winner: it "
    "lacks what the metric reads; exposed comm needs recorded kernels and no warning that "
    "kernels may be missing, and a group needs collectives in it (the world group of a run of "
    "one pool with no other parallel dimension is its DP group); idle (sync_wait) needs two or "
    "more ranks, idle (weight_sync) a weight_sync stage, idle (rollout_tail) a rollout stage."
)
"""What an empty cell means, and what each metric that a run may lack needs: in the footnote
and in the JSON (``"missing"``)."""

NOTE = (
    "Each run after the first shows its change against the first in parentheses: percentage "
    "points (pp) for shares, relative change otherwise. stage time: per step, on the ranks that "
    "run the stage; idle: share of all devices' step windows; exposed comm: collective time no "
    "computation hides, summed over ranks, so between runs of different rank counts it and "
    "GPU busy time are not comparable and win nothing; runs whose device work per step differs "
    "more than 2× did different work, and step and stage times win nothing between them. "
    f"{MISSING} The JSON format gives every "
    "metric's "
    "path, delta and change (docs/reports.md)."
)
"""The footnote under every comparison table: how to read it and what its metrics measure."""

TEXT_COLUMNS = ("metric", "better", "winner")
"""Columns of :func:`display` that are words (left-aligned); the others are numbers."""


class Compared(Protocol):
    """What a renderer reads of ``analyzer.ops.compare.Comparison``."""

    labels: list[str]
    table: pl.DataFrame

    def wins(self) -> dict[str, list[str]]: ...


def display(comparison: Compared) -> pl.DataFrame:
    """The table as report cells (strings): one column per run, each later run's value with its
    change against the first (``62.1% (+36.9 pp)``, ``12.3 ms (+10.8%)``), then the direction and
    the winner. One column per run, not three, keeps four runs within a 1,400 px page and a
    two-run table within 80 terminal columns (at most two tables, stacked)."""
    labels = comparison.labels
    rows = []
    for row in comparison.table.iter_rows(named=True):
        fmt = unit_format(row["unit"])
        out = {"metric": row["title"], labels[0]: cell(row[labels[0]], fmt)}
        for label in labels[1:]:
            out[label] = _with_change(
                cell(row[label], fmt), row[f"delta {label}"], row[f"change {label}"], fmt
            )
        out["better"] = row["better"] if row["better"] in ("lower", "higher") else ""
        out["winner"] = row["winner"] or ""
        rows.append(out)
    columns = ["metric", *labels, "better", "winner"]
    return pl.DataFrame(rows, schema=dict.fromkeys(columns, pl.String))


def _with_change(value: str, delta: float | None, change: float | None, fmt: str) -> str:
    """``value (change)``: points for a share, the relative change otherwise (the absolute delta
    when the first run's value is 0)."""
    if delta is None:
        return value
    if fmt == "percent":
        shown = _signed(cell(delta, fmt).replace("%", " pp"), delta)
    elif change is not None:
        shown = _signed(cell(change, "percent"), change)
    else:
        shown = _signed(cell(delta, fmt), delta)
    return f"{value} ({shown})"


def _signed(text: str, value: float | None) -> str:
    return f"+{text}" if value is not None and value > 0 else text


def display_columns(shown: pl.DataFrame) -> list[Column]:
    """Columns of :func:`display`'s table: text on the left, pre-formatted numbers on the right."""
    return [Column(c, c, "text" if c in TEXT_COLUMNS else "preformatted") for c in shown.columns]


def wins_line(label: str, won: list[str]) -> str:
    """``label wins 3: idle (all devices), idle (train pool), stage time (rollout)``: each metric
    named with its scope in parentheses, so commas separate metrics only."""
    return f"{label} wins {len(won)}: {', '.join(won) or '–'}"
