"""Collectives by parallelism dimension, weight sync and stragglers."""

from __future__ import annotations

import polars as pl

from ...analyses.overview import METRIC_BY_NAME
from ...model.run import Run
from ...model.units import plural, spans
from ..section import Column, Section, gated

HEADLINE = f"{METRIC_BY_NAME['weight_sync_share'].title} (headline)"
"""The name of ``overview.weight_sync_share`` wherever a report shows it."""
PER_STEP = "weight sync share of each step (the headline's definition, one step at a time)"
LOG_TIMER = "the log's weight-sync timer share of the log's step time"


def section(run: Run) -> Section | None:
    title = "Collectives by parallelism dimension"
    table = gated(run, title, "collectives_by_dim", "no collectives in these sources")
    if isinstance(table, Section):
        return table
    notes = [*outside_steps(run), *unsized(run), *weight_sync_notes(run)]
    top = run.stragglers.head(3)
    if top.height:
        notes.append(
            "stragglers (wait caused by arriving last): "
            + ", ".join(
                f"rank {r['rank']} {r['caused_wait_ns'] / 1e6:.3g} ms"
                for r in top.iter_rows(named=True)
            )
        )
    return Section(
        title,
        table,
        columns=[
            Column("dim", "dim"),
            Column("coll", "collective"),
            Column("count", "count", "number"),
            Column("bytes", "bytes", "bytes"),
            Column("time_ns", "time", "duration"),
            Column("exposed_ns", "exposed", "duration"),
            Column("wait_ns", "wait", "duration"),
            Column("transfer_ns", "transfer", "duration"),
            Column("busbw_gbps", "bus bw", "bandwidth"),
        ],
        note="; ".join(notes),
    )


def outside_steps(run: Run) -> list[str]:
    """The calls the table leaves out because they lie outside every step window
    (``analyses.sync.in_steps``), so a table of fewer calls than the trace holds says why."""
    counted, every = run.collective_waits.height, run.collectives.height
    if counted == every:
        return []
    return [
        f"calls inside the step windows only: {every - counted:,} of the trace's "
        f"{plural(every, 'collective call')} lie outside every step, counted neither here nor "
        "in the headline"
    ]


def unsized(run: Run) -> list[str]:
    """Which rows' bytes are of some of their calls only, and that a dash is no size known."""
    waits = run.collective_waits
    if waits.height == 0 or waits["bytes"].null_count() == 0:
        return []
    per = waits.group_by("dim", "coll").agg(
        pl.len().alias("n"), pl.col("bytes").null_count().alias("none")
    ).filter(pl.col("none") > 0).sort("dim", "coll")
    some = per.filter(pl.col("none") < pl.col("n"))
    none = per.height > some.height
    said = ["bytes –: the trace records no size for those calls"] if none else []
    said += [
        f"{r['dim']} {r['coll']} bytes are of {r['n'] - r['none']:,} of its {r['n']:,} calls "
        "(the others have no size)"
        for r in some.iter_rows(named=True)
    ]
    return said


def weight_sync_notes(run: Run) -> list[str]:
    """The headline weight-sync share with its definition, its per-step values, and the log's
    own timer named apart (it times the framework's call, over the log's steps)."""
    sync = run.weight_sync
    if sync.height == 0:
        return []
    notes = []
    headline = run.overview.filter(pl.col("metric") == "weight_sync_share")["value"]
    if headline.len() and headline[0] is not None:
        notes.append(
            f"{HEADLINE}: {100 * headline[0]:.1f}% = Σ time some rank is in weight sync ÷ Σ step "
            f"time over steps {spans(sync['step'].to_list(), dash='–')}"
        )
    per_step = []
    for r in sync.iter_rows(named=True):
        bw = f", {r['bandwidth_gbps']:.3g} GB/s" if r["bandwidth_gbps"] else ""
        per_step.append(
            f"step {r['step']} {r['time_ns'] / 1e6:.3g} ms = {100 * r['share']:.1f}%{bw}"
        )
    notes.append(f"{PER_STEP}: " + ", ".join(per_step))
    log = run.log_weight_sync
    if log.height and log["share"][0] is not None:
        stats = run.log_stats
        steps = (
            f"steps {stats['first_step'][0]}–{stats['last_step'][0]}" if stats.height else "steps"
        )
        notes.append(
            f"not the same number: {LOG_TIMER} ({log['where'][0]}, {steps}) is "
            f"{100 * log['share'][0]:.1f}% (Logs section)"
        )
    return notes
