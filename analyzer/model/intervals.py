"""Interval algebra over polars frames: unions, their lengths, intersections, subtraction.

Every analysis that asks "how much time was X" reduces to these few operations over
``[start, end)`` intervals grouped by some keys (rank, device, step, …). They are polars
expressions over sorted columns — never Python loops over intervals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from .query import collect

START = "start_ns"
END = "end_ns"
MAX_LABELS = 62
"""The labels :func:`labelled_sweep` can tell apart: one bit each of an Int64."""


def _per(by: list[str]) -> Callable[[pl.Expr], pl.Expr]:
    """A window expression per ``by`` group (over the whole frame when there are no keys)."""
    return (lambda e: e.over(by)) if by else (lambda e: e)


def union(frame: pl.DataFrame | pl.LazyFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Merge overlapping or touching intervals per group; returns ``by`` + start_ns, end_ns.

    In start order, a piece begins where an interval starts after the reach (running maximum
    end) of those before it, and ends at the reach of its last interval: two filters of the
    sorted rows, where grouping by piece would hash one group per piece (on a run's kernels,
    most of them). The sort keeps the order of ties: polars' unstable sort of two keys or more
    is several times slower on rows nearly in time order already, and the result is the same."""
    by = list(by)
    ordered = frame.lazy().select([*by, START, END]).filter(pl.col(END) > pl.col(START))
    return collect(_merged(ordered.sort([*by, START], maintain_order=True), by))


def _merged(ordered: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    """:func:`union` of intervals already in ``by`` + start order."""
    per = _per(by)
    marked = ordered.with_columns(per(pl.col(END).cum_max()).alias("_reach"))
    marked = marked.with_columns(
        (pl.col(START) > per(pl.col("_reach").shift(1))).fill_null(True).alias("_new")
    ).with_columns(per(pl.col("_new").shift(-1)).fill_null(True).alias("_last"))
    return marked.select(
        *(pl.col(k).filter("_new") for k in by),
        pl.col(START).filter("_new"),
        pl.col("_reach").filter("_last").alias(END),
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
    the count of that point's last row, the only one whose segment is kept. The kept segments
    come out in time order, disjoint, and are merged where they touch."""
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
    ).sort([*by, "t"], maintain_order=True)
    per = _per(by)
    segments = points.with_columns(
        per(pl.col("da").cast(pl.Int32).cum_sum()).alias("_ca"),
        per(pl.col("db").cast(pl.Int32).cum_sum()).alias("_cb"),
        per(pl.col("t").shift(-1)).alias("_next"),
    ).filter(keep & pl.col("_next").is_not_null() & (pl.col("_next") > pl.col("t")))
    merged = segments.select([*by, pl.col("t").alias(START), pl.col("_next").alias(END)])
    return collect(_merged(merged.lazy(), by))


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

    Each label's intervals are merged first, so that at any time a label covers 0 or 1 times:
    one running sum of ±2**label then holds the set of labels covering each piece, and its
    lowest bit is the winner (one column, where a count per label took ``labels`` columns of
    every boundary point, hashed by time point).
    """
    by = list(by)
    if labels > MAX_LABELS:
        raise ValueError(f"labelled_sweep takes at most {MAX_LABELS} labels, not {labels}")
    merged = union(tagged.select(*by, "label", START, END), [*by, "label"])
    if merged.height == 0:
        return pl.DataFrame(
            schema={
                **{k: tagged.schema[k] for k in by},
                "label": pl.Int8(),
                START: pl.Int64(),
                END: pl.Int64(),
            }
        )
    bit = pl.col("label").replace_strict(
        {k: 1 << k for k in range(labels)}, return_dtype=pl.Int64
    )
    over = _per(by)
    points = pl.concat(
        [
            merged.select(*by, pl.col(START).alias("t"), bit.alias("_d")),
            merged.select(*by, pl.col(END).alias("t"), (-bit).alias("_d")),
        ]
    ).lazy().sort([*by, "t"], maintain_order=True)
    pieces = points.with_columns(
        over(pl.col("_d").cum_sum()).alias("_mask"), over(pl.col("t").shift(-1)).alias(END)
    ).filter((pl.col("_mask") > 0) & (pl.col(END) > pl.col("t"))).select(
        *by,
        pl.col("_mask").bitwise_trailing_zeros().cast(pl.Int8).alias("label"),
        pl.col("t").alias(START),
        END,
    )
    new = (pl.col("label") != over(pl.col("label").shift(1))) | (
        pl.col(START) != over(pl.col(END).shift(1))
    )
    runs = pieces.with_columns(new.fill_null(True).alias("_new")).with_columns(
        over(pl.col("_new").shift(-1)).fill_null(True).alias("_last")
    )
    return collect(runs.select(
        *(pl.col(k).filter("_new") for k in by),
        pl.col("label").filter("_new"),
        pl.col(START).filter("_new"),
        pl.col(END).filter("_last"),
    ))


def overlap_each(frame: pl.DataFrame, cover: pl.DataFrame, by: Sequence[str] = (),
                 merged: bool = False) -> pl.Series:
    """For each interval of ``frame`` (in row order), how much of it ``cover`` covers.

    ``cover`` is merged into a union per ``by`` group first, unless ``merged`` says its
    intervals are disjoint already (a union, or gaps between a union's pieces); the answer is
    C(end) − C(start), with C(x) the covered length before x, found for every start and end
    by one as-of join on the union's pieces.
    """
    by = list(by)
    if frame.height == 0:
        return pl.Series("overlap_ns", [], dtype=pl.Int64)
    pieces = (cover.select([*by, START, END]) if merged else union(cover, by)).sort(
        [*by, START], maintain_order=True
    )
    lengths = pl.col(END) - pl.col(START)
    before = lengths.cum_sum().shift(1, fill_value=0)
    pieces = pieces.with_columns(_per(by)(before).alias("_before")).select(
        [*by, pl.col(START).alias("_ps"), pl.col(END).alias("_pe"), "_before"]
    )
    rows = frame.select([*by, START, END]).with_row_index("_row")
    points = pl.concat([
        rows.select(["_row", *by, pl.col(START).alias("_x"), pl.lit(-1, pl.Int8).alias("_sign")]),
        rows.select(["_row", *by, pl.col(END).alias("_x"), pl.lit(1, pl.Int8).alias("_sign")]),
    ]).sort([*by, "_x"], maintain_order=True)
    hit = points.join_asof(
        pieces, left_on="_x", right_on="_ps", by=by or None, strategy="backward",
        check_sortedness=False,
    )
    inside = (pl.min_horizontal("_x", "_pe") - pl.col("_ps")).clip(lower_bound=0)
    covered = hit.select("_row", "_sign", (pl.col("_before") + inside).fill_null(0).alias("_c"))
    at_start, at_end = (covered.filter(pl.col("_sign") == sign) for sign in (-1, 1))
    end, start = (
        pl.zeros(frame.height, dtype=pl.Int64, eager=True).scatter(at["_row"], at["_c"])
        for at in (at_end, at_start)
    )
    return (end - start).clip(lower_bound=0).alias("overlap_ns")
