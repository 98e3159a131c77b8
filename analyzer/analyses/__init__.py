"""The analyses and assembly steps a run computes lazily, by name.

Every module listed in :data:`REGISTRY` declares ``PROVIDES`` (the names of the frames — or
values — it computes, each documented in its module docstring and, for frames, with a schema in
``analyzer/frames.py``) and ``provide(run, name)``. ``Run`` computes a product on first access
(``run.gpu_time``, ``run.bubbles``, …) and caches it. Modules read other products through the
run, so data flows one way: assembly → classification → analyses → reports.

A module may also define ``section(run) -> Section | None`` to put its results in the reports
(see ``analyzer/report/sections.py``).
"""

from __future__ import annotations

REGISTRY: tuple[str, ...] = (
    "analyzer.assemble",
    "analyzer.classify",
    "analyzer.placement",
    "analyzer.analyses.overview",
    "analyzer.analyses.quality",
    "analyzer.analyses.logs",
    "analyzer.analyses.gpu_time",
    "analyzer.analyses.annotations",
    "analyzer.analyses.breakdown",
    "analyzer.analyses.bubbles",
    "analyzer.analyses.sync",
    "analyzer.analyses.workdepth",
    "analyzer.analyses.guidelines",
)
"""Modules providing run products, in report order. Add one line per module."""
