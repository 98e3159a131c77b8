"""Rank-local products computed rank by rank (``@provides(..., per_rank=True)``).

A rank-local provider's product over the run is the concatenation, in ascending rank order
(null ranks first, as ``sort`` puts them), of the provider called on each rank's events alone
with its other parameters passed whole, and its events are those the ``--ranks`` selection
keeps (:func:`rank_input`, the one place that applies it to them). ``Run`` computes such a
product through its
:class:`Shards` when it has one (a run read from a dataset: each rank's partition read by a
worker, ``analyzer/engines/per_rank.py``), else over the whole event table; the two are equal
(``tests/test_per_rank.py`` checks every declaration on multi-rank runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import polars as pl

from parsers.events import empty_events

from .options import Selection, keep_ranks
from .products import SHARDED, Provider

Broadcast = Mapping[str, Mapping[str, Any]]
"""Product → its provider's parameters other than the events, passed whole to every rank."""
PerRank = list[dict[str, pl.DataFrame]]
"""Product → value, one dict per rank in rank order."""


class Shards(Protocol):
    def evaluate(
        self, providers: Sequence[Provider], broadcast: Broadcast, ranks: Selection | None
    ) -> dict[str, pl.DataFrame]:
        """Each provider's product over the run (``ranks``: the ``--ranks`` selection),
        computed rank by rank and gathered."""
        ...


def rank_input(provider: Provider, events: pl.DataFrame, ranks: Selection | None) -> pl.DataFrame:
    """The events a rank-local provider reads, of the whole run or of one rank: those of the
    ``ranks`` selected (the driver's and logs' too), every rank's for one about the files."""
    return events if provider.every_rank else keep_ranks(events, ranks)


def split(events: pl.DataFrame) -> list[pl.DataFrame]:
    """The events of each rank, in rank order, each in the run's row order."""
    if events.height == 0:
        return []
    parts = events.partition_by("rank", maintain_order=True, as_dict=True)
    order = sorted(parts, key=lambda k: (k[0] is not None, k[0] if k[0] is not None else 0))
    return [parts[k] for k in order]


def on_rank(
    providers: Sequence[Provider], events: pl.DataFrame, broadcast: Broadcast,
    ranks: Selection | None = None,
) -> dict[str, pl.DataFrame]:
    """Every provider on one rank's events (those ``ranks`` selects)."""
    return {
        p.name: p.fn(**{SHARDED: rank_input(p, events, ranks), **broadcast[p.name]})
        for p in providers
    }


def over_ranks(
    providers: Sequence[Provider], events: pl.DataFrame, broadcast: Broadcast,
    ranks: Selection | None = None,
) -> PerRank:
    """Every provider on each rank of ``events`` in turn."""
    return [on_rank(providers, part, broadcast, ranks) for part in split(events)]


def gathered(
    providers: Sequence[Provider], per_rank: PerRank, broadcast: Broadcast
) -> dict[str, pl.DataFrame]:
    """The run's products from the per-rank ones; a run without events gets the provider's
    value over the empty event table (what the whole-run computation gives)."""
    if not per_rank:
        return on_rank(providers, empty_events(), broadcast)
    return {
        p.name: pl.concat([values[p.name] for values in per_rank], how="vertical")
        for p in providers
    }


class InProcess:
    """The run's own event table split by rank, each rank computed in this process."""

    def __init__(self, events: pl.DataFrame) -> None:
        self.events = events

    def evaluate(
        self, providers: Sequence[Provider], broadcast: Broadcast, ranks: Selection | None = None
    ) -> dict[str, pl.DataFrame]:
        per_rank = over_ranks(providers, self.events, broadcast, ranks)
        return gathered(providers, per_rank, broadcast)
