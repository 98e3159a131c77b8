"""The parallelism dimension of every collective (product ``collectives``: one row per rank and
collective call, matched into instances): process-group description, else pool-spanning group →
``weight_sync``, else a ``weight_sync`` stage, else rank layout, else kernel-name and pattern
rules (``taxonomy/collectives.toml``) — except for a call whose process group was not recorded
and whose communication family names a dimension (``taxonomy/comm_families.toml``: DeepEP →
ep, an engine's custom all-reduce → tp): the family decides first, the group then being only a
guess from which ranks make the same calls.

The send/recv pattern rule (→ pp) holds only in a run that shows a pipeline: a pipeline group
(a description or the rank layout says pp), pp > 1 in ``--layout``, or pipeline-schedule or
chunk ranges in the trace (``taxonomy/pipeline_phases.toml``). Elsewhere a send/recv is
``unknown``: DDP and all-to-all implementations, CP rings and recommender embedding exchanges
send and receive too. So with the all-to-all pattern rule (→ ep): it holds only in a run that
shows experts (an ep group, family or layout degree, or a kernel or annotation name of
``[evidence] experts``); elsewhere an all-to-all is ``unknown``, as recommender models exchange
embeddings and Ulysses sequence parallelism exchanges heads with all-to-all too.
"""

from __future__ import annotations

import polars as pl

from taxonomy import collectives as tc
from taxonomy.pipeline_phases import SCHEDULE, phase_of
from taxonomy.vocab import DIM

from ..assemble.collectives import fill_groups, pg_config
from ..assemble.p2p import P2P
from ..model import frames
from ..model.options import Options
from ..model.products import provides
from ..model.run import SourceInfo
from .steps import select_steps
from .timeline import stage_at, window_step

PATTERN_FIRST = (*P2P, "all_to_all")
"""Collective kinds whose pattern rules outrank a rank pattern read without layout degrees."""
PIPELINE_NAME_KINDS = ("annotation", "gpu_annotation")
EXPERT_NAME_KINDS = ("kernel", "annotation", "gpu_annotation")


def pipeline_ranges(events: pl.DataFrame) -> bool:
    """Whether the trace names a pipeline schedule, or chunks only a pipeline runs (a chunk
    name as common as ``forward`` counts only inside a schedule, so it is no evidence alone)."""
    names = events.filter(pl.col("kind").is_in(PIPELINE_NAME_KINDS))["name"]
    if names.len() == 0:
        return False
    phases = phase_of(names)
    return phases.filter(
        (pl.col("phase") == SCHEDULE)
        | (pl.col("phase").is_not_null() & ~pl.col("within_schedule").fill_null(False))
    ).height > 0


def expert_names(events: pl.DataFrame, options: Options) -> bool:
    """Whether a kernel or annotation name of the trace shows experts (``[evidence] experts``
    in taxonomy/collectives.toml): MoE layers, routers, grouped GEMMs, DeepEP."""
    pattern = _dim_rules(options).experts
    names = events.filter(pl.col("kind").is_in(EXPERT_NAME_KINDS))["name"].unique()
    return bool(pattern) and bool(names.cast(pl.String).str.contains(pattern).any())


def _dim_rules(options: Options) -> tc.CollectiveRules:
    rules = tc.load_rules(options.collective_rules)
    if options.layout:
        given = tc.parse_layout(options.layout)
        rules = tc.CollectiveRules(rules.descriptions, rules.kernels, rules.patterns, given,
                                   rules.layout_note, rules.paths, rules.experts)
    return rules


def group_dims(
    pools: pl.DataFrame, groups: pl.DataFrame, rules: tc.CollectiveRules
) -> pl.DataFrame:
    """Per unique (group, pg_desc): the dimension from the description, else pool spanning
    (``gdim``, and ``by`` which of them decided), and what the rank layout says (``_layout``)."""
    groups = groups.unique(["group", "pg_desc"]).filter(pl.col("group").is_not_null())
    if groups.height == 0:
        return groups.with_columns(
            pl.lit(None, pl.String).alias("gdim"),
            pl.lit(None, pl.String).alias("by"),
            pl.lit(None, pl.String).alias("_layout"),
            pl.lit(True).alias("_weak"),
        )
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
        pool = (
            sorted(r for r, p in pool_of.items() if p in pool_names)
            if pool_names <= {"rollout", "train", "shared"} and len(pool_names) == 1
            else sorted(pool_of)
        )
        lay = tc.infer_layout(
            [(d, k) for d, k in known if set(map(int, k.split(","))) <= set(pool)],
            rules.layout,
            len(pool),
        )
        layout_of.append(tc.layout_dims([g], pool, lay)[0])
        pattern_only.append(not tc.has_degrees(lay, len(pool)))
    out = out.with_columns(
        pl.Series("_layout", layout_of, dtype=pl.String),
        pl.Series("_weak", pattern_only, dtype=pl.Boolean),
    )
    return out.with_columns(
        pl.coalesce(pl.col("_desc"), pl.when(pl.col("_span")).then(pl.lit("weight_sync"))).alias(
            "gdim"
        ),
        pl.when(pl.col("_desc").is_not_null())
        .then(pl.lit("description"))
        .when(pl.col("_span"))
        .then(pl.lit("pools"))
        .alias("by"),
    ).select("group", "pg_desc", "gdim", "by", "_layout", "_weak")


def _family_dims(names: pl.Series, families: tuple[tc.Family, ...]) -> pl.DataFrame:
    """name → the dimension its communication family names (``_fdim``), for families that
    name one."""
    fam = tc.family_frame(names, families)
    return fam.filter(pl.col("family_dim").is_not_null()).select(
        "name", pl.col("family_dim").alias("_fdim")
    )


def _dims_for(
    rows: pl.DataFrame, options: Options, pools: pl.DataFrame, *, pipeline_seen: bool = True,
    experts_seen: bool = True, families: tuple[tc.Family, ...] | None = None,
) -> pl.DataFrame:
    """``rows`` (group, pg_desc, name, coll, stage, bytes, group_recorded) → dim and
    ``dim_by``. A family's dimension decides only where no process group was recorded (the
    group then is a guess from which ranks make the same calls, which says nothing of the
    dimension). Without ``pipeline_seen`` (pipeline ranges in the trace), a pattern-only pp
    send/recv is ``unknown`` unless a group or the layout shows a pipeline; without
    ``experts_seen`` (expert names in the trace), a pattern-only ep all-to-all likewise unless
    a group, a family or the layout shows experts. ``families``: those the caller read already
    (each read parses the TOML files again)."""
    rules = _dim_rules(options)
    if families is None:
        families = tc.load_families(options.collective_rules)
    g = group_dims(pools, rows.select("group", "pg_desc"), rules)
    names = rows["name"].unique()
    recorded = (
        pl.col("group_recorded")
        if "group_recorded" in rows.columns
        else pl.col("group").is_not_null()
    )
    kd = pl.DataFrame({"name": names, "_kdim": tc.kernel_dims(names, rules)})
    out = rows.join(
        g, on=["group", "pg_desc"], how="left", nulls_equal=True, maintain_order="left"
    ).join(kd, on="name", how="left", maintain_order="left").join(
        _family_dims(names, families), on="name", how="left", maintain_order="left"
    ).with_columns(
        pl.when(~recorded).then(pl.col("_fdim")).alias("_fdim")
    )
    pattern = tc.pattern_dim(rules)
    in_sync = pl.when(pl.col("stage").cast(pl.String) == "weight_sync").then(pl.lit("weight_sync"))
    # a rank pattern read without degrees does not outweigh what p2p and all-to-all say
    out = out.with_columns(
        pl.when(pl.col("_weak") & pl.col("coll").is_in(list(PATTERN_FIRST)))
        .then(None)
        .otherwise(pl.col("_layout"))
        .alias("_layout")
    )
    out = out.with_columns(
        pl.coalesce("_fdim", "gdim", in_sync, "_layout", "_kdim", pattern.cast(pl.String))
        .cast(DIM)
        .alias("dim"),
        pl.coalesce(
            pl.when(pl.col("_fdim").is_not_null()).then(pl.lit("family")),
            "by",
            pl.when(in_sync.is_not_null()).then(pl.lit("stage")),
            pl.when(pl.col("_layout").is_not_null()).then(pl.lit("layout")),
            pl.when(pl.col("_kdim").is_not_null()).then(pl.lit("kernel name")),
            pl.lit("pattern"),
        ).alias("dim_by"),
    ).drop("gdim", "by", "_kdim", "_fdim", "_layout", "_weak")
    out = _unshown(out, "pp", P2P, pipeline_seen or rules.layout.degrees.get("pp", 1) > 1)
    return _unshown(out, "ep", ("all_to_all",),
                    experts_seen or rules.layout.degrees.get("ep", 1) > 1)


def _unshown(out: pl.DataFrame, dim: str, colls: tuple[str, ...], seen: bool) -> pl.DataFrame:
    """Pattern-only ``dim`` calls of ``colls`` → ``unknown`` when nothing shows the dimension:
    no evidence in the trace or the layout (``seen``) and no call whose group, family or layout
    position is ``dim`` (a pipeline for pp send/recv, experts for ep all-to-all)."""
    by_pattern = (pl.col("dim") == dim) & (pl.col("dim_by") == "pattern")
    if seen or out.filter((pl.col("dim") == dim) & ~by_pattern).height:
        return out
    guess = by_pattern & pl.col("coll").cast(pl.String).is_in(list(colls))
    return out.with_columns(
        pl.when(guess).then(pl.lit("unknown")).otherwise(pl.col("dim").cast(pl.String))
        .cast(DIM).alias("dim")
    )


def row_dims(
    ev: pl.DataFrame, sources: list[SourceInfo], options: Options, pools: pl.DataFrame
) -> pl.Series:
    """Dimension of every collective row of the event table (null elsewhere)."""
    coll = ev.with_row_index("_row").filter(
        pl.col("coll").is_not_null() & (pl.col("kind") != "log_stage")
    )
    if coll.height == 0:
        return pl.Series("dim", [None] * ev.height, dtype=DIM)
    calls = coll.select(
        "_row",
        "rank",
        "source",
        pl.col("name").cast(pl.String),
        pl.col("coll").cast(pl.String),
        pl.col("pg").cast(pl.String),
        pl.col("pg_desc").cast(pl.String),
        "pg_ranks",
        "group_size",
        "bytes",
        "stage",
    )
    families = tc.load_families(options.collective_rules)
    filled = fill_groups(calls, pg_config(sources), families)
    dims = _dims_for(filled, options, pools, pipeline_seen=pipeline_ranges(ev),
                     experts_seen=expert_names(ev, options), families=families)
    return (
        pl.DataFrame({"_row": pl.int_range(ev.height, eager=True).cast(pl.UInt32)})
        .join(dims.select(pl.col("_row").cast(pl.UInt32), "dim"), on="_row", how="left",
              maintain_order="left")["dim"]
    )


@provides("collectives", schema=frames.COLLECTIVE_INSTANCES)
def collectives(
    collective_calls: pl.DataFrame,
    clock: pl.DataFrame,
    stage_timeline: pl.DataFrame,
    steps: pl.DataFrame,
    options: Options,
    pools: pl.DataFrame,
    incomplete_steps: pl.DataFrame,
    events: pl.DataFrame,
) -> pl.DataFrame:
    calls = collective_calls
    offsets = clock.select("rank", "offset_ns")
    calls = calls.join(offsets, on="rank", how="left").with_columns(
        (pl.col("start_ns") - pl.col("offset_ns").fill_null(0)).alias("start_ns"),
        (pl.col("end_ns") - pl.col("offset_ns").fill_null(0)).alias("end_ns"),
    )
    points = calls.select("rank", pl.col("start_ns").alias("t")).with_row_index("_row")
    hit = stage_at(points, stage_timeline).sort("_row")
    calls = calls.with_columns(
        hit["stage"].alias("stage"),
        pl.coalesce(hit["seg_step"], window_step(points, steps)).alias("step"),
        (pl.col("kind") == "kernel").alias("on_device"),
    )
    calls = _dims_for(calls, options, pools, pipeline_seen=pipeline_ranges(events),
                      experts_seen=expert_names(events, options))
    out = calls.select(
        "instance",
        "rank",
        "step",
        "coll",
        "dim",
        pl.col("pg"),
        "pg_ranks",
        "group_size",
        "bytes",
        "start_ns",
        "end_ns",
        "stage",
        "on_device",
        "pg_desc",
        "dim_by",
        "name",
    )
    out = out.cast(frames.COLLECTIVE_INSTANCES).sort("rank", "start_ns")
    return select_steps(out, options, incomplete_steps)
