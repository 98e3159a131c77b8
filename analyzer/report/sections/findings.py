"""The findings list every report leads with: what to fix first, by what it would save per step."""

from __future__ import annotations

from typing import Any

import polars as pl

from ...model.run import Run
from ..section import Column, Section

TITLE = "Findings"
COLUMNS = [
    Column("position", "#", "number"),
    Column("title", "Finding"),
    Column("where", "Where"),
    Column("saving_ns", "Saving/step", "duration"),
    Column("saving_fraction", "Saving %", "percent"),
    Column("severity", "Severity"),
    Column("confidence", "Confidence"),
    Column("recommendation", "Recommendation"),
    Column("evidence", "Evidence"),
]


def section(run: Run) -> Section:
    found: pl.DataFrame = run.findings
    failed = [f.marker for what, f in run.failures.items() if what.startswith("findings: ")]
    if found.height == 0:
        note = "nothing found to fix: no guideline violated and no idle cause, bound or " \
               "generic check above its threshold"
        return Section(TITLE, None, note="; ".join([note, *failed]))
    shown = found.with_columns(
        pl.Series("where", [_where(r) for r in found.iter_rows(named=True)], dtype=pl.String)
    )
    return Section(TITLE, shown, COLUMNS, note=_note(found, failed))


def _where(row: dict[str, Any]) -> str:
    """``rollout · ranks 0-3 · step 2``; ``all`` when the finding is not confined."""
    parts = [
        row["stage"] or "",
        _label("rank", row["ranks"]),
        _label("step", row["steps"]),
    ]
    return " · ".join(p for p in parts if p) or "all"


def _label(noun: str, spans: str) -> str:
    if not spans:
        return ""
    many = "," in spans or "-" in spans
    return f"{noun}{'s' if many else ''} {spans}"


def _note(found: pl.DataFrame, failed: list[str]) -> str:
    estimated = found.filter(pl.col("saving_ns").is_not_null()).height
    text = (
        f"{found.height} findings, ranked by the estimated saving per step ({estimated} with an "
        "estimate; the rest by severity). Saving % is of the mean step of the trace or log it is "
        "measured on; each finding's basis "
        "says which bound it comes from (docs/analyses.md, Findings)."
    )
    return "; ".join([text, *failed])
