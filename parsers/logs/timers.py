"""From per-step timer values to ``log_stage`` rows, and from scalars to the metrics frame.

Every log parser ends here. A parser hands over long frames:

- timers: ``step, name, seconds, record`` (+ optional ``line, pid, rank, end_ns``) — one row per
  timer key a step logged, ``record`` the line number where that step's record starts;
- scalars: ``step, key, value, record``.

Logs rarely say *when* a step ran, only how long its parts took, so the rows are laid end to end:
step k starts where step k-1 ended (its total, or the sum of its timers when the log has no
step total) and every row of a step starts at the step start (``synthetic_time = True``). When
the log stamps the line that closes a step with a wall-clock time, that stamp ends the step;
a row whose own line stamps its end (``end_ns``) keeps its real position
(``synthetic_time = False``).
"""

from __future__ import annotations

import polars as pl

from ..events import conform, empty_events
from ..source import ParsedSource, empty_metrics

NS = 1_000_000_000
MAX_SECONDS = 366 * 86_400
"""A timer longer than a year is a corrupt value, not a duration (and would overflow ns)."""
MAX_END_NS = 2**62
"""Latest end of a laid-out step (year 2116): steps laid end to end past it are left out, so the
running sum of step times never wraps int64."""


def latest_records(
    timers: pl.DataFrame, scalars: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, list[int]]:
    """For a step logged more than once (a resumed run re-logs the steps after its checkpoint),
    keep each key's last value. A step counts as repeated when one of its keys comes from two
    different records.

    Returns the filtered frames and the repeated steps.
    """
    records = pl.concat(
        [f.select("step", "record") for f in (timers, scalars) if f.height], how="vertical"
    ).unique() if (timers.height or scalars.height) else None
    if records is None or not records["step"].is_duplicated().any():
        return timers, scalars, []
    several = records.filter(pl.col("step").is_duplicated())["step"].unique()
    repeated: set[int] = set()
    kept = []
    for frame, key in ((timers, "name"), (scalars, "key")):
        mine = frame.filter(pl.col("step").is_in(several.implode()))
        if mine.height == 0:
            kept.append(frame)
            continue
        twice = mine.group_by("step", key).agg(pl.col("record").n_unique().alias("_n"))
        repeated.update(twice.filter(pl.col("_n") > 1)["step"].to_list())
        rest = frame.filter(~pl.col("step").is_in(several.implode()))
        kept.append(
            pl.concat([rest, mine.unique(subset=["step", key], keep="last", maintain_order=True)])
        )
    return kept[0], kept[1], sorted(repeated)


def step_spans(
    timers: pl.DataFrame,
    step_totals: tuple[str, ...],
    base_ns: int,
    anchors: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """``step, total_s, start_ns`` per step: the step's own total (first of ``step_totals``
    present) or the sum of its timers; steps laid end to end from ``base_ns``, or ending at their
    anchor (``step, end_ns``: a wall-clock stamp of the line that closed the step)."""
    rank = {name: i for i, name in enumerate(step_totals)}
    totals = (
        timers.filter(pl.col("name").is_in(list(step_totals)))
        .with_columns(pl.col("name").replace_strict(rank, default=len(rank)).alias("_rank"))
        .sort("step", "_rank")
        .group_by("step", maintain_order=True)
        .agg(pl.col("seconds").first().alias("_own"))
    )
    sums = timers.group_by("step").agg(pl.col("seconds").sum().alias("_sum"))
    steps = (
        sums.join(totals, on="step", how="left")
        .with_columns(pl.coalesce("_own", "_sum").alias("total_s"))
        .select("step", "total_s")
        .sort("step")
    )
    dur_ns = (pl.col("total_s") * NS).round(0).cast(pl.Int64)
    steps = steps.with_columns(
        (pl.lit(base_ns, dtype=pl.Int64) + dur_ns.cum_sum().shift(1, fill_value=0)).alias(
            "start_ns"
        )
    )
    if anchors is not None and anchors.height:
        steps = steps.join(
            anchors.select("step", pl.col("end_ns").alias("_anchor")), on="step", how="left"
        ).with_columns(
            pl.when(pl.col("_anchor").is_not_null())
            .then(pl.col("_anchor") - dur_ns)
            .otherwise(None)
            .alias("_anchored")
        )
        # Unanchored steps follow the previous step's end, so a run stays ordered and gap-free.
        offset = (
            (pl.col("_anchored") - pl.col("start_ns")).forward_fill().backward_fill().fill_null(0)
        )
        steps = steps.with_columns(
            pl.coalesce("_anchored", pl.col("start_ns") + offset).alias("start_ns")
        ).drop("_anchor", "_anchored")
    return steps


def stage_events(
    timers: pl.DataFrame,
    *,
    source: int,
    step_totals: tuple[str, ...] = (),
    base_ns: int = 0,
    anchors: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The ``log_stage`` rows of the event table for the timer rows of one log."""
    if timers.height == 0:
        return empty_events()
    for col, dtype in (("pid", pl.Int64), ("rank", pl.Int32), ("end_ns", pl.Int64)):
        if col not in timers.columns:
            timers = timers.with_columns(pl.lit(None, dtype=dtype).alias(col))
    steps = step_spans(timers, step_totals, base_ns, anchors)
    dur_ns = (pl.col("seconds") * NS).round(0).cast(pl.Int64)
    rows = timers.join(steps.select("step", "start_ns"), on="step", how="left").with_columns(
        pl.col("end_ns").is_null().alias("synthetic_time"),
    ).with_columns(
        pl.when(pl.col("synthetic_time"))
        .then(pl.col("start_ns"))
        .otherwise(pl.col("end_ns") - dur_ns)
        .alias("start_ns"),
    ).with_columns((pl.col("start_ns") + dur_ns).alias("end_ns"))
    rows = rows.sort("start_ns", "step", "record").select(
        "step", "name", "start_ns", "end_ns", "pid", "rank", "synthetic_time"
    )
    return conform(rows, kind="log_stage", source=source)


def metrics_frame(scalars: pl.DataFrame, *, source: int) -> pl.DataFrame:
    """The long metrics frame, in the order the log states the values (one per step and key
    once :func:`latest_records` has run)."""
    if scalars.height == 0:
        return empty_metrics()
    return scalars.filter(pl.col("value").is_not_null()).select(
        pl.lit(source, dtype=pl.UInt32).alias("source"),
        pl.col("step").cast(pl.Int32),
        pl.col("key").cast(pl.String),
        pl.col("value").cast(pl.Float64),
    )


def checked_timers(timers: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split timer rows into usable ones and those with no finite, non-negative duration."""
    seconds = pl.col("seconds")
    good = seconds.is_not_null() & seconds.is_finite() & (seconds >= 0) & (seconds <= MAX_SECONDS)
    return timers.filter(good), timers.filter(~good)


def _steps_that_fit(
    out: ParsedSource,
    timers: pl.DataFrame,
    step_totals: tuple[str, ...],
    base_ns: int,
    anchors: pl.DataFrame | None,
    unit: str,
) -> pl.DataFrame:
    """``timers`` less the steps longer than a year or laid out past :data:`MAX_END_NS`
    (checked in float seconds, before any ns arithmetic can wrap); those are warned and counted."""
    if timers.height == 0:
        return timers
    rank = {name: i for i, name in enumerate(step_totals)}
    own = (
        timers.filter(pl.col("name").is_in(list(step_totals)))
        .with_columns(pl.col("name").replace_strict(rank, default=len(rank)).alias("_rank"))
        .sort("step", "_rank")
        .group_by("step")
        .agg(pl.col("seconds").first().alias("_own"))
    )
    steps = (
        timers.group_by("step").agg(pl.col("seconds").sum().alias("_sum"))
        .join(own, on="step", how="left")
        .select("step", total=pl.coalesce("_own", "_sum"))
        .sort("step")
    )
    laid_end = base_ns / NS + pl.col("total").cum_sum()
    anchored = set(anchors["step"].to_list()) if anchors is not None and anchors.height else set()
    too_long = pl.col("total") > MAX_SECONDS
    past_end = (laid_end * NS > MAX_END_NS) & ~pl.col("step").is_in(list(anchored))
    bad = steps.filter(too_long | past_end)["step"]
    if bad.len():
        shown = ", ".join(str(s) for s in bad.head(5).to_list())
        out.warn(
            f"{bad.len()} {unit}s left out: longer than a year, or laid end to end past year 2116 "
            f"({shown})"
        )
        out.tally("dropped_out_of_range", bad.len())
        timers = timers.filter(~pl.col("step").is_in(bad.implode()))
    return timers


def finish(
    out: ParsedSource,
    timers: pl.DataFrame,
    scalars: pl.DataFrame,
    *,
    source: int,
    step_totals: tuple[str, ...] = (),
    base_ns: int = 0,
    anchors: pl.DataFrame | None = None,
    unit: str = "step",
) -> ParsedSource:
    """Fill ``out`` from the timer and scalar rows: drop repeated steps (warned), bad durations
    (warned), build the event table and the metrics, and record the step range in ``meta``."""
    timers, scalars, repeated = latest_records(timers, scalars)
    if repeated:
        shown = ", ".join(str(s) for s in repeated[:8]) + (" …" if len(repeated) > 8 else "")
        out.warn(
            f"{len(repeated)} {unit}s logged more than once (a resumed or restarted run): {shown}; "
            "the last record of each is kept"
        )
        out.meta["repeated_steps"] = repeated
    timers, bad = checked_timers(timers)
    if bad.height:
        names = ", ".join(sorted(set(bad["name"].to_list()))[:5])
        out.warn(
            f"{bad.height} timer values dropped: not a finite, non-negative duration under a year "
            f"({names})"
        )
        out.tally("dropped_timer", bad.height)
    timers = _steps_that_fit(out, timers, step_totals, base_ns, anchors, unit)
    out.events = stage_events(
        timers, source=source, step_totals=step_totals, base_ns=base_ns, anchors=anchors
    )
    finite = pl.col("value").is_finite()
    odd = scalars.filter(pl.col("value").is_not_null() & ~finite)
    if odd.height:
        names = ", ".join(sorted(set(odd["key"].to_list()))[:5])
        out.warn(f"{odd.height} metric values dropped: nan or infinite ({names})")
        out.tally("non_finite_metric", odd.height)
        scalars = scalars.filter(finite)
    out.metrics = metrics_frame(scalars, source=source)
    steps = sorted(
        set(out.events["step"].drop_nulls().to_list())
        | set(out.metrics["step"].drop_nulls().to_list())
    )
    out.meta["n_steps"] = len(steps)
    if steps:
        out.meta["first_step"] = steps[0]
        out.meta["last_step"] = steps[-1]
    return out
