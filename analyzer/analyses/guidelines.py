"""Guidelines: the catalogue of docs/guidelines.md judged against one run.

Product ``violations`` (schema ``frames.VIOLATIONS``, then ``metric`` and ``heuristic``): one row
per enabled guideline of the catalogue (``taxonomy/guidelines.toml``, merged with the user file
in ``run.options["guidelines"]``). Each check's metric (``guideline_metrics.METRICS``) gives
per-step values, the check's ``aggregate`` makes them the run's value, and its thresholds judge
it. A guideline is

- ``violated`` when a check crosses a threshold: the most severe crossing is reported, with the
  step, rank and time window where its per-step value was worst;
- ``passed`` when every check that could be measured stays within its thresholds, or the run
  cannot break the guideline (evidence says why);
- ``not_evaluated`` when no check could be measured: evidence says "needs …", never passed;
  or when the run is not the kind its ``applies_to`` names (no RL framework or RL stages, a
  framework without a single controller): evidence says "does not apply: …". A guideline for a
  placement passes ("does not apply") on a run known to have another placement and needs the
  placement when nobody states it.

The recommendation carries a guideline's ``device_notes`` sentence only on that kind of device.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from parsers.errors import InputError
from taxonomy.guidelines import (
    SEVERITIES,
    AppliesTo,
    Catalogue,
    Check,
    Guideline,
    GuidelineError,
    format_value,
    load,
)

from ..model import frames
from ..model.failures import Failure, record, user_errors
from ..model.options import Options
from ..model.products import Lazy, provides
from .guideline_evidence import (
    LOG_STAGES,
    LOG_STEPS,
    LOG_WEIGHT_SYNC,
    Evidence,
    Inapplicable,
    Measured,
    Missing,
    Result,
    run_value,
)
from .guideline_metrics import METRICS

if TYPE_CHECKING:
    pass

EVIDENCE = (
    "steps",
    "stage_timeline",
    "stage_ranges",
    "pools",
    "placement",
    "activity",
    "bubbles",
    "collectives",
    "weight_sync",
    "aligned",
    LOG_STAGES,
    LOG_STEPS,
    LOG_WEIGHT_SYNC,
    "metrics",
    "events",
    "sources",
    "profile",
)
"""What the metrics may read (:class:`Evidence`), each only when a metric asks for it."""
SCHEMA: dict[str, pl.DataType] = {
    **frames.VIOLATIONS,
    "metric": pl.String(),
    "heuristic": pl.Boolean(),
}
STATUS_ORDER = {"violated": 0, "passed": 1, "not_evaluated": 2}
SEVERITY_ORDER = {s: -i for i, s in enumerate(SEVERITIES)}


def load_catalogue(user: str | Path | None = None) -> Catalogue:
    """The catalogue with ``user``'s file merged; a bad file or an unknown metric is an
    :class:`InputError` naming the file."""
    try:
        catalogue = load(user)
    except GuidelineError as exc:
        raise InputError(exc.path, exc.problem) from None
    for g in catalogue.guidelines:
        for c in g.checks:
            if c.implemented and c.metric not in METRICS:
                known = ", ".join(sorted(METRICS))
                raise InputError(
                    g.origin,
                    f"{g.id}.checks.{c.metric}: no such metric is implemented (known: {known})",
                )
    return catalogue


@provides("violations", lazy=EVIDENCE)
def violations(lazy: Lazy, options: Options, failures: dict[str, Failure]) -> pl.DataFrame:
    return evaluate(lazy, load_catalogue(options.guidelines), failures)


def evaluate(products: Lazy, catalogue: Catalogue, failures: dict[str, Failure]) -> pl.DataFrame:
    """One row per guideline (:data:`SCHEMA`), violated first; a guideline whose metric fails
    with an internal error is kept in ``failures`` and marked so in its row."""
    evidence = Evidence(products, catalogue)
    rows = [_judged(g, evidence, failures) for g in catalogue.guidelines]
    frame = pl.DataFrame(rows, schema=SCHEMA, orient="row")
    order = pl.col("status").replace_strict(STATUS_ORDER, return_dtype=pl.Int8)
    severity = pl.col("severity").replace_strict(SEVERITY_ORDER, default=1, return_dtype=pl.Int8)
    return frame.with_row_index("_i").sort([order, severity, "_i"]).drop("_i")


def _judged(g: Guideline, evidence: Evidence, failures: dict[str, Failure]) -> tuple[Any, ...]:
    """:func:`_judge`, or a row marked failed when its metric raises: one metric's bug leaves
    the other guidelines judged (docs/errors.md)."""
    try:
        return _judge(g, evidence)
    except user_errors():
        raise
    except Exception as exc:
        marker = record(failures, f"guideline {g.id}", exc).marker
        check = g.checks[0]
        return _row(
            g,
            check,
            "not_evaluated",
            None,
            None,
            check.first_threshold,
            None,
            None,
            None,
            None,
            marker,
        )


def _judge(g: Guideline, evidence: Evidence) -> tuple[Any, ...]:
    outside = _outside(g.applies_to, evidence)
    if outside is not None:
        status, text = outside
        check = g.checks[0]
        return _row(
            g, check, status, None, None, check.first_threshold, None, None, None, None, text,
            evidence,
        )
    results: list[tuple[Check, Result]] = [
        (
            c,
            METRICS[c.metric](evidence, c)
            if c.implemented
            else Missing(f"{c.needs} (not implemented)"),
        )
        for c in g.checks
    ]
    measured = []
    for i, (check, result) in enumerate(results):
        if isinstance(result, Measured):
            value = run_value(result.per_step, check)
            if value is None:
                results[i] = (check, Missing(f"a step where it can be measured ({result.basis})"))
            else:
                measured.append((check, result, value, *check.judge(value)))
    missing = [f"{c.metric}: needs {r.needs}" for c, r in results if isinstance(r, Missing)]
    if measured:
        crossed = [m for m in measured if m[3] is not None]
        check, result, value, severity, threshold = (
            max(crossed, key=lambda m: SEVERITIES.index(m[3])) if crossed else measured[0]
        )
        step, rank, start, end = _where(result, check)
        others = [
            f"{c.metric} = {format_value(v, c.unit)} ({r.basis})"
            for c, r, v, _, _ in measured
            if c is not check
        ]
        text = f"{check.metric} = {format_value(value, check.unit)} ({result.basis})"
        if step is not None and check.aggregate != "value":
            worst = result.per_step.filter(pl.col("step") == step)["value"][0]
            text += f"; worst step {step}: {format_value(worst, check.unit)}"
        text = "; ".join([text, *others, *(f"not evaluated: {m}" for m in missing)])
        return _row(
            g,
            check,
            "violated" if severity else "passed",
            severity,
            value,
            threshold,
            step,
            rank,
            start,
            end,
            text,
            evidence,
        )
    applicable = [(c, r) for c, r in results if isinstance(r, Inapplicable)]
    if applicable:
        check, result = applicable[0]
        assert isinstance(result, Inapplicable)
        text = "; ".join(
            [f"does not apply: {result.reason}", *(f"not evaluated: {m}" for m in missing)]
        )
        return _row(
            g, check, "passed", None, None, check.first_threshold, None, None, None, None, text,
            evidence,
        )
    check = g.checks[0]
    text = "; ".join(
        f"needs {r.needs}" if len(results) == 1 else f"{c.metric} needs {r.needs}"
        for c, r in results
        if isinstance(r, Missing)
    )
    return _row(
        g, check, "not_evaluated", None, None, check.first_threshold, None, None, None, None, text,
        evidence,
    )


def _outside(rule: AppliesTo, ev: Evidence) -> tuple[str, str] | None:
    """(status, evidence) when the run is not one ``rule`` is about, else None."""
    name, rl_framework = ev.framework
    if rule.needs_rl_stages and not rl_framework and not ev.rl_stages:
        return "not_evaluated", (
            f"does not apply: no RL framework or RL stages recognised (framework {name}; no "
            "rollout, reward, log-prob, value, advantage, critic-update or weight-sync stage)"
        )
    if rule.frameworks and name not in rule.frameworks:
        why = rule.why or "not a framework it is about"
        return "not_evaluated", (
            f"does not apply: {why} (framework {name}; "
            f"applies to {', '.join(rule.frameworks)})"
        )
    if rule.placements:
        placement, _, told = ev.placement
        wanted = " or ".join(rule.placements)
        if placement is None:
            return "not_evaluated", (
                f"needs the placement ({wanted}): neither the trace's stages nor the config "
                "state it"
            )
        if placement not in rule.placements:
            return "passed", (
                f"does not apply: the placement is {placement} (from the {told}), not {wanted}"
            )
    return None


def recommendation(g: Guideline, ev: Evidence) -> str:
    """The recommendation with the sentences of ``device_notes`` true on the run's device; a
    run that states no device is taken as CUDA (what GPU traces and most logs are)."""
    device = ev.device or "cuda"
    notes = [text for kind, text in g.device_notes.items() if kind == device]
    return " ".join([g.recommendation, *notes])


def _where(result: Measured, check: Check) -> tuple[int | None, int | None, int | None, int | None]:
    """Step, rank and window of the worst per-step value."""
    rows = result.per_step.filter(pl.col("value").is_not_null())
    if rows.height == 0:
        return None, None, None, None
    worst = rows.sort("value", descending=check.direction == "above").row(0, named=True)
    return worst["step"], worst["rank"], worst["start_ns"], worst["end_ns"]


def _row(
    g: Guideline,
    check: Check,
    status: str,
    severity: str | None,
    value: float | None,
    threshold: float | None,
    step: int | None,
    rank: int | None,
    start: int | None,
    end: int | None,
    evidence: str,
    ev: Evidence | None = None,
) -> tuple[Any, ...]:
    return (
        g.id,
        g.title,
        status,
        severity,
        value,
        threshold,
        check.unit,
        step,
        rank,
        start,
        end,
        evidence,
        g.recommendation if ev is None else recommendation(g, ev),
        g.source,
        check.metric,
        check.heuristic,
    )


