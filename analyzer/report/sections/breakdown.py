"""Stage time per step, with the critical path."""

from __future__ import annotations

import polars as pl

from ...analyses.breakdown import critical_summary
from ...model.run import Run
from ..section import Column, Section, gated


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
    notes = [
        f"step {r['step']}: critical path {r['depth_ns'] / 1e6:.3g} "
        f"ms, set by rank {r['rank']} in {r['stage']}"
        for r in chain.iter_rows(named=True)
    ]
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
