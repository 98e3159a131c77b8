"""Hand-built inputs of the analyses for the tests: rows as tuples, frames checked against the
contract schemas of analyzer/model/frames.py."""

from __future__ import annotations

import polars as pl

from analyzer.model import frames


def frame(columns: dict[str, list], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return frames.check(pl.DataFrame(columns, schema=schema), schema, "input")


def transposed(rows: list[tuple], width: int) -> list[list]:
    """The columns of ``rows`` (``width`` empty lists when there are none)."""
    return [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def activity(rows: list[tuple[int, int, int, bool]]) -> pl.DataFrame:
    """(rank, start, end, is_collective) kernels on stream 7 of the rank's own device."""
    n = len(rows)
    rank, start, end, coll = transposed(rows, 4)
    return frame(
        {
            "rank": rank,
            "device": rank,
            "stream": [7] * n,
            "kind": ["kernel"] * n,
            "start_ns": start,
            "end_ns": end,
            "stage": [None] * n,
            "step": [None] * n,
            "is_collective": coll,
        },
        frames.ACTIVITY,
    )


def collectives(rows: list[tuple]) -> pl.DataFrame:
    """(instance, rank, coll, dim, group size, bytes, start, end, stage) rows of step 1."""
    n = len(rows)
    instance, rank, coll, dim, size, moved, start, end, stage = transposed(rows, 9)
    return frame(
        {
            "instance": instance,
            "rank": rank,
            "step": [1] * n,
            "coll": coll,
            "dim": dim,
            "pg": ["g"] * n,
            "pg_ranks": [None] * n,
            "group_size": size,
            "bytes": moved,
            "start_ns": start,
            "end_ns": end,
            "stage": stage,
            "on_device": [True] * n,
        },
        frames.COLLECTIVE_INSTANCES,
    )
