"""Pipeline-schedule chunk labels → pipeline phases, as data (``taxonomy/pipeline_phases.toml``).

DualPipe, zero-bubble and 1F1B schedules name their chunks in host ranges (``attn(F)``,
``mlp(B)``, ``mlp(W)``, ``dispatch(F)``, Megatron's ``forward-compute``); this module says which
phase each name is, so the analysis never hard-codes a label.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import polars as pl

from .tomlfile import read_toml, regex_problem

RULES_PATH = Path(__file__).with_name("pipeline_phases.toml")
PHASES: tuple[str, ...] = ("forward", "backward_input", "backward_weight")
"""The phases, in schedule order; the report has one column each."""
SCHEDULE = "schedule"
"""The ``phase`` of a range framing a whole schedule (``1F1B``)."""


class PhaseRulesError(ValueError):
    """A pipeline-phase rules file that cannot be used; the message names it."""


@dataclass(frozen=True)
class PhaseRule:
    match: str
    phase: str
    note: str = ""
    within_schedule: bool = False


def _error(path: Path, problem: str) -> PhaseRulesError:
    return PhaseRulesError(f"{path}: {problem}")


def _rule(path: Path, table: str, index: int, raw: object) -> PhaseRule:
    where = f"[[{table}]] #{index + 1}"
    if not isinstance(raw, dict) or not isinstance(raw.get("match"), str):
        raise _error(path, f"{where} needs a string 'match'")
    phase = SCHEDULE if table == SCHEDULE else raw.get("phase")
    if phase not in (*PHASES, SCHEDULE):
        raise _error(path, f"{where}: phase {phase!r} is not one of {', '.join(PHASES)}")
    if (problem := regex_problem(raw["match"])) is not None:
        raise _error(path, f"{where}: match {raw['match']!r} is not a valid regex ({problem})")
    within = raw.get("within_schedule", False)
    if not isinstance(within, bool):
        raise _error(path, f"{where}: within_schedule must be true or false")
    return PhaseRule(raw["match"], str(phase), str(raw.get("note", "")), within)


def load_rules(path: Path = RULES_PATH) -> tuple[PhaseRule, ...]:
    """Phase rules first (in file order), then the schedule rules."""
    data = read_toml(path, _error)
    return tuple(
        _rule(path, table, i, raw)
        for table in ("phase", SCHEDULE)
        for i, raw in enumerate(data.get(table) or [])
    )


@cache
def builtin_rules() -> tuple[PhaseRule, ...]:
    return load_rules()


def phase_of(names: pl.Series, rules: tuple[PhaseRule, ...] | None = None) -> pl.DataFrame:
    """``name`` → ``phase`` (a phase, ``schedule``, or null) and ``within_schedule`` for each
    unique name; the first matching rule wins."""
    rules = builtin_rules() if rules is None else rules
    unique = names.cast(pl.String).drop_nulls().unique().sort()
    index = pl.lit(None, dtype=pl.Int32)
    for i, rule in reversed(list(enumerate(rules))):
        hit = pl.col("name").str.contains(rule.match)
        index = pl.when(hit).then(pl.lit(i, pl.Int32)).otherwise(index)
    table = pl.DataFrame(
        {
            "_rule": list(range(len(rules))),
            "phase": [r.phase for r in rules],
            "within_schedule": [r.within_schedule for r in rules],
        },
        schema={"_rule": pl.Int32, "phase": pl.String, "within_schedule": pl.Boolean},
    )
    return (
        pl.DataFrame({"name": unique}, schema={"name": pl.String})
        .with_columns(index.alias("_rule"))
        .join(table, on="_rule", how="left")
        .drop("_rule")
    )
