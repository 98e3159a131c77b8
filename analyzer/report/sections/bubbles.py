"""Idle time by cause."""

from __future__ import annotations

import polars as pl

from taxonomy.vocab import IDLE_CAUSES

from ...analyses import queued
from ...analyses.bubbles import RULES, host_only, without_devices
from ...analyses.findings import rules as finding_rules
from ...analyses.sync import of_ranks
from ...model.run import Run
from ...model.units import duration
from ..section import Column, Section, gated
from .overview import NO_STEP, why_not


def section(run: Run) -> Section | None:
    title = "Idle time by cause"
    skipped = without_devices(run.activity, run.stage_ranges, run.selected_ranks)
    if skipped and run.steps.height and not of_ranks(run.bubbles, run.selected_ranks).height:
        return Section(title, None, note=f"needs GPU activity: {_no_device(skipped)}")
    lacks = (
        f"needs {NO_STEP}" if why_not(run)
        else "needs steps and device activity: none in these sources"
    )
    table = gated(run, title, "bubbles", lacks)
    if isinstance(table, Section):
        return table
    table = of_ranks(table, run.selected_ranks)
    per_device = (
        table.group_by("step", "rank", maintain_order=True)
        .agg(
            pl.col("window_ns", "busy_ns", "productive_ns").first(),
            pl.col("idle_ns").sum().alias("idle_ns"),
        )
        .group_by("rank")
        .agg(pl.col("window_ns", "busy_ns", "productive_ns", "idle_ns").sum())
    )
    causes = (
        table.group_by("rank", "cause")
        .agg(pl.col("idle_ns").sum())
        .with_columns(pl.col("cause").cast(pl.String))
        .pivot(on="cause", index="rank", values="idle_ns")
    )
    causes = causes.select("rank", *[c for c in IDLE_CAUSES if c in causes.columns])
    frame = per_device.join(causes, on="rank").with_columns(
        (pl.col("idle_ns") / pl.col("window_ns")).alias("idle_fraction"),
        pl.when(~pl.col("rank").is_in(host_only(run.activity)))
        .then(1 - pl.col("busy_ns") / pl.col("window_ns")).alias("gpu_idle_fraction"),
    ).sort("rank")
    largest = of_ranks(run.largest_bubbles, run.selected_ranks).head(3)
    note = (
        "Idle = step window − productive busy (busy minus "
        "sync wait); GPU idle % is step window − busy (no device activity at all; HTA's idle, "
        "in GPU time per rank, is over the first to last GPU activity instead)."
    )
    hosted = host_only(run.activity.filter(pl.col("rank").is_in(frame["rank"].implode())))
    if hosted:
        note += (
            f" Rank{'s' if len(hosted) > 1 else ''} "
            f"{listed_ranks(hosted)}: no device activity, so host work (the"
            " outermost CPU ops) stands in for it and GPU idle % needs GPU activity."
        )
    if skipped:
        note += f" Not shown, needs GPU activity: {_no_device(skipped)}."
    note += _queued(run, frame["rank"].to_list())
    if largest.height:
        note += " Largest: " + "; ".join(
            f"rank {r['rank']} step {r['step']} {r['cause']} "
            f"{(r['end_ns'] - r['start_ns']) / 1e6:.3g} ms"
            for r in largest.iter_rows(named=True)
        )
    return Section(
        title,
        frame,
        columns=[
            Column("rank", "rank"),
            Column("window_ns", "window", "duration"),
            Column("productive_ns", "productive", "duration"),
            Column("idle_fraction", "idle %", "percent"),
            *[Column(c, c.replace("_", " "), "duration") for c in RULES],
            Column("gpu_idle_fraction", "GPU idle %", "percent"),
        ],
        note=note,
    )


def _queued(run: Run, shown: list[int]) -> str:
    """How much of the host-bound column had launched work waiting to start (``queued``): the
    column holds every gap inside a stage range, and a GPU that idles with work queued waited
    for something other than the host (TraceLens' SGLang prefill-decode step: 493 ms of its
    495 ms, behind a stream wait event), which the findings say and the column alone did not."""
    gpu = [r for r in shown if r not in host_only(run.activity)]
    runs = run.device_states.filter(
        (pl.col("cause").cast(pl.String) == "host_bound") & pl.col("rank").is_in(gpu)
    )
    wait = queued.split(runs, run.events, finding_rules().queue_lag_ns)
    if wait.queued_ns == 0:
        return ""
    total = wait.queued_ns + wait.waited_ns
    return (
        f" Of the {duration(total)} host bound, {duration(wait.queued_ns)} had launched work "
        "queued, not yet started: the GPU waited for something other than the host (a stream or "
        "event, or work from before the trace), as the findings say."
    )


def listed_ranks(ranks: list[int]) -> str:
    """``0, 1, 2`` — the first eight, then how many more."""
    shown = ", ".join(map(str, ranks[:8]))
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def _no_device(ranks: list[int]) -> str:
    return (
        f"rank{'s' if len(ranks) > 1 else ''} {listed_ranks(ranks)} "
        f"ha{'ve' if len(ranks) > 1 else 's'} no kernels,"
        " copies or memsets (a CPU-only capture) and no "
        "stage ranges for their host work to stand in for"
    )
