"""Data quality: what was wrong with the inputs and what rlperf did about it, per file and in total.

Every number a report shows rests on the event table; this section says how far that table can
be trusted. Three kinds of rows (product ``data_quality``, schema ``frames.DATA_QUALITY``):

* **parser tallies** — what a parser dropped, clamped, de-duplicated or repaired, as counted in
  each source's ``meta["quality"]`` (``ParsedSource.tally``); any key is shown, known keys
  under a friendly title;
* **checks of the event table** — identical rows, negative durations, zero-length GPU work,
  GPU work overlapping on one stream (a stream runs one thing at a time), host ranges on one
  thread that overlap without nesting, GPU work that starts before its launch or before work
  launched earlier on its stream (out of order), events outside the profiler's own window;
* **run level** — clock offsets applied and clocks that could not be aligned, times not on the
  epoch clock, names and log timers no profile rule maps, files cut short (what was kept,
  where the cut is) and the steps left out because a trace does not cover them
  (``incomplete_steps``);
* **contradictions** a file states about itself — ``distributedInfo.world_size`` against the
  size of the default process group it lists, and the role its folder (or ``<role>__`` file-name
  prefix, as verl's per-role profiler folders are flattened) names against the role its
  process names (``ray::WorkerDict.actor_rollout_compute_log_prob``), each read with the
  framework profiles' stage rules. Each is also a warning naming both values.

Zero-length host rows are not counted: profilers round sub-microsecond operators to 0 and
instants are zero-length by design. A clean run has no rows; the section then says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import polars as pl

from parsers.discover import format_traits
from parsers.events import GPU_ACTIVITY_KINDS
from parsers.source import CORRELATION_PER_PROCESS
from taxonomy import profiles as tp
from taxonomy.pipeline_phases import phase_of

from ..assemble.runs import folder_role, profiler_window_ns, role_place
from ..classify.steps import exclusion, name_classes, trace_ends
from ..model import frames
from ..model.products import provides
from ..model.query import collect
from ..model.run import SourceInfo
from ..model.units import duration

if TYPE_CHECKING:
    pass

@dataclass(frozen=True)
class Inputs:
    """The products the checks read (those :func:`data_quality` declares)."""

    event_checks: pl.DataFrame
    event_names: pl.DataFrame
    sources: list[SourceInfo]
    aligned: pl.DataFrame
    clock: pl.DataFrame
    pools: pl.DataFrame
    incomplete_steps: pl.DataFrame
    step_table: pl.DataFrame
    profile: dict[str, Any]
    log_unclassified: pl.DataFrame


CONTRADICTIONS = ("world_size_mismatch", "role_mismatch")
"""Checks whose finding is also a warning: what a file says about itself does not agree."""
TOTAL = "(all files)"
"""The ``file`` of the total rows."""
HOST_KINDS = ("cpu_op", "annotation", "runtime", "python")
"""Host rows that nest on their thread."""
EXAMPLES = 3
"""How many names or kinds a detail cell lists."""
RESOLUTION_NS = 1_000
"""Overlaps and disorder up to this are timer resolution (Kineto writes microseconds, and a
child operator is seen to end a few hundred ns after its parent), not counted."""

TITLES: dict[str, str] = {
    "duplicate": "duplicated events (identical rows)",
    "negative_duration": "negative durations (end before start)",
    "zero_duration": "zero-length GPU activity",
    "overlap_stream": "GPU activity overlapping on one stream",
    "overlap_thread": "host ranges on one thread overlapping without nesting",
    "started_before_launch": "out of order: GPU activity starting before its launch",
    "stream_order": "out of order: GPU activity before work launched earlier on its stream",
    "outside_window": "events outside the profiler's window",
    "skipped_categories": "event categories dropped (unknown to the parser)",
    "clock_offset": "rank times shifted to align the clocks",
    "clock_unaligned": "rank clock not aligned (no matched collectives)",
    "clock_time_base": "times not on the epoch clock",
    "unmapped_names": "annotation names no profile rule maps",
    "unmapped_timers": "log timers no profile rule maps",
    "world_size_mismatch": "contradiction: world_size is not the default group's size",
    "role_mismatch": "contradiction: the folder (or verl's role__ file-name prefix) names one "
                     "role, the trace's process another",
    "salvaged": "file cut short: complete events kept",
    "excluded_steps": "incomplete steps excluded from per-step analyses",
}
"""Title of every check this module computes, in report order."""
PARSER_TITLES: dict[str, str] = {
    "clamped_ts": "timestamps clamped to the valid range",
    "clamped_dur": "durations clamped to the valid range",
    "clamped_depth": "nesting depths clamped",
    "clamped_stream": "stream ids out of range (set to -1)",
    "negative_dur": "negative durations (set to 0 or dropped)",
    "zero_dur": "events of zero duration",
    "negative_bytes": "negative byte counts (left empty)",
    "dropped_out_of_range": "events dropped: values out of range",
    "dropped_cut_row": "rows dropped: cut mid-row",
    "unreadable_arg": "event arguments that could not be read",
    "wrong_type_cells": "cells of the wrong type (left empty)",
    "undecodable_text": "text that could not be decoded",
    "unusable_time_base": "time base unusable",
    "unreadable_metadata": "metadata that could not be read",
}
"""Friendly titles of parser tallies whose key is known; others are titled from the key."""
_PREFIXES = (("dropped_", "dropped"), ("clamped_", "clamped"), ("dedup_", "de-duplicated"),
             ("duplicate_", "de-duplicated"), ("repaired_", "repaired"), ("skipped_", "skipped"),
             ("out_of_range_", "out of range"))
_NOT_EPOCH = ("synthetic", "relative", "unknown", "none", "quarter")
"""``time_base`` words of a trace whose times are not epoch times as recorded."""

Per = pl.DataFrame
"""A check's result: ``source`` (UInt32), ``count`` (Int64), ``detail`` (String)."""


def parser_title(key: str) -> str:
    """The title of a parser tally key."""
    if key in PARSER_TITLES:
        return PARSER_TITLES[key]
    for prefix, verb in _PREFIXES:
        if key.startswith(prefix):
            return f"{verb}: {key.removeprefix(prefix).replace('_', ' ')}"
    return key.replace("_", " ")


# --- checks of the event table -------------------------------------------------------------------


def _per_source(rows: pl.DataFrame, label: str = "kind") -> Per:
    """Rows found by a check → per source, their count and the commonest ``label`` values."""
    if rows.height == 0:
        return _empty()
    return _from_counts(
        rows.group_by("source", pl.col(label).cast(pl.String).alias("_l")).len()
    )


def _from_counts(counts: pl.DataFrame) -> Per:
    """``source``, ``_l`` (a label), ``len`` (rows of it) → :data:`Per`."""
    if counts.height == 0:
        return _empty()
    counted = counts.sort(["source", "len", "_l"], descending=[False, True, False])
    return counted.group_by("source", maintain_order=True).agg(
        pl.col("len").sum().cast(pl.Int64).alias("count"),
        pl.format("{} {}", pl.col("len"), pl.col("_l"))
        .head(EXAMPLES)
        .str.join(", ")
        .alias("detail"),
    )


def _empty() -> Per:
    return pl.DataFrame(schema={"source": pl.UInt32, "count": pl.Int64, "detail": pl.String})


FOUND = ("rank", "source", "kind")
"""What a check of the event table keeps of each row it finds."""


def _found(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.select(FOUND)


def duplicates(events: pl.DataFrame) -> pl.DataFrame:
    """Rows identical to an earlier one in every recorded column (the analyses would count them
    twice); ``depth`` is derived, and of two identical ranges one is nested in the other.
    Only rows whose start repeats can be such a copy: the whole rows are compared among those
    few, not hashed for every event."""
    candidates = events.filter(pl.col("start_ns").is_duplicated())
    return _found(candidates.filter(~pl.struct(pl.exclude("depth")).is_first_distinct()))


def negative_durations(events: pl.DataFrame) -> pl.DataFrame:
    return _found(events.filter(pl.col("end_ns") < pl.col("start_ns")))


def zero_durations(events: pl.DataFrame) -> pl.DataFrame:
    """GPU work of no length (host rows of no length are instants or rounding)."""
    gpu = pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS))
    return _found(events.filter(gpu & (pl.col("end_ns") == pl.col("start_ns"))))


def stream_overlaps(events: pl.DataFrame) -> pl.DataFrame:
    """GPU rows that overlap another row of their stream: a stream runs its work one after the
    other, so an overlap is a recording error (or concurrent graph branches reported on one
    stream). A row overlaps a later one exactly when the next start is before its end."""
    keys = ["source", "pid", "device", "stream"]
    gpu = events.lazy().select("rank", *keys, "kind", "start_ns", "end_ns").filter(
        pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS))
        & (pl.col("stream") >= 0)
        & (pl.col("end_ns") > pl.col("start_ns"))
    ).sort([*keys, "start_ns", "end_ns"], maintain_order=True).pipe(collect)
    before = pl.col("start_ns") < pl.col("end_ns").cum_max().shift(1).over(keys) - RESOLUTION_NS
    after = pl.col("end_ns") - RESOLUTION_NS > pl.col("start_ns").shift(-1).over(keys)
    return _found(gpu.filter(before.fill_null(False) | after.fill_null(False)))


def thread_crossings(events: pl.DataFrame) -> pl.DataFrame:
    """Host ranges that end after the range enclosing their start, on one thread (ranges of a
    thread form a stack; a crossing one breaks every stage and depth rule built on it). The
    enclosing range is the last one before it, in (start, longest first) order, one level
    shallower (:func:`thread_depth`)."""
    keys = ["source", "pid", "tid"]
    host = collect(events.lazy().select("rank", *keys, "kind", "start_ns", "end_ns").filter(
        pl.col("kind").is_in(list(HOST_KINDS))
        & (pl.col("tid") >= 0)
        & (pl.col("end_ns") > pl.col("start_ns"))
    ))
    if host.height == 0:
        return _found(host)
    ordered = host.sort(
        [*keys, "start_ns", "end_ns"], descending=[False] * 4 + [True], maintain_order=True
    ).with_columns(pl.struct(keys).rle_id().cast(pl.Int64).alias("_g")).with_row_index("_order")
    ordered = ordered.with_columns(thread_depth(ordered))
    parents = ordered.select(
        "_g", "_order", (pl.col("depth") + 1).alias("depth"), pl.col("end_ns").alias("_parent_end")
    )
    linked = ordered.filter(pl.col("depth") > 0).join_asof(
        parents,
        on="_order",
        by=["_g", "depth"],
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    return _found(linked.filter(pl.col("end_ns") > pl.col("_parent_end") + RESOLUTION_NS))


def thread_depth(ordered: pl.DataFrame) -> pl.Series:
    """How many ranges of its thread are open as each range starts (``parsers.events
    .nesting_depth``'s depth of ranges none of which is empty), for rows in thread (``_g``),
    start and longest-first order: the ranges before it in that order less those that ended
    by its start, which one binary search of the thread's sorted ends counts. Thread and time
    are one sort key: the thread's number times the count of distinct times, plus the time's
    rank among them (a key that cannot overflow, where raw nanoseconds times threads could)."""
    n = ordered.height
    ranks = pl.concat([ordered["start_ns"], ordered["end_ns"]]).rank("dense").cast(pl.Int64)
    thread = ordered["_g"] * (2 * n + 1)
    ended = (thread + ranks.tail(n)).sort().search_sorted(thread + ranks.head(n), side="right")
    return (ordered["_order"].cast(pl.Int64) - ended.cast(pl.Int64)).cast(pl.Int32).alias("depth")


def _launch_pid(formats: dict[int, str]) -> pl.Expr:
    """Correlation ids are per process where the format says so (nsys reports of several
    processes), per file elsewhere."""
    by_pid = [s for s, f in formats.items() if CORRELATION_PER_PROCESS in format_traits(f)]
    return pl.when(pl.col("source").is_in(by_pid)).then(pl.col("pid")).otherwise(-1).alias("_lp")


def before_launch(events: pl.DataFrame, formats: dict[int, str]) -> pl.DataFrame:
    """GPU rows that start before the runtime call that launched them starts: host and device
    clocks disagree."""
    launches = events.filter((pl.col("kind") == "runtime") & pl.col("corr").is_not_null()).select(
        "source", "corr", _launch_pid(formats), pl.col("start_ns").alias("_launch")
    ).unique(["source", "corr", "_lp"], keep="first")
    gpu = events.lazy().select("rank", "source", "pid", "kind", "corr", "start_ns").filter(
        pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & pl.col("corr").is_not_null()
    ).with_columns(_launch_pid(formats)).pipe(collect)
    linked = gpu.join(launches, on=["source", "corr", "_lp"])
    return _found(linked.filter(pl.col("start_ns") < pl.col("_launch") - RESOLUTION_NS))


def stream_disorder(events: pl.DataFrame) -> pl.DataFrame:
    """GPU rows that run before a row launched earlier on their stream (correlation ids grow
    with launch order, and a stream runs in launch order)."""
    keys = ["source", "pid", "device", "stream"]
    gpu = events.lazy().select("rank", *keys, "kind", "start_ns", "corr").filter(
        pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS))
        & (pl.col("stream") >= 0)
        & pl.col("corr").is_not_null()
    ).sort([*keys, "start_ns", "corr"], maintain_order=True).pipe(collect)
    return _found(
        gpu.filter((pl.col("corr") < pl.col("corr").cum_max().shift(1).over(keys)).fill_null(False))
    )


def outside_window(events: pl.DataFrame, sources: list[Any]) -> pl.DataFrame:
    """Rows beyond the window the profiler states it recorded (Kineto's ``Trace`` span)."""
    windows = [(s.index, *w) for s in sources if (w := profiler_window_ns(s.meta)) is not None]
    if not windows:
        return _found(events.clear())
    frame = pl.DataFrame(
        windows, schema={"source": pl.UInt32, "_lo": pl.Int64, "_hi": pl.Int64}, orient="row"
    )
    rows = events.select("rank", "source", "kind", "start_ns", "end_ns").join(
        frame, on="source"
    ).filter((pl.col("start_ns") < pl.col("_lo")) | (pl.col("end_ns") > pl.col("_hi")))
    return _found(rows)


# --- run-level checks
# ------------------------------------------------------------------------------


def _rank_sources(q: Inputs) -> pl.DataFrame:
    """``rank`` → the first source holding its rows."""
    held = q.event_names.filter(pl.col("rank") >= 0)
    return held.group_by("rank").agg(pl.col("source").min())


def clock_offsets(q: Inputs) -> Per:
    clock = q.clock.filter(pl.col("offset_ns") != 0).join(_rank_sources(q), on="rank")
    if clock.height == 0:
        return _empty()
    return _details(
        clock,
        lambda r: (
            f"rank {r['rank']}: {duration(r['offset_ns'])} ± {duration(r['uncertainty_ns'])} "
            f"from {r['matched']} matched collectives"
        ),
    )


def clock_unaligned(q: Inputs) -> Per:
    """Ranks whose clock could not be checked against the others', where that matters: ranks
    of one capture, or all on one host, share one clock."""
    sources = _rank_sources(q)
    hosts = q.pools["host"].drop_nulls().unique()
    if sources["source"].n_unique() < 2 or (hosts.len() == 1 and q.pools["host"].null_count() == 0):
        return _empty()
    clock = q.clock.filter(~pl.col("aligned")).join(sources, on="rank")
    return _details(clock, lambda r: f"rank {r['rank']}: times taken as recorded")


def time_bases(q: Inputs) -> Per:
    rows = [
        (s.index, 1, f"time base: {s.meta['time_base']}")
        for s in q.sources
        if s.meta.get("role") != "log"
        and any(w in str(s.meta.get("time_base", "")).lower() for w in _NOT_EPOCH)
    ]
    return _frame(rows)


def skipped_categories(q: Inputs) -> Per:
    rows = [
        (
            s.index,
            len(cats),
            ", ".join(map(str, cats[:EXAMPLES])) + (" …" if len(cats) > EXAMPLES else ""),
        )
        for s in q.sources
        if (cats := list(s.meta.get("skipped_categories") or []))
    ]
    return _frame(rows)


def unmapped_names(q: Inputs) -> tuple[Per, int]:
    """Annotation names (collective ranges aside) that no rule of the run's profile maps and that
    are no pipeline chunk (``taxonomy/pipeline_phases.toml`` knows those)."""
    ann = q.event_names.filter(pl.col("kind") == "annotation").select("source", "name", "count")
    if ann.height == 0:
        return _empty(), 0
    classes = name_classes(q.profile, ann["name"].unique(), "trace")
    chunks = phase_of(ann["name"]).filter(pl.col("phase").is_not_null()).select("name")
    unknown = classes.filter(pl.col("relation") == "unknown").select("name").join(
        chunks, on="name", how="anti"
    )
    rows = ann.join(unknown, on="name")
    return _names(rows), rows["name"].n_unique()


def unmapped_timers(q: Inputs) -> tuple[Per, int]:
    """Log timers no rule claims (the log analysis lists them as ``log_unclassified``)."""
    names = q.log_unclassified.select("name")
    rows = (
        q.event_names.filter(pl.col("kind") == "log_stage")
        .select("source", "name", "count")
        .join(names, on="name")
    )
    return _names(rows), rows["name"].n_unique()


def world_size_mismatch(q: Inputs) -> Per:
    """Files whose ``world_size`` differs from the size of the default group they list: one of
    the two is wrong, so neither is used as the run's size without saying so."""
    rows = [
        (s.index, 1, f"distributedInfo world_size {s.meta['world_size']}, default group "
         f"{group['pg_desc'] or group['pg_name']!r} has {size} ranks ({group['ranks']})")
        for s in q.sources
        if isinstance(s.meta.get("world_size"), int)
        and (group := default_group(s.meta)) is not None
        and (size := group_size(group)) is not None
        and size != s.meta["world_size"]
    ]
    return _frame(rows)


def default_group(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The ``pg_config`` entry of the default (world) group: described ``default_pg``, else
    named ``0``."""
    groups = [g for g in meta.get("pg_config") or [] if isinstance(g, dict)]
    return next((g for g in groups if g.get("pg_desc") == "default_pg"),
                next((g for g in groups if str(g.get("pg_name")) == "0"), None))


def group_size(group: dict[str, Any]) -> int | None:
    """The group's stated size, else how many ranks it lists."""
    if isinstance(group.get("pg_size"), int) and group["pg_size"] > 0:
        return int(group["pg_size"])
    ranks = [r for r in str(group.get("ranks") or "").split(",") if r.strip()]
    return len(ranks) or None


def role_mismatch(q: Inputs) -> Per:
    """Files whose folder names one stage and whose process names another (a file copied into
    the wrong role's folder: every stage time read from it lands on the wrong stage). The
    files of one folder and process names are classified once (a run's ranks share them: 64
    files were 64 × 12 profile classifications, 1.7 s)."""
    rows = []
    known: dict[tuple[str, ...], dict[str, str] | None] = {}
    for s in q.sources:
        processes = [str(n) for n in s.meta.get("process_names") or []]
        label = folder_role(s.path)
        key = (label, *processes)
        if processes and label and key not in known:
            known[key] = _stages(list(key), q.profile)
        stages = known.get(key)
        if stages is None:
            continue
        said = {p: stages[p] for p in processes if p in stages}
        if label in stages and said and stages[label] not in said.values():
            names = ", ".join(f"{p} (stage {st})" for p, st in said.items())
            rows.append((s.index, 1, f"{role_place(s.path)} names {label} (stage "
                         f"{stages[label]}), the process "
                         f"names {names}"))
    return _frame(rows)


def _stages(names: list[str], profile: dict[str, Any]) -> dict[str, str] | None:
    """``name`` → stage under the first profile (the run's, then the others) that gives the
    first name and another a stage; None when none does."""
    profiles = profile["profiles"]
    order = [profile["profile"], *(p for n, p in profiles.items() if n != profile["name"])]
    for candidate in order:
        classes = tp.classify(names, "trace", candidate, profiles=profiles).filter(
            pl.col("relation") == "stage"
        )
        stage = dict(zip(classes["name"].to_list(), classes["stage"].cast(pl.String).to_list(),
                         strict=True))
        if names[0] in stage and len(stage) > 1:
            return stage
    return None


def contradiction_warnings(checks: dict[str, tuple[Per, int | None]],
                           sources: list[SourceInfo]) -> list[str]:
    """One warning per contradiction found, naming the file and both values."""
    return [
        f"{sources[int(source)].path.name}: {TITLES[key].removeprefix('contradiction: ')}: "
        f"{detail}"
        for key in CONTRADICTIONS
        for source, detail in checks[key][0].select("source", "detail").iter_rows()
    ]


def _names(rows: pl.DataFrame) -> Per:
    """Per source: how many distinct names, the commonest few (``count``: rows of each)."""
    if rows.height == 0:
        return _empty()
    counted = (
        rows.group_by("source", "name")
        .agg(pl.col("count").sum().alias("len"))
        .sort(["source", "len", "name"], descending=[False, True, False])
    )
    return counted.group_by("source", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("count"),
        (pl.col("name").head(EXAMPLES).str.join(", ")
         + pl.when(pl.len() > EXAMPLES).then(pl.lit(" …")).otherwise(pl.lit(""))).alias("detail"),
    )


def salvaged(q: Inputs) -> Per:
    """Files cut short: what was kept, where the data ends, which step the cut falls in."""
    cut = [s for s in q.sources if s.meta.get("salvaged")]
    if not cut:
        return _empty()
    ends = (
        trace_ends(q.aligned, [s.index for s in cut])
        .group_by("source")
        .agg(pl.col("trace_end_ns").min())
    )
    starts = q.aligned.group_by("source").agg(pl.col("start_ns").min(), pl.len().alias("kept"))
    first = (
        q.incomplete_steps.filter(pl.col("reason") == "cut")
        .group_by("source")
        .agg(pl.col("step").min())
    )
    facts = (
        pl.DataFrame({"source": [s.index for s in cut]}, schema={"source": pl.UInt32})
        .join(starts, on="source", how="left")
        .join(ends, on="source", how="left")
        .join(first, on="source", how="left")
        .with_columns(pl.col("kept").fill_null(0))
    )
    meta = {s.index: s.meta["salvaged"] for s in cut}
    stepped = _has_steps(q)
    return _details(facts, lambda r: _salvage_text(meta[r["source"]], r, stepped), count="kept")


def _has_steps(q: Inputs) -> bool:
    return q.step_table.height > 0


def _salvage_text(kept: Any, row: dict[str, Any], stepped: bool) -> str:
    if isinstance(kept, dict) and "bytes_lost" in kept:
        what = f"the last {int(kept['bytes_lost']):,} bytes lost"
    elif isinstance(kept, dict) and "gzip_bytes_read" in kept:
        what = (
            f"the gzip stream ends after {int(kept['gzip_bytes_read']):,} compressed bytes "
            f"({int(kept['json_bytes_read']):,} bytes of JSON read): the rest of the trace "
            "lost, its size unknown"
        )
    elif isinstance(kept, float):
        what = f"the first {kept:.1%} of the file kept"
    else:
        what = f"salvaged: {kept}"
    if row["trace_end_ns"] is None or row["start_ns"] is None:
        return what
    where = (
        f"complete data ends {duration(row['trace_end_ns'] - row['start_ns'])} "
        "after the trace's start"
    )
    step = (
        f"inside step {row['step']}, which is excluded"
        if row["step"] is not None
        else "after the last step (no step excluded)"
        if stepped
        else "no step found in what was kept"
    )
    return f"{what}; {where}, {step}"


def excluded_steps(q: Inputs) -> tuple[Per, int]:
    found = q.incomplete_steps
    if found.height == 0:
        return _empty(), 0
    per = found.group_by("source", "reason", maintain_order=True).agg(
        pl.col("step").unique().sort()
    )
    rows = [
        (r["source"], len(r["step"]), exclusion(r["reason"], r["step"]))
        for r in per.iter_rows(named=True)
    ]
    merged = (
        _frame(rows)
        .group_by("source", maintain_order=True)
        .agg(pl.col("count").sum(), pl.col("detail").str.join("; "))
    )
    return merged, found["step"].n_unique()


def parser_tallies(q: Inputs) -> pl.DataFrame:
    """``meta["quality"]`` of every source as rows ``source, check, title, count, detail``."""
    rows = [
        (s.index, f"parser:{k}", parser_title(str(k)), int(v), "counted by the parser")
        for s in q.sources
        for k, v in sorted((s.meta.get("quality") or {}).items())
        if _count(v)
    ]
    return pl.DataFrame(rows, schema={"source": pl.UInt32, "check": pl.String, "title": pl.String,
                                      "count": pl.Int64, "detail": pl.String}, orient="row")


def _count(value: Any) -> bool:
    try:
        return int(value) != 0
    except (TypeError, ValueError, OverflowError):
        return False


def _frame(rows: list[tuple[int, int, str]]) -> Per:
    return (
        pl.DataFrame(
            rows, schema={"source": pl.UInt32, "count": pl.Int64, "detail": pl.String}, orient="row"
        )
        if rows
        else _empty()
    )


def _details(
    facts: pl.DataFrame, text: Callable[[dict[str, Any]], str], count: str | None = None
) -> Per:
    """One detail line per fact row (a few rows: ranks or files), joined per source in the order
    of source, rank and step (a join's row order changes from run to run)."""
    keys = [c for c in ("rank", "step") if c in facts.columns]

    def order(r: dict[str, Any]) -> tuple:
        return (r["source"], *((r[k] is not None, r[k]) for k in keys), text(r))

    rows = [
        (r["source"], int(r[count]) if count else 1, text(r))
        for r in sorted(facts.iter_rows(named=True), key=order)
    ]
    return (
        _frame(rows)
        .group_by("source", maintain_order=True)
        .agg(pl.col("count").sum(), pl.col("detail").str.join("; "))
    )


# --- the product and the section
# -------------------------------------------------------------------


EVENT_CHECKS: dict[str, Callable[[pl.DataFrame, list[SourceInfo]], pl.DataFrame]] = {
    "duplicate": lambda events, _: duplicates(events),
    "negative_duration": lambda events, _: negative_durations(events),
    "zero_duration": lambda events, _: zero_durations(events),
    "overlap_stream": lambda events, _: stream_overlaps(events),
    "overlap_thread": lambda events, _: thread_crossings(events),
    "started_before_launch": lambda events, sources: before_launch(
        events, {s.index: s.format for s in sources}),
    "stream_order": lambda events, _: stream_disorder(events),
    "outside_window": outside_window,
}
"""The checks of the event table, each giving the rows it finds. Each reads one row, or the rows
of one stream, thread or process, or a launch and the GPU work it launched: all of one rank,
so they run rank by rank (``event_checks``)."""


def check_events(events: pl.DataFrame, sources: list[SourceInfo]) -> pl.DataFrame:
    """EVENT_CHECKS of ``events``."""
    order = {k: i for i, k in enumerate(EVENT_CHECKS)}
    found = [
        check(events, sources)
        .group_by("rank", "source", pl.col("kind").cast(pl.String).alias("label"))
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .with_columns(pl.lit(key).alias("check"), pl.lit(order[key]).alias("_order"))
        for key, check in EVENT_CHECKS.items()
    ]
    out = pl.concat(found).sort("rank", "_order", "source", "label")
    return out.select(pl.col(name).cast(dtype) for name, dtype in frames.EVENT_CHECKS.items())


def _event_check(found: pl.DataFrame, key: str) -> Per:
    """One check's per-source rows, gathered from every rank's counts."""
    mine = found.filter(pl.col("check") == key)
    return _from_counts(
        mine.group_by("source", pl.col("label").alias("_l")).agg(pl.col("count").sum().alias("len"))
    )


def _checks(q: Inputs) -> dict[str, tuple[Per, int | None]]:
    """Every computed check: per-source rows and, where a plain sum would count one thing
    twice (a name in several files, a step excluded by several traces), the total."""
    plain: dict[str, Callable[[], Per]] = {
        **{key: partial(_event_check, q.event_checks, key) for key in EVENT_CHECKS},
        "skipped_categories": lambda: skipped_categories(q),
        "clock_offset": lambda: clock_offsets(q),
        "clock_unaligned": lambda: clock_unaligned(q),
        "clock_time_base": lambda: time_bases(q),
        "salvaged": lambda: salvaged(q),
        "world_size_mismatch": lambda: world_size_mismatch(q),
        "role_mismatch": lambda: role_mismatch(q),
    }
    out: dict[str, tuple[Per, int | None]] = {k: (f(), None) for k, f in plain.items()}
    out["unmapped_names"] = unmapped_names(q)
    out["unmapped_timers"] = unmapped_timers(q)
    out["excluded_steps"] = excluded_steps(q)
    return {k: out[k] for k in TITLES}


def compute(q: Inputs, warnings: list[str] | None = None) -> pl.DataFrame:
    """DATA_QUALITY: per file (in source order) the parser's tallies, then the checks; then one
    total row per check found. The contradictions are also added to ``warnings``."""
    checks = _checks(q)
    if warnings is not None:
        warnings.extend(contradiction_warnings(checks, q.sources))
    computed = [per.with_columns(pl.lit(key).alias("check"), pl.lit(TITLES[key]).alias("title"))
                for key, (per, _) in checks.items() if per.height]
    found = pl.concat(
        [
            parser_tallies(q),
            *(c.select("source", "check", "title", "count", "detail") for c in computed),
        ]
    )
    if found.height == 0:
        return frames.empty(frames.DATA_QUALITY)
    order = {k: i for i, k in enumerate(TITLES)}
    found = found.with_columns(
        pl.col("check").replace_strict(order, default=-1, return_dtype=pl.Int32).alias("_order"))
    names = pl.DataFrame(
        {"source": [s.index for s in q.sources], "file": [s.path.name for s in q.sources]},
        schema={"source": pl.UInt32, "file": pl.String},
    )
    per_file = found.join(names, on="source").sort("source", "_order", "check")
    distinct = {k: t for k, (_, t) in checks.items() if t is not None}
    totals = (
        per_file.group_by("check", "title", "_order")
        .agg(pl.col("count").sum(), pl.col("source").n_unique().alias("_files"))
        .with_columns(
            pl.col("check")
            .replace_strict(distinct, default=None, return_dtype=pl.Int64)
            .fill_null(pl.col("count"))
            .alias("count"),
            pl.lit(TOTAL).alias("file"),
            pl.format("in {} file{}", pl.col("_files"),
                      pl.when(pl.col("_files") == 1).then(pl.lit("")).otherwise(pl.lit("s")))
            .alias("detail"),
        )
        .sort("_order", "check")
    )
    cols = list(frames.DATA_QUALITY)
    return pl.concat([per_file.select(cols), totals.select(cols)]).cast(frames.DATA_QUALITY)


NAMED_KINDS = {"annotation": ("annotation", "gpu_annotation"), "log_stage": ("log_stage",)}
"""The names the checks look up, by the kind they are counted under: annotations (collective
ranges aside) and log timers."""


def name_events(events: pl.DataFrame) -> pl.DataFrame:
    """EVENT_NAMES of ``events``."""
    kinds = {k: label for label, ks in NAMED_KINDS.items() for k in ks}
    count = pl.len().cast(pl.Int64).alias("count")
    named = events.lazy().filter(
        pl.col("kind").is_in(list(kinds)) & pl.col("coll").is_null()
    ).group_by(
        "rank", "source", pl.col("kind").cast(pl.String).replace_strict(kinds).alias("kind"),
        pl.col("name").cast(pl.String),
    ).agg(count)
    held = events.lazy().group_by("rank", "source").agg(count).with_columns(
        *(pl.lit(None, pl.String).alias(c) for c in ("kind", "name"))
    )
    out = pl.concat([held, named], how="diagonal").sort("rank", "source", "kind", "name")
    return collect(out).select(
        pl.col(name).cast(dtype) for name, dtype in frames.EVENT_NAMES.items()
    )


@provides("event_names", schema=frames.EVENT_NAMES, per_rank=True, every_rank=True)
def event_names(events: pl.DataFrame) -> pl.DataFrame:
    return name_events(events)


@provides("event_checks", schema=frames.EVENT_CHECKS, per_rank=True, every_rank=True)
def event_checks(events: pl.DataFrame, sources: list[SourceInfo]) -> pl.DataFrame:
    return check_events(events, sources)


@provides("data_quality", schema=frames.DATA_QUALITY)
def data_quality(
    event_checks: pl.DataFrame,
    event_names: pl.DataFrame,
    sources: list[SourceInfo],
    aligned: pl.DataFrame,
    clock: pl.DataFrame,
    pools: pl.DataFrame,
    incomplete_steps: pl.DataFrame,
    step_table: pl.DataFrame,
    profile: dict[str, Any],
    log_unclassified: pl.DataFrame,
    warnings: list[str],
) -> pl.DataFrame:
    return compute(
        Inputs(
            event_checks,
            event_names,
            sources,
            aligned,
            clock,
            pools,
            incomplete_steps,
            step_table,
            profile,
            log_unclassified,
        ),
        warnings,
    )


