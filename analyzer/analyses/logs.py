"""The logs-only analysis as run products: what the framework's own timers say, step by step.

Wraps :mod:`analyzer.analyses.log_steps` (a pure function of the log rows) for ``Run``: its
frames become products named ``log_<output>`` (``log_stages``, ``log_steps``, ``log_stats``,
``log_stage_summary``, ``log_dominant``, ``log_weight_sync``, ``log_long_tail``,
``log_long_tail_summary``, ``log_unclassified``, ``log_needs_trace``), empty when the run has no
log timers. The log's names are classified by the run's detected framework profile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from ..classify.steps import name_classes
from ..model.options import Options
from ..model.products import provides
from ..model.run import SourceInfo
from . import log_steps

if TYPE_CHECKING:
    pass


@provides("log_result")
def log_result(
    events: pl.DataFrame, metrics: pl.DataFrame, profile: dict[str, Any], options: Options
) -> log_steps.LogSteps | None:
    """The logs-only analysis of the run's log timers (None when it has none), of the
    ``--steps`` selection (the run's metric rows are already only those)."""
    chosen = options.step_selection
    if chosen is not None:
        events = events.filter(
            (pl.col("kind") != "log_stage") | pl.col("step").is_null() | chosen.expr("step")
        )
    timers = events.filter(pl.col("kind") == "log_stage")
    if timers.height == 0:
        return None
    classes = name_classes(profile, timers["name"].cast(pl.String).unique(), "log")
    return log_steps.compute(events, metrics, classes, profile["detection"].profile.metrics)


def _output(attr: str) -> Callable[[log_steps.LogSteps | None], pl.DataFrame]:
    def output(log_result: log_steps.LogSteps | None) -> pl.DataFrame:
        return (
            pl.DataFrame(schema=_empty_schema(attr))
            if log_result is None
            else getattr(log_result, attr)
        )

    output.__qualname__ = output.__name__ = f"log_{attr}"
    output.__doc__ = f"The log analysis' ``{attr}`` frame: {log_steps.OUTPUTS[attr]}."
    return output


for _attr in log_steps.OUTPUT_NAMES:
    provides(f"log_{_attr}")(_output(_attr))


@provides("log_notes")
def log_notes(log_result: log_steps.LogSteps | None) -> list[str]:
    return [] if log_result is None else log_result.notes


def _empty_schema(attr: str) -> dict[str, pl.DataType]:
    return getattr(log_steps, f"{attr.upper()}_SCHEMA")


LOG_RUNS_SCHEMA = pl.Schema({
    "file": pl.String(), "framework": pl.String(), "device": pl.String(), "steps": pl.Int64(),
    "first_step": pl.Int64(), "last_step": pl.Int64(), "ended": pl.String(),
    "stopped_at": pl.String(),
})


def log_runs(sources: Sequence[SourceInfo]) -> pl.DataFrame:
    """Per framework log: its framework, device, steps and how it ended; for a log that recorded
    no step, where the run stopped (``meta["stopped_at"]``, parsers/logs/progress.py)."""
    rows = [
        {
            "file": s.path.name,
            "framework": s.meta.get("framework"),
            "device": s.meta.get("device_name"),
            "steps": s.meta.get("n_steps"),
            "first_step": s.meta.get("first_step"),
            "last_step": s.meta.get("last_step"),
            "ended": s.meta.get("ended"),
            "stopped_at": (s.meta.get("stopped_at") or {}).get("description")
            if not s.meta.get("n_steps") else None,
        }
        for s in sources
        if s.format.endswith("-log")
    ]
    return pl.DataFrame(rows, schema=LOG_RUNS_SCHEMA)


