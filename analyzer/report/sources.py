"""The sources every report lists last: which ranks each file holds."""

from __future__ import annotations

import polars as pl


def source_ranks(run) -> dict[int, str]:
    """Source index → the device ranks its events carry (``0,1``: an nsys report of a whole
    node holds several), ``–`` for none (the driver's trace, framework logs)."""
    held = dict(
        run.events.filter(pl.col("rank") >= 0)
        .group_by("source")
        .agg(pl.col("rank").unique().sort())
        .iter_rows()
    )
    return {s.index: ",".join(map(str, held.get(s.index, []))) or "–" for s in run.sources}
