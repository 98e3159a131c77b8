"""Interval algebra over polars frames: unions, their lengths, intersections, subtraction.

Every analysis that asks "how much time was X" reduces to these few operations over
``[start, end)`` intervals grouped by some keys (rank, device, step, …). They are polars
expressions over sorted columns — never Python loops over intervals.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

START = "start_ns"
END = "end_ns"


def union(frame: pl.DataFrame | pl.LazyFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Merge overlapping or touching intervals per group; returns ``by`` + start_ns, end_ns."""
    by = list(by)
    lazy = frame.lazy().select([*by, START, END]).filter(pl.col(END) > pl.col(START))
    ordered = lazy.sort([*by, START])
    reach = pl.col(END).cum_max().shift(1)
    if by:
        reach = reach.over(by)
    grouped = ordered.with_columns(
        (pl.col(START) > reach).fill_null(True).cum_sum().alias("_piece")
        if not by
        else (pl.col(START) > reach).fill_null(True).cum_sum().over(by).alias("_piece")
    )
    return (
        grouped.group_by([*by, "_piece"], maintain_order=True)
        .agg(pl.col(START).min(), pl.col(END).max())
        .drop("_piece")
        .collect()
    )


def union_length(frame: pl.DataFrame | pl.LazyFrame, by: Sequence[str] = (), name: str = "length_ns") -> pl.DataFrame:
    """Total length of the union of intervals per group."""
    merged = union(frame, by)
    if not by:
        return pl.DataFrame({name: [int((merged[END] - merged[START]).sum() or 0)]})
    return merged.group_by(list(by)).agg((pl.col(END) - pl.col(START)).sum().alias(name))


def intersection(a: pl.DataFrame, b: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Intervals covered by both ``a`` and ``b`` (each first merged into a union), per group."""
    by = list(by)
    ua = union(a, by).with_columns(pl.lit(1, pl.Int8).alias("_a"), pl.lit(0, pl.Int8).alias("_b"))
    ub = union(b, by).with_columns(pl.lit(0, pl.Int8).alias("_a"), pl.lit(1, pl.Int8).alias("_b"))
    return _sweep(pl.concat([ua, ub]), by, pl.col("_ca").gt(0) & pl.col("_cb").gt(0))


def difference(a: pl.DataFrame, b: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Intervals covered by ``a`` and not by ``b``, per group."""
    by = list(by)
    ua = union(a, by).with_columns(pl.lit(1, pl.Int8).alias("_a"), pl.lit(0, pl.Int8).alias("_b"))
    ub = union(b, by).with_columns(pl.lit(0, pl.Int8).alias("_a"), pl.lit(1, pl.Int8).alias("_b"))
    return _sweep(pl.concat([ua, ub]), by, pl.col("_ca").gt(0) & pl.col("_cb").eq(0))


def length(intervals: pl.DataFrame, by: Sequence[str] = (), name: str = "length_ns") -> pl.DataFrame:
    """Sum of interval lengths per group (intervals assumed disjoint)."""
    dur = (pl.col(END) - pl.col(START)).sum().alias(name)
    if not by:
        return intervals.select(dur.fill_null(0).cast(pl.Int64))
    return intervals.group_by(list(by)).agg(dur)


def _sweep(tagged: pl.DataFrame, by: list[str], keep: pl.Expr) -> pl.DataFrame:
    """Boundary sweep over two tagged unions; keeps the elementary segments where ``keep`` holds."""
    points = pl.concat(
        [
            tagged.select([*by, pl.col(START).alias("t"), pl.col("_a").alias("da"), pl.col("_b").alias("db")]),
            tagged.select([*by, pl.col(END).alias("t"), (-pl.col("_a")).alias("da"), (-pl.col("_b")).alias("db")]),
        ]
    ).sort([*by, "t"])
    cum = (lambda e: e.cum_sum().over(by)) if by else (lambda e: e.cum_sum())
    nxt = (lambda e: e.shift(-1).over(by)) if by else (lambda e: e.shift(-1))
    segments = points.with_columns(
        cum(pl.col("da").cast(pl.Int32)).alias("_ca"),
        cum(pl.col("db").cast(pl.Int32)).alias("_cb"),
        nxt(pl.col("t")).alias("_next"),
    ).filter(keep & pl.col("_next").is_not_null() & (pl.col("_next") > pl.col("t")))
    merged = segments.select([*by, pl.col("t").alias(START), pl.col("_next").alias(END)])
    return union(merged, by) if merged.height else merged
