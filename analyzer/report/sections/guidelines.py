"""The guideline table: result, where, evidence and advice."""

from __future__ import annotations

from typing import Any

import polars as pl

from taxonomy.guidelines import SEVERITIES, format_value

from ...model.run import Run
from ..section import Column, Section


def section(run: Run) -> Section | None:
    violations: pl.DataFrame = run.violations
    if violations.height == 0:
        return Section("Guidelines", None, note="no guidelines enabled")
    shown = violations.with_columns(
        pl.Series(
            "result", [_result(r) for r in violations.iter_rows(named=True)], dtype=pl.String
        ),
        pl.Series(
            "where",
            [_place(r["step"], r["rank"]) for r in violations.iter_rows(named=True)],
            dtype=pl.String,
        ),
        pl.when(pl.col("status") == "violated").then(pl.col("recommendation")).alias("advice"),
    )
    counts = dict(violations.group_by("status").len().iter_rows())
    severities = dict(
        violations.filter(pl.col("status") == "violated").group_by("severity").len().iter_rows()
    )
    skipped = shown.filter(pl.col("result") == NOT_EVALUATED)
    note = (
        f"{counts.get('violated', 0)} violated "
        f"({', '.join(f'{severities.get(s, 0)} {s}' for s in reversed(SEVERITIES))}), "
        f"{counts.get('passed', 0)} passed, {counts.get('not_evaluated', 0)} not evaluated"
        f"{_not_evaluated(skipped)}. * heuristic threshold (docs/guidelines.md)."
    )
    columns = [
        Column("id", "ID"),
        Column("title", "Guideline"),
        Column("result", "Result"),
        Column("where", "Where"),
        Column("evidence", "Evidence"),
        Column("advice", "Recommendation"),
    ]
    evaluated = shown.filter(pl.col("result") != NOT_EVALUATED)
    return Section("Guidelines", evaluated, columns, note=note, everything=shown)


def _not_evaluated(skipped: pl.DataFrame) -> str:
    """``: G1, G2 (does not apply: …); G13 (needs …)``: the guidelines not evaluated, each id
    named, grouped by what they need, in one line instead of a row each (a trace that is not
    an RL run had ~100 lines of them); a failed one keeps its row."""
    if skipped.height == 0:
        return ""
    groups = skipped.group_by("evidence", maintain_order=True).agg(pl.col("id"))
    return ": " + "; ".join(
        f"{', '.join(ids)} ({evidence})" for evidence, ids in groups.iter_rows()
    )


NOT_EVALUATED = "not evaluated"
"""The result of a guideline the run could not judge (a failed one reads ``failed``)."""


def _result(row: dict[str, Any]) -> str:
    """``warn: 69.6% > 20%*``, ``passed: 33.6% < 60%``, ``passed (does not apply)``,
    ``not evaluated``."""
    if row["status"] == "not_evaluated":
        return "failed" if row["evidence"].startswith("failed: ") else NOT_EVALUATED
    if row["value"] is None:
        return "passed (does not apply)"
    value, threshold = row["value"], row["threshold"]
    sign = ">" if value > threshold else "<" if value < threshold else "="
    limit = format_value(row["threshold"], row["unit"]) + ("*" if row["heuristic"] else "")
    label = row["severity"] if row["status"] == "violated" else "passed"
    return f"{label}: {format_value(row['value'], row['unit'])} {sign} {limit}"


def _place(step: int | None, rank: int | None) -> str | None:
    parts = [f"step {step}" if step is not None else "", f"rank {rank}" if rank is not None else ""]
    return ", ".join(p for p in parts if p) or None
