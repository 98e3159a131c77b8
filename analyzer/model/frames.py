"""The frames that flow between assembly, classification, the analyses and the reports.

Each schema here is a contract: the module that produces a frame returns exactly these columns
(more may follow at the end), and every consumer reads only these. ``docs/architecture.md``
documents them for users of the Python API (``analyzer.load(paths)`` → ``Run``). Times are epoch
ns on the aligned clock (docs/analyses.md §2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

import polars as pl

from taxonomy.vocab import DIM, IDLE_CAUSE, POOL, ROLE, STAGE

# --- produced by assembly and classification ----------------------------------------------------

CLASSIFIED_COLUMNS = pl.Schema({
    "stage": STAGE,
    "role": ROLE,
    "dim": DIM,
    "pool": POOL,
    "inferred": pl.Boolean(),
    "confidence": pl.Float32(),
})
"""Columns classification appends to the event table (``Run.events``): the stage and role of
annotation, log and GPU rows (GPU rows inherit them from the range enclosing their launch), the
parallelism dimension of collective rows, the pool of the row's rank, and whether the stage was
inferred from operator signatures (with a confidence in [0, 1]) rather than named by a range."""

STEPS = pl.Schema({
    "step": pl.Int32(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "source": pl.String(),
})
"""One row per step: the step window over all ranks (docs/analyses.md §1); ``source`` says what
defined it (``ProfilerStep``, a step range name, ``log``)."""

CLOCK = pl.Schema({
    "rank": pl.Int32(),
    "offset_ns": pl.Int64(),
    "uncertainty_ns": pl.Int64(),
    "matched": pl.Int64(),
    "aligned": pl.Boolean(),
})
"""Per rank: the offset subtracted from its times, the residual uncertainty (MAD), how many
matched collective instances it rests on, and whether the rank could be aligned at all."""

INCOMPLETE_STEPS = pl.Schema({
    "step": pl.Int32(),
    "source": pl.UInt32(),
    "rank": pl.Int32(),
    "reason": pl.String(),
    "trace_end_ns": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
})
"""One row per step and trace that leaves the step unobserved: ``reason`` ``cut`` (the file was
cut short and salvaged: every step not over when its data ends), ``unclosed`` (the trace
ends inside the step and its own marker of that step is missing) or ``stub`` (the last step,
under ``[stub] share`` of the median of the others: where the profiler stopped). These steps
are left out of
``steps`` and every per-step analysis (docs/analyses.md §1)."""

POOLS = pl.Schema({
    "rank": pl.Int32(),
    "pool": POOL,
    "host": pl.String(),
    "device": pl.Int16(),
})
"""Per rank: its pool (rollout / train / shared), host and device."""

STAGE_RANGES = pl.Schema({
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "stage": STAGE,
    "role": ROLE,
    "name": pl.String(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "depth": pl.Int16(),
    "inferred": pl.Boolean(),
    "confidence": pl.Float32(),
})
"""Every range that has a stage (named by a profile rule, or inferred), possibly nested."""

STAGE_TIMELINE = pl.Schema({
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "stage": STAGE,
    "role": ROLE,
    "name": pl.String(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "inferred": pl.Boolean(),
})
"""Per rank, non-overlapping segments: at each time point the innermost staged range decides
the stage (docs/analyses.md §1). Sorted by rank, start. Gaps are time no range covers."""

COLLECTIVE_INSTANCES = pl.Schema({
    "instance": pl.Int64(),
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "coll": pl.String(),
    "dim": DIM,
    "pg": pl.String(),
    "pg_ranks": pl.String(),
    "group_size": pl.Int32(),
    "bytes": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "stage": STAGE,
    "on_device": pl.Boolean(),
})
"""One row per rank and collective call (NCCL kernel, or host op on CPU-only ranks); rows of one
collective instance across its members share ``instance`` (-1 when it could not be matched)."""

ACTIVITY = pl.Schema({
    "rank": pl.Int32(),
    "device": pl.Int16(),
    "stream": pl.Int32(),
    "kind": pl.String(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "stage": STAGE,
    "step": pl.Int32(),
    "is_collective": pl.Boolean(),
})
"""A rank's device work (docs/analyses.md §1): kernels, copies, memsets — or, for CPU-only
ranks, their outermost host ops — with the stage and step they belong to."""

# --- produced by the analyses --------------------------------------------------------------------

BREAKDOWN = pl.Schema({
    "step": pl.Int32(),
    "rank": pl.Int32(),
    "stage": STAGE,
    "time_ns": pl.Int64(),
    "share": pl.Float64(),
})
"""Per step × rank × stage: time on that rank in that stage, and its share of the step window."""

CRITICAL_PATH = pl.Schema({
    "step": pl.Int32(),
    "rank": pl.Int32(),
    "stage": STAGE,
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
})
"""The chain of stage intervals that sets each step's time (docs/analyses.md §3)."""

BUBBLES = pl.Schema({
    "step": pl.Int32(),
    "rank": pl.Int32(),
    "window_ns": pl.Int64(),
    "busy_ns": pl.Int64(),
    "productive_ns": pl.Int64(),
    "cause": IDLE_CAUSE,
    "idle_ns": pl.Int64(),
})
"""Per step × rank × cause: idle time by cause (docs/analyses.md §4), with the device's window,
busy and productive-busy time repeated on each row."""

LARGEST_BUBBLES = pl.Schema({
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "cause": IDLE_CAUSE,
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
})
"""The longest contiguous runs of one cause on one device."""

DEVICE_STATES = pl.Schema({
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "cause": IDLE_CAUSE,
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
})
"""Every device's step window cut into disjoint runs: productive busy (``cause`` null) or idle
time of one cause (docs/analyses.md §4). Sorted by rank, step, start; the runs tile the window."""

COLLECTIVE_WAITS = pl.Schema({
    "instance": pl.Int64(),
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "dim": DIM,
    "coll": pl.String(),
    "group_size": pl.Int32(),
    "bytes": pl.Int64(),
    "stage": STAGE,
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "arrival_ns": pl.Int64(),
    "wait_ns": pl.Int64(),
    "exposed_ns": pl.Int64(),
})
"""One row per collective row of ``collectives``: when the instance's last member arrived
(its own start when unmatched), the sync wait of docs/analyses.md §4 (the part of
``[start, min(end, arrival))`` no non-collective activity of the rank overlaps) and the exposed
time of §5 (the part of ``[start, end)`` no non-collective activity overlaps)."""

COLLECTIVES_BY_DIM = pl.Schema({
    "dim": DIM,
    "coll": pl.String(),
    "count": pl.Int64(),
    "bytes": pl.Int64(),
    "time_ns": pl.Int64(),
    "exposed_ns": pl.Int64(),
    "wait_ns": pl.Int64(),
    "transfer_ns": pl.Int64(),
    "busbw_gbps": pl.Float64(),
})
"""Per dimension and collective kind (docs/analyses.md §5), summed over ranks."""

WEIGHT_SYNC = pl.Schema({
    "step": pl.Int32(),
    "time_ns": pl.Int64(),
    "bytes": pl.Int64(),
    "bandwidth_gbps": pl.Float64(),
    "share": pl.Float64(),
})
"""Per step: weight-sync time, bytes moved, effective bandwidth, share of the step time."""

EXPOSED_INTERVALS = pl.Schema({
    "rank": pl.Int32(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
})
"""Per rank, disjoint and in time order: the pieces of time some collective runs on it and no
non-collective activity does."""

EXPOSED_COMM = pl.Schema({
    "rank": pl.Int32(),
    "comm_ns": pl.Int64(),
    "exposed_ns": pl.Int64(),
})
"""Per rank: the time some collective runs on it (calls that overlap counted once) and the part
of it no non-collective activity overlaps."""

STRAGGLERS = pl.Schema({
    "rank": pl.Int32(),
    "caused_wait_ns": pl.Int64(),
    "last_arrivals": pl.Int64(),
})
"""Per rank: the total wait it caused others by arriving last at collectives."""

WORKDEPTH = pl.Schema({
    "step": pl.Int32(),
    "work_ns": pl.Int64(),
    "depth_ns": pl.Int64(),
    "parallelism": pl.Float64(),
    "step_ns": pl.Int64(),
    "async_overlap_bound": pl.Float64(),
    "no_tail_step_ns": pl.Int64(),
    "balanced_dp_step_ns": pl.Int64(),
})
"""Per step: W, D, W/D and the what-if bounds of docs/analyses.md §7."""

VIOLATIONS = pl.Schema({
    "id": pl.String(),
    "title": pl.String(),
    "status": pl.String(),
    "severity": pl.String(),
    "value": pl.Float64(),
    "threshold": pl.Float64(),
    "unit": pl.String(),
    "step": pl.Int32(),
    "rank": pl.Int32(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "evidence": pl.String(),
    "recommendation": pl.String(),
    "source": pl.String(),
})
"""One row per guideline evaluated: ``status`` is ``violated``, ``passed`` or ``not_evaluated``
(then ``evidence`` says what is missing: "needs …"); ``severity`` is ``info``/``warn``/``error``
for violations."""

FINDING_CANDIDATES = pl.Schema({
    "id": pl.String(),
    "kind": pl.String(),
    "title": pl.String(),
    "severity": pl.String(),
    "ranks": pl.String(),
    "steps": pl.String(),
    "stage": pl.String(),
    "evidence": pl.String(),
    "saving_ns": pl.Int64(),
    "saving_basis": pl.String(),
    "measured_on": pl.String(),
    "recommendation": pl.String(),
    "confidence": pl.String(),
})
"""One row per problem an analysis found, before ranking: ``id`` is stable (``G3``,
``gpu.host_bound``, ``bubble.rollout_tail``, …) and ``kind`` says which family found it
(``guideline``, ``gpu``, ``bubble``, ``step``, …); ``ranks``/``steps`` are spans as
``model.units.spans`` writes them (empty: all); ``stage`` is a taxonomy stage or empty;
``evidence`` gives the numbers with their definition; ``saving_ns`` is the estimated wall time
saved per step if the problem were fixed (null when it cannot be estimated) and
``saving_basis`` says which bound it comes from, ``measured_on`` whose steps it is measured on
(``trace`` or ``log``); ``severity`` is ``info``/``warn``/``error``,
``confidence`` ``high``/``medium``/``low``."""

FINDINGS = pl.Schema({
    "position": pl.Int32(),
    **FINDING_CANDIDATES,
    "saving_fraction": pl.Float64(),
})
"""The ranked findings every report leads with: the candidates, deduplicated and ordered by
saving (largest first; those without a saving after, by severity), ``position`` from 1;
``saving_fraction`` is ``saving_ns`` over the mean step time of the steps it is measured on
(``measured_on``: the trace's or the log's)."""

EVENT_CHECKS = pl.Schema({
    "rank": pl.Int32(),
    "check": pl.String(),
    "source": pl.UInt32(),
    "label": pl.String(),
    "count": pl.Int64(),
})
"""Per rank, check of the event table (duplicates, overlaps, disorder, …), source and kind of
event: how many rows the check found; in rank order (no rank first), then the checks' report
order, source and kind. The summary ``data_quality`` gathers."""

EVENT_NAMES = pl.Schema({
    "rank": pl.Int32(),
    "source": pl.UInt32(),
    "kind": pl.String(),
    "name": pl.String(),
    "count": pl.Int64(),
})
"""Per rank and source: its rows (``kind`` and ``name`` null), and the rows of each name of the
kinds the data-quality checks look up (``annotation``: host and GPU annotations that are not
collectives; ``log_stage``: log timers); sorted by rank (no rank first), source, kind, name."""

DATA_QUALITY = pl.Schema({
    "file": pl.String(),
    "check": pl.String(),
    "title": pl.String(),
    "count": pl.Int64(),
    "detail": pl.String(),
})
"""One row per file and problem found (what a parser dropped, clamped or repaired, and what the
event table shows: overlaps, disorder, zero durations, events outside the window, clock
corrections, unmapped names, salvage, excluded steps), then one ``total`` row per check;
``check`` is a stable key (``parser:<kind>`` for a parser's tally), ``detail`` says where."""


class Stepping(TypedDict):
    """The ``stepping`` product: how the trace's steps were found, before the ``--steps``
    selection and the exclusion of incomplete steps."""

    rows: pl.DataFrame
    """The staged ranges, each with its step (null when nothing marks steps)."""
    steps: pl.DataFrame
    """The step windows (:data:`STEPS`)."""
    origin: str
    """What marks the steps: ``ProfilerStep``, a step range name, ``rollout waves``, ``log``,
    ``none``."""
    note: str
    """How the trace's steps were renumbered to the log's, or empty."""
    shift: int
    """That renumbering: trace step s is log step s + shift."""


def empty(schema: pl.Schema) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def check(frame: pl.DataFrame, schema: Mapping[str, pl.DataType], what: str) -> pl.DataFrame:
    """Raise when ``frame`` lacks a contract column or has it with another dtype."""
    for name, dtype in schema.items():
        if name not in frame.columns:
            raise ValueError(f"{what}: missing column {name!r}")
        if frame.schema[name] != dtype:
            raise ValueError(f"{what}: column {name!r} is {frame.schema[name]}, expected {dtype}")
    return frame
