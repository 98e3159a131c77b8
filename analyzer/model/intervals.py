"""Interval algebra over polars frames: unions, their lengths, intersections, subtraction.

Every analysis that asks "how much time was X" reduces to these few operations over
``[start, end)`` intervals grouped by some keys (rank, device, step, …). They are polars
expressions over sorted columns — never Python loops over intervals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

START = "start_ns"
END = "end_ns"


def _per(by: list[str]) -> Callable[[pl.Expr], pl.Expr]:
    """A window expression per ``by`` group (over the whole frame when there are no keys)."""
    return (lambda e: e.over(by)) if by else (lambda e: e)


def union(frame: pl.DataFrame | pl.LazyFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Merge overlapping or touching intervals per group; returns ``by`` + start_ns, end_ns."""
    by = list(by)
    lazy = frame.lazy().select([*by, START, END]).filter(pl.col(END) > pl.col(START))
    ordered = lazy.sort([*by, START])
    per = _per(by)
    piece = per((pl.col(START) > per(pl.col(END).cum_max().shift(1))).fill_null(True).cum_sum())
    grouped = ordered.with_columns(piece.alias("_piece"))
    return (
        grouped.group_by([*by, "_piece"], maintain_order=True)
        .agg(pl.col(START).min(), pl.col(END).max())
        .drop("_piece")
        .collect()
    )


def union_length(
    frame: pl.DataFrame | pl.LazyFrame, by: Sequence[str] = (), name: str = "length_ns"
) -> pl.DataFrame:
    """Total length of the union of intervals per group."""
    merged = union(frame, by)
    if not by:
        return pl.DataFrame({name: [int((merged[END] - merged[START]).sum() or 0)]})
    return merged.group_by(list(by)).agg((pl.col(END) - pl.col(START)).sum().alias(name))


def intersection(a: pl.DataFrame, b: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Intervals covered by both ``a`` and ``b`` (each first merged into a union), per group."""
    return _sweep(a, b, list(by), pl.col("_ca").gt(0) & pl.col("_cb").gt(0))


def difference(a: pl.DataFrame, b: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Intervals covered by ``a`` and not by ``b``, per group."""
    return _sweep(a, b, list(by), pl.col("_ca").gt(0) & pl.col("_cb").eq(0))


def length(
    intervals: pl.DataFrame, by: Sequence[str] = (), name: str = "length_ns"
) -> pl.DataFrame:
    """Sum of interval lengths per group (intervals assumed disjoint)."""
    dur = (pl.col(END) - pl.col(START)).sum().alias(name)
    if not by:
        return intervals.select(dur.fill_null(0).cast(pl.Int64))
    return intervals.group_by(list(by)).agg(dur)


def _sweep(a: pl.DataFrame, b: pl.DataFrame, by: list[str], keep: pl.Expr) -> pl.DataFrame:
    """Boundary sweep over ``a`` and ``b``; keeps the elementary segments where ``keep`` holds
    (``_ca``, ``_cb``: how many of a's and b's intervals cover the segment). The counts need no
    union first: overlapping intervals only raise them, and every delta at one time point is in
    the count of that point's last row, the only one whose segment is kept."""
    tagged = pl.concat([
        _live(a, by).with_columns(pl.lit(1, pl.Int8).alias("_a"), pl.lit(0, pl.Int8).alias("_b")),
        _live(b, by).with_columns(pl.lit(0, pl.Int8).alias("_a"), pl.lit(1, pl.Int8).alias("_b")),
    ])
    points = pl.concat(
        [
            tagged.select(
                [*by, pl.col(START).alias("t"), pl.col("_a").alias("da"), pl.col("_b").alias("db")]
            ),
            tagged.select(
                [
                    *by,
                    pl.col(END).alias("t"),
                    (-pl.col("_a")).alias("da"),
                    (-pl.col("_b")).alias("db"),
                ]
            ),
        ]
    ).sort([*by, "t"])
    per = _per(by)
    segments = points.with_columns(
        per(pl.col("da").cast(pl.Int32).cum_sum()).alias("_ca"),
        per(pl.col("db").cast(pl.Int32).cum_sum()).alias("_cb"),
        per(pl.col("t").shift(-1)).alias("_next"),
    ).filter(keep & pl.col("_next").is_not_null() & (pl.col("_next") > pl.col("t")))
    merged = segments.select([*by, pl.col("t").alias(START), pl.col("_next").alias(END)])
    return union(merged, by) if merged.height else merged


def _live(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``by`` + start_ns, end_ns of the intervals that are not empty."""
    return frame.select([*by, START, END]).filter(pl.col(END) > pl.col(START))


def clip_to_windows(
    frame: pl.DataFrame, windows: pl.DataFrame, on: Sequence[str] = ()
) -> pl.DataFrame:
    """Each interval cut to every window it overlaps, tagged with that window's ``step``.

    ``windows`` holds ``step``, start_ns, end_ns (plus the ``on`` keys when windows differ per
    group); windows may overlap, and an interval in two windows appears once in each. A
    ``step`` column already on ``frame`` is replaced.
    """
    on = list(on)
    left = frame.drop("step", strict=False)
    right = windows.select([*on, "step", pl.col(START).alias("_ws"), pl.col(END).alias("_we")])
    if left.height == 0 or right.height == 0:
        return left.clear().with_columns(pl.lit(None, pl.Int32).alias("step"))
    predicates = [pl.col(START) < pl.col("_we"), pl.col(END) > pl.col("_ws")]
    if on:
        right = right.rename({k: f"_w_{k}" for k in on})
        predicates += [pl.col(k) == pl.col(f"_w_{k}") for k in on]
    joined = left.join_where(right, *predicates)
    return joined.with_columns(
        pl.max_horizontal(START, "_ws").alias(START), pl.min_horizontal(END, "_we").alias(END)
    ).drop(["_ws", "_we", *[f"_w_{k}" for k in on]])


def labelled_sweep(tagged: pl.DataFrame, by: Sequence[str], labels: int) -> pl.DataFrame:
    """Cut time at every boundary and give each piece the lowest ``label`` whose intervals cover it.

    ``tagged`` holds ``by`` + ``label`` (0 … labels-1, lower wins) + start_ns, end_ns; intervals
    of one label may overlap. Returns ``by`` + label + start_ns, end_ns: disjoint runs, adjacent
    pieces of one label merged, time no label covers left out. This is a precedence rule over
    several interval sets in one pass (e.g. the idle causes of docs/analyses.md §4).
    """
    by = list(by)
    live = tagged.filter(pl.col(END) > pl.col(START))
    if live.height == 0:
        return pl.DataFrame(
            schema={
                **{k: tagged.schema[k] for k in by},
                "label": pl.Int8(),
                START: pl.Int64(),
                END: pl.Int64(),
            }
        )
    deltas = [
        pl.when(pl.col("label") == k).then(pl.col("_d")).otherwise(0).cast(pl.Int32).alias(f"_d{k}")
        for k in range(labels)
    ]
    points = (
        pl.concat(
            [
                live.select(
                    [*by, "label", pl.col(START).alias("t"), pl.lit(1, pl.Int32).alias("_d")]
                ),
                live.select(
                    [*by, "label", pl.col(END).alias("t"), pl.lit(-1, pl.Int32).alias("_d")]
                ),
            ]
        )
        .lazy()
        .with_columns(deltas)
        .group_by([*by, "t"])
        .agg(pl.col(f"_d{k}").sum() for k in range(labels))
        .sort([*by, "t"])
    )
    over = _per(by)
    winner = pl.coalesce(
        [
            pl.when(over(pl.col(f"_d{k}").cum_sum()) > 0).then(pl.lit(k, pl.Int8))
            for k in range(labels)
        ]
    )
    pieces = points.select(
        [
            *by,
            pl.col("t").alias(START),
            over(pl.col("t").shift(-1)).alias(END),
            winner.alias("label"),
        ]
    ).filter(
        pl.col("label").is_not_null() & pl.col(END).is_not_null() & (pl.col(END) > pl.col(START))
    )
    run = (pl.col("label") != pl.col("label").shift(1)) | (pl.col(START) != pl.col(END).shift(1))
    return (
        pieces.with_columns(over(run.fill_null(True).cum_sum()).alias("_run"))
        .group_by([*by, "_run"])
        .agg(pl.col("label").first(), pl.col(START).min(), pl.col(END).max())
        .drop("_run")
        .sort([*by, START])
        .collect()
    )


def overlap_each(frame: pl.DataFrame, cover: pl.DataFrame, by: Sequence[str] = ()) -> pl.Series:
    """For each interval of ``frame`` (in row order), how much of it ``cover`` covers.

    ``cover`` is merged into a union per ``by`` group first; the answer is C(end) − C(start),
    with C(x) the covered length before x, found by an as-of join on the union's pieces.
    """
    by = list(by)
    if frame.height == 0:
        return pl.Series("overlap_ns", [], dtype=pl.Int64)
    pieces = union(cover, by).sort([*by, START])
    lengths = pl.col(END) - pl.col(START)
    before = lengths.cum_sum().shift(1, fill_value=0)
    pieces = pieces.with_columns(_per(by)(before).alias("_before")).select(
        [*by, pl.col(START).alias("_ps"), pl.col(END).alias("_pe"), "_before"]
    )
    rows = frame.select([*by, START, END]).with_row_index("_row")

    def covered_before(col: str) -> pl.DataFrame:
        points = rows.select(["_row", *by, pl.col(col).alias("_x")]).sort([*by, "_x"])
        hit = points.join_asof(
            pieces,
            left_on="_x",
            right_on="_ps",
            by=by or None,
            strategy="backward",
            check_sortedness=False,
        )
        inside = (pl.min_horizontal("_x", "_pe") - pl.col("_ps")).clip(lower_bound=0)
        return hit.select("_row", (pl.col("_before") + inside).fill_null(0).alias(col))

    both = covered_before(START).join(covered_before(END), on="_row").sort("_row")
    return (both[END] - both[START]).clip(lower_bound=0).cast(pl.Int64).alias("overlap_ns")
