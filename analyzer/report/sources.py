"""The sources every report lists last: which ranks each file holds."""

from __future__ import annotations

import polars as pl


def held_ranks(events: pl.DataFrame) -> dict[int, list[int]]:
    """Source index → the device ranks its events carry, ascending (an nsys report of a whole
    node, or rlperf's own export of a run, holds several); a source with none is absent."""
    return dict(
        events.filter(pl.col("rank") >= 0)
        .group_by("source")
        .agg(pl.col("rank").unique().sort())
        .iter_rows()
    )


def source_ranks(run) -> dict[int, str]:
    """Source index → the device ranks its events carry (``0,1``), ``–`` for none (the
    driver's trace, framework logs)."""
    held = held_ranks(run.events)
    return {s.index: ",".join(map(str, held.get(s.index, []))) or "–" for s in run.sources}
