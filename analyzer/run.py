"""A run: every source of one training job, assembled into one event table, analysed lazily.

``Run`` is the Python API (``analyzer.load(paths)``) and what every report renders. Every
product of assembly and analysis (``run.gpu_time``, ``run.steps``, ``run.bubbles``, …) is
computed on first access by the module that provides it (``analyzer.analyses.REGISTRY``) and
cached; frames follow the schemas in ``analyzer/frames.py``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl

from parsers import ParsedSource
from parsers.source import empty_metrics

from .analyses import REGISTRY


@dataclass
class SourceInfo:
    """What the run keeps of a parsed file besides its events."""

    index: int
    path: Path
    format: str
    rank: int
    meta: dict[str, Any]
    warnings: list[str]


@dataclass
class Run:
    sources: list[SourceInfo]
    events: pl.DataFrame
    metrics: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unknown: list[Path] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    _products: dict[str, Any] = field(default_factory=dict, repr=False)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        products = self.__dict__["_products"]
        if name in products:
            return products[name]
        module = _providers().get(name)
        if module is None:
            raise AttributeError(f"Run has no product {name!r}")
        products[name] = importlib.import_module(module).provide(self, name)
        return products[name]

    def product(self, name: str) -> Any:
        """A product by name (same as the attribute)."""
        return getattr(self, name)

    def provides(self, *names: str) -> bool:
        """Whether every product in ``names`` is injected or computed by a registered module."""
        return all(n in self.__dict__["_products"] or n in _providers() for n in names)

    @classmethod
    def from_sources(
        cls, parsed: list[ParsedSource], *, unknown: list[Path] | None = None, notes: list[str] | None = None
    ) -> Run:
        events, infos, assembly_notes = _assign_ranks(parsed)
        metrics = pl.concat([p.metrics for p in parsed if p.metrics.height] or [empty_metrics()], how="vertical")
        warnings = [w for p in parsed for w in p.warnings]
        return cls(
            sources=infos,
            events=events,
            metrics=metrics,
            warnings=warnings,
            notes=[*(notes or []), *assembly_notes],
            unknown=list(unknown or []),
        )

    @property
    def ranks(self) -> list[int]:
        """The devices' ranks (the driver, rank -1, and logs are not devices)."""
        return sorted(r for r in self.events["rank"].unique().to_list() if r is not None and r >= 0)

    def summary(self) -> dict[str, Any]:
        """Everything the reports show, as plain JSON-able data: one key per report section."""
        from .report.sections import failures, sections

        document: dict[str, Any] = {
            "sources": [
                {"path": str(s.path), "format": s.format, "rank": s.rank, "warnings": s.warnings}
                for s in self.sources
            ],
            "unknown_files": [str(p) for p in self.unknown],
            "notes": self.notes,
            "warnings": self.warnings,
        }
        for section in sections(self):
            document[section.key] = section.frame.to_dicts() if section.frame is not None else []
            for name, frame in section.details.items():
                document[name] = frame.to_dicts()
        document["failures"] = [{"failed": f.what, "module": f.module, "error": f.error} for f in failures(self)]
        return document


@cache
def _providers() -> dict[str, str]:
    """Product name → module providing it."""
    found: dict[str, str] = {}
    for name in REGISTRY:
        for product in importlib.import_module(name).PROVIDES:
            if product in found:
                raise RuntimeError(f"{product!r} provided by both {found[product]} and {name}")
            found[product] = name
    return found


def _assign_ranks(parsed: list[ParsedSource]) -> tuple[pl.DataFrame, list[SourceInfo], list[str]]:
    """Ranks and roles of the sources (``analyzer/assemble.py``); ``meta["role"]`` is ``worker``,
    ``driver`` (the single controller, rank -1) or ``log``."""
    from .assemble import assign_ranks

    events, ranks, roles, notes = assign_ranks(parsed)
    infos = [
        SourceInfo(i, p.path, p.format, ranks[i], {**p.meta, "role": roles[i]}, p.warnings)
        for i, p in enumerate(parsed)
    ]
    return events, infos, notes
