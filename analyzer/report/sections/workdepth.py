"""Work and depth per step, with the what-if bounds."""

from __future__ import annotations

from ...model.run import Run
from ..section import Column, Section, gated


def section(run: Run) -> Section | None:
    title = "Work and depth per step"
    table = gated(run, title, "workdepth", "needs stage ranges: no critical path without them")
    if isinstance(table, Section):
        return table
    return Section(
        title,
        table,
        columns=[
            Column("step", "step"),
            Column("step_ns", "step time", "duration"),
            Column("work_ns", "work W (device time)", "duration"),
            Column("depth_ns", "depth D", "duration"),
            Column("parallelism", "W/D", "number"),
            Column("async_overlap_bound", "async overlap ×", "number"),
            Column("no_tail_step_ns", "step w/o rollout tail", "duration"),
            Column("balanced_dp_step_ns", "step w/ balanced DP", "duration"),
        ],
        note="W = Σ productive device time; D = critical-path length; what-if bounds as in "
             "docs/analyses.md §7.",
    )
