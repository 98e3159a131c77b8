"""Classified events (product ``classified``): the event table plus ``stage, role, dim, pool,
inferred, confidence`` and ``step`` filled. GPU work takes the stage of the timeline segment at
its launch (correlation → runtime call on the launching thread), else of the device's
``gpu_user_annotation``, else of its own start. ``activity``: a rank's device work (or, on
CPU-only ranks, its outermost host ops and host collective calls) with stage and step.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from parsers.discover import format_traits
from parsers.events import GPU_ACTIVITY_KINDS, nesting_depth
from parsers.source import CORRELATION_PER_PROCESS
from taxonomy.vocab import DIM, POOL, ROLE, STAGE

from ..model import frames, intervals
from ..model.options import Options
from ..model.products import provides
from ..model.run import SourceInfo
from .dims import row_dims
from .ranges import with_classes
from .steps import name_classes, select_steps, staged
from .timeline import stage_at, timeline, window_step


def _anchors(ev: pl.DataFrame, formats: dict[int, str]) -> pl.DataFrame:
    """Per row (in order): ``anchor``, the time that decides its stage — for GPU work the start
    of the runtime call that launched it (linked on source, correlation id and, in multi-process
    nsys reports, pid), else the row's own start — and ``unlinked``: GPU work whose launch the
    trace lacks."""
    gpu = pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS))
    by_pid = [s for s, f in formats.items() if CORRELATION_PER_PROCESS in format_traits(f)]
    link_pid = pl.when(pl.col("source").is_in(by_pid)).then(pl.col("pid")).otherwise(-1)
    launches = ev.filter((pl.col("kind") == "runtime") & pl.col("corr").is_not_null()).select(
        "source", "corr", link_pid.alias("_lp"), pl.col("start_ns").alias("_launch")
    ).unique(["source", "corr", "_lp"], keep="first")
    rows = ev.select(
        "source", "corr", "start_ns", gpu.alias("_gpu"), link_pid.alias("_lp")
    ).with_row_index("_row")
    linked = (
        rows.filter(pl.col("_gpu") & pl.col("corr").is_not_null())
        .join(launches, on=["source", "corr", "_lp"])
        .select("_row", "_launch")
    )
    return (
        rows.join(linked, on="_row", how="left")
        .sort("_row")
        .select(
            pl.coalesce("_launch", "start_ns").alias("anchor"),
            (pl.col("_gpu") & pl.col("_launch").is_null()).alias("unlinked"),
        )
    )


def device_timeline(
    aligned: pl.DataFrame, profile: dict[str, Any], steps: pl.DataFrame
) -> pl.DataFrame:
    """The stage timeline of the device-side annotations (Kineto ``gpu_user_annotation``): for
    GPU work whose launch the trace does not hold."""
    ev = aligned.filter(
        (pl.col("kind") == "gpu_annotation") & (pl.col("end_ns") > pl.col("start_ns"))
    )
    if ev.height == 0:
        return frames.empty(frames.STAGE_TIMELINE)
    rows = staged(with_classes(profile, ev.select("rank", "name", "start_ns", "end_ns")))
    if rows.height == 0:
        return frames.empty(frames.STAGE_TIMELINE)
    rows = rows.with_columns(
        window_step(
            rows.select("start_ns").with_row_index("_row").rename({"start_ns": "t"}), steps
        ).alias("step")
    )
    rows = (
        rows.with_columns(nesting_depth(rows, ["rank"]).alias("depth"))
        .select(list(frames.STAGE_RANGES))
        .cast(frames.STAGE_RANGES)
    )
    return timeline(rows)


@provides("classified")
def classified(
    aligned: pl.DataFrame,
    events: pl.DataFrame,
    sources: list[SourceInfo],
    segments: pl.DataFrame,
    profile: dict[str, Any],
    steps: pl.DataFrame,
    pools: pl.DataFrame,
    options: Options,
    incomplete_steps: pl.DataFrame,
) -> pl.DataFrame:
    ev = aligned
    anchors = _anchors(ev, {s.index: s.format for s in sources})
    points = ev.select("rank").with_columns(anchors["anchor"].alias("t")).with_row_index("_row")
    hit = stage_at(points, segments).sort("_row")
    if anchors["unlinked"].any():
        unlinked = points.filter(anchors["unlinked"])
        on_device = stage_at(unlinked, device_timeline(aligned, profile, steps)).filter(
            pl.col("stage").is_not_null()
        )
        if on_device.height:
            hit = hit.update(on_device, on="_row")
    by_window = window_step(points, steps)
    out = ev.with_columns(
        hit["stage"].alias("stage"), hit["role"].alias("role"),
        pl.coalesce(hit["seg_step"], by_window).alias("_step"),
        hit["inferred"].fill_null(False).alias("inferred"), hit["confidence"].alias("confidence"),
    )
    logs = ev.filter(pl.col("kind") == "log_stage")
    if logs.height:
        lc = name_classes(profile, logs["name"].cast(pl.String).unique(), "log").select(
            "name", pl.col("stage").alias("_ls"), pl.col("role").alias("_lr"))
        out = (
            out.with_columns(pl.col("name").cast(pl.String).alias("_name"))
            .join(lc, left_on="_name", right_on="name", how="left", maintain_order="left")
            .with_columns(
                pl.when(pl.col("kind") == "log_stage")
                .then(pl.col("_ls"))
                .otherwise(pl.col("stage"))
                .alias("stage"),
                pl.when(pl.col("kind") == "log_stage")
                .then(pl.col("_lr"))
                .otherwise(pl.col("role"))
                .alias("role"),
            )
            .drop("_name", "_ls", "_lr")
        )
    out = out.with_columns(
        pl.when(pl.col("kind") == "log_stage")
        .then(pl.col("step"))
        .otherwise(pl.col("_step"))
        .alias("step")
    ).drop("_step")
    dims = row_dims(out, sources, options, pools)
    pool = pools.select("rank", "pool")
    out = out.with_columns(dims.alias("dim")).join(
        pool, on="rank", how="left", maintain_order="left"
    )
    out = out.with_columns(
        pl.col("stage").cast(STAGE),
        pl.col("role").cast(ROLE),
        pl.col("dim").cast(DIM),
        pl.col("pool").cast(POOL),
        pl.col("inferred").cast(pl.Boolean),
        pl.col("confidence").cast(pl.Float32),
    )
    out = out.select([*events.columns, *frames.CLASSIFIED_COLUMNS])
    return _selected(out, options, incomplete_steps, steps)


def _selected(
    out: pl.DataFrame, options: Options, incomplete_steps: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    """The rows of the selected steps (``select_steps``: by the step each row belongs to) and
    the device work of other steps that ran inside a selected step's window: a kernel belongs
    to the step that launched it, but the time analyses (idle, busy, W) cut activity to the
    windows, and without it ``--steps 1011`` on HTA's test trace read 122 ms of productive
    device time in a step where the whole run reads 160 ms (work launched in step 1010 runs
    in 1011's window)."""
    indexed = out.with_row_index("_row")
    kept = select_steps(indexed, options, incomplete_steps)
    windows = steps.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    if kept.height == out.height or windows.height == 0:
        return kept.drop("_row")
    device = pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("rank") >= 0)
    rest = indexed.filter(device & ~pl.col("_row").is_in(kept["_row"].implode()))
    inside = rest.filter(intervals.overlap_each(rest, windows.select("start_ns", "end_ns")) > 0)
    if inside.height == 0:
        return kept.drop("_row")
    rows = pl.concat([kept["_row"], inside["_row"]]).implode()
    return indexed.filter(pl.col("_row").is_in(rows)).drop("_row")


@provides("activity", schema=frames.ACTIVITY)
def activity(classified: pl.DataFrame) -> pl.DataFrame:
    cl = classified.filter(pl.col("rank") >= 0)
    device = cl.filter(pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("stream") >= 0))
    device_ranks = device["rank"].unique()
    host = cl.filter(~pl.col("rank").is_in(device_ranks.implode()) & (
        ((pl.col("kind") == "cpu_op") & (pl.col("depth") == 0))
        | ((pl.col("kind") == "annotation") & pl.col("coll").is_not_null())
    ))
    out = pl.concat([device, host]).select(
        "rank",
        "device",
        "stream",
        pl.col("kind").cast(pl.String),
        "start_ns",
        "end_ns",
        "stage",
        "step",
        pl.col("coll").is_not_null().alias("is_collective"),
    )
    return out.cast(frames.ACTIVITY).sort("rank", "start_ns")
