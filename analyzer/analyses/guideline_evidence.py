"""What the guideline metrics read: views over a run's products, its logged metrics and config.

A metric (``guideline_metrics.py``) asks for evidence here and gets a per-step frame or a
:class:`Missing` saying what the run lacks. Trace products are preferred; log products, logged
metrics (keys from the catalogue's ``[keys]`` and the framework profiles' ``[metrics]``) and the
config a log header states (``[config]`` paths) are the fallback, so logs-only runs get every
guideline logs can decide. Nothing here recomputes another module's product.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import polars as pl

from taxonomy import profiles
from taxonomy.guidelines import Catalogue, Check

from ..model import intervals
from ..model.scalars import number
from ..model.units import plural
from .log_steps import one_per_key

if TYPE_CHECKING:
    from ..model.products import Lazy

LOG_STAGES = "log_stages"
"""log_steps' per step × stage frame (step, stage, label, seconds, share, in_step, keys)."""
LOG_STEPS = "log_steps"


def in_steps(frame: pl.DataFrame) -> str:
    """``1 step``, ``3 steps``: how many steps a per-step frame holds."""
    return plural(frame.height, "step")
"""log_steps' per-step frame (step, total_s, total_from, …, wall_s)."""
LOG_WEIGHT_SYNC = "log_weight_sync"
"""log_steps' weight-sync frame (status, …, note): says when a version hides the sync in a timer."""

PER_STEP: dict[str, pl.DataType] = {
    "step": pl.Int32(),
    "value": pl.Float64(),
    "num": pl.Float64(),
    "den": pl.Float64(),
    "rank": pl.Int32(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
}
"""What a metric measures: one row per step (or one row with a null step for a run-level
value); ``num``/``den`` for shares, the rank and time window it was seen in where known."""


@dataclass(frozen=True)
class Measured:
    per_step: pl.DataFrame
    basis: str
    """Where the number comes from, e.g. "trace stage ranges, 2 steps"."""


@dataclass(frozen=True)
class Missing:
    needs: str


@dataclass(frozen=True)
class Inapplicable:
    """The run cannot break the guideline (e.g. no critic to overlap): it passes, saying why."""

    reason: str


Result = Measured | Missing | Inapplicable

RL_STAGES: tuple[str, ...] = (
    "rollout",
    "reward",
    "old_logprob",
    "ref_logprob",
    "values",
    "advantage",
    "critic_update",
    "weight_sync",
)
"""Stages only RL post-training has: a plain training loop has data loading, an update
(``actor_update`` is what the generic profile calls any optimizer step), checkpoints and
evaluation, never these."""


def per_step(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` shaped to :data:`PER_STEP` (absent columns null), sorted by step."""
    cols = [
        (pl.col(name) if name in frame.columns else pl.lit(None)).cast(dtype).alias(name)
        for name, dtype in PER_STEP.items()
    ]
    return frame.select(cols).sort("step", nulls_last=True)


def ratio(whole: pl.DataFrame, part: pl.DataFrame, on: Sequence[str] = ("step",)) -> pl.DataFrame:
    """``whole`` (``den`` per ``on``) with ``part``'s ``num`` joined in, 0 where ``part`` has
    none, and ``value`` = num ÷ den; null where ``den`` is not positive (a 0/0 NaN or an x/0
    infinity is no measurement: the check then says what it needs)."""
    return (
        whole.join(part, on=list(on), how="left")
        .with_columns(pl.col("num").fill_null(0))
        .with_columns(pl.when(pl.col("den") > 0).then(pl.col("num") / pl.col("den")).alias("value"))
    )


def run_value(frame: pl.DataFrame, check: Check) -> float | None:
    """The run's value from per-step values by the check's ``aggregate``; steps without a
    positive denominator or a finite value add nothing (None when no step is left)."""
    values = frame["value"].drop_nulls()
    values = values.filter(values.is_finite())
    if check.aggregate == "share":
        measured = frame.filter(pl.col("den") > 0)
        den = number(measured["den"].sum())
        share = number(measured["num"].sum()) / den if den > 0 else None
        return float(share) if share is not None and math.isfinite(share) else None
    if values.len() == 0:
        return None
    match check.aggregate:
        case "mean":
            return float(values.mean())
        case "median":
            return float(values.median())
        case "max":
            return float(values.max())
    return float(values[-1])


class Evidence:
    """Cached views over one run for the metrics of one catalogue."""

    def __init__(self, products: Lazy, catalogue: Catalogue) -> None:
        self.products = products
        self.catalogue = catalogue

    # --- products -------------------------------------------------------------------------

    def frame(self, name: str) -> pl.DataFrame | None:
        """A frame product with rows, or None when it is empty."""
        value: pl.DataFrame = self.products[name]
        return value if value.height else None

    @cached_property
    def placement(self) -> tuple[str | None, str | None, str]:
        """(placement, execution mode, where from): the trace's inference, else the config."""
        facts = self.products["placement"]
        if facts.get("placement"):
            return facts["placement"], facts.get("execution"), "trace"
        stated = self.config("placement")
        return (str(stated) if stated else None), None, "config"

    @cached_property
    def framework(self) -> tuple[str, bool]:
        """(profile name, whether it is an RL framework): not the generic fallback, not an
        inference engine."""
        found = self.products["profile"]
        profile = found["profile"]
        return found["name"], found["name"] != profiles.GENERIC and not profile.engine

    def _logs_a_timer(self, stages: list[str]) -> bool:
        """Whether the run's framework profile names a log timer of one of ``stages``: a log of
        that framework without one did none of them (zero); of another, it cannot say."""
        profile = self.products["profile"]["profile"]
        return any(r.stage in stages and r.source in ("log", "any") for r in profile.rules)

    @cached_property
    def rl_stages(self) -> tuple[str, ...]:
        """The RL-only stages (:data:`RL_STAGES`) the trace's timeline or the log's timers hold."""
        seen: set[str] = set()
        for name in ("stage_timeline", LOG_STAGES):
            frame = self.frame(name)
            if frame is not None and "stage" in frame.columns:
                seen |= set(frame["stage"].cast(pl.String).unique().drop_nulls().to_list())
        return tuple(s for s in RL_STAGES if s in seen)

    @cached_property
    def device(self) -> str | None:
        """The device kind a log header states (``cuda``, ``tpu``, ``npu``), lower case."""
        stated = self.config("device")
        return str(stated).strip().lower() or None if stated is not None else None

    @cached_property
    def device_noun(self) -> str:
        """What the evidence calls a device: ``GPU`` on CUDA and in a run stating no device (as
        :attr:`device` is read elsewhere), else the stated kind (``TPU``, ``NPU``)."""
        return "GPU" if self.device in (None, "cuda") else self.device.upper()

    @cached_property
    def windows(self) -> pl.DataFrame | None:
        """Trace step windows: step, start_ns, end_ns, wall_ns."""
        steps = self.frame("steps")
        if steps is None:
            return None
        return steps.select(
            "step", "start_ns", "end_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("wall_ns")
        )

    def in_windows(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` (per step) with its steps' trace windows, where the trace has steps."""
        return frame if self.windows is None else frame.join(self.windows, on="step", how="left")

    @cached_property
    def timeline(self) -> pl.DataFrame | None:
        """The stage timeline's segments that belong to a step."""
        timeline = self.frame("stage_timeline")
        if timeline is None or self.windows is None:
            return None
        inside = timeline.filter(pl.col("step").is_not_null())
        return inside if inside.height else None

    @cached_property
    def device_timeline(self) -> pl.DataFrame | None:
        """The timeline of device ranks only (the single controller, rank -1, is not a device)."""
        if self.timeline is None:
            return None
        devices = self.timeline.filter(pl.col("rank") >= 0)
        return devices if devices.height else None

    @cached_property
    def pools(self) -> pl.DataFrame | None:
        return self.frame("pools")

    @cached_property
    def disaggregated(self) -> bool | None:
        """False when the placement is colocated (every rank runs every stage), True when it is
        disaggregated or split, None when neither the trace nor the config says, or when the run
        is rollout-only (no training ranks to be placed apart from)."""
        placement = self.placement[0]
        return None if placement in (None, "rollout_only") else placement != "colocated"

    # --- stage time -----------------------------------------------------------------------

    def stage_time(
        self, stages: Iterable[str], *, absent_is_zero: bool = False
    ) -> Measured | Missing:
        """Per step: time in any of ``stages`` (num) over the step's wall time (den). From the
        trace (union over ranks of the stages' segments) when it has them, else from the log."""
        wanted = sorted(set(stages))
        label = " + ".join(wanted)
        traced = self._trace_stage_time(wanted)
        if traced is not None and (traced["num"].sum() > 0 or absent_is_zero):
            return Measured(traced, f"trace stage ranges, {in_steps(traced)}")
        logged = self._log_stage_time(wanted, absent_is_zero)
        if isinstance(logged, Measured) or traced is None:
            return logged
        return Missing(f"{label} ranges (the trace has none) or {logged.needs}")

    def _trace_stage_time(self, stages: list[str]) -> pl.DataFrame | None:
        if self.timeline is None or self.windows is None:
            return None
        segments = self.timeline.filter(pl.col("stage").cast(pl.String).is_in(stages))
        spent = (
            intervals.union_length(segments, ["step"], "num")
            if segments.height
            else pl.DataFrame(schema={"step": pl.Int32, "num": pl.Int64})
        )
        return per_step(ratio(self.windows.with_columns(pl.col("wall_ns").alias("den")), spent))

    def _log_stage_time(self, stages: list[str], absent_is_zero: bool) -> Measured | Missing:
        label = " + ".join(stages)
        rows, walls = self.frame(LOG_STAGES), self.frame(LOG_STEPS)
        if rows is None or walls is None:
            return Missing(f"{label} times (stage ranges in a trace, or a framework log's timers)")
        covers = rows.with_columns(pl.col("label").str.split("+").alias("_covers"))
        inside = pl.col("_covers").list.eval(pl.element().is_in(stages))
        pure = covers.filter(inside.list.all())
        mixed = covers.filter(inside.list.any() & ~inside.list.all())
        if mixed.height:
            names = ", ".join(sorted(set(mixed["keys"].to_list())))
            return Missing(
                f"{label} timed on their own (the log times "
                f"them together with other stages: {names})"
            )
        if pure.height == 0 and not absent_is_zero:
            return Missing(f"a {label} timer (the log has none)")
        if pure.height == 0 and not self._logs_a_timer(stages):
            return Missing(f"a {label} timer (the log has none, and the {self.framework[0]} "
                           "profile names no log timer of them: none is not zero)")
        spent = pure.group_by("step").agg(pl.col("seconds").sum().alias("num"))
        frame = ratio(walls.select("step", pl.col("wall_s").alias("den")), spent)
        keys = (
            ", ".join(sorted(set(", ".join(pure["keys"].to_list()).split(", "))))
            if pure.height
            else "no timer"
        )
        return Measured(per_step(frame), f"log timers ({keys}), {in_steps(frame)}")

    # --- logged metrics, timers and config --------------------------------------------------

    @cached_property
    def _profiles(self) -> Mapping[str, profiles.Profile]:
        return profiles.load_profiles()

    def candidates(self, quantity: str) -> list[str]:
        """Log keys for a quantity: the catalogue's first, then every profile's."""
        keys = list(self.catalogue.keys.get(quantity, ()))
        for profile in self._profiles.values():
            keys += [k for k in profile.metrics.get(quantity, ()) if k not in keys]
        return keys

    @cached_property
    def _metric_keys(self) -> set[str]:
        metrics = self.products["metrics"]
        return set(metrics["key"].unique().to_list()) if metrics.height else set()

    def logged(self, quantity: str) -> tuple[str, pl.DataFrame] | None:
        """The first candidate key the run logs for ``quantity`` and its per-step values
        (step, value; one per step, whatever the order of the files: ``log_steps.one_per_key``)."""
        key = next((k for k in self.candidates(quantity) if k in self._metric_keys), None)
        if key is None:
            return None
        stated = self.products["metrics"].filter(
            (pl.col("key") == key) & pl.col("step").is_not_null() & pl.col("value").is_finite()
        )
        values = (
            one_per_key(stated, ["step"], "value")
            .select(pl.col("step").cast(pl.Int32), "value")
            .sort("step")
        )
        return (key, values) if values.height else None

    def timer(self, name: str) -> tuple[str, pl.DataFrame] | None:
        """Per-step seconds of the first log timer in ``[timers].name`` the run has."""
        names = self.catalogue.timers.get(name, ())
        logs = self.products["events"].filter(pl.col("kind") == "log_stage")
        if not names or logs.height == 0:
            return None
        found = logs.filter(pl.col("name").cast(pl.String).is_in(list(names)))
        if found.height == 0:
            return None
        key = next(n for n in names if n in set(found["name"].cast(pl.String).to_list()))
        seconds = (
            found.filter(pl.col("name").cast(pl.String) == key)
            .group_by("step")
            .agg(((pl.col("end_ns") - pl.col("start_ns")).sum() / 1e9).alias("num"))
        )
        return key, seconds

    def config(self, fact: str) -> Any:
        """A run-config fact from the sources' meta: each ``[config]`` path is a top-level meta
        key, or a dotted path into ``meta["config"]``; the first stated value wins."""
        paths = self.catalogue.config.get(fact, ())
        for source in self.products["sources"]:
            meta = source.meta or {}
            for path in paths:
                value = (
                    meta.get(path) if path in meta else _dig(meta.get("config"), path.split("."))
                )
                if value is not None:
                    return value
        return None


def _dig(tree: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(tree, Mapping) or part not in tree:
            return None
        tree = tree[part]
    return tree
