"""Classification: the stage and role of every range, of the GPU work launched inside it, the
dimension of every collective, the pool of every rank.

Products (schemas in ``analyzer/frames.py``):

* ``profile`` — the framework profile detected from the run's names (or named with
  ``--framework``), the version assumed and why; ``--rules`` puts a user's rules first.
* ``ranges`` — every annotation range on the aligned clock with its class (stage, role,
  relation), plus the ranges :mod:`analyzer.infer` infers on ranks without stage annotations.
* ``stage_ranges`` — the ranges that name a stage, with their step. Composite timers (OpenRLHF
  ``make_experience``: several stages, not split) are not stage ranges; the generic fallback's
  ranges (``Optimizer.step#…``) count only where no framework range encloses them.
* ``stage_timeline`` — per rank, disjoint segments: at each time the innermost staged range
  decides (docs/analyses.md §1).
* ``pools`` — rollout / train / shared per rank, from the stages it runs.
* ``classified`` — the event table plus ``stage, role, dim, pool, inferred, confidence`` and
  ``step`` filled: GPU work takes the stage of the timeline segment at its launch (correlation
  → runtime call on the launching thread), else of the device's ``gpu_user_annotation``, else
  of its own start.
* ``collectives`` — one row per rank and collective call, matched into instances, with the
  dimension: process-group description, else pool-spanning group → ``weight_sync``, else rank
  layout, else kernel-name and pattern rules (``taxonomy/collectives.toml``).
* ``activity`` — a rank's device work (or, on CPU-only ranks, its outermost host ops and host
  collective calls) with stage and step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from parsers.discover import format_traits
from parsers.events import GPU_ACTIVITY_KINDS, nesting_depth
from parsers.source import CORRELATION_PER_PROCESS
from taxonomy import collectives as tc
from taxonomy import profiles as tp
from taxonomy.vocab import DIM, POOL, ROLE, STAGE, TRAINER_STAGES

from . import frames, intervals
from .assemble import fill_groups, pg_config
from .infer import infer_ranges
from .options import Options
from .products import provides
from .run import SourceInfo
from .steps import is_staged, name_classes, select_steps, staged

RANGE_KINDS = ("annotation",)
PATTERN_FIRST = ("send", "recv", "send_recv", "all_to_all")
"""Collective kinds whose pattern rules outrank a rank pattern read without layout degrees."""
RANGES_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(), "source": pl.UInt32(), "pid": pl.Int64(), "tid": pl.Int64(), "name": pl.String(),
    "start_ns": pl.Int64(), "end_ns": pl.Int64(), "stage": STAGE, "role": ROLE, "relation": tp.RELATION,
    "composite": pl.Boolean(), "weak": pl.Boolean(), "inferred": pl.Boolean(), "confidence": pl.Float32(),
}


# --- profile and name classes ------------------------------------------------------------------


@provides("profile")
def detect_profile(events: pl.DataFrame, sources: list[SourceInfo], options: Options) -> dict[str, Any]:
    """The profile of the run: ``--framework`` if given, else a parser's ``framework``, else the
    one whose detection patterns match the most names."""
    names = events.filter(pl.col("kind").is_in(["annotation", "gpu_annotation", "log_stage"]))["name"].cast(pl.String).unique()
    framework = options.framework
    profiles = tp.load_profiles(options.rules)
    if framework and not any(framework == p.name or framework in p.frameworks for p in profiles.values()):
        raise tp.ProfileError(f"--framework {framework}: no such profile ({', '.join(sorted(profiles))})")
    meta = next((s.meta for s in sources if s.meta.get("framework")), {})
    detection = tp.detect(names, meta=meta, profiles=profiles, framework=framework)
    return {
        "profile": detection.profile, "name": detection.profile.name, "title": detection.profile.title,
        "version": detection.version, "reason": detection.reason, "scores": dict(detection.scores),
        "detection": detection, "profiles": profiles,
    }


# --- ranges, steps, stage ranges, timeline -------------------------------------------------------


@provides("ranges")
def all_ranges(aligned: pl.DataFrame, profile: dict[str, Any]) -> pl.DataFrame:
    """Annotation ranges with their class; inferred ranges for ranks without stage annotations."""
    ev = aligned.filter(pl.col("kind").is_in(list(RANGE_KINDS)) & (pl.col("end_ns") > pl.col("start_ns")))
    ranges = _with_classes(profile, ev.select("rank", "source", "pid", "tid", "name", "start_ns", "end_ns"))
    named = ranges.filter(is_staged() & ~pl.col("weak"))
    workers = set(aligned.filter(pl.col("rank") >= 0)["rank"].unique().to_list())
    needs = sorted(workers - set(named["rank"].unique().to_list()))
    if needs:
        inferred = infer_ranges(aligned.filter(pl.col("rank").is_in(needs)))
        if inferred.height:
            inferred = inferred.with_columns(
                pl.lit(None, pl.UInt32).alias("source"), pl.lit(-1, pl.Int64).alias("pid"), pl.lit(-1, pl.Int64).alias("tid"),
                pl.lit("stage").alias("relation"), pl.lit(False).alias("composite"), pl.lit(False).alias("weak"),
                pl.lit(True).alias("inferred"),
            )
            ranges = pl.concat([ranges.cast(RANGES_SCHEMA), inferred.select(list(RANGES_SCHEMA)).cast(RANGES_SCHEMA)])
    return ranges.select(list(RANGES_SCHEMA)).cast(RANGES_SCHEMA)


def _with_classes(profile: dict[str, Any], ev: pl.DataFrame) -> pl.DataFrame:
    """Named rows with the class of their name: stage, role, relation, ``composite`` (one timer
    over several stages), ``weak`` (named by the generic fallback only), not inferred."""
    classes = name_classes(profile, ev["name"].cast(pl.String).unique(), "trace").select(
        "name", "stage", "role", "relation", "rule", (pl.col("covers").list.len().fill_null(0) > 1).alias("composite"))
    return ev.with_columns(pl.col("name").cast(pl.String)).join(classes, on="name", how="left").with_columns(
        pl.col("rule").fill_null("").str.starts_with(tp.GENERIC + ":").alias("weak"),
        pl.lit(False).alias("inferred"),
        pl.lit(1.0, pl.Float32).alias("confidence"),
    ).drop("rule")


@provides("stage_ranges", schema=frames.STAGE_RANGES)
def stage_ranges(stepping: dict[str, Any], options: Options, incomplete_steps: pl.DataFrame) -> pl.DataFrame:
    rows = stepping["rows"]
    depth = nesting_depth(rows, ["rank"]) if rows.height else pl.Series("depth", [], dtype=pl.Int16)
    out = rows.with_columns(depth.alias("depth")).select(list(frames.STAGE_RANGES)).cast(frames.STAGE_RANGES)
    return select_steps(out, options, incomplete_steps)


def timeline(ranges: pl.DataFrame, keep: Sequence[str] = ()) -> pl.DataFrame:
    """Disjoint per-rank segments where the innermost range decides (ranges carry ``depth``):
    each range keeps what no deeper range covers; ranges that merely touch stay apart. ``keep``:
    further range columns every segment carries (classified rows take the confidence)."""
    cols = [*frames.STAGE_TIMELINE, *keep]
    if ranges.height == 0:
        return ranges.select(cols).cast(frames.STAGE_TIMELINE)
    pieces = []
    keyed = ranges.with_row_index("_id").sort("rank", "start_ns")
    for d in sorted(keyed["depth"].unique().to_list()):
        level = keyed.filter(pl.col("depth") == d)
        inner = keyed.filter(pl.col("depth") > d).drop("_id").join_asof(
            level.select("rank", "start_ns", "_id"), on="start_ns", by="rank", strategy="backward", check_sortedness=False)
        inner = inner.filter(pl.col("_id").is_not_null())
        own = intervals.difference(level.select("rank", "_id", "start_ns", "end_ns"),
                                   inner.select("rank", "_id", "start_ns", "end_ns"), by=["rank", "_id"])
        if own.height:
            pieces.append(own.join(level.drop("rank", "start_ns", "end_ns"), on="_id").select(cols))
    return pl.concat(pieces).sort("rank", "start_ns").cast(frames.STAGE_TIMELINE)


# --- pools ---------------------------------------------------------------------------------------


@provides("pools", schema=frames.POOLS)
def pools(aligned: pl.DataFrame, stage_ranges: pl.DataFrame) -> pl.DataFrame:
    """Pool of every rank (docs/analyses.md §1): rollout only → rollout, training models only →
    train, both (or neither) → shared."""
    ev = aligned.filter(pl.col("rank") >= 0)
    ranks = ev.group_by("rank").agg(
        pl.col("host").cast(pl.String).drop_nulls().first().alias("host"),
        pl.col("device").filter(pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("device") >= 0)).first().alias("device"),
    )
    stages = stage_ranges.filter(pl.col("rank") >= 0).group_by("rank").agg(
        (pl.col("stage") == "rollout").any().alias("gen"),
        pl.col("stage").cast(pl.String).is_in(list(TRAINER_STAGES)).any().alias("train"),
    )
    out = ranks.join(stages, on="rank", how="left").with_columns(
        pl.when(pl.col("gen") & ~pl.col("train")).then(pl.lit("rollout"))
        .when(pl.col("train") & ~pl.col("gen")).then(pl.lit("train"))
        .otherwise(pl.lit("shared")).alias("pool"),
        pl.col("device").fill_null(-1),
    )
    return out.select(list(frames.POOLS)).cast(frames.POOLS).sort("rank")


# --- GPU work → stage, classified events ---------------------------------------------------------


def _anchors(ev: pl.DataFrame, formats: dict[int, str]) -> pl.DataFrame:
    """Per row (in order): ``anchor``, the time that decides its stage — for GPU work the start
    of the runtime call that launched it (linked on source, correlation id and, in multi-process
    nsys reports, pid), else the row's own start — and ``unlinked``: GPU work whose launch the
    trace lacks."""
    gpu = pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS))
    by_pid = [s for s, f in formats.items() if CORRELATION_PER_PROCESS in format_traits(f)]
    link_pid = pl.when(pl.col("source").is_in(by_pid)).then(pl.col("pid")).otherwise(-1)
    launches = ev.filter((pl.col("kind") == "runtime") & pl.col("corr").is_not_null()).select(
        "source", "corr", link_pid.alias("_lp"), pl.col("start_ns").alias("_launch")
    ).unique(["source", "corr", "_lp"], keep="first")
    rows = ev.select("source", "corr", "start_ns", gpu.alias("_gpu"), link_pid.alias("_lp")).with_row_index("_row")
    linked = rows.filter(pl.col("_gpu") & pl.col("corr").is_not_null()).join(launches, on=["source", "corr", "_lp"]).select("_row", "_launch")
    return rows.join(linked, on="_row", how="left").sort("_row").select(
        pl.coalesce("_launch", "start_ns").alias("anchor"), (pl.col("_gpu") & pl.col("_launch").is_null()).alias("unlinked"))


def device_timeline(aligned: pl.DataFrame, profile: dict[str, Any], steps: pl.DataFrame) -> pl.DataFrame:
    """The stage timeline of the device-side annotations (Kineto ``gpu_user_annotation``): for
    GPU work whose launch the trace does not hold."""
    ev = aligned.filter((pl.col("kind") == "gpu_annotation") & (pl.col("end_ns") > pl.col("start_ns")))
    if ev.height == 0:
        return frames.empty(frames.STAGE_TIMELINE)
    rows = staged(_with_classes(profile, ev.select("rank", "name", "start_ns", "end_ns")))
    if rows.height == 0:
        return frames.empty(frames.STAGE_TIMELINE)
    rows = rows.with_columns(_window_step(rows.select("start_ns").with_row_index("_row").rename({"start_ns": "t"}), steps).alias("step"))
    rows = rows.with_columns(nesting_depth(rows, ["rank"]).alias("depth")).select(list(frames.STAGE_RANGES)).cast(frames.STAGE_RANGES)
    return timeline(rows)


def _stage_at(points: pl.DataFrame, segments: pl.DataFrame) -> pl.DataFrame:
    """For ``_row, rank, t``: the segment (stage, role, step, inferred, confidence) covering t."""
    if segments.height == 0 or points.height == 0:
        return points.select("_row").with_columns(
            pl.lit(None, STAGE).alias("stage"), pl.lit(None, ROLE).alias("role"), pl.lit(None, pl.Int32).alias("seg_step"),
            pl.lit(None, pl.Boolean).alias("inferred"), pl.lit(None, pl.Float32).alias("confidence"))
    if "confidence" not in segments.columns:
        segments = segments.with_columns(pl.lit(1.0, pl.Float32).alias("confidence"))
    segs = segments.sort("rank", "start_ns").select(
        "rank", pl.col("start_ns").alias("t"), pl.col("end_ns").alias("_end"), "stage", "role",
        pl.col("step").alias("seg_step"), "inferred", "confidence")
    hit = points.sort("rank", "t").join_asof(segs, on="t", by="rank", strategy="backward", check_sortedness=False)
    inside = pl.col("t") < pl.col("_end")
    return hit.select(
        "_row",
        *[pl.when(inside).then(pl.col(c)).alias(c) for c in ("stage", "role", "seg_step", "inferred", "confidence")],
    )


@provides("segments")
def segments(stage_ranges: pl.DataFrame) -> pl.DataFrame:
    """The stage timeline with the confidence of the range each segment is a piece of (the
    ``stage_timeline`` product is this without it)."""
    return timeline(stage_ranges, keep=["confidence"])


@provides("stage_timeline", schema=frames.STAGE_TIMELINE)
def stage_timeline(segments: pl.DataFrame) -> pl.DataFrame:
    return segments.drop("confidence")


@provides("classified")
def classified(aligned: pl.DataFrame, events: pl.DataFrame, sources: list[SourceInfo], segments: pl.DataFrame,
               profile: dict[str, Any], steps: pl.DataFrame, pools: pl.DataFrame, options: Options,
               incomplete_steps: pl.DataFrame) -> pl.DataFrame:
    ev = aligned
    anchors = _anchors(ev, {s.index: s.format for s in sources})
    points = ev.select("rank").with_columns(anchors["anchor"].alias("t")).with_row_index("_row")
    hit = _stage_at(points, segments).sort("_row")
    if anchors["unlinked"].any():
        unlinked = points.filter(anchors["unlinked"])
        on_device = _stage_at(unlinked, device_timeline(aligned, profile, steps)).filter(pl.col("stage").is_not_null())
        if on_device.height:
            hit = hit.update(on_device, on="_row")
    by_window = _window_step(points, steps)
    out = ev.with_columns(
        hit["stage"].alias("stage"), hit["role"].alias("role"),
        pl.coalesce(hit["seg_step"], by_window).alias("_step"),
        hit["inferred"].fill_null(False).alias("inferred"), hit["confidence"].alias("confidence"),
    )
    logs = ev.filter(pl.col("kind") == "log_stage")
    if logs.height:
        lc = name_classes(profile, logs["name"].cast(pl.String).unique(), "log").select(
            "name", pl.col("stage").alias("_ls"), pl.col("role").alias("_lr"))
        out = out.with_columns(pl.col("name").cast(pl.String).alias("_name")).join(
            lc, left_on="_name", right_on="name", how="left", maintain_order="left"
        ).with_columns(
            pl.when(pl.col("kind") == "log_stage").then(pl.col("_ls")).otherwise(pl.col("stage")).alias("stage"),
            pl.when(pl.col("kind") == "log_stage").then(pl.col("_lr")).otherwise(pl.col("role")).alias("role"),
        ).drop("_name", "_ls", "_lr")
    out = out.with_columns(
        pl.when(pl.col("kind") == "log_stage").then(pl.col("step")).otherwise(pl.col("_step")).alias("step")
    ).drop("_step")
    dims = _row_dims(out, sources, options, pools)
    pool = pools.select("rank", "pool")
    out = out.with_columns(dims.alias("dim")).join(pool, on="rank", how="left", maintain_order="left")
    out = out.with_columns(
        pl.col("stage").cast(STAGE), pl.col("role").cast(ROLE), pl.col("dim").cast(DIM), pl.col("pool").cast(POOL),
        pl.col("inferred").cast(pl.Boolean), pl.col("confidence").cast(pl.Float32),
    )
    out = out.select([*events.columns, *frames.CLASSIFIED_COLUMNS])
    return select_steps(out, options, incomplete_steps)


def _window_step(points: pl.DataFrame, steps: pl.DataFrame) -> pl.Series:
    """Step whose window holds the point (the latest-starting one when windows overlap)."""
    if steps.height == 0:
        return pl.Series("step", [None] * points.height, dtype=pl.Int32)
    w = steps.sort("start_ns").select(pl.col("start_ns").alias("t"), pl.col("end_ns").alias("_we"), "step")
    hit = points.select("_row", "t").sort("t").join_asof(w, on="t", strategy="backward")
    return hit.sort("_row").select(pl.when(pl.col("t") < pl.col("_we")).then(pl.col("step")).cast(pl.Int32))["step"]


# --- collectives ---------------------------------------------------------------------------------


def _dim_rules(options: Options) -> tc.CollectiveRules:
    rules = tc.load_rules(options.collective_rules)
    if options.layout:
        given = tc.parse_layout(options.layout)
        rules = tc.CollectiveRules(rules.descriptions, rules.kernels, rules.patterns, given,
                                   rules.layout_note, rules.paths)
    return rules


def group_dims(pools: pl.DataFrame, groups: pl.DataFrame, rules: tc.CollectiveRules) -> pl.DataFrame:
    """Per unique (group, pg_desc): the dimension from the description, else pool spanning
    (``gdim``, and ``by`` which of them decided), and what the rank layout says (``_layout``)."""
    groups = groups.unique(["group", "pg_desc"]).filter(pl.col("group").is_not_null())
    if groups.height == 0:
        return groups.with_columns(pl.lit(None, pl.String).alias("gdim"), pl.lit(None, pl.String).alias("by"),
                                   pl.lit(None, pl.String).alias("_layout"), pl.lit(True).alias("_weak"))
    by_desc = tc.description_dims(groups["pg_desc"], rules)
    pool_of = dict(pools.select("rank", pl.col("pool").cast(pl.String)).iter_rows())
    ranks_text = [g.split("|", 1)[0] or None for g in groups["group"].to_list()]
    spans = tc.spans_pools(ranks_text, pool_of)
    out = groups.with_columns(by_desc.alias("_desc"), pl.Series("_span", spans))
    known = [(d, g) for d, g in zip(out["_desc"].to_list(), ranks_text, strict=True) if d and g]
    layout_of: list[str | None] = []
    pattern_only: list[bool] = []
    for g in ranks_text:
        if g is None:
            layout_of.append(None)
            pattern_only.append(True)
            continue
        members = [int(x) for x in g.split(",")]
        pool_names = {pool_of.get(r) for r in members}
        pool = sorted(r for r, p in pool_of.items() if p in pool_names) if pool_names <= {"rollout", "train", "shared"} and len(pool_names) == 1 else sorted(pool_of)
        lay = tc.infer_layout([(d, k) for d, k in known if set(map(int, k.split(","))) <= set(pool)], rules.layout, len(pool))
        layout_of.append(tc.layout_dims([g], pool, lay)[0])
        pattern_only.append(not tc.has_degrees(lay, len(pool)))
    out = out.with_columns(pl.Series("_layout", layout_of, dtype=pl.String), pl.Series("_weak", pattern_only, dtype=pl.Boolean))
    return out.with_columns(
        pl.coalesce(pl.col("_desc"), pl.when(pl.col("_span")).then(pl.lit("weight_sync"))).alias("gdim"),
        pl.when(pl.col("_desc").is_not_null()).then(pl.lit("description"))
        .when(pl.col("_span")).then(pl.lit("pools")).alias("by"),
    ).select("group", "pg_desc", "gdim", "by", "_layout", "_weak")


def _dims_for(rows: pl.DataFrame, options: Options, pools: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (group, pg_desc, name, coll, stage, bytes) → dim and ``dim_by``."""
    rules = _dim_rules(options)
    g = group_dims(pools, rows.select("group", "pg_desc"), rules)
    names = rows["name"].unique()
    kd = pl.DataFrame({"name": names, "_kdim": tc.kernel_dims(names, rules)})
    out = rows.join(g, on=["group", "pg_desc"], how="left", nulls_equal=True, maintain_order="left").join(
        kd, on="name", how="left", maintain_order="left")
    pattern = tc.pattern_dim(rules)
    in_sync = pl.when(pl.col("stage").cast(pl.String) == "weight_sync").then(pl.lit("weight_sync"))
    # a rank pattern read without degrees does not outweigh what p2p and all-to-all say
    out = out.with_columns(
        pl.when(pl.col("_weak") & pl.col("coll").is_in(list(PATTERN_FIRST))).then(None).otherwise(pl.col("_layout")).alias("_layout"))
    return out.with_columns(
        pl.coalesce("gdim", in_sync, "_layout", "_kdim", pattern.cast(pl.String)).cast(DIM).alias("dim"),
        pl.coalesce(
            "by", pl.when(in_sync.is_not_null()).then(pl.lit("stage")),
            pl.when(pl.col("_layout").is_not_null()).then(pl.lit("layout")),
            pl.when(pl.col("_kdim").is_not_null()).then(pl.lit("kernel name")), pl.lit("pattern"),
        ).alias("dim_by"),
    ).drop("gdim", "by", "_kdim", "_layout", "_weak")


def _row_dims(ev: pl.DataFrame, sources: list[SourceInfo], options: Options, pools: pl.DataFrame) -> pl.Series:
    """Dimension of every collective row of the event table (null elsewhere)."""
    coll = ev.with_row_index("_row").filter(pl.col("coll").is_not_null() & (pl.col("kind") != "log_stage"))
    if coll.height == 0:
        return pl.Series("dim", [None] * ev.height, dtype=DIM)
    calls = coll.select(
        "_row", "rank", "source", pl.col("name").cast(pl.String), pl.col("coll").cast(pl.String), pl.col("pg").cast(pl.String),
        pl.col("pg_desc").cast(pl.String), "pg_ranks", "group_size", "bytes", "stage",
    )
    filled = fill_groups(calls, pg_config(sources))
    dims = _dims_for(filled, options, pools)
    return pl.DataFrame({"_row": pl.int_range(ev.height, eager=True).cast(pl.UInt32)}).join(
        dims.select(pl.col("_row").cast(pl.UInt32), "dim"), on="_row", how="left").sort("_row")["dim"]


@provides("collectives", schema=frames.COLLECTIVE_INSTANCES)
def collectives(collective_calls: pl.DataFrame, clock: pl.DataFrame, stage_timeline: pl.DataFrame, steps: pl.DataFrame,
                options: Options, pools: pl.DataFrame, incomplete_steps: pl.DataFrame) -> pl.DataFrame:
    calls = collective_calls
    offsets = clock.select("rank", "offset_ns")
    calls = calls.join(offsets, on="rank", how="left").with_columns(
        (pl.col("start_ns") - pl.col("offset_ns").fill_null(0)).alias("start_ns"),
        (pl.col("end_ns") - pl.col("offset_ns").fill_null(0)).alias("end_ns"),
    )
    points = calls.select("rank", pl.col("start_ns").alias("t")).with_row_index("_row")
    hit = _stage_at(points, stage_timeline).sort("_row")
    calls = calls.with_columns(
        hit["stage"].alias("stage"), pl.coalesce(hit["seg_step"], _window_step(points, steps)).alias("step"),
        (pl.col("kind") == "kernel").alias("on_device"),
    )
    calls = _dims_for(calls, options, pools)
    out = calls.select(
        "instance", "rank", "step", "coll", "dim", pl.col("pg"), "pg_ranks", "group_size", "bytes", "start_ns", "end_ns",
        "stage", "on_device", "pg_desc", "dim_by", "name",
    )
    ranks = options.rank_selection
    if ranks is not None:
        out = out.filter(ranks.expr("rank"))
    out = out.cast(frames.COLLECTIVE_INSTANCES).sort("rank", "start_ns")
    return select_steps(out, options, incomplete_steps)


# --- activity ------------------------------------------------------------------------------------


@provides("activity", schema=frames.ACTIVITY)
def activity(classified: pl.DataFrame) -> pl.DataFrame:
    cl = classified.filter(pl.col("rank") >= 0)
    device = cl.filter(pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("stream") >= 0))
    device_ranks = device["rank"].unique()
    host = cl.filter(~pl.col("rank").is_in(device_ranks.implode()) & (
        ((pl.col("kind") == "cpu_op") & (pl.col("depth") == 0))
        | ((pl.col("kind") == "annotation") & pl.col("coll").is_not_null())
    ))
    out = pl.concat([device, host]).select(
        "rank", "device", "stream", pl.col("kind").cast(pl.String), "start_ns", "end_ns", "stage", "step",
        pl.col("coll").is_not_null().alias("is_collective"),
    )
    return out.cast(frames.ACTIVITY).sort("rank", "start_ns")
