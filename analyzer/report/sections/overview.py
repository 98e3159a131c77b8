"""The headline numbers every report leads with."""

from __future__ import annotations

import polars as pl

from parsers.events import GPU_ACTIVITY_KINDS

from ...analyses.overview import METRIC_BY_NAME, warmup_steps
from ...model.run import Run
from ...model.units import UNIT_FORMATS, cell
from ..section import Column, Section


def section(run: Run) -> Section | None:
    return Section(
        "Headline numbers",
        shown(run.overview, why_not(run)),
        columns=[
            Column("title", "metric"),
            Column("text", "value"),
        ],
        note=warmup_note(run)
        + "rlperf audit reads these as overview.<metric> (the names in --format json; "
        "docs/reports.md).",
        fold=False,
    )


def warmup_note(run: Run) -> str:
    """Which trace steps the median step time leaves out as warm-up, so the headline says it."""
    left_out = warmup_steps({"step_outliers": run.product("step_outliers")})
    if not left_out:
        return ""
    named = ", ".join(str(s) for s in left_out)
    return f"Median step time without warm-up step {named} (see Slow steps). "


PER_STEP = (
    "gpu_step_idle_fraction", "idle_fraction", "trainer_idle_fraction", "rollout_idle_fraction",
    "parallelism",
)
"""Shares of the step windows: device work alone does not give them."""
NO_STEP = "step ranges in the trace: it has device work but no step window"


def why_not(run: Run) -> dict[str, str]:
    """What an empty row needs where the metric's general need would be untrue: a trace with
    device work (copies only, or kernels) but no steps has the device work the need names."""
    if run.steps.height or not run.activity["kind"].is_in(list(GPU_ACTIVITY_KINDS)).any():
        return {}
    return dict.fromkeys(PER_STEP, NO_STEP)


def shown(overview: pl.DataFrame, needs: dict[str, str] | None = None) -> pl.DataFrame:
    """The overview with ``text``, what reports print: the value in its unit's format, or what
    the metric needs (``needs``: this run's, where it differs from the metric's)."""
    needs = needs or {}
    texts = [
        cell(r["value"], UNIT_FORMATS.get(r["unit"], "number"))
        if r["value"] is not None
        else f"– needs {needs.get(r['metric'], METRIC_BY_NAME[r['metric']].needs)}"
        if METRIC_BY_NAME[r["metric"]].needs
        else "–"
        for r in overview.iter_rows(named=True)
    ]
    return overview.with_columns(pl.Series("text", texts, dtype=pl.String)).select(
        "metric", "title", "value", "text", "unit"
    )
