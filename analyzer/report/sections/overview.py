"""The headline numbers every report leads with."""

from __future__ import annotations

import polars as pl

from ...analyses.overview import METRIC_BY_NAME, warmup_steps
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
        note=warmup_note(run)
        + "rlperf audit reads these as overview.<metric> (the names in --format json; "
        "docs/reports.md).",
    )


def warmup_note(run: Run) -> str:
    """Which trace steps the median step time leaves out as warm-up, so the headline says it."""
    left_out = warmup_steps({"step_outliers": run.product("step_outliers")})
    if not left_out:
        return ""
    named = ", ".join(str(s) for s in left_out)
    return f"Median step time without warm-up step {named} (see Slow steps). "


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
