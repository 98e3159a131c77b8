"""Per-step records printed as one dict per line (Python repr or JSON), split into timers and
scalars. The loop runs over step records, not over log lines: lines are filtered by column
expressions first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import polars as pl

from .lines import LineIssues
from .values import MAX_STEP, flat_scalars, py_step, python_literal

ROWS_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int32(),
    "key": pl.String(),
    "value": pl.Float64(),
    "record": pl.UInt32(),
    "line": pl.UInt32(),
}

_json = msgspec.json.Decoder()


def decode_json(text: str) -> Any:
    return _json.decode(text)


def record_rows(
    records: pl.DataFrame,
    issues: LineIssues,
    decode: Callable[[str], Any] = python_literal,
    unwrap: Callable[[Any], tuple[int | None, dict[str, Any]]] | None = None,
) -> pl.DataFrame:
    """Long rows ``step, key, value, record, line`` from ``records`` (columns ``line``, ``step``,
    ``payload``). ``unwrap`` turns a decoded payload into (step or None, dict of values) when the
    step lives inside the payload (ROLL's ``{"step": N, "metrics": {…}}``)."""
    rows: list[tuple[int, str, float, int, int]] = []
    for line, step, payload in records.select("line", "step", "payload").iter_rows():
        try:
            data = decode(payload)
            if unwrap is not None:
                inner_step, data = unwrap(data)
                step = inner_step if inner_step is not None else step
            if not isinstance(data, dict):
                raise TypeError("not a dict")
        except (ValueError, SyntaxError, TypeError, KeyError, MemoryError, RecursionError,
                OverflowError, msgspec.DecodeError) as exc:
            issues.add(line, f"unreadable record ({type(exc).__name__}: {str(exc)[:50]})")
            continue
        if step is None:
            issues.add(line, "record without a step number")
            continue
        if py_step(step) is None:
            issues.add(
                line,
                f"step {str(step)[:24]} is no number in 0…{MAX_STEP}",
                kind="dropped_out_of_range",
            )
            continue
        rows.extend(
            (int(step), key, value, line, line) for key, value in flat_scalars(data).items()
        )
    return pl.DataFrame(rows, schema=ROWS_SCHEMA, orient="row")


def split_timers(
    rows: pl.DataFrame, is_timer: pl.Expr, extra: tuple[str, ...] = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(timers ``step, name, seconds, record`` + ``extra``, scalars ``step, key, value,
    record``)."""
    timers = rows.filter(is_timer).select(
        "step", pl.col("key").alias("name"), pl.col("value").alias("seconds"), "record", *extra
    )
    scalars = rows.filter(~is_timer).select("step", "key", "value", "record")
    return timers, scalars
