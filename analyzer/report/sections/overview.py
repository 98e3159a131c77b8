"""The headline numbers every report leads with."""

from __future__ import annotations

import polars as pl

from ...analyses.overview import METRIC_BY_NAME
from ...model.run import Run
from ...model.units import UNIT_FORMATS, cell
from ..section import Column, Section


def section(run: Run) -> Section | None:
    return Section(
        "Headline numbers",
        shown(run.overview),
        columns=[
            Column("title", "metric"),
            Column("text", "value"),
        ],
        note="rlperf audit reads these as overview.<metric> (the names in --format json; "
        "docs/reports.md).",
    )


def shown(overview: pl.DataFrame) -> pl.DataFrame:
    """The overview with ``text``, what reports print: the value in its unit's format, or what
    the metric needs."""
    texts = [
        cell(r["value"], UNIT_FORMATS.get(r["unit"], "number"))
        if r["value"] is not None
        else f"– needs {METRIC_BY_NAME[r['metric']].needs}"
        if METRIC_BY_NAME[r["metric"]].needs
        else "–"
        for r in overview.iter_rows(named=True)
    ]
    return overview.with_columns(pl.Series("text", texts, dtype=pl.String)).select(
        "metric", "title", "value", "text", "unit"
    )
