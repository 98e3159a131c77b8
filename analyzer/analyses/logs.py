"""The logs-only analysis as run products: what the framework's own timers say, step by step.

Wraps :mod:`analyzer.analyses.log_steps` (a pure function of the log rows) for ``Run``: its
frames become products named ``log_<output>`` (``log_stages``, ``log_steps``, ``log_stats``,
``log_stage_summary``, ``log_dominant``, ``log_weight_sync``, ``log_long_tail``,
``log_long_tail_summary``, ``log_unclassified``, ``log_needs_trace``), empty when the run has no
log timers. The log's names are classified by the run's detected framework profile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from ..products import provides
from ..steps import name_classes
from . import log_steps

if TYPE_CHECKING:
    from ..run import Run

@provides("log_result")
def log_result(events: pl.DataFrame, metrics: pl.DataFrame, profile: dict[str, Any]) -> log_steps.LogSteps | None:
    """The logs-only analysis of the run's log timers (None when it has none)."""
    timers = events.filter(pl.col("kind") == "log_stage")
    if timers.height == 0:
        return None
    classes = name_classes(profile, timers["name"].cast(pl.String).unique(), "log")
    return log_steps.compute(events, metrics, classes, profile["detection"].profile.metrics)


def _output(attr: str) -> Callable[[log_steps.LogSteps | None], pl.DataFrame]:
    def output(log_result: log_steps.LogSteps | None) -> pl.DataFrame:
        return pl.DataFrame(schema=_empty_schema(attr)) if log_result is None else getattr(log_result, attr)

    output.__qualname__ = output.__name__ = f"log_{attr}"
    output.__doc__ = f"The log analysis' ``{attr}`` frame: {log_steps.OUTPUTS[attr]}."
    return output


for _attr in log_steps.OUTPUT_NAMES:
    provides(f"log_{_attr}")(_output(_attr))


@provides("log_notes")
def log_notes(log_result: log_steps.LogSteps | None) -> list[str]:
    return [] if log_result is None else log_result.notes


def _empty_schema(attr: str) -> dict[str, pl.DataType]:
    return getattr(log_steps, f"{attr.upper()}_SCHEMA")


def section(run: Run):
    from ..report.sections import Column, Section

    summary = run.log_stage_summary
    if summary.height == 0:
        return None
    stats = run.log_stats.row(0, named=True) if run.log_stats.height else {}
    dominant = run.log_dominant.row(0, named=True) if run.log_dominant.height else {}
    sync = run.log_weight_sync.row(0, named=True) if run.log_weight_sync.height else {}
    parts = []
    if stats:
        parts.append(
            f"{stats.get('n_steps', '?')} steps; step time median {stats.get('median_s', 0):.3g} s, "
            f"p95 {stats.get('p95_s', 0):.3g} s, {stats.get('n_outliers', 0)} outlier step(s)"
        )
    if dominant:
        parts.append(f"dominant stage: {dominant.get('label') or dominant.get('stage')} ({100 * (dominant.get('share') or 0):.1f}%)")
    if sync:
        parts.append(
            f"weight sync: {100 * sync['share']:.1f}% of step time" if sync.get("share") is not None
            else f"weight sync: {sync.get('note') or sync.get('status')}"
        )
    tail = run.log_long_tail_summary
    if tail.height:
        t = tail.row(0, named=True)
        if t.get("median_max_over_mean") is not None:
            parts.append(f"longest response ÷ mean: median {t['median_max_over_mean']:.2f}, max {t['max_max_over_mean']:.2f}")
        if t.get("mean_clip_ratio") is not None:
            parts.append(f"clip ratio mean {100 * t['mean_clip_ratio']:.1f}%")
    needs = ", ".join(run.log_needs_trace["analysis"].to_list())
    if needs:
        parts.append(f"needs a trace: {needs}")
    return Section(
        "From the framework log",
        summary.sort("share", descending=True),
        columns=_summary_columns(Column),
        note="; ".join(parts + run.log_notes),
        key="log_stage_summary",
        details={
            name: run.product(name)
            for name in ("log_steps", "log_stages", "log_stats", "log_dominant", "log_weight_sync",
                         "log_long_tail", "log_long_tail_summary", "log_unclassified", "log_needs_trace")
        },
    )


def _summary_columns(Column) -> list:
    return [
        Column("label", "stage"),
        Column("seconds", "time (s)", "number"),
        Column("share", "share of wall time", "percent"),
        Column("median_s", "median per step (s)", "number"),
        Column("p95_s", "p95 per step (s)", "number"),
        Column("n_steps", "steps", "number"),
    ]
