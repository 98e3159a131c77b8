"""The terminal report (rich tables)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..run import Run
from .units import duration, percent

TOP_ANNOTATIONS = 8


def render(run: Run, console: Console) -> None:
    console.print(f"[bold]rlperf[/bold] — {len(run.sources)} source(s), {len(run.ranks)} rank(s)")
    sources = Table(title="Sources", title_justify="left", show_edge=False)
    for column in ("file", "format", "rank"):
        sources.add_column(column)
    for s in run.sources:
        sources.add_row(s.path.name, s.format, str(s.rank) if s.rank >= 0 else "–")
    console.print(sources)

    gpu = run.gpu_time.filter(run.gpu_time["gpu_start_ns"].is_not_null())
    if gpu.height:
        table = Table(title="GPU time per rank", title_justify="left", show_edge=False)
        for column in ("rank", "GPU window", "busy", "idle", "idle %", "comm", "compute", "comm overlapped"):
            table.add_column(column, justify="right")
        for row in gpu.iter_rows(named=True):
            table.add_row(
                str(row["rank"]),
                duration(row["gpu_window_ns"]),
                duration(row["busy_ns"]),
                duration(row["idle_ns"]),
                percent(row["idle_fraction"]),
                duration(row["comm_ns"]),
                duration(row["compute_ns"]),
                percent(row["overlap_fraction"]),
            )
        console.print(table)
    else:
        console.print("No GPU activity in these sources (CPU-only traces or logs).")

    top = run.annotations
    if top.height:
        table = Table(title="Time by top-level annotation", title_justify="left", show_edge=False)
        for column, justify in (("rank", "right"), ("annotation", "left"), ("count", "right"), ("time", "right"), ("share of trace", "right")):
            table.add_column(column, justify=justify)
        for rank in sorted(top["rank"].unique().to_list()):
            rows = top.filter(top["rank"] == rank).head(TOP_ANNOTATIONS)
            for row in rows.iter_rows(named=True):
                table.add_row(str(rank), row["name"], str(row["count"]), duration(row["time_ns"]), percent(row["share"]))
        console.print(table)

    for note in run.notes:
        console.print(f"[dim]note: {note}[/dim]")
    for path in run.unknown:
        console.print(f"[dim]skipped (not a format rlperf reads): {path}[/dim]")
    for warning in run.warnings:
        console.print(f"[yellow]warning: {warning}[/yellow]")
