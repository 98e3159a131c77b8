"""Stage ranges (product ``stage_ranges``: the ranges that name a stage, with their step; composite
timers such as OpenRLHF ``make_experience`` are not stage ranges, the generic fallback's ranges
count only where no framework range encloses them) and the stage timeline (product
``stage_timeline``: per rank, disjoint segments where the innermost staged range decides,
docs/analyses.md §1), with the look-ups of the segment or step at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from parsers.events import nesting_depth
from taxonomy.vocab import ROLE, STAGE

from ..model import frames, intervals
from ..model.options import Options
from ..model.products import provides
from . import innermost
from .steps import select_steps


@provides("stage_ranges", schema=frames.STAGE_RANGES)
def stage_ranges(
    stepping: frames.Stepping, options: Options, incomplete_steps: pl.DataFrame
) -> pl.DataFrame:
    rows = stepping["rows"]
    depth = nesting_depth(rows, ["rank"]) if rows.height else pl.Series("depth", [], dtype=pl.Int16)
    out = (
        rows.with_columns(depth.alias("depth"))
        .select(list(frames.STAGE_RANGES))
        .cast(frames.STAGE_RANGES)
    )
    return select_steps(out, options, incomplete_steps)


def _deepest_of_equal(ranges: pl.DataFrame) -> pl.DataFrame:
    """Of ranges with the same rank, start and end only the deepest, which is the only one of
    them that keeps any time: one level per range of a pile of identical ranges made the
    per-depth walk below quadratic (2,000 copies of one range took 12 s)."""
    key = ["rank", "start_ns", "end_ns"]
    if ranges.select(pl.struct(key).n_unique()).item() == ranges.height:
        return ranges
    ordered = ranges.with_row_index("_o").sort("depth", descending=True, maintain_order=True)
    return ordered.unique(key, keep="first", maintain_order=True).sort("_o").drop("_o")


def timeline(ranges: pl.DataFrame, keep: Sequence[str] = ()) -> pl.DataFrame:
    """Disjoint per-rank segments where the innermost range decides (ranges carry ``depth``):
    each range keeps what no deeper range covers; ranges that merely touch stay apart. ``keep``:
    further range columns every segment carries (classified rows take the confidence)."""
    cols = [*frames.STAGE_TIMELINE, *keep]
    if ranges.height == 0:
        return ranges.select(cols).cast(frames.STAGE_TIMELINE)
    pieces = []
    keyed = _deepest_of_equal(ranges).with_row_index("_id").sort("rank", "start_ns")
    for d in sorted(keyed["depth"].unique().to_list()):
        level = keyed.filter(pl.col("depth") == d)
        inner = (
            keyed.filter(pl.col("depth") > d)
            .drop("_id")
            .join_asof(
                level.select("rank", "start_ns", "_id"),
                on="start_ns",
                by="rank",
                strategy="backward",
                check_sortedness=False,
            )
        )
        inner = inner.filter(pl.col("_id").is_not_null())
        own = intervals.difference(
            level.select("rank", "_id", "start_ns", "end_ns"),
            inner.select("rank", "_id", "start_ns", "end_ns"),
            by=["rank", "_id"],
        )
        if own.height:
            pieces.append(own.join(level.drop("rank", "start_ns", "end_ns"), on="_id").select(cols))
    out = pl.concat(pieces)
    crossing = innermost.overlapping_ranks(out)
    if crossing:
        mine = keyed.filter(pl.col("rank").is_in(crossing))
        owned = innermost.owners(mine).join(mine.drop("rank", "start_ns", "end_ns"), on="_id")
        out = pl.concat([out.filter(~pl.col("rank").is_in(crossing)), owned.select(cols)])
    return out.sort("rank", "start_ns").cast(frames.STAGE_TIMELINE)


def by_rank(frame: pl.DataFrame, on: str) -> pl.DataFrame:
    """``frame`` in (rank, ``on``) order as two single-key sorts, the second stable: a sort on
    two keys encodes every row's keys first and costs ten times as much on an event table.
    Rows tied on both keys may come in another order than such a sort's."""
    return frame.sort(on).sort("rank", maintain_order=True)


def stage_at(points: pl.DataFrame, segments: pl.DataFrame) -> pl.DataFrame:
    """For ``_row, rank, t``: the segment (stage, role, step, inferred, confidence) covering t."""
    if segments.height == 0 or points.height == 0:
        return points.select("_row").with_columns(
            pl.lit(None, STAGE).alias("stage"),
            pl.lit(None, ROLE).alias("role"),
            pl.lit(None, pl.Int32).alias("seg_step"),
            pl.lit(None, pl.Boolean).alias("inferred"),
            pl.lit(None, pl.Float32).alias("confidence"),
        )
    if "confidence" not in segments.columns:
        segments = segments.with_columns(pl.lit(1.0, pl.Float32).alias("confidence"))
    segs = segments.sort("rank", "start_ns").select(
        "rank", pl.col("start_ns").alias("t"), pl.col("end_ns").alias("_end"), "stage", "role",
        pl.col("step").alias("seg_step"), "inferred", "confidence")
    hit = by_rank(points, "t").join_asof(
        segs, on="t", by="rank", strategy="backward", check_sortedness=False
    )
    inside = pl.col("t") < pl.col("_end")
    return hit.select(
        "_row",
        *[
            pl.when(inside).then(pl.col(c)).alias(c)
            for c in ("stage", "role", "seg_step", "inferred", "confidence")
        ],
    )


@provides("segments")
def segments(stage_ranges: pl.DataFrame) -> pl.DataFrame:
    """The stage timeline with the confidence of the range each segment is a piece of (the
    ``stage_timeline`` product is this without it)."""
    return timeline(stage_ranges, keep=["confidence"])


@provides("stage_timeline", schema=frames.STAGE_TIMELINE)
def stage_timeline(segments: pl.DataFrame) -> pl.DataFrame:
    return segments.drop("confidence")


def window_step(points: pl.DataFrame, steps: pl.DataFrame) -> pl.Series:
    """Step whose window holds the point (the latest-starting one when windows overlap), in
    ``_row`` order. The few windows are searched for each point where an as-of join would sort
    every point by time and back."""
    if steps.height == 0:
        return pl.Series("step", [None] * points.height, dtype=pl.Int32)
    w = steps.sort("start_ns").select(
        pl.col("start_ns").alias("t"), pl.col("end_ns").alias("_we"), "step"
    )
    if w["t"].null_count():
        hit = points.select("_row", "t").sort("t").join_asof(w, on="t", strategy="backward")
        return hit.sort("_row").select(
            pl.when(pl.col("t") < pl.col("_we")).then(pl.col("step")).cast(pl.Int32)
        )["step"]
    at = pl.lit(w["t"]).search_sorted(pl.col("t"), side="right").cast(pl.Int64) - 1
    found = points.select("_row", "t", at.alias("_w")).sort("_row")
    pick = pl.col("_w").clip(lower_bound=0)
    inside = (pl.col("_w") >= 0) & (pl.col("t") < pl.lit(w["_we"]).gather(pick))
    return found.select(
        pl.when(inside).then(pl.lit(w["step"]).gather(pick)).cast(pl.Int32).alias("step")
    )["step"]
