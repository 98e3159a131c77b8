"""Efficiency: throughput, MFU per role and peak memory, per step and over the run.

Two sources. A framework log states its own numbers every step (verl's ``perf/throughput``,
``perf/mfu/actor``, ``perf/max_memory_allocated_gb``, …); they are taken as logged, never
recomputed, the keys named by ``taxonomy/efficiency.toml``. A Kineto trace recorded
``with_flops`` (or with shapes, for the matrix products) carries FLOPs on its operators
(the event table's ``flops`` column); MFU is then the FLOPs inside a window ÷ (the window's
time × the device's peak dense bf16 FLOP/s), the peak looked up by the device name the trace
states. A device the table does not know gets its achieved TFLOP/s and no MFU, and says so.

Over the run each number has one headline: the mean per step for rates, the peak for memory.
When the first step is a warm-up outlier (its step time above ``warmup_ratio`` × the median of
the others) the mean without it is the headline and the mean over all steps is stated beside it.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from taxonomy.efficiency import EfficiencyTable, table

from ..model.frames import FINDING_CANDIDATES
from ..model.products import Lazy, provides
from ..model.run import SourceInfo, captured

EFFICIENCY_STEPS = pl.Schema({
    "source": pl.UInt32(),
    "file": pl.String(),
    "step": pl.Int32(),
    "metric": pl.String(),
    "role": pl.String(),
    "stage": pl.String(),
    "unit": pl.String(),
    "value": pl.Float64(),
    "key": pl.String(),
})
"""One row per step and number: ``key`` is the log key it was read from, or ``trace flops`` for
a number computed from a trace's FLOPs (``role`` ``all`` and ``stage`` empty: the whole step)."""

EFFICIENCY = pl.Schema({
    "source": pl.UInt32(),
    "file": pl.String(),
    "metric": pl.String(),
    "role": pl.String(),
    "stage": pl.String(),
    "unit": pl.String(),
    "key": pl.String(),
    "n_steps": pl.Int64(),
    "first_step": pl.Int32(),
    "last_step": pl.Int32(),
    "mean": pl.Float64(),
    "min": pl.Float64(),
    "max": pl.Float64(),
    "warmup_step": pl.Int32(),
    "mean_after_warmup": pl.Float64(),
    "headline_value": pl.Float64(),
    "headline": pl.String(),
    "definition": pl.String(),
})
"""One row per source, number, role and stage over the run: ``mean`` over every step,
``mean_after_warmup`` without the first step when it is a warm-up outlier (``warmup_step``,
else both null), ``headline_value`` the one number to quote and ``headline`` what it is."""

TRACE_KEY = "trace flops"
TFLOP = 1e12
NS = 1e9


def _table_keys(tab: EfficiencyTable) -> pl.DataFrame:
    rows = [
        (key, m.metric, m.role, m.stage, m.unit, m.aggregate, m.definition, rank * 100 + order)
        for rank, m in enumerate(tab.log_metrics)
        for order, key in enumerate(m.keys)
    ]
    return pl.DataFrame(
        rows,
        schema={"key": pl.String, "metric": pl.String, "role": pl.String, "stage": pl.String,
                "unit": pl.String, "aggregate": pl.String, "definition": pl.String,
                "_priority": pl.Int64},
        orient="row",
    )


def _files(sources: list[SourceInfo]) -> pl.DataFrame:
    return pl.DataFrame(
        {"source": [s.index for s in sources], "file": [s.path.name for s in sources]},
        schema={"source": pl.UInt32, "file": pl.String},
    )


def log_steps_frame(metrics: pl.DataFrame, sources: list[SourceInfo],
                    tab: EfficiencyTable) -> pl.DataFrame:
    """The efficiency numbers each log states per step; of several keys for one number (a
    version's rename), the first the table lists that the log has."""
    keys = _table_keys(tab)
    found = metrics.join(keys, on="key", how="inner")
    if found.height == 0:
        return pl.DataFrame(schema=EFFICIENCY_STEPS)
    best = found.group_by("source", "metric", "role", "stage").agg(
        pl.col("_priority").min().alias("_best")
    )
    found = found.join(best, on=["source", "metric", "role", "stage"]).filter(
        pl.col("_priority") == pl.col("_best")
    )
    return (
        found.join(_files(sources), on="source", how="left")
        .select(*EFFICIENCY_STEPS.names())
        .cast(EFFICIENCY_STEPS)
        .sort("source", "metric", "role", "step")
    )


def _step_times(metrics: pl.DataFrame, events: pl.DataFrame, tab: EfficiencyTable) -> pl.DataFrame:
    """``source, step, seconds`` for the warm-up test: the log's own step time where the table
    names one, else the span of the step's log timers."""
    keys = [k for m in tab.log_metrics if m.metric == "step_time_s" for k in m.keys]
    stated = metrics.filter(pl.col("key").is_in(keys)).group_by("source", "step").agg(
        pl.col("value").first().alias("seconds")
    )
    spans = (
        events.filter((pl.col("kind") == "log_stage") & pl.col("step").is_not_null())
        .group_by("source", "step")
        .agg(((pl.col("end_ns").max() - pl.col("start_ns").min()) / NS).alias("seconds"))
        .join(stated.select("source").unique(), on="source", how="anti")
    )
    return pl.concat([stated, spans.cast(stated.schema)], how="vertical")


def warmup_steps(step_times: pl.DataFrame, ratio: float) -> pl.DataFrame:
    """``source, warmup_step``: the first step of each source whose time exceeds ``ratio`` × the
    median of its other steps (at least two others, so a median means something)."""
    ordered = step_times.sort("source", "step")
    per = ordered.group_by("source", maintain_order=True).agg(
        pl.col("step").first().alias("warmup_step"),
        pl.col("seconds").first().alias("_first"),
        pl.col("seconds").slice(1).median().alias("_rest"),
        pl.len().alias("_n"),
    )
    return per.filter(
        (pl.col("_n") >= 3) & (pl.col("_first") > ratio * pl.col("_rest")) & (pl.col("_rest") > 0)
    ).select(pl.col("source").cast(pl.UInt32), pl.col("warmup_step").cast(pl.Int32))


def summarise(steps: pl.DataFrame, warmups: pl.DataFrame, tab: EfficiencyTable) -> pl.DataFrame:
    """:data:`EFFICIENCY` from the per-step rows."""
    if steps.height == 0:
        return pl.DataFrame(schema=EFFICIENCY)
    meta = _table_keys(tab).select("key", "aggregate", "definition")
    trace_meta = pl.DataFrame(
        {"key": [TRACE_KEY], "aggregate": ["mean"],
         "definition": ["FLOPs the trace records in the step ÷ (step time × peak FLOP/s)"]}
    )
    rows = steps.join(warmups, on="source", how="left")
    after = pl.col("value").filter(pl.col("step") != pl.col("warmup_step").first())
    summary = rows.group_by("source", "file", "metric", "role", "stage", "unit", "key",
                            maintain_order=True).agg(
        pl.col("value").drop_nulls().len().alias("n_steps"),
        pl.col("step").min().alias("first_step"),
        pl.col("step").max().alias("last_step"),
        pl.col("value").mean().alias("mean"),
        pl.col("value").min().alias("min"),
        pl.col("value").max().alias("max"),
        pl.col("warmup_step").first(),
        after.mean().alias("_after"),
    )
    summary = summary.join(pl.concat([meta, trace_meta]), on="key", how="left")
    warm = pl.col("warmup_step").is_not_null() & (pl.col("aggregate") == "mean")
    n = pl.format("{} step", pl.col("n_steps").cast(pl.String)) + pl.when(
        pl.col("n_steps") == 1).then(pl.lit("")).otherwise(pl.lit("s"))
    return summary.with_columns(
        pl.when(warm).then(pl.col("warmup_step")).alias("warmup_step"),
        pl.when(warm).then(pl.col("_after")).alias("mean_after_warmup"),
        pl.when(pl.col("aggregate") == "max").then(pl.col("max"))
        .when(warm).then(pl.col("_after")).otherwise(pl.col("mean")).alias("headline_value"),
        pl.when(pl.col("aggregate") == "max").then(pl.format("peak over {}", n))
        .when(warm).then(pl.format("mean over {} steps after warm-up step {}",
                                   (pl.col("n_steps") - 1).cast(pl.String), "warmup_step"))
        .otherwise(pl.format("mean over {}", n)).alias("headline"),
    ).select(*EFFICIENCY.names()).cast(EFFICIENCY)


def _device_names(sources: list[SourceInfo]) -> pl.DataFrame:
    """``source, device, device_name`` from each trace's ``deviceProperties``."""
    rows: list[tuple[int, int, str]] = []
    for s in sources:
        props = s.meta.get("device_properties")
        for entry in props if isinstance(props, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), int):
                rows.append((s.index, entry["id"], str(entry.get("name") or "")))
    return pl.DataFrame(rows, schema={"source": pl.UInt32, "device": pl.Int16,
                                      "device_name": pl.String}, orient="row")


def trace_devices(events: pl.DataFrame, sources: list[SourceInfo],
                  tab: EfficiencyTable) -> pl.DataFrame:
    """``source, rank, device_name, peak_tflops`` per source with FLOPs: the device its kernels
    ran on (the first when several), its name from the trace, its peak from the table (null when
    the trace names no device or the table has no row for it)."""
    with_flops = events.filter(pl.col("flops").is_not_null()).select("source", "rank").unique()
    used = (
        events.filter((pl.col("kind") == "kernel") & (pl.col("device") >= 0))
        .group_by("source").agg(pl.col("device").min())
    )
    names = _device_names(sources)
    only = names.group_by("source").agg(
        pl.col("device_name").unique().alias("_names")
    ).filter(pl.col("_names").list.len() == 1).select(
        "source", pl.col("_names").list.first().alias("_only")
    )
    # The trace's own device index can differ from its kernels' (ROCm numbers GPUs by node):
    # one named device, or one name for all, is still unambiguous.
    named = (
        with_flops.join(used, on="source", how="left")
        .join(names, on=["source", "device"], how="left")
        .join(only, on="source", how="left")
        .with_columns(pl.coalesce("device_name", "_only").alias("device_name"))
    )
    peaks = [getattr(tab.device(n), "peak_tflops", None) for n in named["device_name"]]
    return named.select("source", "rank", "device_name").with_columns(
        pl.Series("peak_tflops", peaks, dtype=pl.Float64)
    )


def _windows(steps: pl.DataFrame, flops_events: pl.DataFrame) -> pl.DataFrame:
    """``step, start_ns, end_ns``: the run's steps, or one window over the FLOPs when none."""
    if steps.height:
        return steps.select("step", "start_ns", "end_ns")
    return flops_events.select(
        pl.lit(None, dtype=pl.Int32).alias("step"),
        pl.col("start_ns").min(), pl.col("end_ns").max(),
    )


def trace_steps_frame(aligned: pl.DataFrame, steps: pl.DataFrame, sources: list[SourceInfo],
                      tab: EfficiencyTable) -> pl.DataFrame:
    """Achieved TFLOP/s per GPU and MFU per step from the FLOPs a trace records: per rank, the
    FLOPs of operators that start inside the step ÷ the step's time, summed over ranks and
    divided by the ranks' summed peak (MFU) or their number (TFLOP/s per GPU)."""
    flops = aligned.filter(_executed_flops(sources))
    if flops.height == 0:
        return pl.DataFrame(schema=EFFICIENCY_STEPS)
    devices = trace_devices(aligned, sources, tab)
    windows = _windows(steps, flops).sort("start_ns")
    inside = (
        flops.select("source", "rank", "start_ns", "flops").sort("start_ns")
        .join_asof(windows.rename({"start_ns": "_ws"}), left_on="start_ns", right_on="_ws",
                   strategy="backward")
        .filter(pl.col("start_ns") < pl.col("end_ns"))
    )
    per_rank = inside.group_by("source", "rank", "step", "_ws", "end_ns").agg(
        pl.col("flops").sum().alias("_flops")
    ).join(devices, on=["source", "rank"], how="left").with_columns(
        ((pl.col("end_ns") - pl.col("_ws")) / NS).alias("_s")
    )
    per_step = per_rank.group_by("step").agg(
        (pl.col("_flops") / pl.col("_s")).sum().alias("_rate"),
        pl.len().alias("_gpus"),
        pl.col("peak_tflops").sum().alias("_peak"),
        pl.col("peak_tflops").null_count().alias("_unknown"),
        pl.col("source").min(),
    )
    files = _files(sources)
    tflops = per_step.select(
        "source", "step", pl.lit("achieved_tflops").alias("metric"), pl.lit("TFLOP/s/GPU").alias(
            "unit"), (pl.col("_rate") / pl.col("_gpus") / TFLOP).alias("value"))
    mfu = per_step.filter(pl.col("_unknown") == 0).select(
        "source", "step", pl.lit("mfu").alias("metric"), pl.lit("fraction").alias("unit"),
        (pl.col("_rate") / (pl.col("_peak") * TFLOP)).alias("value"))
    return (
        pl.concat([tflops, mfu]).join(files, on="source", how="left")
        .with_columns(pl.lit("all").alias("role"), pl.lit("").alias("stage"),
                      pl.lit(TRACE_KEY).alias("key"))
        .select(*EFFICIENCY_STEPS.names()).cast(EFFICIENCY_STEPS).sort("metric", "step")
    )


def trace_stages_frame(aligned: pl.DataFrame, stage_timeline: pl.DataFrame,
                       sources: list[SourceInfo], tab: EfficiencyTable) -> pl.DataFrame:
    """Achieved TFLOP/s per GPU and MFU per stage over the run: the FLOPs of operators that
    start inside a rank's stage segments ÷ the segments' time, over ranks as in
    :func:`trace_steps_frame`."""
    flops = aligned.filter(_executed_flops(sources))
    if flops.height == 0 or stage_timeline.height == 0:
        return pl.DataFrame(schema=EFFICIENCY)
    segments = stage_timeline.select(
        "rank", pl.col("stage").cast(pl.String), pl.col("role").cast(pl.String),
        pl.col("start_ns").alias("_ss"), pl.col("end_ns").alias("_se"),
    ).sort("_ss")
    inside = (
        flops.select("source", "rank", "start_ns", "flops").sort("start_ns")
        .join_asof(segments, left_on="start_ns", right_on="_ss", by="rank", strategy="backward",
                   check_sortedness=False)
        .filter(pl.col("start_ns") < pl.col("_se"))
    )
    time = segments.group_by("rank", "stage", "role").agg(
        ((pl.col("_se") - pl.col("_ss")).sum() / NS).alias("_s")
    )
    devices = trace_devices(aligned, sources, tab)
    per_rank = (
        inside.group_by("source", "rank", "stage", "role").agg(pl.col("flops").sum().alias("_f"))
        .join(time, on=["rank", "stage", "role"], how="left")
        .join(devices, on=["source", "rank"], how="left")
    )
    per_stage = per_rank.group_by("stage", "role").agg(
        (pl.col("_f") / pl.col("_s")).sum().alias("_rate"), pl.len().alias("_gpus"),
        pl.col("peak_tflops").sum().alias("_peak"),
        pl.col("peak_tflops").null_count().alias("_unknown"), pl.col("source").min(),
    )
    tflops = per_stage.with_columns(
        pl.lit("achieved_tflops").alias("metric"), pl.lit("TFLOP/s/GPU").alias("unit"),
        (pl.col("_rate") / pl.col("_gpus") / TFLOP).alias("headline_value"))
    mfu = per_stage.filter(pl.col("_unknown") == 0).with_columns(
        pl.lit("mfu").alias("metric"), pl.lit("fraction").alias("unit"),
        (pl.col("_rate") / (pl.col("_peak") * TFLOP)).alias("headline_value"))
    return (
        pl.concat([tflops, mfu]).join(_files(sources), on="source", how="left")
        .with_columns(
            pl.lit(TRACE_KEY).alias("key"), pl.col("headline_value").alias("mean"),
            pl.lit("over the stage's time in the run").alias("headline"),
            pl.lit("FLOPs the trace records in the stage ÷ (stage time × peak FLOP/s)").alias(
                "definition"),
        )
        .with_columns(*(pl.lit(None).alias(c) for c in EFFICIENCY.names() if c not in (
            "source", "file", "metric", "role", "stage", "unit", "key", "mean",
            "headline_value", "headline", "definition")))
        .select(*EFFICIENCY.names()).cast(EFFICIENCY).sort("metric", "stage")
    )


def device_notes(aligned: pl.DataFrame, sources: list[SourceInfo],
                 tab: EfficiencyTable) -> list[str]:
    """One line per trace with FLOPs: the device and the peak its MFU is measured against, or
    that the device is unknown and the MFU not computed."""
    if "flops" not in aligned.columns or aligned.filter(pl.col("flops").is_not_null()).is_empty():
        return []
    devices = trace_devices(aligned, sources, tab).join(_files(sources), on="source")
    shown = devices.select("file", "device_name").unique().sort("file")
    return [_device_note(file, name, tab) for file, name in shown.iter_rows()]


def _device_note(file: str, name: str | None, tab: EfficiencyTable) -> str:
    known = tab.device(name)
    if known is not None:
        return (f"{file}: device '{name}' read as {known.name}, peak {known.peak_tflops:g} "
                f"TFLOP/s dense bf16 ({known.basis})")
    said = (f"device '{name}' has no peak FLOP/s in taxonomy/efficiency.toml" if name
            else "the trace names no device")
    return f"{file}: {said}; its MFU is not computed (achieved TFLOP/s only)"


@provides("efficiency_steps", schema=EFFICIENCY_STEPS, lazy=("aligned", "steps"))
def efficiency_steps(lazy: Lazy, metrics: pl.DataFrame, events: pl.DataFrame,
                     sources: list[SourceInfo]) -> pl.DataFrame:
    tab = table()
    logged = log_steps_frame(metrics, sources, tab)
    if not _has_flops(events):
        return logged
    return pl.concat([logged, trace_steps_frame(lazy["aligned"], lazy["steps"], sources, tab)])


@provides("efficiency", schema=EFFICIENCY, lazy=("aligned", "stage_timeline"))
def efficiency(lazy: Lazy, efficiency_steps: pl.DataFrame, metrics: pl.DataFrame,
               events: pl.DataFrame, sources: list[SourceInfo]) -> pl.DataFrame:
    tab = table()
    warm = warmup_steps(_step_times(metrics, events, tab), tab.warmup_ratio)
    summary = summarise(efficiency_steps, warm, tab)
    if not _has_flops(events):
        return summary
    staged = trace_stages_frame(lazy["aligned"], lazy["stage_timeline"], sources, tab)
    return pl.concat([summary, staged])


@provides("efficiency_notes", lazy=("aligned",))
def efficiency_notes(lazy: Lazy, events: pl.DataFrame, sources: list[SourceInfo]) -> list[str]:
    if not _has_flops(events):
        return []
    return (capture_notes(sources) + shape_notes(sources)
            + device_notes(lazy["aligned"], sources, table()))


def shape_notes(sources: list[SourceInfo]) -> list[str]:
    """Where FLOPs were computed from shapes, which operators count: the MFU is a lower bound."""
    return [
        f"{s.path.name}: FLOPs of {s.meta['flops_from_shapes']:,} matrix product"
        f"{'' if s.meta['flops_from_shapes'] == 1 else 's'} computed from their recorded shapes "
        "(aten::mm, addmm, bmm, baddbmm; the trace records no FLOPs); other operators are not "
        "counted, so the MFU is a lower bound"
        for s in sources if s.meta.get("flops_from_shapes")
    ]


@provides("efficiency_findings", schema=FINDING_CANDIDATES)
def efficiency_findings(efficiency: pl.DataFrame) -> pl.DataFrame:
    """A training role whose headline MFU is under the table's ``low_mfu`` (the roles it
    exempts, generation, are memory-bound by nature)."""
    tab = table()
    low = tab.low_mfu
    rows = efficiency.filter(
        (pl.col("metric") == "mfu") & (pl.col("headline_value") < low)
        & (pl.col("role") != "all") & ~pl.col("role").is_in(tab.low_mfu_exempt)
    )
    found = rows.select(
        pl.format("efficiency.low_mfu.{}", "role").alias("id"),
        pl.lit("efficiency").alias("kind"),
        pl.format("Low MFU of the {} ({}%)", "role",
                  (100 * pl.col("headline_value")).round(1).cast(pl.String)).alias("title"),
        pl.lit("info").alias("severity"),
        pl.lit("").alias("ranks"),
        pl.format("{}–{}", "first_step", "last_step").alias("steps"),
        pl.col("stage"),
        pl.format("{} MFU {}% ({}, {}; {}), under {}%", "role",
                  (100 * pl.col("headline_value")).round(1).cast(pl.String), "headline", "key",
                  "file", pl.lit(str(round(100 * low, 1)))).alias("evidence"),
        pl.lit(None, dtype=pl.Int64).alias("saving_ns"),
        pl.lit("").alias("saving_basis"),
        pl.when(pl.col("key") == TRACE_KEY).then(pl.lit("trace")).otherwise(pl.lit("log"))
        .alias("measured_on"),
        pl.lit("larger micro-batches per GPU, sequence packing (use_remove_padding / dynamic "
               "batch size), less activation recomputation where memory allows").alias(
                   "recommendation"),
        pl.lit("medium").alias("confidence"),
    )
    return found.cast(FINDING_CANDIDATES)


def _executed_flops(sources: list[SourceInfo]) -> pl.Expr:
    """Rows with FLOPs that ran: not those of a graph-capture trace, whose operators were
    recorded into a graph, not executed (their FLOPs over the capture's time is no rate)."""
    return (pl.col("flops").is_not_null() & (pl.col("flops") > 0)
            & ~pl.col("source").is_in([s.index for s in captured(sources)]))


def capture_notes(sources: list[SourceInfo]) -> list[str]:
    return [
        f"{s.path.name}: a graph-capture trace: its operators were captured into a graph, not "
        "executed, so no TFLOP/s or MFU is computed from their FLOPs"
        for s in captured(sources)
    ]


def _has_flops(events: pl.DataFrame) -> bool:
    return "flops" in events.columns and events["flops"].is_not_null().any()


def headline(efficiency: pl.DataFrame, metric: str, role: str = "all") -> dict[str, Any] | None:
    """The first summary row of ``metric`` for ``role`` (None when the run has none)."""
    rows = efficiency.filter((pl.col("metric") == metric) & (pl.col("role") == role))
    return rows.row(0, named=True) if rows.height else None
