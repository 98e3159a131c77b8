"""What the framework log alone says, step by step."""

from __future__ import annotations

from ...model.run import Run
from ..section import Column, Section


def section(run: Run) -> Section | None:
    summary = run.log_stage_summary
    if summary.height == 0:
        return None
    stats = run.log_stats.row(0, named=True) if run.log_stats.height else {}
    dominant = run.log_dominant.row(0, named=True) if run.log_dominant.height else {}
    sync = run.log_weight_sync.row(0, named=True) if run.log_weight_sync.height else {}
    parts = []
    if stats:
        parts.append(
            f"{stats.get('n_steps', '?')} steps; step time "
            f"median {stats.get('median_s', 0):.3g} s, "
            f"p95 {stats.get('p95_s', 0):.3g} s, {stats.get('n_outliers', 0)} outlier step(s)"
        )
    if dominant:
        parts.append(
            f"dominant stage: {dominant.get('label') or dominant.get('stage')} "
            f"({100 * (dominant.get('share') or 0):.1f}%)"
        )
    if sync:
        parts.append(
            f"weight sync: {100 * sync['share']:.1f}% of step time" if sync.get("share") is not None
            else f"weight sync: {sync.get('note') or sync.get('status')}"
        )
    tail = run.log_long_tail_summary
    if tail.height:
        t = tail.row(0, named=True)
        if t.get("median_max_over_mean") is not None:
            parts.append(
                f"longest response ÷ mean: median {t['median_max_over_mean']:.2f}, max "
                f"{t['max_max_over_mean']:.2f}"
            )
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
            for name in (
                "log_steps",
                "log_stages",
                "log_stats",
                "log_dominant",
                "log_weight_sync",
                "log_long_tail",
                "log_long_tail_summary",
                "log_unclassified",
                "log_needs_trace",
            )
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
