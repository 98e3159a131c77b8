"""The slow-step and warm-up rules as data (``taxonomy/steps.toml``): which steps of a run are
slow, which are warm-up, so that the log summary, the step outliers and the findings judge steps
by one rule that a user can read (and the analyses never hard-code a threshold)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .tomlfile import read_toml

RULES_PATH = Path(__file__).with_name("steps.toml")


class StepRulesError(ValueError):
    """A step-rules file that cannot be used; the message names it."""


@dataclass(frozen=True)
class StepRules:
    k: float
    """Slow: wall > median + k × max(mad_scale × MAD, mad_floor × median)."""
    mad_scale: float
    mad_floor: float
    leading: int
    """How many first steps may be warm-up (each only when slow)."""
    always: int
    """How many first steps are warm-up whatever their time."""
    advice: tuple[tuple[str, str], ...] = ()
    """Stage → what to look at when a slow step grew most there (``default`` for the rest)."""
    stub_share: float = 0.1
    """A trace's last step shorter than this share of the median of its other steps is where
    the profiler stopped (``[stub] share``)."""

    def advise(self, stage: str) -> str:
        table = dict(self.advice)
        return table.get(stage) or table.get("default", "")

    def threshold(self, median: float, mad: float) -> float:
        """The wall time above which a step is slow (``mad`` unscaled)."""
        return median + self.k * max(self.mad_scale * mad, self.mad_floor * median)

    def describe(self) -> str:
        return (
            f"wall time > median + {self.k:g} × MAD (MAD scaled by {self.mad_scale}, "
            f"at least {self.mad_floor:.0%} of the median)"
        )

    def describe_warmup(self) -> str:
        said = []
        if self.leading:
            said.append(f"the first {self.leading} step(s) when slow by that rule")
        if self.always:
            said.append(f"always the first {self.always} step(s)")
        return "warm-up: " + (" and ".join(said) if said else "none")


def _error(path: Path, problem: str) -> StepRulesError:
    return StepRulesError(f"{path}: {problem}")


def _number(path: Path, table: dict, key: str, where: str, low: float) -> float:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
        raise _error(path, f"[{where}] {key} must be a number ≥ {low:g} (found {value!r})")
    return float(value)


def load_rules(path: Path = RULES_PATH) -> StepRules:
    data = read_toml(path, _error)
    slow, warm = data.get("slow") or {}, data.get("warmup") or {}
    counts = {}
    for key in ("leading", "always"):
        value = warm.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _error(path, f"[warmup] {key} must be a whole number ≥ 0 (found {value!r})")
        counts[key] = value
    advice = data.get("advice") or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in advice.items()):
        raise _error(path, "[advice] maps a stage to a string")
    return StepRules(
        advice=tuple(sorted(advice.items())),
        k=_number(path, slow, "k", "slow", 0.0),
        mad_scale=_number(path, slow, "mad_scale", "slow", 0.0),
        mad_floor=_number(path, slow, "mad_floor", "slow", 0.0),
        stub_share=_number(path, data.get("stub") or {"share": 0.0}, "share", "stub", 0.0),
        **counts,
    )


@cache
def builtin_rules() -> StepRules:
    return load_rules()
