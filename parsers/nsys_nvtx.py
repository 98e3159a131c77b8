"""NVTX rows of an Nsight Systems export → annotations and markers, with nesting depth.

Names are the inline ``text`` or, for registered strings (NCCL's domain, the Python ``nvtx``
package), ``StringIds[textId]``. Push/pop and start/end ranges become ``annotation`` rows whose
``depth`` counts the ranges still open on the same thread when they start (all domains share a
thread's nesting, as they do on the timeline); a start/end range closed on another thread stays
on the thread that opened it. Marks become ``marker`` rows. Domain names come from the
domain-create rows, which a file cut to a time window may lack.
"""

from __future__ import annotations

import polars as pl

from .events import nesting_depth
from .nsys_db import Db

RANGE_TYPES: dict[int, str] = {
    59: "push/pop",
    60: "start/end",
    70: "push/pop (NVTXT)",
    71: "start/end (NVTXT)",
}
"""``ENUM_NSYS_EVENT_TYPE`` ids of ranges (hard-coded: 2022 exports have no ENUM tables)."""
MARK_TYPES: tuple[int, ...] = (34, 65)
DOMAIN_CREATE = 75
THREAD_NAME = 39

_ROWS = {
    "start": pl.Int64(),
    "end": pl.Int64(),
    "eventType": pl.Int32(),
    "text": pl.String(),
    "textId": pl.Int64(),
    "globalTid": pl.Int64(),
    "domainId": pl.Int64(),
}


def read_nvtx(
    db: Db, strings: pl.DataFrame
) -> tuple[pl.DataFrame, dict[int, str | None], pl.DataFrame, int]:
    """(events, domain id → name, thread names set through NVTX, ranges dropped as unclosed).

    ``events`` has ``globalTid, kind, name, start, end, depth``.
    """
    if not db.has("NVTX_EVENTS"):
        return _empty(), {}, pl.DataFrame(schema={"globalTid": pl.Int64(), "name": pl.String()}), 0
    wanted = (*RANGE_TYPES, *MARK_TYPES, DOMAIN_CREATE, THREAD_NAME)
    where = f"WHERE eventType IN ({', '.join(map(str, wanted))})"
    rows = db.frame("NVTX_EVENTS", _ROWS, where=where, checked=("eventType",))
    rows = rows.join(
        strings.rename({"id": "textId", "value": "_registered"}), on="textId", how="left"
    )
    rows = rows.with_columns(name=pl.coalesce("text", "_registered")).drop("text", "_registered")

    created = rows.filter((pl.col("eventType") == DOMAIN_CREATE) & pl.col("domainId").is_not_null())
    domains: dict[int, str | None] = {
        int(d): n for d, n in zip(created["domainId"], created["name"], strict=True)
    }
    for d in rows.filter(pl.col("eventType") != DOMAIN_CREATE)["domainId"].drop_nulls().unique():
        domains.setdefault(int(d), None if d else "default")
    threads = rows.filter((pl.col("eventType") == THREAD_NAME) & pl.col("globalTid").is_not_null())
    threads = threads.select("globalTid", "name")

    ranges = rows.filter(pl.col("eventType").is_in(list(RANGE_TYPES)))
    # A range without a start (a damaged cell) stays for the caller to drop and count.
    timeless = ranges.filter(pl.col("start").is_null()).with_columns(depth=pl.lit(0, pl.Int16))
    ranges = ranges.filter(pl.col("start").is_not_null())
    closed = pl.col("end").is_not_null() & (pl.col("end") >= pl.col("start"))
    unclosed = ranges.height - ranges.filter(closed).height
    ranges = ranges.filter(closed)
    spans = ranges.select("globalTid", start_ns="start", end_ns="end")
    ranges = pl.concat(
        [ranges.with_columns(depth=nesting_depth(spans, ["globalTid"])), timeless],
        how="diagonal_relaxed",
    ).with_columns(kind=pl.lit("annotation"))
    marks = rows.filter(pl.col("eventType").is_in(list(MARK_TYPES))).with_columns(
        end=pl.col("start"), kind=pl.lit("marker"), depth=pl.lit(0, pl.Int64)
    )
    events = pl.concat([ranges, marks], how="diagonal_relaxed").select(
        "globalTid", "kind", pl.col("name").fill_null(""), "start", "end", "depth"
    )
    return events, dict(sorted(domains.items())), threads, unclosed


def _empty() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "globalTid": pl.Int64(),
            "kind": pl.String(),
            "name": pl.String(),
            "start": pl.Int64(),
            "end": pl.Int64(),
            "depth": pl.Int64(),
        }
    )
