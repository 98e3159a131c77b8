"""rlperf's own Perfetto export read back (docs/reports.md, "Perfetto export").

The export is one Kineto-shaped file holding every rank of a run, each rank a process. A Kineto
trace names one rank per file (``distributedInfo``), so the export's header adds a process
table, ``rlperf.processes``: per ``pid`` the rank (-1 for the single controller), host, device
and role. With it the reader gives each event the rank, host and device of its process, and the
run comes back with its ranks. The export's derived tracks (stages, bubbles, flows) carry the
categories :data:`OWN_CATEGORIES`, which are no events: the stages are derived again from the
exported ranges.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .events import BOUNDS
from .source import ParsedSource

STAGE_CATEGORY = "rlperf_stage"
BUBBLE_CATEGORY = "rlperf_bubble"
FLOW_CATEGORY = "rlperf_flow"
OWN_CATEGORIES = frozenset({STAGE_CATEGORY, BUBBLE_CATEGORY, FLOW_CATEGORY})
"""Categories of the export's derived tracks: skipped on reading, not counted as unknown."""
ROLES = frozenset({"driver", "worker"})
"""A process's role as the table may state it: the run's single controller keeps its role
even where its ranges alone would not tell (the run named it by its file)."""


def processes(header: Any, out: ParsedSource) -> list[dict[str, Any]]:
    """The process table of an export's ``rlperf`` header; [] for any other trace. An entry
    that is no object with an integer ``pid`` is left out, with a warning that counts them."""
    table = header.get("processes") if isinstance(header, dict) else None
    if not isinstance(table, list):
        return []
    kept = [_entry(e) for e in table]
    bad = sum(e is None for e in kept)
    if bad:
        out.warn(f"{bad} entries of the rlperf process table have no integer pid; left out")
    return [e for e in kept if e is not None]


def _entry(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict) or type(raw.get("pid")) is not int:
        return None
    host, role = raw.get("host"), raw.get("role")
    return {
        "pid": raw["pid"],
        "rank": _integer(raw.get("rank")),
        "host": host if isinstance(host, str) else None,
        "device": _integer(raw.get("device")),
        "role": role if role in ROLES else None,
    }


def _integer(value: Any) -> int:
    """An integer as given (range-checked with the columns), -1 for anything else."""
    return value if type(value) is int else -1


def with_processes(frame: pl.DataFrame, table: list[dict[str, Any]]) -> pl.DataFrame:
    """``rank``, ``host`` and the device of device rows from each event's process. A rank is
    range-checked afterwards with every column (:func:`parsers.events.bound`); a device out of
    range leaves the row on its ``pid``, as in any Kineto trace."""
    pid = pl.col("pid")
    rank = {e["pid"]: e["rank"] for e in table}
    host = {e["pid"]: e["host"] for e in table}
    lo, hi = BOUNDS["device"]
    device = {e["pid"]: e["device"] for e in table if lo <= e["device"] <= hi}
    return frame.with_columns(
        pid.replace_strict(rank, default=-1, return_dtype=pl.Int64).alias("rank"),
        pid.replace_strict(host, default=None, return_dtype=pl.String).alias("host"),
        pl.when(pl.col("device") >= 0)
        .then(pid.replace_strict(device, default=pl.col("device"), return_dtype=pl.Int64))
        .otherwise(pl.col("device"))
        .alias("device"),
    )


def single(table: list[dict[str, Any]], key: str) -> Any:
    """The one value of ``key`` all processes share, else None."""
    values = {e[key] for e in table}
    return values.pop() if len(values) == 1 else None
