"""A run: every source of one training job, assembled into one event table, analysed lazily.

``Run`` is the Python API (``analyzer.load(paths)``) and what every report renders. It holds the
run's inputs (sources, events, metric rows, the user's options, warnings and notes); every
product of assembly and analysis (``run.gpu_time``, ``run.steps``, ``run.bubbles``, …) is
computed on first access by its declared provider (:mod:`analyzer.products`) and kept; frames
follow the schemas in ``analyzer/model/frames.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from . import frames
from .failures import Failure
from .options import Options
from .products import INPUTS, LAZY, SHARDED, Lazy, ProductError, Products, Provider, providers
from .sharded import Shards, rank_input


@dataclass
class SourceInfo:
    """What the run keeps of a parsed file besides its events."""

    index: int
    path: Path
    format: str
    rank: int
    meta: dict[str, Any]
    warnings: list[str]


def captured(sources: Iterable[SourceInfo]) -> list[SourceInfo]:
    """The graph-capture traces among ``sources`` (``meta["graph_capture"]``): their operators
    were captured, not run, so their idle, times and FLOPs are of capturing, not serving."""
    return [s for s in sources if s.meta.get("graph_capture")]


@dataclass
class Run(Products):
    sources: list[SourceInfo]
    events: pl.DataFrame
    metrics: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unknown: list[Path] = field(default_factory=list)
    options: Options = field(default_factory=Options)
    failures: dict[str, Failure] = field(default_factory=dict)
    """What failed with an internal error so far (what → failure), in the order it happened."""
    shards: Shards | None = None
    """Where rank-local products are computed rank by rank (a run read from a dataset); None:
    over the whole event table (:mod:`analyzer.model.sharded`)."""
    kept: dict[str, Any] = field(default_factory=dict, repr=False)
    """What a later layer derives from the products and keeps with the run (the report's
    sections, built once however many formats are written)."""
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    _resolving: list[str] = field(default_factory=list, repr=False)

    def product(self, name: str) -> Any:
        """Product ``name``: computed once, from the products its provider's parameters name."""
        if name in self._cache:
            return self._cache[name]
        provider = providers().get(name)
        if provider is None:
            raise ProductError(f"no provider of product {name!r}")
        if name in self._resolving:
            raise ProductError(
                "products read each other in a cycle: " + " → ".join([*self._resolving, name])
            )
        if provider.per_rank and self.shards is not None:
            return self._per_rank(provider, self.shards)
        self._resolving.append(name)
        try:
            args = {p: self._argument(p, provider) for p in provider.params}
            value = provider.fn(**args)
        finally:
            self._resolving.pop()
        return self._kept(provider, value)

    def _kept(self, provider: Provider, value: Any) -> Any:
        if provider.schema is not None:
            value = frames.check(value, provider.schema, provider.name)
        self._cache[provider.name] = value
        return value

    def _per_rank(self, provider: Provider, shards: Shards) -> Any:
        """``provider``'s product through the shards, together with every other rank-local
        product whose inputs are at hand (one pass over the ranks computes them all)."""
        batch = [provider, *(
            p for p in providers().values()
            if p.per_rank and p.name != provider.name and p.name not in self._cache
            and all(q in INPUTS or q in self._cache for q in p.params)
        )]
        self._resolving.append(provider.name)
        try:
            broadcast = {
                p.name: {q: self.read(q) for q in p.params if q != SHARDED} for p in batch
            }
        finally:
            self._resolving.pop()
        values = shards.evaluate(batch, broadcast, self.options.rank_selection)
        for p in batch:
            self._kept(p, values[p.name])
        return self._cache[provider.name]

    def _argument(self, param: str, provider: Provider) -> Any:
        if param == LAZY:
            return Lazy(self, provider.lazy, provider.name)
        if param == SHARDED and provider.per_rank:
            return rank_input(provider, self.events, self.options.rank_selection)
        return self.read(param)

    def provides(self, *names: str) -> bool:
        """Whether every product in ``names`` is injected or has a provider."""
        return all(n in self._cache or n in providers() for n in names)

    def inject(self, **products: Any) -> None:
        """Set products instead of computing them (tests, what-ifs): what reads them sees these."""
        self._cache.update(products)

    def computed(self) -> set[str]:
        """The products computed (or injected) so far."""
        return set(self._cache)
