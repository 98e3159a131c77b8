"""Run assembly: the sources of one run → a :class:`Run`: which rank (or the driver) every source
is, its collective calls, one clock for all ranks (modules :mod:`.ranks`, :mod:`.collectives`,
:mod:`.clock`; discovery and the parse cache are :mod:`.ingest`, run identity :mod:`.runs`).

* **Ranks and roles** (:func:`assign_ranks`, called by :func:`build`, which makes the run): a rank
  from the trace (``distributedInfo``, nsys environment), else from the file name (``rank-3``,
  ``rank3``), else the next free number. The single controller of verl/OpenRLHF-style runs is
  not a device: a source (or, in an Nsight report of the whole job, a process) without device
  work whose ranges are the driver's timers (``step``, ``gen``, …), or whose file is named so
  (``driver``, ``controller``), gets rank ``-1`` and the ``driver`` role. Log rows keep ``-1``.
* **Clock** (product ``clock``, docs/analyses.md §2): parsers already put every source on the
  epoch clock; per-rank offsets are then estimated from matched collective instances (members
  leave a collective together), alternating between each instance's common end and each rank's
  offset (medians, so a few odd instances do not move the estimate). An offset is applied only
  when it exceeds its own uncertainty (``SIGNIFICANCE`` × MAD); ranks on one host clock stay put.
* **Aligned events** (product ``aligned``): the event table with offsets subtracted, every
  rank's whatever ``--ranks`` selects (docs/cli.md: the selection narrows what is reported).
* **Collective calls** (product ``collective_calls``): one row per rank and call — kernels of a
  communication family on ranks with device work, the outermost host collective ranges
  otherwise — with its process
  group filled from the source's ``pg_config`` and matched across members into instances by
  (group, ``seq``) or, without ``seq``, by order within the group.
The steps (``ProfilerStep#N``, step ranges, rollout waves, log steps) are
:mod:`analyzer.steps`'s.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from parsers import ParsedSource
from parsers.source import empty_metrics
from taxonomy.collectives import load_families

from ..model.options import Options
from ..model.run import Run, SourceInfo
from .collectives import mark_communication
from .ranks import assign_ranks

__all__ = ["build"]


def build(
    parsed: list[ParsedSource],
    options: Options | None = None,
    *,
    unknown: list[Path] | None = None,
    notes: list[str] | None = None,
) -> Run:
    """The run of ``parsed`` (one run's sources): ranks and roles assigned with the user's
    options, events and metric rows concatenated (the metric rows of the ``--steps`` selection,
    and those of no step: a log's settings), the parsers' warnings kept; each note once (a
    dataset's manifest keeps the note its run's choice says again when it is read)."""
    options = options or Options()
    events, ranks, roles, assembly_notes = assign_ranks(parsed, options)
    events = mark_communication(events, load_families(options.collective_rules))
    infos = [SourceInfo(i, p.path, p.format, ranks[i], {**p.meta, "role": roles[i]}, p.warnings)
             for i, p in enumerate(parsed)]
    metrics = pl.concat(
        [p.metrics for p in parsed if p.metrics.height] or [empty_metrics()], how="vertical"
    )
    if options.step_selection is not None:
        metrics = metrics.filter(pl.col("step").is_null() | options.step_selection.expr("step"))
    return Run(
        sources=infos,
        events=events,
        metrics=metrics,
        warnings=[w for p in parsed for w in p.warnings],
        notes=list(dict.fromkeys([*(notes or []), *assembly_notes])),
        unknown=list(unknown or []),
        options=options,
    )
