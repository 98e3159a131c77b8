"""Step outliers: "why was step 40 slow?" — the slow and warm-up steps of a run, how much slower
than the median step each was, and which stage and which rank grew.

One rule judges every step (``taxonomy/steps.toml``, the same the log summary uses): a step is
slow when its wall time exceeds the median of the steps after warm-up by more than k robust
standard deviations; the first steps are warm-up when they are slow against the whole run.
For each flagged step, every stage's time in it is set against that stage's median over the
steps after warm-up, and the stage that grew most is named; within that stage, so is the rank
whose time grew most. From a trace the step windows (``steps``) and the per-step × rank × stage
time (``breakdown``: a stage's time in a step is its slowest rank's, the controller's only
when no device rank ran it) are read; from the log's timers (``log_steps``, ``log_stages``)
otherwise, which have stages but no ranks.

A slow log step right after the traced steps is the profiler's own (``kind = profiler``): the
trainer's profiler writes its trace when it stops (``torch.profiler``'s ``export_chrome_trace``
after ``stop``; verl's profiler saves after its steps), and that delays the next step's first
worker call. It is recognised only where the trace's steps are numbered as the log's (the
``stepping`` product's match of stage timers, docs/assembly.md "Numbering from a log").

``outlier_findings`` turns the slow steps into finding candidates (``FINDING_CANDIDATES``):
one per source and grown stage, its saving the slow steps' excess over the median divided by
the number of steps (per step on average); a profiler step is one low-confidence ``info``
candidate without a saving, which says what the profiler cost.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from taxonomy.steps import StepRules

from ..model import frames
from ..model.frames import Stepping
from ..model.products import provides
from ..model.units import plural, spans
from .log_steps import STEP_RULES, robust_centre, warmup_flags

STEP_OUTLIERS = pl.Schema({
    "source": pl.String(),
    "step": pl.Int32(),
    "kind": pl.String(),
    "wall_ns": pl.Int64(),
    "median_ns": pl.Int64(),
    "excess_ns": pl.Int64(),
    "ratio": pl.Float64(),
    "stage": pl.String(),
    "stage_ns": pl.Int64(),
    "stage_median_ns": pl.Int64(),
    "stage_excess_ns": pl.Int64(),
    "rank": pl.Int32(),
    "rank_ns": pl.Int64(),
    "rank_median_ns": pl.Int64(),
    "rank_excess_ns": pl.Int64(),
    "n_steps": pl.Int64(),
})
"""One row per slow (``kind = slow``), warm-up (``warmup``) or profiler-delayed (``profiler``: a
slow log step right after the traced steps) step of each ``source`` (``trace``, ``log``): its
wall time, the median over the steps after warm-up, the excess (wall − median)
and ratio (wall ÷ median); the ``stage`` whose time grew most against its own median, and
within it the ``rank`` that grew most (null from a log); ``n_steps`` counts the source's steps."""

SOURCES = ("trace", "log")
LOG_ORIGIN = "log"
"""``stepping["origin"]`` when the log, not a trace, marks the steps."""
SEVERE_FRACTION = 0.05
"""A slow-step finding is ``warn`` when its saving is at least this share of the median step."""
SHOWN_STEPS = 3
"""How many of a finding's slow steps its evidence names."""
PROFILER_ID = "step.profiler"


def flag_steps(walls: pl.DataFrame, rules: StepRules = STEP_RULES) -> pl.DataFrame:
    """``walls`` (``step``, ``wall``) with ``warmup``, ``slow`` and the ``median`` of the steps
    after warm-up; the rule of :mod:`taxonomy.steps`."""
    walls = walls.sort("step")
    walls = walls.with_columns(warmup_flags(walls["wall"].cast(pl.Float64), rules))
    median, mad = robust_centre(walls.filter(~pl.col("warmup"))["wall"].cast(pl.Float64))
    threshold = rules.threshold(median, mad)
    return walls.with_columns(
        (~pl.col("warmup") & (pl.col("wall") > threshold)).alias("slow"),
        pl.lit(median, pl.Float64).alias("median"),
    )


def grown(per: pl.DataFrame, key: str, steady: pl.Series, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Per step (and ``by``), the ``key`` whose ``value`` (``per``: ``step``, ``by``, ``key``,
    ``value``) grew most against its median over the ``steady`` steps; a key absent from a step
    counts 0 there."""
    keys = [*by, key]
    grid = (
        per.select(keys).unique()
        .join(per.select("step").unique(), how="cross")
        .join(per, on=["step", *keys], how="left")
        .with_columns(pl.col("value").cast(pl.Float64).fill_null(0.0))
    )
    medians = grid.filter(pl.col("step").is_in(steady.implode())).group_by(keys).agg(
        pl.col("value").median().alias("median")
    )
    return (
        grid.join(medians, on=keys, how="left")
        .with_columns(pl.col("median").fill_null(0.0))
        .with_columns((pl.col("value") - pl.col("median")).alias("excess"))
        .sort(["step", *by, "excess", key], descending=[False] * (1 + len(by)) + [True, False])
        .group_by(["step", *by], maintain_order=True)
        .first()
        .with_columns(pl.col("step").cast(pl.Int32))
    )


def _rows(flags: pl.DataFrame, stage: pl.DataFrame, rank: pl.DataFrame | None,
          source: str, profiler_step: int | None = None) -> pl.DataFrame:
    picked = flags.filter(pl.col("warmup") | pl.col("slow")).with_columns(
        pl.col("step").cast(pl.Int32)
    )
    kind = (
        pl.when(pl.col("warmup")).then(pl.lit("warmup"))
        .when(pl.lit(profiler_step is not None) & (pl.col("step") == (profiler_step or -1)))
        .then(pl.lit("profiler"))
        .otherwise(pl.lit("slow"))
    )
    if picked.height == 0:
        return frames.empty(STEP_OUTLIERS)
    out = picked.select(
        pl.lit(source).alias("source"),
        "step",
        kind.alias("kind"),
        pl.col("wall").alias("wall_ns"),
        pl.col("median").alias("median_ns"),
        (pl.col("wall") - pl.col("median")).alias("excess_ns"),
        pl.when(pl.col("median") > 0).then(pl.col("wall") / pl.col("median")).alias("ratio"),
        pl.lit(flags.height).alias("n_steps"),
    ).join(
        stage.select(
            "step", pl.col("stage").cast(pl.String), pl.col("value").alias("stage_ns"),
            pl.col("median").alias("stage_median_ns"), pl.col("excess").alias("stage_excess_ns"),
        ),
        on="step", how="left",
    )
    if rank is not None and rank.height:
        out = out.join(
            rank.select(
                "step", "rank", pl.col("value").alias("rank_ns"),
                pl.col("median").alias("rank_median_ns"), pl.col("excess").alias("rank_excess_ns"),
            ),
            on="step", how="left",
        )
    for name in STEP_OUTLIERS:
        if name not in out.columns:
            out = out.with_columns(pl.lit(None).alias(name))
    ints = [n for n, t in STEP_OUTLIERS.items() if t == pl.Int64() and n != "n_steps"]
    return out.with_columns(pl.col(ints).cast(pl.Float64).round(0)).select(
        pl.col(n).cast(t) for n, t in STEP_OUTLIERS.items()
    )


def trace_outliers(steps: pl.DataFrame, breakdown: pl.DataFrame,
                   rules: StepRules = STEP_RULES) -> pl.DataFrame:
    """The trace's slow and warm-up steps (step windows; stage and rank growth from the
    breakdown)."""
    if steps.height == 0:
        return frames.empty(STEP_OUTLIERS)
    flags = flag_steps(
        steps.group_by("step").agg((pl.col("end_ns") - pl.col("start_ns")).max().alias("wall")),
        rules,
    )
    if not (flags["warmup"] | flags["slow"]).any():
        return frames.empty(STEP_OUTLIERS)
    steady = flags.filter(~pl.col("warmup"))["step"]
    devices = breakdown.filter(pl.col("rank") >= 0)
    who = breakdown.filter(
        (pl.col("rank") >= 0) | ~pl.col("stage").is_in(devices["stage"].unique().implode())
    ).select("step", "rank", pl.col("stage").cast(pl.String), pl.col("time_ns").alias("value"))
    per_stage = who.group_by("step", "stage").agg(pl.col("value").max())
    stage = grown(per_stage, "stage", steady)
    rank = grown(who, "rank", steady, by=("stage",)).join(
        stage.select("step", "stage"), on=["step", "stage"], how="semi"
    )
    return _rows(flags, stage, rank, "trace")


def log_outliers(log_steps: pl.DataFrame, log_stages: pl.DataFrame,
                 traced: list[int] | None = None) -> pl.DataFrame:
    """The log's slow and warm-up steps, by the flags and timers of the log analysis; a slow
    step right after the ``traced`` steps (numbered as the log's) is the profiler's."""
    if log_steps.height == 0:
        return frames.empty(STEP_OUTLIERS)
    walls = log_steps.select("step", (pl.col("wall_s") * 1e9).alias("wall"), "warmup", "outlier")
    steady = walls.filter(~pl.col("warmup").fill_null(False))
    median, _ = robust_centre(steady["wall"])
    flags = walls.select(
        "step", "wall", pl.col("warmup").fill_null(False),
        (~pl.col("warmup").fill_null(False) & pl.col("outlier").fill_null(False)).alias("slow"),
        pl.lit(median, pl.Float64).alias("median"),
    )
    per_stage = log_stages.group_by("step", "label").agg(
        (pl.col("seconds").sum() * 1e9).alias("value")
    ).rename({"label": "stage"})
    after = max(traced) + 1 if traced else None
    return _rows(flags, grown(per_stage, "stage", steady["step"]), None, "log", after)


def traced_log_steps(stepping: Stepping) -> list[int]:
    """The trace's steps in the log's numbering, or none when the log did not number them (no
    stage-timer match: a trace step's place among the log's steps is then unknown)."""
    if stepping["origin"] == LOG_ORIGIN or not stepping["note"]:
        return []
    return sorted(stepping["steps"]["step"].drop_nulls().unique().to_list())


@provides("step_outliers", schema=STEP_OUTLIERS)
def step_outliers(steps: pl.DataFrame, stepping: Stepping, breakdown: pl.DataFrame,
                  log_steps: pl.DataFrame, log_stages: pl.DataFrame) -> pl.DataFrame:
    """Trace rows only when a trace marks the steps (a logs-only run's windows are the log's)."""
    traced = steps if stepping["origin"] != LOG_ORIGIN else steps.clear()
    return pl.concat([
        trace_outliers(traced, breakdown),
        log_outliers(log_steps, log_stages, traced_log_steps(stepping)),
    ])


def _duration(ns: float) -> str:
    s = ns / 1e9
    return f"{s:.3g} s" if abs(s) >= 1 else f"{ns / 1e6:.3g} ms"


def _evidence(group: pl.DataFrame, slow_steps: int) -> str:
    worst = group.sort("excess_ns", descending=True)
    said = []
    for r in worst.head(SHOWN_STEPS).iter_rows(named=True):
        where = f" on rank {r['rank']}" if r["rank"] is not None else ""
        said.append(
            f"step {r['step']} took {_duration(r['wall_ns'])}, {r['ratio']:.2f}× the median "
            f"{_duration(r['median_ns'])} (+{_duration(r['excess_ns'])}); {r['stage']}{where} "
            f"{_duration(r['stage_ns'])} against its median {_duration(r['stage_median_ns'])} "
            f"(+{_duration(r['stage_excess_ns'])})"
        )
    more = f"; and {group.height - SHOWN_STEPS} more" if group.height > SHOWN_STEPS else ""
    return "; ".join(said) + more + f" (slow: {STEP_RULES.describe()}; {_of(group, slow_steps)})"


def _of(group: pl.DataFrame, slow_steps: int) -> str:
    """How many steps the finding holds, of the source's slow steps and of all its steps: the
    group is the slow steps where one stage grew most, not every slow step."""
    source, stage, n = group["source"][0], group["stage"][0], group["n_steps"][0]
    if group.height == slow_steps:
        return f"{group.height} of {n} steps, from the {source}"
    return (f"{group.height} of the {slow_steps} slow steps of {n}, those where {stage} grew "
            f"most, from the {source}")


def findings(outliers: pl.DataFrame, rules: StepRules = STEP_RULES) -> pl.DataFrame:
    """FINDING_CANDIDATES: one per source and grown stage of the slow steps."""
    slow = outliers.filter((pl.col("kind") == "slow") & pl.col("stage").is_not_null())
    profiled = outliers.filter(pl.col("kind") == "profiler")
    rows = [_profiler(r) for r in profiled.iter_rows(named=True)]
    slow_steps = dict(outliers.filter(pl.col("kind") == "slow").group_by("source").agg(
        pl.col("step").n_unique()).iter_rows())
    for (source, stage), group in slow.group_by("source", "stage", maintain_order=True):
        n_steps = int(group["n_steps"][0])
        saving = round(float(group["excess_ns"].sum()) / n_steps)
        median = float(group["median_ns"][0])
        ranks = group["rank"].drop_nulls().unique().sort().to_list()
        rows.append({
            "id": f"step.slow.{source}.{stage}",
            "kind": "step",
            "title": f"Slow steps: {stage} grew",
            "severity": "warn" if median and saving / median >= SEVERE_FRACTION else "info",
            "ranks": spans(ranks),
            "steps": spans(group["step"].sort().to_list()),
            "stage": str(stage),
            "evidence": _evidence(group, slow_steps[source]),
            "saving_ns": saving,
            "saving_basis": (
                f"the slow steps' excess over the median step (Σ wall − median over the "
                f"{plural(group.height, 'slow step')} where {stage} grew most) divided by all "
                f"{n_steps} steps: per step on average"
            ),
            "measured_on": str(source),
            "recommendation": rules.advise(str(stage)),
            "confidence": "high" if source == "trace" else "medium",
        })
    if not rows:
        return frames.empty(frames.FINDING_CANDIDATES)
    return pl.DataFrame(rows, schema=frames.FINDING_CANDIDATES).sort(
        ["saving_ns", "id"], descending=[True, False]
    )


def _profiler(r: dict[str, Any]) -> dict[str, Any]:
    """The profiler step's candidate: what it cost, said, and no saving (not a training cost)."""
    grew = (f"; {r['stage']} grew most ({_duration(r['stage_ns'])} against its median "
            f"{_duration(r['stage_median_ns'])})" if r["stage"] is not None else "")
    return {
        "id": PROFILER_ID,
        "kind": "step",
        "title": "The profiler's trace export slowed the step after the traced steps",
        "severity": "info",
        "ranks": "",
        "steps": str(r["step"]),
        "stage": "",
        "evidence": (
            f"log step {r['step']} took {_duration(r['wall_ns'])}, {r['ratio']:.2f}× the median "
            f"{_duration(r['median_ns'])} (+{_duration(r['excess_ns'])}){grew}; it directly "
            f"follows the traced steps (the last is log step {r['step'] - 1}), when the "
            "profiler writes its trace (torch.profiler exports after stop; verl's profiler "
            "saves after its steps) and delays that step's first worker call: the profiler's "
            "cost, not the training's"
        ),
        "saving_ns": None,
        "saving_basis": "",
        "measured_on": "log",
        "recommendation": (
            "Nothing to change in training. Leave this step out when timing the run; profile "
            "fewer or shorter steps to make the export smaller."
        ),
        "confidence": "low",
    }


@provides("outlier_findings", schema=frames.FINDING_CANDIDATES)
def outlier_findings(step_outliers: pl.DataFrame) -> pl.DataFrame:
    return findings(step_outliers)
