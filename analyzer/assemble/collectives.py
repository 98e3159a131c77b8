"""Collective calls (product ``collective_calls``): one row per rank and call — communication
kernels on ranks with device work, the outermost host collective ranges otherwise — with its
process group filled from the source's ``pg_config`` and matched across members into instances
by (group, ``seq``) or, without ``seq``, by order within the group; point-to-point calls (whose
peers differ from call to call) by time instead (:mod:`.p2p`).

Which kernels are communication beyond what the parsers recognise (NCCL, c10d and gloo ranges)
is the communication-family table (``taxonomy/comm_families.toml``): :func:`mark_communication`
fills ``coll`` of the event table from it when the run is assembled, so every analysis that
reads ``coll`` (exposed time, overlap, bus bandwidth, dimensions) counts DeepEP, custom
all-reduce and the rest as it counts NCCL.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from parsers.events import COLL, GPU_ACTIVITY_KINDS
from taxonomy import collectives as tc

from ..model.options import Options
from ..model.products import provides
from ..model.run import SourceInfo
from . import p2p
from .clock import SYMMETRIC

CALL_COLUMNS = ["rank", "source", "name", "kind", "coll", "pg", "pg_desc", "pg_ranks", "group_size",
                "bytes", "seq", "start_ns", "end_ns", "group", "instance", "group_recorded"]


def collective_calls(
    events: pl.DataFrame,
    pg_config: dict[int, list[dict[str, Any]]],
    families: tuple[tc.Family, ...] | None = None,
) -> pl.DataFrame:
    """One row per rank and collective call, with its group (canonical ranks) and instance."""
    return matched_calls(rank_calls(events), pg_config, families)


def rank_calls(events: pl.DataFrame) -> pl.DataFrame:
    """Each rank's collective calls as its own events record them (kernels on a device rank;
    on a host-only rank its outermost annotations, else cpu ops), in rank order: rank-local,
    so a run read from a dataset extracts them rank by rank and gathers only the calls."""
    coll = events.filter(
        pl.col("coll").is_not_null() & (pl.col("rank") >= 0) & (pl.col("kind") != "log_stage")
    )
    device_ranks = events.filter(
        pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("rank") >= 0)
    )["rank"].unique()
    on_device = coll.filter(pl.col("kind") == "kernel")
    host = coll.filter(
        ~pl.col("rank").is_in(device_ranks.implode())
        & pl.col("kind").is_in(["annotation", "cpu_op"])
    )
    # per rank, the annotation rows (gloo:/nccl: record_function) when there are any, else cpu ops
    has_ann = host.filter(pl.col("kind") == "annotation")["rank"].unique()
    host = host.filter(
        (pl.col("kind") == "annotation") | ~pl.col("rank").is_in(has_ann.implode())
    )
    host = _outermost(host)
    calls = pl.concat([on_device, host]).select(
        "rank",
        "source",
        pl.col("name").cast(pl.String),
        pl.col("kind").cast(pl.String),
        pl.col("coll").cast(pl.String),
        pl.col("pg").cast(pl.String),
        pl.col("pg_desc").cast(pl.String),
        "pg_ranks",
        "group_size",
        "bytes",
        "seq",
        "start_ns",
        "end_ns",
    )
    return calls.sort("rank", maintain_order=True)


def matched_calls(
    calls: pl.DataFrame,
    pg_config: dict[int, list[dict[str, Any]]],
    families: tuple[tc.Family, ...] | None = None,
) -> pl.DataFrame:
    """The run's calls (:func:`rank_calls`) with their groups filled and matched across the
    groups' members into instances: the cross-rank step."""
    calls = fill_groups(calls, pg_config, families)
    return _instances(calls).select(CALL_COLUMNS).sort("rank", "start_ns")


def mark_communication(
    events: pl.DataFrame, families: tuple[tc.Family, ...] | None = None
) -> pl.DataFrame:
    """``events`` with ``coll`` filled for the rows a communication family claims (by name, for
    the event kinds the family applies to) that the parser left without one; a kind the parser
    found (from the collective's arguments) is kept. Names are matched per distinct name and
    looked up by their categorical code: casting the column to strings would materialise every
    row's name (on a run of a million kernels, 200 MB for a column of 4 MB of codes)."""
    if events.height == 0 or "name" not in events.columns:
        return events
    return host_kinds(_by_family(events, families))


def _by_family(events: pl.DataFrame, families: tuple[tc.Family, ...] | None) -> pl.DataFrame:
    distinct = events.select(pl.col("name").unique().drop_nulls())["name"]
    found = tc.family_frame(distinct, tc.load_families() if families is None else families)
    if found.height == 0:
        return events
    coded = events.schema["name"] == pl.Categorical()
    keys = distinct.to_physical() if coded else distinct
    codes = dict(zip(distinct.cast(pl.String), keys, strict=True))
    key = pl.col("name").to_physical() if coded else pl.col("name").cast(pl.String)
    fill: pl.Expr = pl.lit(None, dtype=pl.String)
    for kind in tc.FAMILY_KINDS:
        claimed = found.filter(pl.col("on").list.contains(kind))
        if claimed.height:
            mapping = {codes[n]: c for n, c in zip(claimed["name"], claimed["coll"], strict=True)}
            by_name = key.replace_strict(mapping, default=None, return_dtype=pl.String)
            fill = pl.when(pl.col("kind") == kind).then(by_name).otherwise(fill)
    return events.with_columns(pl.coalesce(pl.col("coll"), fill.cast(COLL)).alias("coll"))


HOST_KINDS = ("annotation", "cpu_op")
"""Event kinds of host collective ranges (``nccl:all_to_all``, ``record_param_comms``)."""


def host_kinds(events: pl.DataFrame) -> pl.DataFrame:
    """``events`` with each communication kernel's ``coll`` taken from the host collective
    range its launch lies in: the outermost one on the launching thread that encloses the
    runtime call with the kernel's correlation id (on its source; where correlation ids repeat
    across processes, the one of the kernel's pid). PyTorch runs all_to_all as grouped
    send/recv: the kernel is ``ncclKernel_SendRecv_…``, the call ``nccl:all_to_all``. The
    kernel name decides where there is no such range, or where its kind is one that
    ``[host_kind] keeps_kernel`` (comm_families.toml) names."""
    needed = {"kind", "coll", "corr", "source", "pid", "tid", "start_ns", "end_ns"}
    if not needed <= set(events.columns):
        return events
    kernels = events.with_row_index("_row").filter(
        (pl.col("kind") == "kernel") & pl.col("coll").is_not_null() & pl.col("corr").is_not_null()
    ).select("_row", "source", "pid", "corr")
    if kernels.height == 0:
        return events
    kept = list(tc.host_kind_keeps_kernel())
    ranges = events.filter(
        pl.col("kind").is_in(list(HOST_KINDS)) & pl.col("coll").is_not_null()
        & ~pl.col("coll").cast(pl.String).is_in(kept)
    ).select(pl.col("rank").fill_null(-1), "source", "pid", "tid", "start_ns", "end_ns",
             pl.col("coll").alias("_host"))
    if ranges.height == 0:
        return events
    launches = events.filter(
        (pl.col("kind") == "runtime") & pl.col("corr").is_in(kernels["corr"].unique().implode())
    ).select("source", "corr", pl.col("pid").alias("_lp"), "tid", "start_ns", "end_ns")
    linked = kernels.join(launches, on=["source", "corr"]).filter(
        (pl.len().over("_row") == 1) | (pl.col("pid") == pl.col("_lp"))
    ).filter(pl.len().over("_row") == 1)
    if linked.height == 0:
        return events
    outer = _outermost(ranges).select(
        "source", pl.col("pid").alias("_lp"), "tid", pl.col("start_ns").alias("_hs"),
        pl.col("end_ns").alias("_he"), "_host",
    ).sort("_hs")
    inside = linked.sort("start_ns").join_asof(
        outer, left_on="start_ns", right_on="_hs", by=["source", "_lp", "tid"],
        strategy="backward", check_sortedness=False,
    ).filter(pl.col("_he") >= pl.col("end_ns"))
    if inside.height == 0:
        return events
    coll = events["coll"].scatter(inside["_row"], inside["_host"].cast(events.schema["coll"]))
    return events.with_columns(coll)


def _outermost(rows: pl.DataFrame) -> pl.DataFrame:
    """Host collective rows not inside another collective row of the same rank and thread."""
    if rows.height == 0:
        return rows
    ordered = rows.sort(
        ["rank", "source", "pid", "tid", "start_ns", "end_ns"], descending=[False] * 5 + [True]
    )
    reach = pl.col("end_ns").cum_max().shift(1).over(["rank", "source", "pid", "tid"])
    return ordered.filter(reach.is_null() | (pl.col("start_ns") >= reach))


def fill_groups(
    calls: pl.DataFrame,
    pg_config: dict[int, list[dict[str, Any]]],
    families: tuple[tc.Family, ...] | None = None,
) -> pl.DataFrame:
    """Group ranks and description from ``pg_config`` where rows name only the group; for rows
    with no group at all (gloo on CPU, DeepEP), the ranks that make calls of that kind (and
    family, for a library's own communicator) the same number of times — named after the one
    ``pg_config`` group with exactly those ranks, and left without a description when several
    groups have them. Point-to-point calls need no equal counts (a pipeline's first and last
    stages make half the calls of the others): they are matched by time, not by order."""
    calls = calls.with_columns(
        (pl.col("pg").is_not_null() | pl.col("pg_ranks").is_not_null()).alias("group_recorded")
    )
    config = pl.DataFrame(
        [
            {
                "source": s,
                "pg": str(g.get("pg_name")),
                "cfg_desc": g.get("pg_desc"),
                "cfg_ranks": g.get("ranks"),
            }
            for s, groups in pg_config.items()
            for g in groups or []
        ],
        schema={
            "source": pl.UInt32,
            "pg": pl.String,
            "cfg_desc": pl.String,
            "cfg_ranks": pl.String,
        },
    )
    calls = calls.join(config, on=["source", "pg"], how="left").with_columns(
        pl.coalesce("pg_ranks", "cfg_ranks").alias("pg_ranks"),
        pl.coalesce("pg_desc", "cfg_desc").alias("pg_desc"),
    ).drop("cfg_desc", "cfg_ranks")
    calls = calls.with_columns(
        _bare_key(calls, tc.load_families() if families is None else families)
    )
    bare = calls.filter(pl.col("pg_ranks").is_null())
    if bare.height:
        counts = bare.group_by("_key", "rank").len()
        members = counts.group_by("_key").agg(
            pl.col("rank").sort().cast(pl.String).str.join(",").alias("members"),
            (pl.col("len").n_unique() == 1).alias("even"),
            pl.len().alias("n"),
        ).filter(
            (pl.col("even") | pl.col("_key").str.split(":").list.last().is_in(list(p2p.P2P)))
            & (pl.col("n") > 1)
        )
        by_ranks = (
            config.unique(["cfg_ranks", "pg"])
            .group_by("cfg_ranks")
            .agg(
                pl.col("cfg_desc").first(),
                pl.col("pg").first().alias("cfg_pg"),
                pl.len().alias("_n"),
            )
            .filter(pl.col("_n") == 1)
            .drop("_n")
        )
        members = members.join(
            by_ranks, left_on="members", right_on="cfg_ranks", how="left"
        ).with_columns(pl.coalesce(pl.col("cfg_pg"), pl.lit("~") + pl.col("_key")).alias("cfg_pg"))
        calls = (
            calls.join(
                members.select("_key", "members", "cfg_desc", "cfg_pg"), on="_key", how="left"
            )
            .with_columns(
                pl.when(pl.col("pg_ranks").is_null())
                .then(pl.col("members"))
                .otherwise(pl.col("pg_ranks"))
                .alias("pg_ranks"),
                pl.when(pl.col("pg_ranks").is_null())
                .then(pl.col("cfg_desc"))
                .otherwise(pl.col("pg_desc"))
                .alias("pg_desc"),
                pl.when(pl.col("pg_ranks").is_null())
                .then(pl.col("cfg_pg"))
                .otherwise(pl.col("pg"))
                .alias("pg"),
            )
            .drop("members", "cfg_desc", "cfg_pg")
        )
    return calls.drop("_key").with_columns(
        pl.when(pl.col("pg_ranks").is_not_null())
        .then(pl.concat_str([pl.col("pg_ranks"), pl.lit("|"), pl.col("pg").fill_null("")]))
        .otherwise(pl.lit("|") + pl.col("pg"))
        .alias("group"),
        pl.coalesce(pl.col("group_size"), pl.col("pg_ranks").str.count_matches(",") + 1)
        .cast(pl.Int32)
        .alias("group_size"),
    )


def _bare_key(calls: pl.DataFrame, families: tuple[tc.Family, ...]) -> pl.Expr:
    """What ungrouped calls are matched by: their kind, and for a library with its own
    communicator (DeepEP, custom all-reduce, …) its family too — its calls are not ordered
    with NCCL's, so pairing them by order with NCCL calls of the same kind would mismatch."""
    own = tc.family_frame(calls["name"], families).filter("own_group")
    if own.height == 0:
        return pl.col("coll").alias("_key")
    own_of = dict(zip(own["name"], own["family"] + ":" + own["coll"], strict=True))
    return pl.col("name").replace_strict(own_of, default=pl.col("coll")).alias("_key")


def _instances(calls: pl.DataFrame) -> pl.DataFrame:
    """Match calls across group members into instances (-1: unmatched). Collectives: by (group,
    seq) where every collective of the group records ``seq``, else by order within the group on
    each rank. Point-to-point calls: by time (:mod:`.p2p`)."""
    is_p2p = (
        pl.col("coll").cast(pl.String).is_in(list(p2p.P2P)).fill_null(False)
        if "coll" in calls.columns
        else pl.lit(False)
    )
    marked = calls.with_columns(is_p2p.alias("_p2p"))
    ordered = _ordered_instances(marked.filter(~pl.col("_p2p")).drop("_p2p"))
    timed = pl.col("group").is_in(_out_of_order(ordered).implode()).fill_null(False)
    collective = ordered.filter(~timed)
    pointwise = pl.concat([
        marked.filter(pl.col("_p2p")).drop("_p2p"),
        ordered.filter(timed).drop("instance").select(marked.drop("_p2p").columns),
    ])
    if pointwise.height:
        first = collective.select(pl.col("instance").max().fill_null(-1) + 1).item()
        pointwise = p2p.match(pointwise, collective, first)
        collective = pl.concat([collective, pointwise.select(collective.columns)])
    return collective.sort("rank", "start_ns")


ORDER_OFF_SHARE = 0.25
"""A group's calls matched by order are taken only when at most this share of its members'
calls end apart from their instance's (see :func:`_out_of_order`)."""


def _out_of_order(ordered: pl.DataFrame) -> pl.Series:
    """Groups of symmetric collectives matched by order (no ``seq``) whose instances do not end
    together: the trace lacks some of the group's calls on some rank (HTA's sampled pair is
    event-sampled: of its ranks' 4 all_to_all each, rank 0's k-th is never rank 1's k-th),
    so the k-th call of one rank is not the k-th of another and they are matched by time (the
    ends rule of :mod:`.p2p`). Members leave a symmetric collective together: per instance,
    each member's end minus its lowest member's, less the rank's median of those (its clock
    offset), lies within the ends rule's tolerance for the calls of a complete trace."""
    if not {"coll", "end_ns"} <= set(ordered.columns):
        return pl.Series("group", [], pl.String)  # no kind or end to judge the order by
    by_seq = pl.col("seq").is_not_null().all().over("group")
    rows = ordered.filter(
        ~by_seq & (pl.col("instance") >= 0)
        & pl.col("coll").cast(pl.String).is_in(list(SYMMETRIC)).fill_null(False)
    )
    if rows.height == 0:
        return pl.Series("group", [], pl.String)
    first = pl.col("rank") == pl.col("rank").min().over("instance")
    ref = rows.filter(first).select(
        "instance", pl.col("end_ns").alias("_re"), (pl.col("end_ns") - pl.col("start_ns"))
        .alias("_rd")
    ).unique("instance")
    diffs = rows.filter(~first).join(ref, on="instance").with_columns(
        (pl.col("end_ns") - pl.col("_re")).alias("_d"),
        pl.min_horizontal(pl.col("end_ns") - pl.col("start_ns"), "_rd").alias("_short"),
    )
    off = (pl.col("_d") - pl.col("_d").median().over("group", "rank")).abs() > p2p.end_tolerance(
        pl.col("_short"))
    share = diffs.group_by("group").agg(off.mean().alias("_off"))
    return share.filter(pl.col("_off") > ORDER_OFF_SHARE)["group"]


def _ordered_instances(calls: pl.DataFrame) -> pl.DataFrame:
    """Collectives: by (group, seq) where every call of the group records ``seq``, else by
    order within the group on each rank."""
    seq_ok = calls.group_by("group").agg(pl.col("seq").is_not_null().all().alias("seq_ok"))
    keyed = calls.sort("rank", "start_ns").join(seq_ok, on="group", how="left").with_columns(
        pl.when(pl.col("seq_ok")).then(pl.col("seq"))
        .otherwise(pl.int_range(pl.len()).over(["group", "rank"]).cast(pl.Int64)).alias("_key")
    )
    members = pl.col("rank").n_unique().over(["group", "_key"])
    ident = pl.struct("group", "_key").rank("dense").cast(pl.Int64) - 1
    return keyed.with_columns(
        pl.when(pl.col("group").is_not_null() & (members > 1))
        .then(ident)
        .otherwise(-1)
        .alias("instance")
    ).drop("seq_ok", "_key")


@provides("rank_collective_calls", per_rank=True, every_rank=True)
def rank_collective_calls(events: pl.DataFrame) -> pl.DataFrame:
    return rank_calls(events)


@provides("collective_calls")
def collective_calls_product(
    rank_collective_calls: pl.DataFrame, sources: list[SourceInfo], options: Options
) -> pl.DataFrame:
    return matched_calls(
        rank_collective_calls, pg_config(sources), tc.load_families(options.collective_rules)
    )


def pg_config(sources: list[SourceInfo]) -> dict[int, list[dict[str, Any]]]:
    """Each source's process groups as its parser read them (Kineto ``distributedInfo``)."""
    return {s.index: s.meta.get("pg_config") or [] for s in sources}
