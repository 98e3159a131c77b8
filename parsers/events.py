"""The event table: the one contract between parsers and analyses.

Every parser returns a polars DataFrame with exactly the columns of :data:`EVENT_SCHEMA`
(in that order); analyses read nothing else. ``docs/events.md`` is the prose version of this
module and is checked against it by the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import polars as pl

KINDS: tuple[str, ...] = (
    "kernel",
    "memcpy",
    "memset",
    "gpu_sync",
    "runtime",
    "cpu_op",
    "annotation",
    "gpu_annotation",
    "python",
    "marker",
    "log_stage",
)
"""Event kinds. GPU activity is ``kernel``/``memcpy``/``memset``; the rest are host-side or
derived (``log_stage``: one row per step and framework timer)."""

GPU_ACTIVITY_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset")

COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "send",
    "recv",
    "send_recv",
    "barrier",
    "other",
)
"""Canonical collective names filled into ``coll``."""

KIND = pl.Enum(list(KINDS))
COLL = pl.Enum(list(COLLECTIVES))

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.UInt32(),
    "rank": pl.Int32(),
    "host": pl.Categorical(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "device": pl.Int16(),
    "stream": pl.Int32(),
    "kind": KIND,
    "name": pl.Categorical(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "corr": pl.Int64(),
    "ext_id": pl.Int64(),
    "depth": pl.Int16(),
    "coll": COLL,
    "pg": pl.Categorical(),
    "pg_desc": pl.Categorical(),
    "pg_ranks": pl.String(),
    "group_size": pl.Int32(),
    "bytes": pl.Int64(),
    "flops": pl.Int64(),
    "seq": pl.Int64(),
    "step": pl.Int32(),
    "synthetic_time": pl.Boolean(),
}
"""Column name → dtype, in order; docs/events.md says what each column holds."""

NON_NULL: frozenset[str] = frozenset(
    {"source", "rank", "pid", "tid", "device", "stream", "kind", "name", "start_ns", "end_ns",
     "depth", "synthetic_time"}
)
"""Columns that never hold nulls (unknown values use -1 instead)."""

DEFAULTS: dict[str, object] = {
    "source": 0,
    "rank": -1,
    "host": None,
    "pid": -1,
    "tid": -1,
    "device": -1,
    "stream": -1,
    "depth": 0,
    "synthetic_time": False,
}
"""Fill values for columns a parser does not know."""


TIME_MAX_NS = 7_258_118_400 * 10**9
"""2200-01-01 UTC in epoch ns. A start at or past it, or before 0 (1970), is a damaged value: the
event is dropped and counted. It keeps every start plus :data:`DURATION_MAX_NS` below 2**63."""
DURATION_MAX_NS = 366 * 86_400 * 10**9
"""One (leap) year: a longer range is a damaged value, not a measurement; dropped and counted."""

BOUNDS: dict[str, tuple[int, int]] = {
    "rank": (0, 2**31 - 1),
    "device": (0, 2**15 - 1),
    "stream": (0, 2**31 - 1),
    "depth": (0, 2**15 - 1),
    "group_size": (0, 2**31 - 1),
    "bytes": (0, 2**63 - 1),
    "flops": (0, 2**63 - 1),
    "step": (0, 2**31 - 1),
}
"""Valid values of the integer columns narrower than a file's integers, or never negative.
:func:`bound` makes any other value unknown (-1 where the column never holds nulls, else null)
and counts it; -1 itself is "unknown" and stays. ``depth`` past its bound is clamped instead
(:func:`nesting_depth`): the range is still nested, only deeper than the column can say."""

QUALITY_TEXT: dict[str, str] = {
    "dropped_time_out_of_range": "events dropped: start before 1970 or after 2200 (epoch)",
    "dropped_duration_out_of_range": "events dropped: duration over a year",
    "dropped_device_out_of_range": "GPU events dropped: device index outside 0–32767",
    "dropped_number_out_of_range": "events dropped: a number too large for JSON's doubles",
    "dropped_oversized_event": "events dropped: one event's JSON longer than the string limit",
    "negative_dur": "negative durations set to 0",
    "clamped_depth": "nesting depths clamped to 32767",
    "dropped_unreadable_event": "events dropped: a field of the wrong type",
    "unreadable_arg": "args values unreadable or beyond 64-bit integers, left empty",
    "zero_dur": "ranges of zero duration (kept)",
    **{
        f"out_of_range_{c}": f"{c} values outside {lo:,}..{hi:,}, set to unknown"
        for c, (lo, hi) in BOUNDS.items()
        if c != "depth"
    },
    **{
        f"out_of_range_{c}": f"{c} values beyond 64-bit integers, set to unknown"
        for c in ("pid", "tid", "corr")
    },
    "out_of_range_base_time": "time bases (baseTimeNanoseconds, file-name epoch) out of range, "
        "ignored",
    "out_of_range_world_size": "world sizes out of range, ignored",
    "out_of_range_pg_size": "process-group sizes out of range, ignored",
}
"""What each count of ``meta["quality"]`` a parser of this module family tallies means, for the one
warning line that states them."""


def bound(frame: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """``frame`` with every value outside :data:`BOUNDS` made unknown, and how many per column
    (``out_of_range_<column>``): a strict cast would raise, a wrapping one would lie."""
    present = [c for c in BOUNDS if c in frame.columns and c != "depth"]
    if not present or frame.height == 0:
        return frame, {}
    valid = {c: _valid(c) for c in present}
    counts = frame.select((~ok).sum().alias(c) for c, ok in valid.items()).row(0, named=True)
    bad = [c for c in present if counts[c]]
    if bad:
        frame = frame.with_columns(
            pl.when(valid[c])
            .then(pl.col(c))
            .otherwise(pl.lit(-1 if c in NON_NULL else None))
            .alias(c)
            for c in bad
        )
    return frame, {f"out_of_range_{c}": int(counts[c]) for c in bad}


def _valid(column: str) -> pl.Expr:
    lo, hi = BOUNDS[column]
    col = pl.col(column)
    ok = col.is_null() | col.is_between(lo, hi)
    return ok | (col == -1) if column in NON_NULL else ok


def describe(counts: Mapping[str, int]) -> str:
    """One line for the counts of :data:`QUALITY_TEXT` kinds: ``3 events dropped: …; 1 …``."""
    return "; ".join(f"{n:,} {QUALITY_TEXT.get(k, k)}" for k, n in counts.items() if n)


def as_int(value: object) -> int:
    """An aggregate of a numeric column (``Series.max()`` and the like) as an int: polars types
    such a result as any Python value, so the check turns it into the number it is."""
    if isinstance(value, (int, float)):
        return int(value)
    raise TypeError(f"expected a number, got {value!r}")


class SchemaError(ValueError):
    """An event table that breaks the contract (a parser bug, never user input)."""


def empty_events() -> pl.DataFrame:
    """A zero-row event table."""
    return pl.DataFrame(schema=EVENT_SCHEMA)


def conform(frame: pl.DataFrame | Mapping[str, object], **constants: object) -> pl.DataFrame:
    """Build a contract-shaped table from whatever columns a parser has.

    Missing columns get their default (or null), ``constants`` fill whole columns (e.g.
    ``source=3, rank=1``), and every column is cast to its contract dtype in contract order.
    """
    df = frame if isinstance(frame, pl.DataFrame) else pl.DataFrame(frame, strict=False)
    height = df.height
    cols = []
    for name, dtype in EVENT_SCHEMA.items():
        if name in constants:
            value = constants[name]
            cols.append(pl.lit(value, dtype=_lit_dtype(dtype)).cast(dtype).alias(name))
        elif name in df.columns:
            expr = pl.col(name)
            if isinstance(dtype, (pl.Enum, pl.Categorical)) and df.schema[name] not in (
                pl.String(),
                dtype,
            ):
                expr = expr.cast(pl.String)
            if name in DEFAULTS and DEFAULTS[name] is not None:
                expr = expr.fill_null(DEFAULTS[name])
            cols.append(expr.cast(dtype).alias(name))
        else:
            default = DEFAULTS.get(name)
            cols.append(pl.lit(default, dtype=_lit_dtype(dtype)).cast(dtype).alias(name))
    if height == 0 and not df.columns:
        return empty_events()
    return df.select(cols)


def _lit_dtype(dtype: pl.DataType) -> pl.DataType:
    return pl.String() if isinstance(dtype, (pl.Enum, pl.Categorical)) else dtype


def validate(events: pl.DataFrame, *, where: str = "event table") -> pl.DataFrame:
    """Check ``events`` against the contract; return it unchanged or raise :class:`SchemaError`.

    Checks: exact columns and order, dtypes, no nulls where the contract forbids them,
    ``end_ns >= start_ns``, GPU activity on a device and stream, host events off the device,
    and collectives only with a known ``coll`` name.
    """
    if list(events.columns) != list(EVENT_SCHEMA):
        missing = [c for c in EVENT_SCHEMA if c not in events.columns]
        extra = [c for c in events.columns if c not in EVENT_SCHEMA]
        raise SchemaError(
            f"{where}: columns differ from the contract (missing {missing}, extra {extra}, or out "
            f"of order)"
        )
    for name, dtype in EVENT_SCHEMA.items():
        have = events.schema[name]
        if have != dtype:
            raise SchemaError(f"{where}: column {name!r} has dtype {have}, expected {dtype}")
    if events.height == 0:
        return events
    nulls = events.select(pl.col(sorted(NON_NULL)).null_count()).row(0, named=True)
    bad = {k: v for k, v in nulls.items() if v}
    if bad:
        raise SchemaError(f"{where}: nulls in non-null columns {bad}")
    checks = events.select(
        negative=(pl.col("end_ns") < pl.col("start_ns")).sum(),
        gpu_off_device=(
            pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("device") < 0)
        ).sum(),
        depth_negative=(pl.col("depth") < 0).sum(),
        bytes_negative=(pl.col("bytes") < 0).sum(),
    ).row(0, named=True)
    for check, count in checks.items():
        if count:
            raise SchemaError(f"{where}: {count} rows fail the {check.replace('_', ' ')} check")
    return events


def concat(tables: list[pl.DataFrame]) -> pl.DataFrame:
    """Concatenate event tables (all already conforming)."""
    tables = [t for t in tables if t.height]
    if not tables:
        return empty_events()
    return pl.concat(tables, how="vertical", rechunk=True)


def nesting_depth(
    frame: pl.DataFrame, keys: list[str], clamped: Callable[[int], None] | None = None
) -> pl.Series:
    """For every ``[start_ns, end_ns)`` interval, how many others sharing ``keys`` are open as it
    starts.

    A sweep over start (+1) and end (-1) boundaries per group. At one instant ends come before
    starts (a range ending as another begins does not enclose it); starts come in (start, longest
    first, row) order so a parent precedes its child and, of two identical ranges, the earlier row
    is the outer one; a zero-length range closes right after it opens so it encloses nothing.
    0 for the outermost; returned in the frame's row order. Depths past the i16 column's bound
    are clamped to it and their number handed to ``clamped`` (a parser's tally).
    """
    if frame.height == 0:
        return pl.Series("depth", [], dtype=pl.Int16)
    order = (
        frame.select(*keys, "start_ns", "end_ns")
        .with_row_index("_row")
        .sort(
            [*keys, "start_ns", "end_ns", "_row"],
            descending=[False] * (len(keys) + 1) + [True, False],
        )
        .select("_row", "start_ns", "end_ns", _group=pl.struct(keys).rle_id())
        .with_row_index("_order")
    )
    opens = order.select(
        "_group",
        "_row",
        t="start_ns",
        late=pl.lit(True),
        sub=pl.col("_order") * 2,
        delta=pl.lit(1, pl.Int32),
    )
    closes = order.select(
        "_group",
        "_row",
        t="end_ns",
        late=pl.col("end_ns") == pl.col("start_ns"),
        sub=pl.col("_order") * 2 + 1,
        delta=pl.lit(-1, pl.Int32),
    )
    # Every group opens and closes as often, so the running sum is back at 0 where a group ends.
    sweep = (
        pl.concat([opens, closes])
        .sort(["_group", "t", "late", "sub"])
        .with_columns(open=pl.col("delta").cum_sum())
        .filter(pl.col("delta") == 1)
    )
    depth = pl.zeros(frame.height, dtype=pl.Int32, eager=True).scatter(
        sweep["_row"], sweep["open"] - 1
    )
    deepest = BOUNDS["depth"][1]
    over = int((depth > deepest).sum())
    if over and clamped is not None:
        clamped(over)
    return depth.clip(upper_bound=deepest).cast(pl.Int16).alias("depth")
