"""Stage time per step, with the critical path."""

from __future__ import annotations

import polars as pl

from ...analyses.breakdown import critical_summary
from ...model.run import Run
from ..section import Column, Section, gated


def _chain_note(chain: dict, depth_ns: int | None) -> str:
    """The step's critical path; where a device's own work outlasts the chain through the stage
    ranges (work queued after its range closed: TraceLens' vLLM piecewise-graph step, a
    26.4 ms range and 156 ms of GPU work), the note says that the depth D of the work-depth
    section is that work, rather than leave two critical paths side by side."""
    said = f"{chain['depth_ns'] / 1e6:.3g} ms, set by rank {chain['rank']} in {chain['stage']}"
    if depth_ns is None or depth_ns <= chain["depth_ns"]:
        return f"step {chain['step']}: critical path {said}"
    return (
        f"step {chain['step']}: critical path through the stage ranges {said}; a device's own "
        f"work in the step is longer, {depth_ns / 1e6:.3g} ms (queued after its range closed), "
        "and is the work-depth section's depth D"
    )


def section(run: Run) -> Section | None:
    title = "Stage time per step"
    table = gated(
        run, title, "breakdown", "needs stage ranges: no range in these sources maps to an RL stage"
    )
    if isinstance(table, Section):
        return table
    chain = critical_summary(run.critical_path)
    on_chain = run.critical_path.group_by("step", "stage").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("critical_ns")
    )
    devices = table.filter(pl.col("rank") >= 0)
    slowest = (
        devices.sort(["step", "stage", "time_ns", "rank"], descending=[False, False, True, False])
        .group_by(["step", "stage"], maintain_order=True)
        .first()
    )
    controller = table.filter(pl.col("rank") < 0).select(
        "step", "stage", pl.col("time_ns").alias("controller_ns")
    )
    frame = (
        devices.group_by("step", "stage")
        .agg(pl.col("rank").n_unique().alias("ranks"), pl.col("time_ns").mean().alias("mean_ns"))
        .join(
            slowest.select(
                "step",
                "stage",
                pl.col("time_ns").alias("max_ns"),
                pl.col("rank").alias("max_rank"),
                "share",
            ),
            on=["step", "stage"],
        )
        .join(on_chain, on=["step", "stage"], how="left")
        .join(controller, on=["step", "stage"], how="full", coalesce=True)
        .sort(["step", "stage"])
    )
    depth = dict(run.workdepth.select("step", "depth_ns").iter_rows())
    notes = [_chain_note(r, depth.get(r["step"])) for r in chain.iter_rows(named=True)]
    return Section(
        title,
        frame,
        columns=[
            Column("step", "step"),
            Column("stage", "stage"),
            Column("ranks", "ranks", "number"),
            Column("mean_ns", "mean", "duration"),
            Column("max_ns", "max", "duration"),
            Column("max_rank", "slowest rank"),
            Column("share", "max share of step", "percent"),
            Column("critical_ns", "on critical path", "duration"),
            *([Column("controller_ns", "controller", "duration")] if controller.height else []),
        ],
        note="; ".join(
            [*notes, "ranks are devices; the controller's timers (rank -1) are shown apart"]
            if controller.height
            else notes
        ),
    )
