"""The event table: the one contract between parsers and analyses.

Every parser returns a polars DataFrame with exactly the columns of :data:`EVENT_SCHEMA`
(in that order); analyses read nothing else. ``docs/events.md`` is the prose version of this
module and is checked against it by the tests.
"""

from __future__ import annotations

from collections.abc import Mapping

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
    "seq": pl.Int64(),
    "step": pl.Int32(),
    "synthetic_time": pl.Boolean(),
}
"""Column name → dtype, in order. ``seq`` (a collective's sequence number in its process group,
where the source records it) extends ARCHITECTURE.md §3; everything else is as agreed there."""

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
        raise SchemaError(f"{where}: columns differ from the contract (missing {missing}, extra {extra}, or out of order)")
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


def nesting_depth(frame: pl.DataFrame, keys: list[str]) -> pl.Series:
    """For every ``[start_ns, end_ns)`` interval, how many others sharing ``keys`` are open as it starts.

    A sweep over start (+1) and end (-1) boundaries per group. At one instant ends come before
    starts (a range ending as another begins does not enclose it); starts come in (start, longest
    first, row) order so a parent precedes its child and, of two identical ranges, the earlier row
    is the outer one; a zero-length range closes right after it opens so it encloses nothing.
    0 for the outermost; returned in the frame's row order.
    """
    if frame.height == 0:
        return pl.Series("depth", [], dtype=pl.Int16)
    order = (
        frame.select(*keys, "start_ns", "end_ns")
        .with_row_index("_row")
        .sort([*keys, "start_ns", "end_ns", "_row"], descending=[False] * (len(keys) + 1) + [True, False])
        .select("_row", "start_ns", "end_ns", _group=pl.struct(keys).rle_id())
        .with_row_index("_order")
    )
    opens = order.select(
        "_group", "_row", t="start_ns", late=pl.lit(True), sub=pl.col("_order") * 2, delta=pl.lit(1, pl.Int32)
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
    depth = pl.zeros(frame.height, dtype=pl.Int32, eager=True).scatter(sweep["_row"], sweep["open"] - 1)
    return depth.cast(pl.Int16).alias("depth")
