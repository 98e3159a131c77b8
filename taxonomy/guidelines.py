"""The guideline catalogue: loading, validation, a user file merged on top, and its rendering.

The catalogue is data (``taxonomy/guidelines.toml``, described in docs/guidelines.md): what
each guideline says, the metrics it is judged by with their thresholds, and what to do about a
violation. The analyzer implements the metrics (``analyzer/analyses/guidelines.py``) and judges
them here (:meth:`Check.judge`). Errors name the file and the place in it, in one line.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from .tomlfile import read_toml
from .vocab import PLACEMENTS

CATALOGUE = Path(__file__).with_name("guidelines.toml")

SEVERITIES: tuple[str, ...] = ("info", "warn", "error")
"""From least to most severe."""
DIRECTIONS: tuple[str, ...] = ("above", "below")
UNITS: tuple[str, ...] = ("fraction", "ratio", "count", "steps")
EVIDENCE_KINDS: tuple[str, ...] = ("trace", "log", "config")
AGGREGATE_WORDS: dict[str, str] = {
    "share": "Σ part ÷ Σ whole over steps",
    "mean": "mean over steps",
    "median": "median over steps",
    "max": "worst step",
    "value": "one value for the run",
}
AGGREGATES: tuple[str, ...] = tuple(AGGREGATE_WORDS)
TABLES: tuple[str, ...] = ("keys", "timers", "config")
"""Top-level tables that are not guidelines."""

GUIDELINE_FIELDS: tuple[str, ...] = (
    "title",
    "evidence",
    "recommendation",
    "source",
    "checks",
    "enabled",
    "applies_to",
    "device_notes",
)
APPLIES_TO_FIELDS: tuple[str, ...] = ("frameworks", "placements", "needs_rl_stages", "why")
"""``applies_to``: the runs a guideline is about (docs/guidelines.md, Applicability)."""
CHECK_FIELDS: tuple[str, ...] = (
    "formula",
    "unit",
    "direction",
    *SEVERITIES,
    "heuristic",
    "aggregate",
    "from",
    "needs",
    "params",
    "note",
)
REQUIRED_GUIDELINE: tuple[str, ...] = ("title", "evidence", "recommendation", "source", "checks")
REQUIRED_CHECK: tuple[str, ...] = ("formula", "unit", "direction", "aggregate", "needs")
OFF = "off"
"""A threshold given as ``"off"`` in a user file removes that level."""
ID = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


class GuidelineError(ValueError):
    """A catalogue or user file that cannot be used: ``path: problem`` in one line."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


@dataclass(frozen=True)
class Check:
    """One metric a guideline is judged by, with its thresholds."""

    metric: str
    formula: str
    unit: str
    direction: str
    thresholds: Mapping[str, float]
    heuristic: bool
    aggregate: str
    evaluated_from: tuple[str, ...]
    needs: str
    params: Mapping[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def implemented(self) -> bool:
        return bool(self.evaluated_from)

    def crosses(self, value: float, threshold: float) -> bool:
        return value > threshold if self.direction == "above" else value < threshold

    def judge(self, value: float) -> tuple[str | None, float]:
        """The most severe level ``value`` crosses and its threshold; ``(None, first threshold)``
        when it crosses none (the level it would cross first)."""
        for severity in reversed(SEVERITIES):
            limit = self.thresholds.get(severity)
            if limit is not None and self.crosses(value, limit):
                return severity, limit
        return None, self.first_threshold

    @property
    def first_threshold(self) -> float:
        return next(self.thresholds[s] for s in SEVERITIES if s in self.thresholds)

    def limits(self) -> str:
        """``warn > 5%, error > 10%``: the thresholds as a reader wants them."""
        sign = ">" if self.direction == "above" else "<"
        return ", ".join(
            f"{s} {sign} {format_value(self.thresholds[s], self.unit)}"
            for s in SEVERITIES
            if s in self.thresholds
        )


@dataclass(frozen=True)
class AppliesTo:
    """The runs a guideline is about; empty fields restrict nothing."""

    frameworks: tuple[str, ...] = ()
    placements: tuple[str, ...] = ()
    needs_rl_stages: bool = False
    why: str = ""
    """What the listed frameworks have that others lack (\"no single controller\")."""


@dataclass(frozen=True)
class Guideline:
    id: str
    title: str
    evidence: str
    recommendation: str
    source: str
    checks: tuple[Check, ...]
    origin: str = ""
    applies_to: AppliesTo = AppliesTo()
    device_notes: Mapping[str, str] = field(default_factory=dict)
    """Device kind → a sentence of the recommendation true only on that kind of device."""

    @property
    def implemented(self) -> bool:
        return any(c.implemented for c in self.checks)


@dataclass(frozen=True)
class Catalogue:
    guidelines: tuple[Guideline, ...]
    keys: Mapping[str, tuple[str, ...]]
    timers: Mapping[str, tuple[str, ...]]
    config: Mapping[str, tuple[str, ...]]
    paths: tuple[str, ...]
    disabled: tuple[str, ...] = ()

    def __getitem__(self, gid: str) -> Guideline:
        for g in self.guidelines:
            if g.id == gid:
                return g
        raise KeyError(gid)

    @property
    def ids(self) -> list[str]:
        return [g.id for g in self.guidelines]


def load(user: str | Path | None = None, path: Path = CATALOGUE) -> Catalogue:
    """The catalogue, with ``user``'s file merged on top (see the header of guidelines.toml)."""
    data = _read(path)
    origins = {gid: str(path) for gid in data if gid not in TABLES}
    paths = [str(path)]
    if user is not None:
        user = Path(user)
        extra = _read(user)
        _merge(data, extra, user, origins)
        paths.append(str(user))
    disabled = [
        gid
        for gid, raw in data.items()
        if gid not in TABLES and isinstance(raw, dict) and raw.get("enabled") is False
    ]
    guidelines = [
        _guideline(Path(origins[gid]), gid, raw)
        for gid, raw in data.items()
        if gid not in TABLES and gid not in disabled
    ]
    guidelines.sort(key=_order)
    return Catalogue(
        guidelines=tuple(guidelines),
        keys=_string_lists(path, data.get("keys", {}), "keys"),
        timers=_string_lists(path, data.get("timers", {}), "timers"),
        config=_string_lists(path, data.get("config", {}), "config"),
        paths=tuple(paths),
        disabled=tuple(sorted(disabled, key=_order_id)),
    )


def _order_id(gid: str) -> tuple[int, int, str]:
    match = re.fullmatch(r"G(\d+)", gid)
    return (0, int(match.group(1)), "") if match else (1, 0, gid)


def _order(g: Guideline) -> tuple[int, int, str]:
    return _order_id(g.id)


def _read(path: Path) -> dict[str, Any]:
    return read_toml(path, GuidelineError)


def _merge(base: dict[str, Any], user: dict[str, Any], path: Path, origins: dict[str, str]) -> None:
    """Merge ``user`` into ``base`` in place: tables deeply, values replaced; new guidelines and
    checks are taken whole (and must then be complete)."""
    for gid, raw in user.items():
        if gid in TABLES:
            if not isinstance(raw, dict):
                raise GuidelineError(path, f"[{gid}] must be a table")
            for key, new in _string_lists(path, raw, gid).items():
                old = base.setdefault(gid, {}).get(key, [])
                base[gid][key] = [*new, *(k for k in old if k not in new)]
            continue
        if not ID.fullmatch(gid):
            raise GuidelineError(
                path,
                f"{gid!r} is not a guideline id (letters, digits, _ or -, starting with a letter)",
            )
        if not isinstance(raw, dict):
            raise GuidelineError(path, f"{gid} must be a table")
        if gid not in base:
            base[gid] = raw
            origins[gid] = str(path)
            continue
        target = base[gid]
        origins[gid] = str(path)
        for key, value in raw.items():
            if key not in GUIDELINE_FIELDS:
                raise GuidelineError(
                    path, f"{gid}: unknown field {key!r} (one of {', '.join(GUIDELINE_FIELDS)})"
                )
            if key != "checks":
                target[key] = value
                continue
            if not isinstance(value, dict):
                raise GuidelineError(path, f"{gid}.checks must be a table of metric tables")
            for metric, fields in value.items():
                if not isinstance(fields, dict):
                    raise GuidelineError(path, f"{gid}.checks.{metric} must be a table")
                current = target.setdefault("checks", {}).get(metric)
                if current is None:
                    target["checks"][metric] = fields
                    continue
                for name, setting in fields.items():
                    if name in SEVERITIES and setting == OFF:
                        current.pop(name, None)
                    else:
                        current[name] = setting
                _check(path, gid, metric, current)


def _guideline(path: Path, gid: str, raw: Any) -> Guideline:
    if not ID.fullmatch(gid):
        raise GuidelineError(path, f"{gid!r} is not a guideline id")
    _fields(path, gid, raw, GUIDELINE_FIELDS, REQUIRED_GUIDELINE)
    for key in ("title", "evidence", "recommendation", "source"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise GuidelineError(path, f"{gid}.{key} must be non-empty text")
    checks = raw["checks"]
    if not isinstance(checks, dict) or not checks:
        raise GuidelineError(path, f"{gid}: needs at least one [{gid}.checks.<metric>] table")
    return Guideline(
        id=gid,
        title=raw["title"].strip(),
        evidence=raw["evidence"].strip(),
        recommendation=" ".join(raw["recommendation"].split()),
        source=raw["source"].strip(),
        checks=tuple(_check(path, gid, metric, fields) for metric, fields in checks.items()),
        origin=str(path),
        applies_to=_applies_to(path, gid, raw.get("applies_to", {})),
        device_notes=_texts(path, f"{gid}.device_notes", raw.get("device_notes", {})),
    )


def _applies_to(path: Path, gid: str, raw: Any) -> AppliesTo:
    where = f"{gid}.applies_to"
    _fields(path, where, raw, APPLIES_TO_FIELDS, ())
    lists = {k: _string_lists(path, {k: raw[k]}, where)[k] for k in ("frameworks", "placements")
             if k in raw}
    for placement in lists.get("placements", ()):
        _one_of(path, where, "placements", placement, PLACEMENTS)
    needs = raw.get("needs_rl_stages", False)
    if not isinstance(needs, bool):
        raise GuidelineError(path, f"{where}.needs_rl_stages must be true or false")
    return AppliesTo(
        frameworks=lists.get("frameworks", ()),
        placements=lists.get("placements", ()),
        needs_rl_stages=needs,
        why=_texts(path, where, {"why": raw.get("why", "")})["why"],
    )


def _texts(path: Path, where: str, raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise GuidelineError(path, f"{where} must be a table of texts")
    return {str(k): " ".join(v.split()) for k, v in raw.items()}


def _check(path: Path, gid: str, metric: str, raw: Any) -> Check:
    where = f"{gid}.checks.{metric}"
    if not ID.fullmatch(metric):
        raise GuidelineError(path, f"{where}: {metric!r} is not a metric name")
    _fields(path, where, raw, CHECK_FIELDS, REQUIRED_CHECK)
    _one_of(path, where, "unit", raw["unit"], UNITS)
    _one_of(path, where, "direction", raw["direction"], DIRECTIONS)
    _one_of(path, where, "aggregate", raw["aggregate"], AGGREGATES)
    thresholds: dict[str, float] = {}
    for severity in SEVERITIES:
        if severity in raw:
            thresholds[severity] = _number(path, f"{where}.{severity}", raw[severity])
    if not thresholds:
        raise GuidelineError(
            path, f"{where}: needs at least one threshold ({', '.join(SEVERITIES)})"
        )
    levels = [s for s in SEVERITIES if s in thresholds]
    for lower, higher in itertools.pairwise(levels):
        a, b = thresholds[lower], thresholds[higher]
        if (raw["direction"] == "above" and b < a) or (raw["direction"] == "below" and b > a):
            word = "below" if raw["direction"] == "above" else "above"
            raise GuidelineError(
                path,
                f"{where}: {higher} {b:g} is {word} {lower} {a:g} (direction {raw['direction']})",
            )
    sources = raw.get("from", [])
    if not isinstance(sources, list) or any(s not in EVIDENCE_KINDS for s in sources):
        raise GuidelineError(path, f"{where}.from must list some of {', '.join(EVIDENCE_KINDS)}")
    heuristic = raw.get("heuristic", True)
    if not isinstance(heuristic, bool):
        raise GuidelineError(path, f"{where}.heuristic must be true or false")
    params = raw.get("params", {})
    if not isinstance(params, dict):
        raise GuidelineError(path, f"{where}.params must be a table of numbers")
    for key in ("formula", "needs", "note"):
        if key in raw and not isinstance(raw[key], str):
            raise GuidelineError(path, f"{where}.{key} must be text")
    return Check(
        metric=metric,
        formula=raw["formula"],
        unit=raw["unit"],
        direction=raw["direction"],
        thresholds=thresholds,
        heuristic=heuristic,
        aggregate=raw["aggregate"],
        evaluated_from=tuple(sources),
        needs=raw["needs"],
        params={k: _number(path, f"{where}.params.{k}", v) for k, v in params.items()},
        note=raw.get("note", ""),
    )


def _fields(
    path: Path, where: str, raw: Any, allowed: tuple[str, ...], required: tuple[str, ...]
) -> None:
    if not isinstance(raw, dict):
        raise GuidelineError(path, f"{where} must be a table")
    for key in raw:
        if key not in allowed:
            raise GuidelineError(
                path, f"{where}: unknown field {key!r} (one of {', '.join(allowed)})"
            )
    for key in required:
        if key not in raw:
            raise GuidelineError(path, f"{where}: {key!r} is required")


def _one_of(path: Path, where: str, key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise GuidelineError(
            path, f"{where}.{key} is {value!r}, expected one of {', '.join(allowed)}"
        )


def _number(path: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GuidelineError(path, f"{where} must be a finite number, not {value!r}")
    return float(value)


def _string_lists(path: Path, raw: Any, table: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, dict):
        raise GuidelineError(path, f"[{table}] must be a table")
    out = {}
    for key, value in raw.items():
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, str) and v for v in values):
            raise GuidelineError(path, f"[{table}].{key} must be a list of names")
        out[str(key)] = tuple(values)
    return out


# --- presentation ------------------------------------------------------------------------------


def format_value(value: float | None, unit: str) -> str:
    """A measured value or threshold in its unit, for reports and docs."""
    if value is None:
        return "–"
    if unit == "fraction":
        return f"{100 * value:.3g}%"
    if unit == "count":
        return f"{value:.0f}"
    if unit == "steps":
        return f"{value:.3g} steps"
    return f"{value:.3g}"


def catalogue_frame(catalogue: Catalogue | None = None) -> pl.DataFrame:
    """One row per check of every guideline, for printing (``rlperf taxonomy``)."""
    catalogue = catalogue or load()
    rows = [
        {
            "id": g.id,
            "title": g.title,
            "metric": c.metric,
            "formula": c.formula,
            "unit": c.unit,
            "thresholds": c.limits(),
            "heuristic": c.heuristic,
            "from": ", ".join(c.evaluated_from) or None,
            "needs": c.needs,
            "recommendation": g.recommendation,
            "source": g.source,
        }
        for g in catalogue.guidelines
        for c in g.checks
    ]
    return pl.DataFrame(rows)


def markdown(catalogue: Catalogue | None = None) -> str:
    """The catalogue as the Markdown that docs/guidelines.md embeds."""
    catalogue = catalogue or load()
    implemented = [g.id for g in catalogue.guidelines if g.implemented]
    lines = [
        f"{len(implemented)} of {len(catalogue.guidelines)} guidelines are evaluated "
        f"({', '.join(implemented)}); the others are always reported as not evaluated, with what "
        f"they need.",
        "",
        "| id | guideline | metric | thresholds | evaluated from |",
        "|---|---|---|---|---|",
    ]
    for g in catalogue.guidelines:
        for i, c in enumerate(g.checks):
            mark = " *(heuristic)*" if c.heuristic else ""
            lines.append(
                f"| {g.id if i == 0 else ''} | {g.title if i == 0 else ''} | `{c.metric}` | "
                f"{c.limits()}{mark} | "
                f"{', '.join(c.evaluated_from) or 'not implemented'} |"
            )
    for g in catalogue.guidelines:
        lines += ["", f"### {g.id} — {g.title}", "", f"- **Evidence**: {g.evidence}"]
        for c in g.checks:
            mark = " *(heuristic)*" if c.heuristic else ""
            state = f"from {', '.join(c.evaluated_from)}" if c.implemented else "not implemented"
            lines.append(
                f"- **`{c.metric}`** ({c.unit}, {AGGREGATE_WORDS[c.aggregate]}; {state}): "
                f"{c.formula}. "
                f"Thresholds: {c.limits()}{mark}."
                + (f" {c.note[0].upper()}{c.note[1:]}." if c.note else "")
            )
            lines.append(f"  Needs: {c.needs}.")
        lines += [f"- **Recommendation**: {g.recommendation}"]
        notes = g.device_notes.items()
        lines += [f"  On {kind.upper()} devices only: {note}" for kind, note in notes]
        if g.applies_to != AppliesTo():
            lines.append(f"- **Applies to**: {applies_words(g.applies_to)}.")
        lines.append(f"- **Source**: {g.source}")
    return "\n".join(lines) + "\n"


def applies_words(rule: AppliesTo) -> str:
    """``applies_to`` as a reader wants it."""
    parts = []
    if rule.needs_rl_stages:
        parts.append("runs of an RL framework or with RL stages")
    if rule.frameworks:
        why = f" (others: {rule.why})" if rule.why else ""
        parts.append(f"the frameworks {', '.join(rule.frameworks)}{why}")
    if rule.placements:
        parts.append(f"{' or '.join(rule.placements)} placement")
    return "; ".join(parts)


DOCS_BEGIN = (
    "<!-- catalogue: generated from taxonomy/guidelines.toml by `python -m "
    "taxonomy.guidelines docs/guidelines.md` -->"
)
DOCS_END = "<!-- end of catalogue -->"


def write_docs(path: Path) -> None:
    """Replace the generated block of ``path`` (between the two markers) with :func:`markdown`."""
    text = path.read_text()
    head, _, rest = text.partition(DOCS_BEGIN)
    _, _, tail = rest.partition(DOCS_END)
    path.write_text(f"{head}{DOCS_BEGIN}\n\n{markdown()}\n{DOCS_END}{tail}")


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 1:
        write_docs(Path(sys.argv[1]))
    else:
        print(markdown(), end="")
