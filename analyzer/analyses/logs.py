"""The logs-only analysis as run products: what the framework's own timers say, step by step.

Wraps :mod:`analyzer.analyses.log_steps` (a pure function of the log rows) for ``Run``: its
frames become products named ``log_<output>`` (``log_stages``, ``log_steps``, ``log_stats``,
``log_stage_summary``, ``log_dominant``, ``log_weight_sync``, ``log_long_tail``,
``log_long_tail_summary``, ``log_unclassified``, ``log_needs_trace``), empty when the run has no
log timers. The log's names are classified by the run's detected framework profile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from ..classify.steps import name_classes
from ..model.products import provides
from . import log_steps

if TYPE_CHECKING:
    pass

@provides("log_result")
def log_result(
    events: pl.DataFrame, metrics: pl.DataFrame, profile: dict[str, Any]
) -> log_steps.LogSteps | None:
    """The logs-only analysis of the run's log timers (None when it has none)."""
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


