"""What a run's logs alone say: per-step stage times and shares, step-time statistics, the
dominant stage, weight-sync share, long-tail indicators, and what needs a trace.

Inputs (all polars, no I/O):

- ``events``: the event table; only ``kind == "log_stage"`` rows are read (``step``, ``name``,
  ``start_ns``, ``end_ns``, ``source``);
- ``metrics``: the long metrics frame (``step``, ``key``, ``value``) of the same sources;
- ``classes``: :func:`taxonomy.profiles.classify` of the log names (``name``, ``stage``,
  ``relation``, ``parent``, ``in_step``, ``covers``, ``hides``, ``rule``);
- ``metric_keys`` (optional): the profile's ``[metrics]`` table, quantity → candidate keys.

Outputs (:class:`LogSteps`, schemas below): ``stages`` (step × stage), ``steps`` (per step),
``stats`` (step-time statistics), ``stage_summary`` (run-level shares), ``dominant``,
``weight_sync``, ``long_tail`` and ``long_tail_summary``, ``unclassified`` (timer keys no rule
knows, kept by name), ``needs_trace`` (analyses logs cannot decide) and ``notes``.

Accounting. A step's *total* is its step timer (``relation = step``) or, when the log has none,
the sum of its stage timers. Stage timers (``relation = stage``) inside the step
(``in_step``) are summed per stage; a *part* (``relation = part``) with another stage than its
parent moves its time from the parent's stage to its own (verl ``reshard`` out of ``gen``), a
part of the same stage changes nothing, and parts are capped at their parent. The *residual*
``total − Σ in-step stages`` is reported as ``other``; timers outside the step (``in_step =
false``, e.g. verl ≥ 0.6 ``testing``) add to the step's *wall* time, the denominator of every
share. ``aux`` and unclassified keys are never summed. A composite timer (``covers`` several
stages the log does not split, e.g. OpenRLHF ``make_experience``) is counted under its first
stage with ``composite = true`` and a ``label`` naming all of them.

Version check. When the assumed version puts evaluation/checkpoint inside the step but the
numbers say otherwise (the stage sum exceeds the total by more than the tolerance on exactly
the steps that have them, and fits without them), or the reverse, the numbers win and
``notes`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from taxonomy.steps import StepRules, builtin_rules
from taxonomy.vocab import STAGE

from ..model.scalars import as_float

OUTPUTS = {
    "stages": "per step × stage: seconds, share of the step's "
              "wall time, inside the step or not, the keys",
    "steps": "per step: total, its origin, stage sum, residual (other), outside time, wall, "
             "dominant stage, outlier (slow), warm-up",
    "stats": "step wall-time statistics over the steps after warm-up: median, p95, mean, "
             "min, max, MAD, the outlier rule and count, the warm-up steps left out",
    "stage_summary": "per stage over the steps after warm-up: seconds, share "
                     "of their wall time, median and p95 per step",
    "dominant": "the stage with the largest share of the steps after warm-up (other excluded), "
                "other's share, and the same without the slow steps (a typical step)",
    "weight_sync": "weight-sync seconds and share of the steps after warm-up, or where the "
                   "version hides it",
    "long_tail": "per step: response length mean/max/min, max ÷ mean, clip ratio",
    "long_tail_summary": "over the run: median/p95/max of max ÷ mean, mean/max clip ratio",
    "unclassified": "timer keys no profile rule claims: steps seen, seconds",
    "needs_trace": "analyses the logs cannot decide, and why",
}
OUTPUT_NAMES: tuple[str, ...] = tuple(OUTPUTS)

STEP_RULES: StepRules = builtin_rules()
"""Which steps are slow (outliers) and which are warm-up: ``taxonomy/steps.toml``."""
TOLERANCE_S = 0.01
TOLERANCE_SHARE = 0.005
"""Reconciliation tolerance: TOLERANCE_S + TOLERANCE_SHARE × total (3-decimal rounding of ~10
timers, and untimed driver work between them)."""
TOTAL_FROM_STAGES = "sum of stage timers"
"""``total_from`` of a step that has no step timer of its own (its total is the stage sum)."""
OUTSIDE_CANDIDATES: tuple[str, ...] = ("evaluation", "checkpoint")
"""Stages whose place inside or outside the step total changed across versions (verl v0.6)."""

NEEDS_TRACE: tuple[tuple[str, str], ...] = (
    ("bubbles", "idle time by cause needs each device's kernel activity"),
    (
        "collectives",
        "communication time, bytes, bandwidth and overlap per dimension need NCCL events",
    ),
    ("critical_path", "which rank and stage set the step time needs per-rank stage intervals"),
    ("stragglers", "ranks arriving late at collectives need per-rank traces"),
    ("workdepth", "work, depth and what-if bounds need device-busy time per stage"),
    (
        "rollout_tail_time",
        "the share of generation spent on the last requests needs per-request finish times; "
        "logs give only length statistics",
    ),
)

STAGES_SCHEMA = pl.Schema({
    "step": pl.Int32(), "stage": STAGE, "label": pl.String(), "composite": pl.Boolean(),
    "seconds": pl.Float64(), "share": pl.Float64(), "in_step": pl.Boolean(), "keys": pl.String(),
})
STEPS_SCHEMA = pl.Schema(
    {
        "step": pl.Int32(),
        "total_s": pl.Float64(),
        "total_from": pl.String(),
        "stages_s": pl.Float64(),
        "residual_s": pl.Float64(),
        "outside_s": pl.Float64(),
        "wall_s": pl.Float64(),
        "dominant": STAGE,
        "outlier": pl.Boolean(),
        "outlier_cause": pl.String(),
        "warmup": pl.Boolean(),
    }
)
STATS_SCHEMA = pl.Schema(
    {
        "n_steps": pl.Int64(),
        "first_step": pl.Int32(),
        "last_step": pl.Int32(),
        "median_s": pl.Float64(),
        "p95_s": pl.Float64(),
        "mean_s": pl.Float64(),
        "min_s": pl.Float64(),
        "max_s": pl.Float64(),
        "mad_s": pl.Float64(),
        "outlier_threshold_s": pl.Float64(),
        "n_outliers": pl.Int64(),
        "outlier_rule": pl.String(),
        "n_warmup": pl.Int64(),
        "warmup_steps": pl.String(),
        "warmup_ratio": pl.Float64(),
        "warmup_rule": pl.String(),
    }
)
STAGE_SUMMARY_SCHEMA = pl.Schema({
    "stage": STAGE, "label": pl.String(), "composite": pl.Boolean(), "seconds": pl.Float64(),
    "share": pl.Float64(), "median_s": pl.Float64(), "p95_s": pl.Float64(), "n_steps": pl.Int64(),
})
DOMINANT_SCHEMA = pl.Schema({
    "stage": STAGE, "label": pl.String(), "share": pl.Float64(), "other_share": pl.Float64(),
    "typical_stage": STAGE, "typical_label": pl.String(), "typical_share": pl.Float64(),
    "slow_steps": pl.String(),
})
"""``stage``/``share``: over the steps after warm-up; ``typical_*``: the same over those steps
that are not slow either (``slow_steps`` lists the slow ones left out)."""
WEIGHT_SYNC_SCHEMA = pl.Schema({
    "status": pl.String(), "seconds": pl.Float64(), "share": pl.Float64(), "median_s": pl.Float64(),
    "where": pl.String(), "note": pl.String(),
})
LONG_TAIL_SCHEMA = pl.Schema({
    "step": pl.Int32(), "mean_len": pl.Float64(), "max_len": pl.Float64(), "min_len": pl.Float64(),
    "max_over_mean": pl.Float64(), "clip_ratio": pl.Float64(),
})
LONG_TAIL_SUMMARY_SCHEMA = pl.Schema(
    {
        "n_steps": pl.Int64(),
        "median_max_over_mean": pl.Float64(),
        "p95_max_over_mean": pl.Float64(),
        "max_max_over_mean": pl.Float64(),
        "mean_clip_ratio": pl.Float64(),
        "max_clip_ratio": pl.Float64(),
        "keys": pl.String(),
    }
)
UNCLASSIFIED_SCHEMA = pl.Schema({
    "name": pl.String(), "n_steps": pl.Int64(), "seconds": pl.Float64(), "median_s": pl.Float64(),
    "stage_guess": pl.String(), "rule": pl.String(),
})
STAGE_GUESSES: tuple[tuple[str, str], ...] = (
    (r"(?i)update_critic|critic_update", "critic_update"),
    (r"(?i)weight|sync|reshard|broadcast|param", "weight_sync"),
    (r"(?i)(?:^|[/_.])ref(?:[/_.]|$)", "ref_logprob"),
    (r"(?i)log_?prob", "old_logprob"),
    (r"(?i)critic|value", "values"),
    (r"(?i)reward|score|verif|judge|sandbox", "reward"),
    (r"(?i)(?:^|[/_.])adv", "advantage"),
    (r"(?i)save|ckpt|checkpoint", "checkpoint"),
    (r"(?i)(?:^|[/_.])(?:val|test|eval)", "evaluation"),
    (r"(?i)gen|rollout|sampl|agent|filter|decode|prefill", "rollout"),
    (r"(?i)update|train|backward|optim", "actor_update"),
    (r"(?i)data|load|batch", "data_load"),
)
"""The stage an unmapped timer's name suggests (first match), offered in its ``--rules`` line
for the user to confirm; ``other`` when nothing matches."""
_REGEX_META = str.maketrans({c: "\\" + c for c in "\\.+*?()|[]{}^$"})
NEEDS_TRACE_SCHEMA = pl.Schema({"analysis": pl.String(), "reason": pl.String()})

LONG_TAIL_KEYS: tuple[str, ...] = (
    "response_length_mean",
    "response_length_max",
    "response_length_min",
    "clip_ratio",
)


@dataclass
class LogSteps:
    stages: pl.DataFrame
    steps: pl.DataFrame
    stats: pl.DataFrame
    stage_summary: pl.DataFrame
    dominant: pl.DataFrame
    weight_sync: pl.DataFrame
    long_tail: pl.DataFrame
    long_tail_summary: pl.DataFrame
    unclassified: pl.DataFrame
    needs_trace: pl.DataFrame
    notes: list[str] = field(default_factory=list)


def compute(
    events: pl.DataFrame,
    metrics: pl.DataFrame,
    classes: pl.DataFrame,
    metric_keys: Mapping[str, Sequence[str]] | None = None,
) -> LogSteps:
    notes: list[str] = []
    rows = _timer_rows(events, classes)
    stage_rows, parts_note = _stage_rows(rows)
    notes += parts_note
    steps = _totals(rows, stage_rows)
    stage_rows, steps, flip_notes = _check_in_step(stage_rows, steps)
    notes += flip_notes
    stages, steps = _shares(stage_rows, steps, notes)
    steps, stats = _outliers(stages, steps)
    counted = steps.filter(~pl.col("warmup").fill_null(False))
    counted_stages = stages.join(counted.select("step"), on="step", how="semi")
    summary = _summary(counted_stages, counted)
    typical = counted.filter(~pl.col("outlier").fill_null(False))
    dominant = _dominant(
        summary,
        _summary(stages.join(typical.select("step"), on="step", how="semi"), typical),
        counted.filter(pl.col("outlier").fill_null(False))["step"].to_list(),
    )
    weight_sync, ws_note = _weight_sync(counted_stages, counted, rows)
    long_tail, tail_summary = _long_tail(metrics, metric_keys or {})
    unclassified = _unclassified(rows)
    needs = list(NEEDS_TRACE)
    if ws_note:
        needs.append(("weight_sync", ws_note))
    if long_tail.height == 0:
        needs.append(("long_tail", "the log has no response-length statistics"))
    return LogSteps(
        stages=stages,
        steps=steps,
        stats=stats,
        stage_summary=summary,
        dominant=dominant,
        weight_sync=weight_sync,
        long_tail=long_tail,
        long_tail_summary=tail_summary,
        unclassified=unclassified,
        needs_trace=pl.DataFrame(needs, schema=NEEDS_TRACE_SCHEMA, orient="row"),
        notes=notes,
    )


def _timer_rows(events: pl.DataFrame, classes: pl.DataFrame) -> pl.DataFrame:
    """One row per step and timer key, with its classification (see :func:`one_per_key`)."""
    duration = pl.col("end_ns") - pl.col("start_ns")
    rows = events.filter((pl.col("kind") == "log_stage") & pl.col("step").is_not_null()).select(
        pl.col("step").cast(pl.Int32), pl.col("name").cast(pl.String), "source",
        (duration / 1e9).alias("seconds"), duration.alias("_ns"),
    )
    rows = one_per_key(rows, ["step", "name"], "seconds", digits=_digits(pl.col("_ns"))).drop("_ns")
    known = classes.with_columns(pl.col("name").cast(pl.String), pl.col("relation").cast(pl.String))
    rows = rows.join(known, on="name", how="left").with_columns(
        pl.col("relation").fill_null("unknown"),
        pl.col("stage").fill_null("other"),
        pl.col("in_step").fill_null(True),
    )
    return rows.with_columns(
        pl.when(pl.col("covers").list.len() > 1)
        .then(pl.col("covers").list.join("+"))
        .otherwise(pl.col("stage").cast(pl.String))
        .alias("label"),
        (pl.col("covers").list.len() > 1).fill_null(False).alias("composite"),
    )


def _digits(value: pl.Expr) -> pl.Expr:
    """How many digits a value is stated with (trailing zeros do not count)."""
    return value.cast(pl.String).str.strip_chars_end("0").str.len_chars()


def one_per_key(
    rows: pl.DataFrame, keys: list[str], value: str, digits: pl.Expr | None = None
) -> pl.DataFrame:
    """One row per ``keys``: within a source its last statement; across sources (a console log
    and ``trainer_state.json`` state the same timer, the console rounded) the one stated with the
    most digits (``digits``, by default those of ``value``), then the larger — so the answer does
    not depend on the order the files were given in."""
    last = rows.unique(subset=["source", *keys], keep="last", maintain_order=True)
    last = last.with_columns(
        (_digits(pl.col(value)) if digits is None else digits).alias("_digits")
    )
    ranked = last.sort(
        [*keys, "_digits", value], descending=[False] * len(keys) + [True, True], nulls_last=True
    )
    return ranked.unique(subset=keys, keep="first", maintain_order=True).drop("_digits")


def _stage_rows(rows: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Stage timers with parts carved out of their parents (capped at the parent's time)."""
    cols = ["step", "name", "stage", "label", "composite", "in_step", "seconds"]
    stages = rows.filter(pl.col("relation") == "stage").select(cols)
    parts = rows.filter(pl.col("relation") == "part").select([*cols, "parent"])
    parents = stages.select(
        "step", pl.col("name").alias("parent"), pl.col("stage").alias("p_stage"),
        pl.col("in_step").alias("p_in_step"), pl.col("seconds").alias("p_seconds"),
    )
    parts = parts.join(parents, on=["step", "parent"], how="left")
    orphans = parts.filter(pl.col("p_stage").is_null()).select(cols)
    moving = parts.filter(pl.col("p_stage").is_not_null() & (pl.col("stage") != pl.col("p_stage")))
    notes = []
    if moving.height:
        moving = moving.with_columns(pl.col("seconds").sum().over("step", "parent").alias("_carve"))
        over = moving.filter(pl.col("_carve") > pl.col("p_seconds") + TOLERANCE_S)
        if over.height:
            names = ", ".join(sorted(set(over["name"].to_list())))
            notes.append(
                f"{over['step'].n_unique()} steps: parts ({names}) "
                "exceed their parent timer; they overlap it "
                "(asynchronous execution) and are capped at the parent's time"
            )
        scale = (
            pl.when(pl.col("_carve") > pl.col("p_seconds"))
            .then(pl.col("p_seconds") / pl.col("_carve"))
            .otherwise(1.0)
        )
        moving = moving.with_columns(
            (pl.col("seconds") * scale).alias("seconds"), pl.col("p_in_step").alias("in_step")
        )
        carved = moving.group_by("step", "parent").agg(pl.col("seconds").sum().alias("_out"))
        stages = (
            stages.join(carved, left_on=["step", "name"], right_on=["step", "parent"], how="left")
            .with_columns((pl.col("seconds") - pl.col("_out").fill_null(0.0)).alias("seconds"))
            .drop("_out")
        )
        stages = pl.concat([stages, moving.select(cols)])
    return pl.concat([stages, orphans]), notes


def _totals(rows: pl.DataFrame, stage_rows: pl.DataFrame) -> pl.DataFrame:
    own = (
        rows.filter(pl.col("relation") == "step")
        .group_by("step")
        .agg(
            pl.col("seconds").max().alias("own"),
            pl.col("name").sort_by("seconds").last().alias("own_name"),
        )
    )
    summed = stage_rows.group_by("step").agg(
        pl.col("seconds").filter(pl.col("in_step")).sum().alias("stages_s"),
    )
    steps = summed.join(own, on="step", how="full", coalesce=True).with_columns(
        pl.col("stages_s").fill_null(0.0)
    )
    return steps.with_columns(
        pl.coalesce("own", "stages_s").alias("total_s"),
        pl.when(pl.col("own").is_not_null()).then(pl.col("own_name")).otherwise(pl.lit(TOTAL_FROM_STAGES)).alias("total_from"),
    ).drop("own", "own_name").sort("step")


def _tolerance(total: pl.Expr) -> pl.Expr:
    return TOLERANCE_S + TOLERANCE_SHARE * total


def _check_in_step(
    stage_rows: pl.DataFrame, steps: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """Let the numbers overrule the assumed version about evaluation/checkpoint being inside the
    step total (only for steps whose total is the log's own step timer)."""
    candidate = pl.col("stage").cast(pl.String).is_in(list(OUTSIDE_CANDIDATES))
    timed = steps.filter(pl.col("total_from") != TOTAL_FROM_STAGES).select(
        "step", "total_s", "stages_s"
    )
    if timed.height == 0:
        return stage_rows, steps, []
    per = stage_rows.filter(candidate).group_by("step").agg(
        pl.col("seconds").filter(pl.col("in_step")).sum().alias("inside"),
        pl.col("seconds").filter(~pl.col("in_step")).sum().alias("outside"),
    ).join(timed, on="step", how="inner")
    if per.height == 0:
        return stage_rows, steps, []
    residual = pl.col("total_s") - pl.col("stages_s")
    tol = _tolerance(pl.col("total_s"))
    notes = []
    flip_out = per.filter(pl.col("inside") > 0)
    if (
        flip_out.height
        and flip_out.select(
            ((residual < -tol) & (residual + pl.col("inside") >= -tol)).all()
        ).item()
    ):
        stage_rows = stage_rows.with_columns(
            pl.when(candidate).then(False).otherwise(pl.col("in_step")).alias("in_step")
        )
        notes.append(
            "the step total excludes evaluation and checkpoint "
            "timers (the stage sum exceeds it on exactly the "
            f"{flip_out.height} steps that have them): they are "
            "counted outside the step, against the assumed version"
        )
    flip_in = per.filter(pl.col("outside") > 0)
    plain = timed.join(per.select("step"), on="step", how="anti")
    if flip_in.height and plain.height:
        base = float((plain["total_s"] - plain["stages_s"]).median())
        fits = ((residual - pl.col("outside") - base).abs() <= tol) & (pl.col("outside") > tol)
        if flip_in.select(fits.all()).item():
            stage_rows = stage_rows.with_columns(
                pl.when(candidate).then(True).otherwise(pl.col("in_step")).alias("in_step")
            )
            notes.append(
                "the step total includes evaluation and checkpoint timers (on the "
                f"{flip_in.height} steps that have them the "
                "residual exceeds the other steps' by exactly their "
                "time): they are counted inside the step, against the assumed version"
            )
    if notes:
        fresh = stage_rows.group_by("step").agg(
            pl.col("seconds").filter(pl.col("in_step")).sum().alias("stages_s")
        )
        steps = (
            steps.drop("stages_s")
            .join(fresh, on="step", how="left")
            .with_columns(
                pl.col("stages_s").fill_null(0.0),
                pl.when(pl.col("total_from") == TOTAL_FROM_STAGES)
                .then(pl.col("stages_s"))
                .otherwise(pl.col("total_s"))
                .alias("total_s"),
            )
        )
    return stage_rows, steps, notes


def _shares(
    stage_rows: pl.DataFrame, steps: pl.DataFrame, notes: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    outside = (
        stage_rows.filter(~pl.col("in_step"))
        .group_by("step")
        .agg(pl.col("seconds").sum().alias("outside_s"))
    )
    steps = steps.join(outside, on="step", how="left").with_columns(
        pl.col("outside_s").fill_null(0.0),
        (pl.col("total_s") - pl.col("stages_s")).round(9).alias("residual_s"),
    ).with_columns((pl.col("total_s") + pl.col("outside_s")).alias("wall_s"))
    over = steps.filter(pl.col("residual_s") < -_tolerance(pl.col("total_s")))
    if over.height:
        shown = ", ".join(str(s) for s in over["step"].head(5).to_list())
        notes.append(
            f"{over.height} steps have stage timers summing "
            f"to more than the step total (steps {shown}…): "
            "timers overlap there; their residual is negative and no 'other' is added"
        )
    grouped = stage_rows.group_by("step", "stage", "label", "composite", "in_step").agg(
        pl.col("seconds").sum(), pl.col("name").unique().sort().str.join(", ").alias("keys")
    )
    other = steps.filter(pl.col("residual_s") > 0).select(
        "step", pl.lit("other").cast(STAGE).alias("stage"), pl.lit("other").alias("label"),
        pl.lit(False).alias("composite"), pl.lit(True).alias("in_step"),
        pl.col("residual_s").alias("seconds"), pl.lit("(step total − stage timers)").alias("keys"),
    )
    stages = (
        pl.concat([grouped.cast({"stage": STAGE}), other], how="vertical_relaxed")
        .join(steps.select("step", "wall_s"), on="step", how="left")
        .with_columns(
            pl.when(pl.col("wall_s") > 0)
            .then(pl.col("seconds") / pl.col("wall_s"))
            .otherwise(None)
            .alias("share")
        )
    )
    stages = (
        stages.sort("step", "stage", "label", "composite", "in_step", "keys")
        .select(list(STAGES_SCHEMA))
        .cast(STAGES_SCHEMA)
    )
    dominant = (
        stages.filter(pl.col("in_step"))
        .sort(["seconds", "stage", "label"], descending=[True, False, False])
        .group_by("step", maintain_order=True)
        .agg(pl.col("stage").first().alias("dominant"))
    )
    steps = steps.join(dominant, on="step", how="left")
    return stages, steps


def _outliers(
    stages: pl.DataFrame, steps: pl.DataFrame, rules: StepRules = STEP_RULES
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Flag warm-up and slow steps; statistics over the steps after warm-up."""
    if steps.height == 0:
        empty_steps = steps.with_columns(
            pl.lit(None, dtype=pl.Boolean).alias("outlier"),
            pl.lit(None, dtype=pl.String).alias("outlier_cause"),
            pl.lit(None, dtype=pl.Boolean).alias("warmup"),
        )
        return empty_steps.select(list(STEPS_SCHEMA)).cast(STEPS_SCHEMA), pl.DataFrame(
            schema=STATS_SCHEMA
        )
    steps = steps.sort("step").with_columns(
        warmup_flags(steps.sort("step")["wall_s"], rules).alias("warmup")
    )
    wall = steps.filter(~pl.col("warmup"))["wall_s"]
    median, mad = robust_centre(wall)
    threshold = rules.threshold(median, mad)
    steps = steps.with_columns((pl.col("wall_s") > threshold).alias("outlier"))
    steady = steps.filter(~pl.col("warmup")).select("step")
    per_stage = stages.pivot(on="label", index="step", values="seconds", aggregate_function="sum")
    labels = [c for c in per_stage.columns if c != "step"]
    per_stage = per_stage.with_columns(pl.col(labels).fill_null(0.0))
    medians = per_stage.join(steady, on="step", how="semi").select(pl.col(labels).median())
    excess = per_stage.select(
        "step", *[(pl.col(c) - medians[c][0]).alias(c) for c in labels]
    ).unpivot(index="step", variable_name="label", value_name="excess")
    cause = excess.sort(["excess", "label"], descending=[True, False]).group_by(
        "step", maintain_order=True
    ).agg(pl.col("label").first().alias("_cause"))
    steps = steps.join(cause, on="step", how="left").with_columns(
        pl.when(pl.col("outlier")).then(pl.col("_cause")).otherwise(None).alias("outlier_cause")
    ).drop("_cause").sort("step")
    warm = steps.filter(pl.col("warmup"))
    stats = pl.DataFrame(
        [
            {
                "n_steps": wall.len(),
                "first_step": steps["step"].min(),
                "last_step": steps["step"].max(),
                "median_s": median,
                "p95_s": as_float(wall.quantile(0.95, "linear")),
                "mean_s": as_float(wall.mean()),
                "min_s": as_float(wall.min()),
                "max_s": as_float(wall.max()),
                "mad_s": mad * rules.mad_scale,
                "outlier_threshold_s": threshold,
                "n_outliers": int(steps.filter(~pl.col("warmup"))["outlier"].sum()),
                "outlier_rule": rules.describe(),
                "n_warmup": warm.height,
                "warmup_steps": ", ".join(str(s) for s in warm["step"].to_list()),
                "warmup_ratio": as_float(warm["wall_s"].max()) / median
                if warm.height and median > 0 else None,
                "warmup_rule": rules.describe_warmup(),
            }
        ],
        schema=STATS_SCHEMA,
    )
    return steps.select(list(STEPS_SCHEMA)).cast(STEPS_SCHEMA), stats


def robust_centre(values: pl.Series) -> tuple[float, float]:
    """Median and (unscaled) median absolute deviation of ``values``."""
    median = as_float(values.median()) or 0.0
    return median, float((values - median).abs().median() or 0.0)


def warmup_flags(wall: pl.Series, rules: StepRules = STEP_RULES) -> pl.Series:
    """Per step (in step order): is it warm-up? The first ``rules.always`` steps are; of the
    first ``rules.leading``, those slow against the whole run. Never every step."""
    median, mad = robust_centre(wall)
    slow = (wall > rules.threshold(median, mad)).to_list()
    flags = [
        i < rules.always or (i < rules.leading and bool(slow[i])) for i in range(wall.len())
    ]
    if all(flags):
        flags = [False] * len(flags)
    return pl.Series("warmup", flags, dtype=pl.Boolean)


def _summary(stages: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    wall = float(steps["wall_s"].sum()) if steps.height else 0.0
    keys = ["stage", "label", "composite"]
    per = stages.group_by("step", *keys).agg(pl.col("seconds").sum())
    grid = (
        per.select(keys).unique()
        .join(steps.select("step"), how="cross")
        .join(per, on=["step", *keys], how="left")
    )
    summary = grid.group_by(keys).agg(
        pl.col("seconds").sum().alias("_total"),
        pl.col("seconds").is_not_null().sum().cast(pl.Int64).alias("n_steps"),
        pl.col("seconds").fill_null(0.0).median().alias("median_s"),
        pl.col("seconds").fill_null(0.0).quantile(0.95, "linear").alias("p95_s"),
    ).rename({"_total": "seconds"}).with_columns(
        (pl.col("seconds") / wall if wall > 0 else pl.lit(None, dtype=pl.Float64)).alias("share")
    )
    return (
        summary.sort(["seconds", "stage", "label"], descending=[True, False, False])
        .select(list(STAGE_SUMMARY_SCHEMA))
        .cast(STAGE_SUMMARY_SCHEMA)
    )


def _dominant(summary: pl.DataFrame, typical: pl.DataFrame, slow: list[int]) -> pl.DataFrame:
    other = summary.filter(pl.col("label") == "other")["share"].sum()
    top = summary.filter(pl.col("stage") != "other").head(1)
    if top.height == 0:
        return pl.DataFrame(schema=DOMINANT_SCHEMA)
    usual = (typical if typical.height else summary).filter(pl.col("stage") != "other").head(1)
    return top.select(
        "stage", "label", "share", pl.lit(other, dtype=pl.Float64).alias("other_share"),
        pl.lit(usual["stage"][0], dtype=STAGE).alias("typical_stage"),
        pl.lit(usual["label"][0]).alias("typical_label"),
        pl.lit(usual["share"][0], dtype=pl.Float64).alias("typical_share"),
        pl.lit(", ".join(str(s) for s in slow)).alias("slow_steps"),
    ).cast(DOMINANT_SCHEMA)


def _weight_sync(
    stages: pl.DataFrame, steps: pl.DataFrame, rows: pl.DataFrame
) -> tuple[pl.DataFrame, str | None]:
    measured = stages.filter(pl.col("stage") == "weight_sync")
    wall = float(steps["wall_s"].sum()) if steps.height else 0.0
    if measured.height:
        per_step = measured.group_by("step").agg(pl.col("seconds").sum())
        seconds = float(per_step["seconds"].sum())
        keys = ", ".join(sorted(set(", ".join(measured["keys"].to_list()).split(", "))))
        row = (
            "measured",
            seconds,
            seconds / wall if wall else None,
            as_float(per_step["seconds"].median()),
            keys,
            None,
        )
        return pl.DataFrame([row], schema=WEIGHT_SYNC_SCHEMA, orient="row"), None
    hiding = (
        rows.filter(pl.col("hides").list.contains("weight_sync").fill_null(False))["name"]
        .unique()
        .sort()
        .to_list()
    )
    if hiding:
        where = ", ".join(hiding)
        note = (
            f"weight sync happens inside {where} in this framework version and is not logged on "
            "its own: needs a trace"
        )
        return pl.DataFrame(
            [("hidden", None, None, None, where, note)], schema=WEIGHT_SYNC_SCHEMA, orient="row"
        ), note
    note = "the log has no weight-sync timer: needs a trace"
    return pl.DataFrame(
        [("not_logged", None, None, None, None, note)], schema=WEIGHT_SYNC_SCHEMA, orient="row"
    ), note


def _long_tail(
    metrics: pl.DataFrame, metric_keys: Mapping[str, Sequence[str]]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    present = set(metrics["key"].unique().to_list()) if metrics.height else set()
    chosen = {
        q: next((k for k in metric_keys.get(q, ()) if k in present), None) for q in LONG_TAIL_KEYS
    }
    if chosen["response_length_mean"] is None:
        return pl.DataFrame(schema=LONG_TAIL_SCHEMA), pl.DataFrame(schema=LONG_TAIL_SUMMARY_SCHEMA)
    used = {k: q for q, k in chosen.items() if k is not None}
    wide = (
        one_per_key(metrics.filter(pl.col("key").is_in(list(used))), ["step", "key"], "value")
        .with_columns(pl.col("key").replace_strict(used).alias("q"))
        .pivot(on="q", index="step", values="value", aggregate_function="last")
    )
    for q in LONG_TAIL_KEYS:
        if q not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(q))
    tail = wide.select(
        pl.col("step").cast(pl.Int32),
        pl.col("response_length_mean").alias("mean_len"),
        pl.col("response_length_max").alias("max_len"),
        pl.col("response_length_min").alias("min_len"),
        pl.when(pl.col("response_length_mean") > 0)
        .then(pl.col("response_length_max") / pl.col("response_length_mean"))
        .otherwise(None)
        .alias("max_over_mean"),
        pl.col("clip_ratio"),
    ).sort("step").cast(LONG_TAIL_SCHEMA)
    ratio = tail["max_over_mean"].drop_nulls()
    clip = tail["clip_ratio"].drop_nulls()
    summary = pl.DataFrame([{
        "n_steps": tail.height,
        "median_max_over_mean": ratio.median() if ratio.len() else None,
        "p95_max_over_mean": ratio.quantile(0.95, "linear") if ratio.len() else None,
        "max_max_over_mean": ratio.max() if ratio.len() else None,
        "mean_clip_ratio": clip.mean() if clip.len() else None,
        "max_clip_ratio": clip.max() if clip.len() else None,
        "keys": ", ".join(k for k in chosen.values() if k),
    }], schema=LONG_TAIL_SUMMARY_SCHEMA)
    return tail, summary


def _unclassified(rows: pl.DataFrame) -> pl.DataFrame:
    found = (
        rows.filter(pl.col("relation") == "unknown")
        .group_by("name")
        .agg(
            pl.col("step").n_unique().alias("n_steps"),
            pl.col("seconds").sum(),
            pl.col("seconds").median().alias("median_s"),
        )
        .sort(["seconds", "name"], descending=[True, False])
    )
    guess = pl.coalesce(
        [pl.when(pl.col("name").str.contains(p)).then(pl.lit(st)) for p, st in STAGE_GUESSES]
    ).fill_null("other")
    found = found.with_columns(guess.alias("stage_guess"))
    rules = [
        rule_line(name, stage)
        for name, stage in found.select("name", "stage_guess").iter_rows()
    ]
    return found.with_columns(pl.Series("rule", rules, dtype=pl.String)).cast(
        UNCLASSIFIED_SCHEMA
    )


def rule_line(name: str, stage: str) -> str:
    """One user rule for exactly ``name``, as a TOML inline table (an element of ``rules = […]``,
    the same as a ``[[rules]]`` table; docs/profiles.md)."""
    pattern = f"^{name.translate(_REGEX_META)}$"
    quoted = (
        f"'{pattern}'" if "'" not in pattern
        else '"' + pattern.replace("\\", "\\\\").replace('"', '\\"') + '"'
    )
    return f'{{match = {quoted}, source = "log", stage = "{stage}", relation = "stage"}}'
