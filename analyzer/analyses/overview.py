"""The headline numbers every report leads with and every comparison and audit reads (what ran —
framework, placement, execution mode — is the run section of ``analyzer/classify/placement.py``).

One row per metric with a stable ``metric`` name; ``overview.<metric>`` is its path in audit
budgets and comparisons (docs/reports.md). Each number is read from the product that computes it
(``steps``, ``gpu_time``, ``bubbles``, ``pools``, ``weight_sync`` or ``log_weight_sync``,
``collectives_by_dim``, ``workdepth``, ``violations``); when that product is not provided or has
nothing to say, the row keeps a null value and its text says what it needs.

Two GPU idle numbers, over two windows: ``gpu_idle_fraction`` is HTA's temporal breakdown (idle
over each rank's first to last GPU activity, ``gpu_time``), ``gpu_step_idle_fraction`` the
same no-activity time over the step windows that ``idle_fraction`` divides by (``bubbles``), so
it is never above that one. A capture whose GPU ran two kernels back to back in a 33.7 ms step
(TraceLens' SGLang capture trace) reads 0.0% in HTA's window and 99.97% in the step's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from taxonomy.vocab import TRAINER_STAGES

from ..model.failures import Failure, record, user_errors
from ..model.products import Lazy, provides
from ..model.scalars import number
from .bubbles import host_only
from .findings import judged
from .sync import of_ranks

OVERVIEW: dict[str, pl.DataType] = {
    "metric": pl.String(),
    "title": pl.String(),
    "value": pl.Float64(),
    "unit": pl.String(),
}
"""``value`` is null for numbers that could not be computed (:class:`Metric` ``needs`` says
what it needs); ``unit`` is ``ns``, ``fraction``, ``count`` or ``ratio``."""


@dataclass(frozen=True)
class Metric:
    name: str
    title: str
    unit: str
    needs: str
    better: str = ""
    """``lower`` or ``higher`` when a smaller or larger value is the better run (compare)."""


STEPS_NEED = "step ranges in a trace or step numbers in a log"
"""What a report says the step metrics need (what the user provides, not a product name)."""
FINDINGS_NEED = "a step (in a trace or a log) or a GPU kernel to judge"

METRICS: tuple[Metric, ...] = (
    Metric(
        "ranks", "ranks (devices)", "count", "a device trace (a log says what ran, not where)"
    ),
    Metric("steps", "steps", "count", STEPS_NEED),
    Metric("step_time_ns", "step time (median)", "ns", STEPS_NEED, "lower"),
    Metric(
        "step_time_max_ns", "step time (max)", "ns", STEPS_NEED, "lower"
    ),
    Metric(
        "gpu_busy_ns", "GPU busy, whole trace (sum over ranks)", "ns", "GPU activity in a trace"
    ),
    Metric(
        "gpu_idle_fraction",
        "GPU idle, first to last GPU activity (HTA)",
        "fraction",
        "GPU activity in a trace",
        "lower",
    ),
    Metric(
        "gpu_step_idle_fraction",
        "GPU idle, step windows",
        "fraction",
        "step ranges and GPU activity in a trace",
        "lower",
    ),
    Metric(
        "idle_fraction",
        "idle, all devices",
        "fraction",
        "device work in a trace",
        "lower",
    ),
    Metric(
        "trainer_idle_fraction",
        "idle, train pool",
        "fraction",
        "a training or reference stage on a pool's ranks, in a trace",
        "lower",
    ),
    Metric(
        "rollout_idle_fraction",
        "idle, rollout pool",
        "fraction",
        "a rollout stage on a pool's ranks, in a trace",
        "lower",
    ),
    Metric(
        "weight_sync_share",
        "weight sync share of step",
        "fraction",
        "a weight-sync range in a trace or a weight-sync timer in a log",
        "lower",
    ),
    Metric(
        "exposed_comm_ns",
        "exposed communication",
        "ns",
        "collectives (NCCL, gloo, …) in a trace",
        "lower",
    ),
    Metric(
        "parallelism",
        "parallelism W/D (mean)",
        "ratio",
        "stage ranges and device work in a trace (D is the critical path through the stages)",
        "higher",
    ),
    Metric(
        "guideline_errors",
        "guideline violations: error",
        "count",
        "a guideline evaluated (RL stage times from a trace or a log)",
        "lower",
    ),
    Metric(
        "guideline_warnings",
        "guideline violations: warn",
        "count",
        "a guideline evaluated (RL stage times from a trace or a log)",
        "lower",
    ),
    Metric("finding_errors", "findings: error", "count", FINDINGS_NEED),
    Metric("finding_warnings", "findings: warn", "count", FINDINGS_NEED),
)
"""The finding counts have no better direction: what a run can be found to lack depends on what
it recorded (a log has no GPU finding), so fewer findings do not make a better run in compare."""
METRIC_BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


READS = (
    "ranks",
    "steps",
    "gpu_time",
    "bubbles",
    "pools",
    "stage_ranges",
    "weight_sync",
    "log_weight_sync",
    "collectives_by_dim",
    "exposed_comm",
    "workdepth",
    "violations",
    "step_outliers",
    "activity",
    "findings",
)


@provides("overview", lazy=("findings", "log_steps"))
def overview(selected_ranks: list[int], steps: pl.DataFrame, gpu_time: pl.DataFrame,
             bubbles: pl.DataFrame, pools: pl.DataFrame, weight_sync: pl.DataFrame,
             log_weight_sync: pl.DataFrame, collectives_by_dim: pl.DataFrame,
             exposed_comm: pl.DataFrame, workdepth: pl.DataFrame, violations: pl.DataFrame,
             step_outliers: pl.DataFrame, activity: pl.DataFrame,
             stage_ranges: pl.DataFrame, lazy: Lazy, failures: dict[str, Failure]) -> pl.DataFrame:
    """The selected ranks' numbers: the per-rank frames narrowed to them (``gpu_time`` and
    ``collectives_by_dim`` already are); the per-step ones are the run's. The findings are
    read on demand, so that their failure leaves only their two counts empty."""
    return compute(
        dict(
            ranks=selected_ranks,
            activity=of_ranks(activity, selected_ranks),
            steps=steps,
            step_outliers=step_outliers,
            gpu_time=gpu_time,
            bubbles=of_ranks(bubbles, selected_ranks),
            pools=pools,
            stage_ranges=stage_ranges,
            weight_sync=weight_sync,
            log_weight_sync=log_weight_sync,
            collectives_by_dim=collectives_by_dim,
            exposed_comm=of_ranks(exposed_comm, selected_ranks),
            workdepth=workdepth,
            violations=violations,
            findings=_judged(lazy, failures, activity, steps),
        )
    )


def _judged(lazy: Lazy, failures: dict[str, Failure], activity: pl.DataFrame,
            steps: pl.DataFrame) -> pl.DataFrame | None:
    """The findings, where the inputs held something to judge (:func:`.findings.judged`):
    else 0 findings would read as a clean run (a log that stopped before step 1)."""
    try:
        if not judged(activity, steps, lazy["log_steps"]):
            return None
        return lazy["findings"]
    except user_errors():
        raise
    except Exception as exc:
        record(failures, "findings", exc)
        return None


def compute(products: Mapping[str, Any]) -> pl.DataFrame:
    """OVERVIEW from ``products`` (any of :data:`READS`; one missing, or not a frame with the
    columns a metric reads, leaves that metric's value null)."""
    values: dict[str, Any] = {}
    for collect in _COLLECTORS:
        values.update(collect(products))
    rows = []
    for m in METRICS:
        value = values.get(m.name)
        rows.append((m.name, m.title, None if value is None else float(value), m.unit))
    return pl.DataFrame(rows, schema=OVERVIEW, orient="row")


def frame_of(run: Any, name: str, *columns: str) -> pl.DataFrame | None:
    """Product ``name`` when the run provides it as a frame holding ``columns``, else None."""
    if not run.provides(name):
        return None
    return _frame(run.product(name), columns)


def _frame(value: Any, columns: tuple[str, ...]) -> pl.DataFrame | None:
    if not isinstance(value, pl.DataFrame) or any(c not in value.columns for c in columns):
        return None
    return value


def _in(products: Mapping[str, Any], name: str, *columns: str) -> pl.DataFrame | None:
    return _frame(products.get(name), columns)


def _ranks(products: Mapping[str, Any]) -> dict[str, Any]:
    """No value for a run of logs only: 0 ranks would read as a measured count, and a log's
    stated GPUs (its config) are not ranks whose work was recorded."""
    ranks = products.get("ranks")
    return {"ranks": len(ranks)} if ranks else {}


def warmup_steps(products: Mapping[str, Any]) -> list[int]:
    """The trace's warm-up steps (``step_outliers``, the rule of ``taxonomy/steps.toml``): left
    out of the median step time, which stands for a steady step."""
    outliers = _in(products, "step_outliers", "source", "kind", "step")
    if outliers is None:
        return []
    mask = (pl.col("source") == "trace") & (pl.col("kind") == "warmup")
    return sorted(outliers.filter(mask)["step"].unique().to_list())


def _steps(products: Mapping[str, Any]) -> dict[str, Any]:
    steps = _in(products, "steps", "step", "start_ns", "end_ns")
    if steps is None or steps.height == 0:
        return {}
    length = steps["end_ns"] - steps["start_ns"]
    steady = steps.filter(~pl.col("step").is_in(warmup_steps(products)))
    typical = steady if steady.height else steps
    return {
        "steps": steps["step"].n_unique(),
        "step_time_ns": (typical["end_ns"] - typical["start_ns"]).median(),
        "step_time_max_ns": length.max(),
    }


def _gpu(products: Mapping[str, Any]) -> dict[str, Any]:
    gpu = _in(products, "gpu_time", "busy_ns", "gpu_window_ns")
    if gpu is None:
        return {}
    gpu = gpu.filter(pl.col("gpu_window_ns").is_not_null() & (pl.col("gpu_window_ns") > 0))
    if gpu.height == 0:
        return {}
    window, busy = number(gpu["gpu_window_ns"].sum()), number(gpu["busy_ns"].sum())
    return {"gpu_busy_ns": busy, "gpu_idle_fraction": (window - busy) / window}


def _gpu_steps(products: Mapping[str, Any]) -> dict[str, Any]:
    """GPU idle over the step windows: Σ (window − busy) ÷ Σ window over the device-steps of
    ranks with GPU activity (a host-only rank's busy is its host work standing in)."""
    bubbles = _in(products, "bubbles", "step", "rank", "window_ns", "busy_ns")
    activity = products.get("activity")
    if bubbles is None or not isinstance(activity, pl.DataFrame) or activity.height == 0:
        return {}
    per_device = (
        bubbles.filter(~pl.col("rank").is_in(host_only(activity)))
        .group_by("step", "rank")
        .agg(pl.col("window_ns", "busy_ns").first())
    )
    window = number(per_device["window_ns"].sum())
    if not window:
        return {}
    return {"gpu_step_idle_fraction": (window - number(per_device["busy_ns"].sum())) / window}


def _without_activity(products: Mapping[str, Any]) -> bool:
    """True when the trace records no device work at all (an NVTX-only capture): every window
    would then read as 100% idle and W/D as 0, numbers about the capture, not the run."""
    activity = products.get("activity")
    return isinstance(activity, pl.DataFrame) and activity.height == 0


def _idle(products: Mapping[str, Any]) -> dict[str, Any]:
    bubbles = _in(products, "bubbles", "step", "rank", "window_ns", "idle_ns")
    if bubbles is None or bubbles.height == 0 or _without_activity(products):
        return {}
    per_device = bubbles.group_by("step", "rank").agg(
        pl.col("window_ns").first(), pl.col("idle_ns").sum()
    )
    out = {"idle_fraction": _ratio(per_device)}
    pools = _in(products, "pools", "rank", "pool")
    if pools is not None:
        tagged = per_device.join(
            pools.select("rank", pl.col("pool").cast(pl.String)), on="rank", how="left"
        )
        staged = _in(products, "stage_ranges", "rank", "stage")
        for pool, key in (("train", "trainer_idle_fraction"), ("rollout", "rollout_idle_fraction")):
            mine = tagged.filter(pl.col("pool").is_in([pool, "shared"]))
            if mine.height and _runs(staged, mine["rank"], POOL_STAGES[pool]):
                out[key] = _ratio(mine)
    return out


POOL_STAGES: dict[str, tuple[str, ...]] = {"train": TRAINER_STAGES, "rollout": ("rollout",)}
"""What makes a pool's idle share a pool's: some of its ranks run these stages. A rank with no
stage range is put in the shared pool, which counted in both: HTA's event_sync_trace, no stage
and no placement, read 98.4% idle in a train and in a rollout pool it does not have."""


def _runs(staged: pl.DataFrame | None, ranks: pl.Series, stages: tuple[str, ...]) -> bool:
    if staged is None:
        return False
    return staged.filter(
        pl.col("rank").is_in(ranks.implode()) & pl.col("stage").cast(pl.String).is_in(stages)
    ).height > 0


def _ratio(per_device: pl.DataFrame) -> float | None:
    window = number(per_device["window_ns"].sum())
    return number(per_device["idle_ns"].sum()) / window if window else None


def _weight_sync(products: Mapping[str, Any]) -> dict[str, Any]:
    """The trace's weight-sync ranges over its steps, else the log's weight-sync timer share
    (the log section's number: a timer that reads 0 s is a measured 0%, not a missing one)."""
    sync = _in(products, "weight_sync", "time_ns")
    steps = _in(products, "steps", "start_ns", "end_ns")
    if sync is None or sync.height == 0 or steps is None:
        return _logged_weight_sync(products)
    total = (steps["end_ns"] - steps["start_ns"]).sum()
    return {"weight_sync_share": sync["time_ns"].sum() / total} if total else {}


def _logged_weight_sync(products: Mapping[str, Any]) -> dict[str, Any]:
    logged = _in(products, "log_weight_sync", "status", "share")
    if logged is None:
        return {}
    measured = logged.filter((pl.col("status") == "measured") & pl.col("share").is_not_null())
    return {"weight_sync_share": measured["share"][0]} if measured.height else {}


def _collectives(products: Mapping[str, Any]) -> dict[str, Any]:
    """Exposed communication; 0 when the trace records kernels and no collective among them
    (null when it records none: a host op or a copy alone, as rl-insight's cpu_op-only file or
    alpa's report2 whose Nsight missed the kernels, cannot show a collective that ran)."""
    coll = _in(products, "collectives_by_dim", "exposed_ns")
    if coll is not None and coll.height == 0:
        activity = products.get("activity")
        searched = isinstance(activity, pl.DataFrame) and (activity["kind"] == "kernel").any()
        return {"exposed_comm_ns": 0} if searched else {}
    if coll is None or coll["exposed_ns"].null_count() == coll.height:
        return {}
    exposed = _in(products, "exposed_comm", "exposed_ns")
    return {"exposed_comm_ns": exposed["exposed_ns"].sum()} if exposed is not None else {}


def _workdepth(products: Mapping[str, Any]) -> dict[str, Any]:
    wd = _in(products, "workdepth", "parallelism")
    if wd is None or wd["parallelism"].null_count() == wd.height or _without_activity(products):
        return {}
    return {"parallelism": wd["parallelism"].mean()}


def _guidelines(products: Mapping[str, Any]) -> dict[str, Any]:
    found = _in(products, "violations", "status", "severity")
    if found is None or not found.filter(pl.col("status") != "not_evaluated").height:
        return {}  # nothing evaluated: 0 violations would read as a clean run (alpa's reports)
    violated = found.filter(pl.col("status") == "violated")
    return {
        "guideline_errors": violated.filter(pl.col("severity") == "error").height,
        "guideline_warnings": violated.filter(pl.col("severity") == "warn").height,
    }


def _finding_counts(products: Mapping[str, Any]) -> dict[str, Any]:
    """The findings at error and warn severity: beside the guideline counts, so that a headline
    of 0 guideline errors does not read as a clean run when findings are errors (a plain
    training loop, which no RL guideline applies to, idle a third of its time)."""
    found = _in(products, "findings", "severity")
    if found is None:
        return {}
    severity = found["severity"]
    return {"finding_errors": (severity == "error").sum(),
            "finding_warnings": (severity == "warn").sum()}


_COLLECTORS: tuple[Callable[[Mapping[str, Any]], dict[str, Any]], ...] = (
    _ranks, _steps, _gpu, _gpu_steps, _idle, _weight_sync, _collectives, _workdepth, _guidelines,
    _finding_counts,
)


