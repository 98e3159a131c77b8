"""The metric of every implemented guideline check (docs/guidelines.md has the definitions).

Each function takes the run's :class:`Evidence` and the :class:`Check` (for its thresholds and
params) and returns :class:`Measured` per-step values, :class:`Missing` (what the run lacks) or
:class:`Inapplicable` (why the run cannot break the guideline). Thresholds and texts live in
``taxonomy/guidelines.toml``; :data:`METRICS` maps a check's metric name to its function.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import polars as pl

from taxonomy.guidelines import Check
from taxonomy.vocab import FORWARD_STAGES, TRAIN_STAGES

from ..assemble.p2p import P2P
from ..model import intervals
from ..model.scalars import as_int
from ..model.units import plural
from .guideline_evidence import (
    LOG_STAGES,
    LOG_STEPS,
    LOG_WEIGHT_SYNC,
    Evidence,
    Inapplicable,
    Measured,
    Missing,
    Result,
    in_steps,
    per_step,
    ratio,
    run_value,
)
from .log_steps import TOTAL_FROM_STAGES

Metric = Callable[[Evidence, Check], Result]

OPTIMIZER_STEP = "Optimizer.step#"
"""Prefix of the profiler's optimizer-step range (``Optimizer.step#AdamW.step``)."""
SEND = "send"
EXECUTION_LAG: dict[str, float] = {"sync": 0.0, "stage_fused": 0.0, "one_step_off": 1.0}
"""Policy versions between generation and training that an execution mode implies."""


# --- stage shares ----------------------------------------------------------------------------


def _share(*stages: str, absent_is_zero: bool = False) -> Metric:
    def metric(ev: Evidence, check: Check) -> Result:
        return ev.stage_time(stages, absent_is_zero=absent_is_zero)

    return metric


def rollout_share(ev: Evidence, check: Check) -> Result:
    """f_gen; a rollout-only run (an inference engine's trace) has no training step for the
    rollout to be a share of: its engine steps hold host ranges whose GPU work runs past them."""
    if ev.placement[0] == "rollout_only":
        return Inapplicable("rollout-only run: no training stages to weigh the rollout against")
    return ev.stage_time(["rollout"])


def weight_sync_share(ev: Evidence, check: Check) -> Result:
    """f_sync from the ``weight_sync`` product (trace), else the log's weight-sync timer."""
    synced = ev.frame("weight_sync")
    if synced is not None and ev.windows is not None and synced["time_ns"].sum() > 0:
        frame = ratio(
            ev.windows.with_columns(pl.col("wall_ns").alias("den")),
            synced.select("step", pl.col("time_ns").alias("num")),
        )
        return Measured(per_step(frame), f"weight-sync stage in the trace, {in_steps(frame)}")
    result = ev.stage_time(["weight_sync"])
    logged = ev.frame(LOG_WEIGHT_SYNC)
    if isinstance(result, Missing) and logged is not None and logged["note"][0]:
        return Missing(f"{result.needs}; {logged['note'][0]}")
    return result


def old_logprob_share(ev: Evidence, check: Check) -> Result:
    """f_old, judged only when K = 1 (one optimizer step per rollout)."""
    measured = ev.stage_time(["old_logprob"])
    if not isinstance(measured, Measured):
        return measured
    value = run_value(measured.per_step, check)
    k, how = updates_per_rollout(ev)
    if value is None or check.judge(value)[0] is None:
        return Measured(
            measured.per_step, f"{measured.basis}; K = {k if k is not None else 'unknown'}"
        )
    if k is None:
        return Missing(
            f"K, the optimizer steps per rollout (PPO epochs and mini-batches in the config, or "
            "optimizer-step ranges in the trace): old "
            f"log-probs take {100 * value:.3g}% of the step"
        )
    if k > 1:
        return Inapplicable(
            f"K = {k} optimizer steps per rollout ({how}): old log-probs are needed "
            f"(they take {100 * value:.3g}% of the step)"
        )
    return Measured(measured.per_step, f"{measured.basis}; K = 1 ({how})")


def config_amount(ev: Evidence, fact: str) -> float | None:
    """A config fact as a finite number, else None: a log header may state any text (``auto``,
    ``1e999``), and a metric then says what it needs instead of failing."""
    value = ev.config(fact)
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def config_count(ev: Evidence, fact: str) -> int | None:
    """A config fact as a positive whole number (a size, a degree, a count), else None."""
    number = config_amount(ev, fact)
    return int(number) if number is not None and number >= 1 and number.is_integer() else None


def config_flag(ev: Evidence, fact: str) -> bool | None:
    """A config fact as true/false; a log may write a flag as text (``"False"`` is not true)."""
    value = ev.config(fact)
    if isinstance(value, bool) or value is None:
        return value
    return {"true": True, "false": False, "1": True, "0": False}.get(str(value).strip().lower())


def updates_per_rollout(ev: Evidence) -> tuple[int | None, str]:
    """K = E·⌈N/b⌉ from the config, else the most optimizer steps one rank takes inside one
    actor-update range of a step in the trace."""
    epochs, batch, mini = (
        config_count(ev, f) for f in ("ppo_epochs", "train_batch_size", "ppo_mini_batch_size")
    )
    if epochs is not None and batch is not None and mini is not None:
        return epochs * math.ceil(
            batch / mini
        ), f"config: {epochs} epochs × ⌈{batch}/{mini}⌉ mini-batches"
    ranges = ev.frame("stage_ranges")
    if ranges is None:
        return None, ""
    marks = ev.products["aligned"].filter(
        pl.col("kind").is_in(["annotation", "cpu_op", "python", "gpu_annotation"])
    )
    names = [
        n
        for n in marks["name"].unique().cast(pl.String).to_list()
        if n and n.startswith(OPTIMIZER_STEP)
    ]
    if not names:
        return None, ""
    steps_taken = marks.filter(pl.col("name").is_in(names)).select(
        "rank", pl.col("start_ns").alias("t")
    )
    update = ranges.filter(pl.col("stage") == "actor_update").select(
        "rank", "step", "start_ns", "end_ns"
    )
    inside = update.join(steps_taken, on="rank").filter(
        (pl.col("t") >= pl.col("start_ns")) & (pl.col("t") < pl.col("end_ns"))
    )
    if inside.height == 0:
        return None, ""
    k = as_int(inside.group_by("rank", "step").len()["len"].max())
    return k, "optimizer-step ranges in the trace's actor update"


# --- rollout tail ----------------------------------------------------------------------------


def _rollout_ends(ev: Evidence) -> pl.DataFrame | Missing:
    """Per step: rollout span start, the median and last rank's rollout end, that last rank."""
    if ev.device_timeline is None:
        return Missing("rollout ranges on at least two ranks (a trace)")
    per_rank = (
        ev.device_timeline.filter(pl.col("stage") == "rollout")
        .group_by("step", "rank")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    )
    ends = per_rank.group_by("step").agg(
        pl.col("start_ns").min().alias("span_start"),
        pl.col("end_ns").median().cast(pl.Int64).alias("median_end"),
        pl.col("end_ns").max().alias("last_end"),
        pl.col("rank").sort_by("end_ns").last().alias("rank"),
        pl.len().alias("ranks"),
    ).filter((pl.col("ranks") >= 2) & (pl.col("last_end") > pl.col("span_start")))
    if ends.height == 0:
        return Missing("rollout ranges on at least two ranks (a trace)")
    return ends.sort("step")


def tail_share(ev: Evidence, check: Check) -> Result:
    ends = _rollout_ends(ev)
    if isinstance(ends, Missing):
        return ends
    frame = ends.select(
        "step",
        "rank",
        pl.col("median_end").alias("start_ns"),
        pl.col("last_end").alias("end_ns"),
        (
            (pl.col("last_end") - pl.col("median_end"))
            / (pl.col("last_end") - pl.col("span_start"))
        ).alias("value"),
    )
    return Measured(
        per_step(frame),
        f"rollout ends of {plural(as_int(ends['ranks'].max()), 'rank')} in the trace, "
        f"{in_steps(frame)}",
    )


def unhidden_tail_share(ev: Evidence, check: Check) -> Result:
    """|tail ∖ S2–S5| / rollout span, tail = [median rank's rollout end, last rollout end]."""
    ends = _rollout_ends(ev)
    if isinstance(ends, Missing):
        return ends
    assert ev.timeline is not None
    tails = ends.select(
        "step", pl.col("median_end").alias("start_ns"), pl.col("last_end").alias("end_ns")
    )
    prep = ev.timeline.filter(pl.col("stage").cast(pl.String).is_in(list(FORWARD_STAGES))).select(
        "step", "start_ns", "end_ns"
    )
    hidden = (
        intervals.length(intervals.intersection(tails, prep, ["step"]), ["step"], "hidden")
        if prep.height
        else None
    )
    frame = (
        ends.join(hidden, on="step", how="left")
        if hidden is not None
        else ends.with_columns(pl.lit(0).alias("hidden"))
    )
    frame = frame.select(
        "step",
        "rank",
        pl.col("median_end").alias("start_ns"),
        pl.col("last_end").alias("end_ns"),
        (
            (pl.col("last_end") - pl.col("median_end") - pl.col("hidden").fill_null(0))
            / (pl.col("last_end") - pl.col("span_start"))
        ).alias("value"),
    )
    return Measured(
        per_step(frame), f"rollout ends and preparation ranges in the trace, {in_steps(frame)}"
    )


def length_ratio(ev: Evidence, check: Check) -> Result:
    top, mean = ev.logged("response_length_max"), ev.logged("response_length_mean")
    if top is None or mean is None:
        return Missing(check.needs)
    frame = top[1].join(mean[1].rename({"value": "mean"}), on="step").filter(pl.col("mean") > 0)
    frame = frame.with_columns((pl.col("value") / pl.col("mean")).alias("value"))
    return Measured(per_step(frame), f"logged {top[0]} ÷ {mean[0]}, {in_steps(frame)}")


def _logged(quantity: str) -> Metric:
    def metric(ev: Evidence, check: Check) -> Result:
        found = ev.logged(quantity)
        if found is None:
            return Missing(check.needs)
        return Measured(per_step(found[1]), f"logged {found[0]}, {in_steps(found[1])}")

    return metric


def preemption_ratio(ev: Evidence, check: Check) -> Result:
    """Preemptions per request; verl logs -1 for requests whose engine does not report them."""
    found = ev.logged("preemptions_per_request")
    if found is None:
        return Missing(check.needs)
    key, values = found
    reported = values.filter(pl.col("value") >= 0)
    if reported.height == 0:
        return Missing(f"{check.needs}; {key} is negative: the engine did not report preemptions")
    return Measured(
        per_step(reported),
        f"logged {key} (an upper bound of the preempted fraction), {in_steps(reported)}",
    )


# --- placement and memory --------------------------------------------------------------------


def engine_memory_share(ev: Evidence, check: Check) -> Result:
    """Colocated only: the engine's memory share kept through training, from its settings."""
    placement = ev.placement[0]
    if placement == "disaggregated":
        return Inapplicable(
            f"the rollout engine has {ev.device_noun}s of its own (disaggregated placement)"
        )
    if placement is None:
        return Missing("the placement (colocated or not) and the engine's memory settings")
    freed, eager = config_flag(ev, "free_cache_engine"), config_flag(ev, "enforce_eager")
    share = config_amount(ev, "gpu_memory_utilization")
    if freed is None:
        return Missing("whether the engine frees its KV cache before training (free_cache_engine)")
    graphs = (
        "; CUDA graphs are captured (enforce_eager off) and stay resident"
        if not eager and (ev.device or "cuda") == "cuda"
        else ""
    )
    told = f"{placement} placement from the {ev.placement[2]}"
    if freed:
        return Measured(
            per_step(pl.DataFrame({"value": [0.0]})),
            f"config: free_cache_engine = true, the KV cache is freed before training{graphs}; "
            f"{told}",
        )
    if share is None:
        return Missing("the engine's gpu_memory_utilization")
    return Measured(
        per_step(pl.DataFrame({"value": [share]})),
        f"config: free_cache_engine = false, the engine keeps gpu_memory_utilization = {share} "
        f"through training{graphs}; {told}",
    )


def pool_idle(ev: Evidence, check: Check) -> Result:
    """The larger pool's pool_wait share (trace), else the larger logged idle ratio."""
    if ev.disaggregated is False:
        return Inapplicable("colocated: every rank runs both rollout and training")
    bubbles, pools = ev.frame("bubbles"), ev.pools
    if (
        pools is not None
        and bubbles is not None
        and {"rollout", "train"} <= set(pools["pool"].cast(pl.String).to_list())
    ):
        pools = pools.select("rank", pl.col("pool").cast(pl.String))
        rows = bubbles.join(pools, on="rank").filter(pl.col("pool").is_in(["rollout", "train"]))
        windows = (
            rows.unique(["step", "rank"])
            .group_by("step", "pool")
            .agg(pl.col("window_ns").sum().alias("den"))
        )
        waits = (
            rows.filter(pl.col("cause") == "pool_wait")
            .group_by("step", "pool")
            .agg(pl.col("idle_ns").sum().alias("num"))
        )
        per_pool = ratio(windows, waits, on=("step", "pool"))
        worst = (
            per_pool.sort("value", descending=True).group_by("step", maintain_order=True).first()
        )
        frame = ev.in_windows(worst)
        pools_named = ", ".join(
            f"step {s}: {p}" for s, p in worst.sort("step").select("step", "pool").iter_rows()
        )
        return Measured(per_step(frame), f"pool_wait idle per pool in the trace ({pools_named})")
    logged = [found for q in ("idle_train", "idle_rollout") if (found := ev.logged(q)) is not None]
    if logged:
        both = (
            pl.concat([values for _, values in logged]).group_by("step").agg(pl.col("value").max())
        )
        return Measured(
            per_step(both), f"logged {', '.join(k for k, _ in logged)}, {in_steps(both)}"
        )
    return Missing(check.needs)


def actor_critic_overlap(ev: Evidence, check: Check) -> Result:
    if ev.disaggregated is False:
        return Inapplicable("colocated: actor and critic share every device")
    if ev.device_timeline is None:
        return Missing(check.needs)
    updates = ev.device_timeline.filter(pl.col("stage").cast(pl.String).is_in(list(TRAIN_STAGES)))
    if updates.filter(pl.col("stage") == "critic_update").height == 0:
        return Inapplicable("no critic update (a critic-free algorithm)")
    sets = updates.group_by("step", "stage").agg(pl.col("rank").unique())
    actor = sets.filter(pl.col("stage") == "actor_update").select("step", pl.col("rank").alias("a"))
    critic = sets.filter(pl.col("stage") == "critic_update").select(
        "step", pl.col("rank").alias("c")
    )
    pairs = actor.join(critic, on="step")
    if pairs.height == 0:
        return Missing("steps with both actor and critic updates")
    if pairs.select(pl.col("a").list.set_intersection("c").list.len().gt(0).any()).item():
        return Inapplicable("actor and critic updates run on the same ranks")
    a = updates.filter(pl.col("stage") == "actor_update").select("step", "start_ns", "end_ns")
    c = updates.filter(pl.col("stage") == "critic_update").select("step", "start_ns", "end_ns")
    both = intervals.intersection(a, c, ["step"])
    frame = (
        intervals.union_length(a, ["step"], "la")
        .join(intervals.union_length(c, ["step"], "lc"), on="step")
        .join(
            intervals.union_length(both, ["step"], "lo")
            if both.height
            else pl.DataFrame(schema={"step": pl.Int32, "lo": pl.Int64}),
            on="step",
            how="left",
        )
        .with_columns((pl.col("lo").fill_null(0) / pl.min_horizontal("la", "lc")).alias("value"))
    )
    frame = ev.in_windows(frame)
    return Measured(
        per_step(frame),
        f"actor and critic update ranges on disjoint ranks in the trace, {in_steps(frame)}",
    )


# --- parallelism -----------------------------------------------------------------------------


def _groups(collectives: pl.DataFrame, dims: list[str]) -> pl.DataFrame:
    """group (its pg_ranks), rank: the members of every process group of ``dims``."""
    groups = collectives.filter(
        pl.col("dim").cast(pl.String).is_in(dims) & pl.col("pg_ranks").is_not_null()
    )
    return (
        groups.select(pl.col("pg_ranks").alias("group")).unique()
        .with_columns(pl.col("group").str.split(",").alias("rank"))
        .explode("rank")
        .with_columns(pl.col("rank").str.strip_chars().cast(pl.Int32, strict=False))
        .drop_nulls("rank")
    )


OTHER_PARALLEL = ("tp", "pp", "sp", "cp", "ep")
"""Dimensions whose collectives are not data parallel: the DP guidelines (G14, G16) leave
them out. HTA's sampled pair under ``--layout tp=2`` has only tp collectives, and G14 asked to
balance DP ranks it does not have while G16 counted TP all-reduces as DP communication."""


def _other_parallel(collectives: pl.DataFrame | None) -> pl.DataFrame:
    """rank, start_ns, end_ns and dim of the collective calls of :data:`OTHER_PARALLEL`."""
    if collectives is None:
        return pl.DataFrame(schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                    "dim": pl.String})
    return collectives.filter(pl.col("dim").cast(pl.String).is_in(OTHER_PARALLEL)).select(
        "rank", "start_ns", "end_ns", pl.col("dim").cast(pl.String)).unique(
        ["rank", "start_ns", "end_ns"], keep="first", maintain_order=True)


def _dims(calls: pl.DataFrame) -> str:
    """The dimensions of ``calls``, in :data:`OTHER_PARALLEL` order."""
    return ", ".join(d for d in OTHER_PARALLEL if d in set(calls["dim"]))


def dp_imbalance(ev: Evidence, check: Check) -> Result:
    """max/mean − 1 of per-rank update compute within DP groups (trace), else of logged tokens."""
    activity = ev.frame("activity")
    compute = None
    if activity is not None:
        compute = activity.filter(
            pl.col("stage").cast(pl.String).is_in(list(TRAIN_STAGES))
            & ~pl.col("is_collective")
            & pl.col("step").is_not_null()
        )
    if compute is not None and compute.height:
        busy = intervals.union_length(compute, ["step", "stage", "rank"], "busy")
        collectives = ev.frame("collectives")
        groups = _groups(collectives, ["dp", "fsdp"]) if collectives is not None else None
        scope = "DP groups"
        if groups is None or groups.height == 0:
            other = _other_parallel(collectives)
            if other.height:
                return Missing(
                    f"DP groups (the collectives are {_dims(other)}, none DP: ranks of other "
                    "dimensions do different or identical work by design)")
            groups = busy.select("rank").unique().with_columns(pl.lit("all").alias("group"))
            scope = "all updating ranks (no DP groups recorded)"
        per_group = (
            busy.join(groups, on="rank")
            .group_by("step", "stage", "group")
            .agg(
                (pl.col("busy").max() / pl.col("busy").mean() - 1).alias("value"),
                pl.col("rank").sort_by("busy").last(),
                pl.len().alias("n"),
            )
            .filter(pl.col("n") >= 2)
        )
        if per_group.height:
            worst = ev.in_windows(
                per_group.sort("value", descending=True)
                .group_by("step", maintain_order=True)
                .first()
            )
            return Measured(
                per_step(worst),
                f"update compute per rank within {scope} in the trace, {in_steps(worst)}",
            )
    top, mean = ev.logged("seqlen_max"), ev.logged("seqlen_mean")
    if top is None or mean is None:
        return Missing(check.needs)
    frame = top[1].join(mean[1].rename({"value": "mean"}), on="step").filter(pl.col("mean") > 0)
    frame = frame.with_columns((pl.col("value") / pl.col("mean") - 1).alias("value"))
    return Measured(
        per_step(frame),
        f"logged {top[0]} ÷ {mean[0]} − 1 (tokens per DP rank), {in_steps(frame)}",
    )


def exposed_update_comm(ev: Evidence, check: Check) -> Result:
    """Collective time in S7/S8 that no compute on the same rank hides ÷ update time."""
    activity = ev.frame("activity")
    if activity is None or ev.device_timeline is None:
        return Missing(check.needs)
    updating = activity.filter(
        pl.col("stage").cast(pl.String).is_in(list(TRAIN_STAGES)) & pl.col("step").is_not_null()
    )
    if updating.height == 0:
        return Missing("device activity inside the update stages (a trace)")
    keys = ["step", "rank"]
    collective = updating.filter(pl.col("is_collective"))
    other = _other_parallel(ev.frame("collectives"))
    comm = collective.join(other, on=["rank", "start_ns", "end_ns"], how="anti")
    compute = updating.filter(~pl.col("is_collective"))
    span = intervals.union_length(
        ev.device_timeline.filter(pl.col("stage").cast(pl.String).is_in(list(TRAIN_STAGES))),
        keys,
        "den",
    )
    exposed = (
        intervals.length(intervals.difference(comm, compute, keys), keys, "num")
        if comm.height
        else pl.DataFrame(schema={"step": pl.Int32, "rank": pl.Int32, "num": pl.Int64})
    )
    per_rank = ratio(span, exposed, on=keys)
    frame = (
        per_rank.group_by("step")
        .agg(
            pl.col("num").sum().cast(pl.Float64),
            pl.col("den").sum().cast(pl.Float64),
            pl.col("rank").sort_by("value").last(),
        )
        .with_columns((pl.col("num") / pl.col("den")).alias("value"))
    )
    frame = ev.in_windows(frame)
    left_out = collective.height - comm.height
    kept = other.join(collective, on=["rank", "start_ns", "end_ns"], how="semi")
    note = f"; {plural(left_out, 'collective call')} of {_dims(kept)} left out" if left_out else ""
    if not comm.height:
        note += "; no DP/FSDP collectives inside the updates" if left_out else \
            "; no collectives inside the updates"
    return Measured(
        per_step(frame),
        f"update-stage activity of {plural(per_rank['rank'].n_unique(), 'rank')} in the "
        f"trace{note}",
    )


def tp_cross_node(ev: Evidence, check: Check) -> Result:
    """TP groups whose members sit on more than one host (trace), else from TP size and GPUs
    per node assuming ranks are laid out TP-first."""
    collectives = ev.frame("collectives")
    if collectives is not None and ev.pools is not None:
        hosts = ev.pools.select("rank", "host")
        if hosts["host"].null_count() < hosts.height:
            members = _groups(collectives, ["tp"]).join(hosts, on="rank", how="left")
            spans = members.group_by("group").agg(
                pl.col("host").n_unique().alias("hosts"), pl.col("rank").min()
            )
            bad = spans.filter(pl.col("hosts") > 1).sort("rank")
            frame = pl.DataFrame(
                {"value": [float(bad.height)], "rank": [bad["rank"][0] if bad.height else None]}
            )
            shown = f": {', '.join(bad['group'].head(3).to_list())}" if bad.height else ""
            return Measured(
                per_step(frame),
                f"{plural(spans.height, 'TP group')} against the hosts of their ranks in the "
                f"trace{shown}",
            )
    per_node, world = config_count(ev, "gpus_per_node"), config_count(ev, "world_size")
    counted = {name: config_count(ev, name) for name in ("rollout_tp", "tensor_parallel")}
    sizes = {k: v for k, v in counted.items() if v is not None}
    if per_node is None or world is None or not sizes:
        return Missing(check.needs)
    crossing = sum(
        1 for size in sizes.values() for first in range(0, world - size + 1, size)
        if first // per_node != (first + size - 1) // per_node
    )
    shown = ", ".join(f"{k} = {v}" for k, v in sizes.items())
    return Measured(
        per_step(pl.DataFrame({"value": [float(crossing)]})),
        f"config: {shown}, {plural(per_node, ev.device_noun)} per node, "
        f"{plural(world, ev.device_noun)}, ranks laid out TP-first",
    )


def pipeline_bubble(ev: Evidence, check: Check) -> Result:
    """β_pp = (pp − 1)/(m + pp − 1); pp and m from PP collectives (trace) or the config."""
    collectives = ev.frame("collectives")
    if collectives is not None:
        pp_rows = collectives.filter(pl.col("dim") == "pp")
        if pp_rows.height == 0:
            unknown = collectives.filter(
                (pl.col("dim") == "unknown") & pl.col("coll").is_in(P2P)).height
            if unknown:
                return Missing(
                    f"the pipeline degree: the trace has {plural(unknown, 'send/recv call')} "
                    "of unknown dimension (no pipeline schedule named; --layout pp=N says it)")
            return Measured(
                per_step(pl.DataFrame({"value": [0.0]})),
                "no pipeline-parallel collectives among "
                f"{collectives.height} in the trace (pp = 1)",
            )
        return _traced_bubble(ev, pp_rows)
    strategy, pp = ev.config("train_strategy"), config_count(ev, "pipeline_parallel")
    if pp is None and strategy is not None and str(strategy).startswith("fsdp"):
        return Measured(
            per_step(pl.DataFrame({"value": [0.0]})),
            f"config: {strategy} training has no pipeline (pp = 1)",
        )
    if pp is None:
        return Missing(check.needs)
    names = (
        "ppo_mini_batch_size",
        "rollout_n",
        "ppo_micro_batch_size_per_gpu",
        "world_size",
        "tensor_parallel",
    )
    facts = {f: config_count(ev, f) for f in names}
    if pp == 1:
        return Measured(per_step(pl.DataFrame({"value": [0.0]})), "config: pp = 1")
    known = {f: v for f, v in facts.items() if v is not None}
    if len(known) < len(facts):
        return Missing(
            "the micro-batch count: mini-batch, rollout n, micro-batch per GPU, world and TP size"
        )
    dp = known["world_size"] // (
        known["tensor_parallel"] * pp * (config_count(ev, "context_parallel") or 1)
    )
    m = (
        known["ppo_mini_batch_size"]
        * known["rollout_n"]
        / max(dp, 1)
        / known["ppo_micro_batch_size_per_gpu"]
    )
    beta = (pp - 1) / (m + pp - 1)
    return Measured(
        per_step(pl.DataFrame({"value": [beta]})),
        f"config: pp = {pp}, m = {m:g} micro-batches per flush",
    )


def pipeline_depth(pp_rows: pl.DataFrame) -> tuple[int, str] | None:
    """pp: the PP groups' stated size, else the length of their member lists; None when the
    trace states neither (a send/recv tagged PP by its name alone)."""
    sizes = pp_rows["group_size"].drop_nulls()
    if sizes.len():
        return as_int(sizes.max()), "the size of its PP groups"
    members = pp_rows["pg_ranks"].drop_nulls().str.split(",").list.len()
    if members.len():
        return as_int(members.max()), "the members of its PP groups"
    return None


def _traced_bubble(ev: Evidence, pp_rows: pl.DataFrame) -> Result:
    depth = pipeline_depth(pp_rows)
    if depth is None:
        return Missing(
            f"the pipeline depth: {pp_rows.height} pipeline-parallel collectives in the trace "
            "name no process group size or members"
        )
    pp, told = depth
    members = pl.element().str.strip_chars().cast(pl.Int32, strict=False)
    firsts = (
        pp_rows.select(pl.col("pg_ranks").str.split(",").list.eval(members).list.min().alias("rank"))
        .drop_nulls().unique()
    )
    sends = (
        pp_rows.filter(
            (pl.col("coll") == SEND)
            & (pl.col("stage") == "actor_update")
            & pl.col("step").is_not_null()
        )
        .join(firsts, on="rank")
        .group_by("step", "rank")
        .len()
    )
    if sends.height == 0:
        return Missing(
            "pipeline sends of the first stage inside the actor update (to count micro-batches)"
        )
    k, how = updates_per_rollout(ev)
    flushes = k or 1
    frame = (
        sends.group_by("step")
        .agg(pl.col("len").min().alias("sends"), pl.col("rank").sort_by("len", "rank").first())
        .with_columns((pl.col("sends") / flushes).alias("m"))
        .with_columns(((pp - 1) / (pl.col("m") + pp - 1)).alias("value"))
    )
    frame = ev.in_windows(frame)
    assumed = how if k else "assuming one pipeline flush per update (no optimizer steps recorded)"
    m = frame["m"].to_list()
    return Measured(
        per_step(frame),
        f"pp = {pp} from {told}; m = {', '.join(f'{x:g}' for x in m)} from first-stage sends in "
        f"the actor update, {assumed}",
    )


def padding_waste(ev: Evidence, check: Check) -> Result:
    removed = config_flag(ev, "use_remove_padding")
    if removed is None:
        return Missing(check.needs)
    if removed:
        return Measured(
            per_step(pl.DataFrame({"value": [0.0]})),
            "config: use_remove_padding = true (sequences packed, no padding)",
        )
    cap_p, cap_r = config_count(ev, "max_prompt_length"), config_count(ev, "max_response_length")
    prompt, response = ev.logged("prompt_length_mean"), ev.logged("response_length_mean")
    if cap_p is None or cap_r is None or prompt is None or response is None:
        return Missing("the configured prompt and response lengths and the logged mean lengths")
    padded = float(cap_p + cap_r)
    frame = prompt[1].join(response[1].rename({"value": "r"}), on="step").with_columns(
        (1 - (pl.col("value") + pl.col("r")) / padded).alias("value")
    )
    return Measured(
        per_step(frame),
        f"config: use_remove_padding = false, padded to {cap_p} + {cap_r} tokens; "
        f"logged {prompt[0]} + {response[0]}, {in_steps(frame)}",
    )


def staleness_lag(ev: Evidence, check: Check) -> Result:
    """The logged mean lag, else the lag the execution mode implies: 0 when synchronous, 1 one
    step off; asynchronous runs need the log."""
    found = ev.logged("staleness_lag")
    if found is not None:
        return Measured(
            per_step(found[1]),
            f"logged {found[0]}, {in_steps(found[1])}; whether "
            "an off-policy correction is on is not recorded",
        )
    execution = ev.placement[1]
    lag = EXECUTION_LAG.get(execution or "")
    if lag is None:
        return Missing(check.needs)
    return Measured(
        per_step(pl.DataFrame({"value": [lag]})),
        f"{execution} execution inferred from the trace: "
        f"every sample is {lag:g} policy versions old",
    )


# --- waits and gaps --------------------------------------------------------------------------


def sync_wait_share(ev: Evidence, check: Check) -> Result:
    found, walls = ev.timer("sync_wait"), ev.frame(LOG_STEPS)
    if found is None or walls is None:
        return Missing(check.needs)
    key, seconds = found
    frame = ratio(walls.select("step", pl.col("wall_s").alias("den")), seconds)
    return Measured(per_step(frame), f"log timer {key}, {in_steps(frame)}")


def dispatch_gap_share(ev: Evidence, check: Check) -> Result:
    """Σ stage_gap idle ÷ Σ device windows (trace), else untimed step time ÷ T (logs)."""
    bubbles = ev.frame("bubbles")
    if bubbles is not None:
        windows = (
            bubbles.unique(["step", "rank"])
            .group_by("step")
            .agg(pl.col("window_ns").sum().alias("den"))
        )
        gaps = (
            bubbles.filter(pl.col("cause") == "stage_gap")
            .group_by("step")
            .agg(pl.col("idle_ns").sum().alias("num"))
        )
        frame = ev.in_windows(ratio(windows, gaps))
        return Measured(
            per_step(frame),
            f"stage_gap idle over {plural(bubbles['rank'].n_unique(), 'device')} in the trace, "
            f"{in_steps(frame)}",
        )
    stages, steps = ev.frame(LOG_STAGES), ev.frame(LOG_STEPS)
    if stages is None or steps is None:
        return Missing(check.needs)
    timed = steps.filter((pl.col("total_from") != TOTAL_FROM_STAGES) & (pl.col("stages_s") > 0))
    if timed.height == 0:
        return Missing("a step timer next to stage timers (the log lacks one or the other)")
    other = (
        stages.filter((pl.col("label") == "other") & pl.col("in_step"))
        .group_by("step")
        .agg(pl.col("seconds").sum().alias("num"))
    )
    frame = ratio(timed.select("step", pl.col("wall_s").alias("den")), other)
    return Measured(
        per_step(frame), f"step time outside every stage timer in the log, {in_steps(frame)}"
    )


METRICS: dict[str, Metric] = {
    "rollout_share": rollout_share,
    "tail_share": tail_share,
    "length_ratio": length_ratio,
    "clip_ratio": _logged("clip_ratio"),
    "weight_sync_share": weight_sync_share,
    "engine_memory_share": engine_memory_share,
    "old_logprob_share": old_logprob_share,
    "preparation_share": _share(*FORWARD_STAGES),
    "unhidden_tail_share": unhidden_tail_share,
    "pipeline_bubble": pipeline_bubble,
    "dp_imbalance": dp_imbalance,
    "padding_waste": padding_waste,
    "exposed_update_comm": exposed_update_comm,
    "tp_cross_node": tp_cross_node,
    "pool_idle": pool_idle,
    "staleness_lag": staleness_lag,
    "sync_wait_share": sync_wait_share,
    "zero_variance_groups": _logged("zero_std_fraction"),
    "preemption_ratio": preemption_ratio,
    "reward_share": _share("reward"),
    "checkpoint_eval_share": _share("checkpoint", "evaluation", absent_is_zero=True),
    "dispatch_gap_share": dispatch_gap_share,
    "actor_critic_overlap": actor_critic_overlap,
}
"""Metric name (the key of ``[G<n>.checks.<metric>]``) → its implementation."""
