"""Efficiency: throughput, MFU per role and peak memory, as the log states them or as the
trace's FLOPs give them; the run's headline per number, the per-step values in the JSON."""

from __future__ import annotations

import polars as pl

from taxonomy.vocab import STAGE_BY_NAME

from ...model.run import Run
from ..section import Column, Section

TITLE = "Efficiency"
METRICS: dict[str, str] = {
    "throughput": "throughput",
    "throughput_total": "throughput, all GPUs",
    "sample_throughput": "sample throughput",
    "mfu": "MFU",
    "achieved_tflops": "achieved TFLOP/s",
    "tokens": "tokens per step",
    "step_time_s": "step time",
    "memory_allocated_gb": "peak GPU memory allocated",
    "memory_reserved_gb": "peak GPU memory reserved",
    "cpu_memory_gb": "peak host memory",
}
"""Report order and wording of the numbers ``analyzer.analyses.efficiency`` computes."""


def value_text(value: float | None, unit: str, with_unit: bool = True) -> str:
    """A number in its unit: fractions as percent, the rest to four significant digits."""
    if value is None:
        return "–"
    if unit == "fraction":
        return f"{100 * value:.1f}%"
    shown = f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return f"{shown} {unit}" if with_unit else shown


def range_text(low: float | None, high: float | None, unit: str) -> str:
    """``low – high unit``, the unit said once."""
    if low is None or high is None:
        return "–"
    return f"{value_text(low, unit, with_unit=unit == 'fraction')} – {value_text(high, unit)}"


def stage_title(stage: str) -> str:
    return STAGE_BY_NAME[stage].title if stage in STAGE_BY_NAME else stage


def section(run: Run) -> Section | None:
    summary = run.efficiency
    notes = run.efficiency_notes
    if summary.height == 0 and not notes:
        return None
    order = {m: i for i, m in enumerate(METRICS)}
    shown = summary.with_columns(
        pl.col("metric").replace_strict(order, default=len(order)).alias("_order")
    ).sort("source", "_order", "role", "stage")
    shown = shown.drop("_order").with_columns(
        pl.Series("number", [METRICS.get(m, m) for m in shown["metric"]], dtype=pl.String),
        pl.Series("value", [value_text(v, u) for v, u in
                            shown.select("headline_value", "unit").iter_rows()], dtype=pl.String),
        pl.Series("range", [range_text(lo, hi, u) for lo, hi, u in
                            shown.select("min", "max", "unit").iter_rows()], dtype=pl.String),
        pl.Series("stage_title", [stage_title(s) for s in shown["stage"]], dtype=pl.String),
    )
    return Section(
        TITLE,
        shown if shown.height else None,
        columns=[Column("number", "number"), Column("role", "role"), Column("stage_title", "stage"),
                 Column("value", "value"), Column("headline", "over"),
                 Column("range", "per-step range"), Column("key", "from")],
        note=" ".join(_warmup_notes(shown) + [f"{n}." for n in notes] + _files_note(shown)),
        key="efficiency",
        details={"efficiency_steps": run.efficiency_steps},
    )


def _warmup_notes(summary: pl.DataFrame) -> list[str]:
    """Where a warm-up first step is left out of the headline mean: which step, and the mean
    with it, so both numbers are on the page."""
    warm = summary.filter(pl.col("warmup_step").is_not_null())
    return [
        f"{METRICS.get(r['metric'], r['metric'])} ({r['role']}): step {r['warmup_step']} is a "
        f"warm-up outlier and is left out of the headline; the mean over all {r['n_steps']} "
        f"steps is {value_text(r['mean'], r['unit'])}."
        for r in warm.iter_rows(named=True)
    ]


def _files_note(summary: pl.DataFrame) -> list[str]:
    files = summary["file"].unique(maintain_order=True).to_list()
    if not files:
        return []
    logged = summary.filter(pl.col("key") != "trace flops").height
    said = "Values as the log states them" if logged else "Values from the trace's FLOPs"
    return [f"{said} ({', '.join(f for f in files if f)}); rates are means per step, memory "
            "the peak over the steps."]
