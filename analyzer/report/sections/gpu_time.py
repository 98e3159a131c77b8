"""GPU time per rank (HTA sense)."""

from __future__ import annotations

import polars as pl

from ...model.run import Run
from ..section import Column, Section
from .bubbles import listed_ranks


def section(run: Run) -> Section | None:
    frame = run.gpu_time.filter(pl.col("gpu_start_ns").is_not_null())
    if frame.height == 0:
        return Section(
            "GPU time per rank",
            None,
            note="needs GPU activity: no kernels, copies or "
                 "memsets in these sources (CPU-only traces or logs)",
        )
    note = (
        "Busy = union of kernels, copies and memsets over "
        "all streams; window = first to last GPU activity."
    )
    without = sorted(set(run.selected_ranks) - set(frame["rank"].to_list()))
    if without:
        note += (
            f" Not shown, needs GPU activity: rank{'s' if len(without) > 1 else ''} "
            f"{listed_ranks(without)} (no device rows)."
        )
    if run.options.step_selection is not None:
        note += (" As in HTA's breakdown, each rank's whole trace: --steps does not narrow this "
                 "table (nor the overview's GPU busy and GPU idle).")
    return Section(
        "GPU time per rank",
        frame,
        columns=[
            Column("rank", "rank"),
            Column("gpu_window_ns", "GPU window", "duration"),
            Column("busy_ns", "busy", "duration"),
            Column("idle_ns", "idle", "duration"),
            Column("idle_fraction", "idle %", "percent"),
            Column("comm_ns", "comm", "duration"),
            Column("compute_ns", "compute", "duration"),
            Column("overlap_fraction", "comm overlapped", "percent"),
        ],
        note=note,
    )
