"""Efficiency vocabulary as data (``taxonomy/efficiency.toml``): the log keys that hold
throughput, MFU, memory and tokens, the peak FLOP/s of the devices a trace names, and the
thresholds of the efficiency findings. The analysis never hard-codes a framework's key or a
device's peak."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .tomlfile import read_toml, regex_problem
from .vocab import ROLES

PATH = Path(__file__).with_name("efficiency.toml")
AGGREGATES = ("mean", "max")


class EfficiencyTableError(ValueError):
    """An efficiency table that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class LogMetric:
    keys: tuple[str, ...]
    metric: str
    role: str
    stage: str
    unit: str
    aggregate: str
    definition: str


@dataclass(frozen=True)
class Device:
    match: str
    name: str
    peak_tflops: float
    basis: str


@dataclass(frozen=True)
class EfficiencyTable:
    log_metrics: tuple[LogMetric, ...]
    devices: tuple[Device, ...]
    warmup_ratio: float
    low_mfu: float
    low_mfu_exempt: tuple[str, ...] = ()
    """Roles the low-MFU finding leaves out (``[low_mfu] exempt_roles``)."""

    def device(self, name: str | None) -> Device | None:
        """The first device row whose pattern matches ``name``; None when none does."""
        if not name:
            return None
        return next((d for d in self.devices if re.search(d.match, name)), None)


def _error(path: Path, problem: str) -> EfficiencyTableError:
    return EfficiencyTableError(f"{path}: {problem}")


def _text(path: Path, where: str, raw: dict, key: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str):
        raise _error(path, f"{where} needs a string {key!r}")
    return value


def _log_metric(path: Path, index: int, raw: object) -> LogMetric:
    where = f"[[log_metric]] #{index + 1}"
    if not isinstance(raw, dict):
        raise _error(path, f"{where} is not a table")
    keys = raw.get("keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise _error(path, f"{where} needs 'keys', a list of log keys")
    aggregate = _text(path, where, raw, "aggregate", "mean")
    if aggregate not in AGGREGATES:
        raise _error(path, f"{where}: aggregate {aggregate!r} is not one of {AGGREGATES}")
    return LogMetric(
        tuple(keys), _text(path, where, raw, "metric"), _text(path, where, raw, "role", "all"),
        _text(path, where, raw, "stage", ""), _text(path, where, raw, "unit"), aggregate,
        _text(path, where, raw, "definition", ""),
    )


def _device(path: Path, index: int, raw: object) -> Device:
    where = f"[[device]] #{index + 1}"
    if not isinstance(raw, dict):
        raise _error(path, f"{where} is not a table")
    match = _text(path, where, raw, "match")
    if (problem := regex_problem(match)) is not None:
        raise _error(path, f"{where}: match {match!r} is not a valid regex ({problem})")
    peak = raw.get("peak_tflops")
    if isinstance(peak, bool) or not isinstance(peak, (int, float)) or not 0 < peak < 1e6:
        raise _error(path, f"{where} needs 'peak_tflops', a positive number")
    return Device(match, _text(path, where, raw, "name"), float(peak),
                  _text(path, where, raw, "basis", ""))


def _threshold(path: Path, data: dict, key: str) -> float:
    value = (data.get("thresholds") or {}).get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _error(path, f"[thresholds] needs a positive number {key!r}")
    return float(value)


def load(path: Path = PATH) -> EfficiencyTable:
    data = read_toml(path, _error)
    return EfficiencyTable(
        tuple(_log_metric(path, i, r) for i, r in enumerate(data.get("log_metric", []))),
        tuple(_device(path, i, r) for i, r in enumerate(data.get("device", []))),
        _threshold(path, data, "warmup_ratio"),
        _threshold(path, data, "low_mfu"),
        _roles(path, data),
    )


def _roles(path: Path, data: dict) -> tuple[str, ...]:
    roles = (data.get("low_mfu") or {}).get("exempt_roles", [])
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise _error(path, "[low_mfu] exempt_roles needs a list of role names")
    if unknown := sorted(set(roles) - set(ROLES)):
        raise _error(path, f"[low_mfu] exempt_roles names no role: {', '.join(unknown)} "
                           f"(roles: {', '.join(ROLES)})")
    return tuple(roles)


@cache
def table() -> EfficiencyTable:
    """The bundled table, read once."""
    return load()
