"""Performance budgets for CI: checks on any number of the JSON report, against fixed limits or
against a baseline report, with a plain summary and JUnit XML.

A *metric path* addresses values in the JSON report (``rlperf analyze --format json``):

    [agg:]section[column=value,...].field

``section`` is a top-level key of the report (``overview``, ``gpu_time``, ``bubbles``, …), the
optional filters keep the rows whose column equals (``=``) or differs from (``!=``) the value,
and ``field`` is a column of the rows — or, in name/value sections such as ``overview``, a row's
``metric``. Without ``agg`` the path must select exactly one value; ``max``, ``min``, ``sum``,
``mean`` and ``count`` reduce many. Examples: ``overview.weight_sync_share``,
``max:gpu_time.idle_fraction``, ``sum:sync[dim=weight_sync].exposed_ns``.

A budget file (TOML) lists checks; each has ``metric`` and any of ``max``, ``min`` (absolute
limits) and ``max_increase``, ``max_decrease`` (fractions of the baseline's value: needs
``--baseline``); ``name`` titles it and ``missing = "skip"`` lets a check pass when the report
has no value for it (default: it fails). Without a baseline (the first run of a branch) the
relative limits are not checked (:data:`NO_BASELINE`): a check of none but those is skipped, a
check with absolute ones too holds to those. With a
baseline and no budget file, every run-summary number with a direction is held to
:data:`DEFAULT_REGRESSION` of the baseline. A check on a section whose analysis failed is an
``error`` (an internal error, exit status 3), never a ``fail`` (exit status 1).
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from rich.cells import cell_len

from parsers.errors import InputError
from taxonomy.tomlfile import read_toml

from ..analyses.overview import METRIC_BY_NAME, METRICS
from ..model.units import cell, plural, unit_format
from ..report.fit import wrap
from ..report.json import SCHEMA as REPORT_SCHEMA
from .compare import RANK_SUMMED

DEFAULT_REGRESSION = 0.10
"""With ``--baseline`` alone: the largest allowed change for the worse, as a fraction of the
baseline."""
AGGREGATES = ("max", "min", "sum", "mean", "count")
LIMITS = ("max", "min", "max_increase", "max_decrease")
CHECK_KEYS = frozenset({"metric", "name", "missing", *LIMITS})
RELATIVE = ("max_increase", "max_decrease")

NO_BASELINE = "no baseline: not checked"
"""The note of a relative limit when the audit has no baseline (the first run has none yet)."""

_PATH = re.compile(
    r"^(?:(?P<agg>[a-z]+):)?(?P<section>[A-Za-z_][\w-]*)(?:\[(?P<filters>[^\]]*)\])?\.(?P<field>[\w.%-]+)$"
)
_FILTER = re.compile(r"^\s*(?P<column>[\w-]+)\s*(?P<op>!=|=)\s*(?P<value>.*?)\s*$")


@dataclass(frozen=True)
class MetricPath:
    text: str
    agg: str | None
    section: str
    filters: tuple[tuple[str, str, str], ...]
    field: str


@dataclass
class Check:
    name: str
    path: MetricPath
    limits: dict[str, float]
    missing: str = "fail"


@dataclass
class Outcome:
    check: Check
    status: str
    """``pass``, ``fail``, ``skip`` or ``error`` (its section failed with an internal error)."""
    value: float | None = None
    baseline: float | None = None
    message: str = ""
    format: str = "number"
    """How the value and limits print (a section format: ``duration``, ``percent``, …)."""


@dataclass
class Result:
    subject: str
    outcomes: list[Outcome]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "fail"]

    @property
    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "error"]

    @property
    def passed(self) -> bool:
        return not self.failed and not self.errors


# --- metric paths -------------------------------------------------------------------------------


def parse_path(text: str, where: str) -> MetricPath:
    """A metric path, or an InputError naming ``where`` (the budget file) and what is wrong."""
    m = _PATH.match(text.strip())
    if not m:
        raise InputError(
            where, f"metric path {text!r} is not [agg:]section[column=value,...].field"
        )
    agg = m.group("agg")
    if agg is not None and agg not in AGGREGATES:
        raise InputError(
            where, f"metric path {text!r}: unknown aggregate {agg!r} (use {', '.join(AGGREGATES)})"
        )
    filters = []
    for part in filter(None, (m.group("filters") or "").split(",")):
        f = _FILTER.match(part)
        if not f:
            raise InputError(
                where, f"metric path {text!r}: filter {part!r} is not column=value or column!=value"
            )
        filters.append((f.group("column"), f.group("op"), f.group("value").strip("\"'")))
    return MetricPath(text.strip(), agg, m.group("section"), tuple(filters), m.group("field"))


def resolve(document: dict[str, Any], path: MetricPath) -> tuple[float | None, str]:
    """The path's value in ``document`` and, when there is none, why."""
    rows = document.get(path.section)
    if not isinstance(rows, list):
        known = ", ".join(
            k for k, v in document.items() if isinstance(v, list) and v and isinstance(v[0], dict)
        )
        return None, f"the report has no section {path.section!r} (sections with rows: {known})"
    rows = [r for r in rows if isinstance(r, dict) and all(_keep(r, f) for f in path.filters)]
    if rows and path.field not in rows[0] and "metric" in rows[0]:
        rows = [r for r in rows if r.get("metric") == path.field]
        if not rows and path.section == "overview" and path.field in METRIC_BY_NAME:
            return None, (f"the report has no row {path.text}: it was written by an rlperf "
                          "without that metric (write the report again)")
        values = [r.get("value") for r in rows]
    else:
        if rows and all(path.field not in r for r in rows):
            return None, (f"the rows of {path.section} have no column {path.field!r} "
                          f"{_choices(path.field, list(rows[0]), 'columns')}")
        values = [r.get(path.field) for r in rows]
    if path.agg == "count":
        return float(len(rows)), ""
    numbers = [
        float(v)
        for v in values
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ]
    if not numbers:
        return (
            None,
            f"no value for {path.text} in the report "
            f"({plural(len(rows), 'matching row')}, none with a number){_why_null(rows)}",
        )
    if path.agg is None:
        if len(numbers) > 1:
            return (
                None,
                f"{path.text} matches {len(numbers)} values: add a [column=value] filter or an "
                "aggregate (max:, sum:, …)",
            )
        return numbers[0], ""
    reducers: dict[str, Callable[[list[float]], float]] = {
        "max": max, "min": min, "sum": sum, "mean": lambda v: sum(v) / len(v),
    }
    return float(reducers[path.agg](numbers)), ""


def _why_null(rows: list[dict[str, Any]]) -> str:
    """What the report says its null values need (an overview row's text ``– needs step ranges
    …``), once per distinct reason: the audit line then says why, as the report does."""
    said = dict.fromkeys(
        text.removeprefix("–").strip()
        for r in rows
        if r.get("value") is None and isinstance(text := r.get("text"), str)
        and text.startswith("–") and text.removeprefix("–").strip()
    )
    return f": {'; '.join(said)}" if said else ""


def _keep(row: dict[str, Any], condition: tuple[str, str, str]) -> bool:
    column, op, wanted = condition
    value = row.get(column)
    try:
        same = value is not None and float(value) == float(wanted)
    except (TypeError, ValueError):
        same = str(value) == wanted
    return same if op == "=" else not same


# --- budgets ------------------------------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(
            path, "not an rlperf JSON report (not text: a trace, gzip or other binary file; "
            "write a report with rlperf analyze --format json)"
        ) from None


def load_budget(path: Path) -> list[Check]:
    data = read_toml(path, InputError)
    entries = data.get("check")
    unknown = set(data) - {"check"}
    if unknown:
        raise InputError(
            path,
            f"unknown top-level {_keys(unknown)} "
            "(a budget is a list of [[check]] tables)",
        )
    if not isinstance(entries, list) or not entries:
        raise InputError(
            path,
            'no [[check]] tables: a budget lists checks, e.g. [[check]] metric = '
            '"overview.weight_sync_share" max = 0.05',
        )
    return [_check(path, i, entry) for i, entry in enumerate(entries, 1)]


def _check(path: Path, index: int, entry: Any) -> Check:
    where = f"{path} (check {index})"
    if not isinstance(entry, dict) or "metric" not in entry:
        raise InputError(where, "each [[check]] needs a metric path")
    unknown = set(entry) - CHECK_KEYS
    if unknown:
        raise InputError(
            where,
            f"unknown {_keys(unknown)} (known: {', '.join(sorted(CHECK_KEYS))})",
        )
    limits = {}
    for key in LIMITS:
        if key in entry:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(where, f"{key} must be a number, not {value!r}")
            limits[key] = float(value)
    if not limits:
        raise InputError(
            where, f"check on {entry['metric']!r} sets no limit (one of {', '.join(LIMITS)})"
        )
    missing = entry.get("missing", "fail")
    if missing not in ("fail", "skip"):
        raise InputError(where, f"missing must be \"fail\" or \"skip\", not {missing!r}")
    metric = parse_path(str(entry["metric"]), where)
    _known_overview_metric(metric, where)
    return Check(
        name=str(entry.get("name") or metric.text), path=metric, limits=limits, missing=missing
    )


OVERVIEW_COLUMNS = ("metric", "title", "value", "text", "unit")
"""The columns of the overview's rows: a path may name one of them instead of a metric."""


def _known_overview_metric(path: MetricPath, where: str) -> None:
    """A run-summary metric the overview never has is a mistake in the budget (exit 2), not a
    broken budget (exit 1): every report lists every metric, with a null value when unknown."""
    names = [m.name for m in METRICS]
    if path.section != "overview" or path.field in names or path.field in OVERVIEW_COLUMNS:
        return
    raise InputError(
        where,
        f"metric path {path.text!r}: the overview has no metric {path.field!r} "
        f"{_choices(path.field, names, 'metrics')}",
    )


def _choices(word: str, names: list[str], kind: str) -> str:
    """``(did you mean <closest>? its <kind>: <names>)``, the hint only where one is close."""
    close = get_close_matches(word, names, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"({hint}its {kind}: {', '.join(names)})"


def regression_checks(baseline: dict[str, Any]) -> list[Check]:
    """With a baseline and no budget: every run-summary number with a direction that the baseline
    has, held to DEFAULT_REGRESSION."""
    have = {
        row.get("metric")
        for row in baseline.get("overview", [])
        if isinstance(row, dict) and row.get("value") is not None
    }
    checks = []
    for m in METRICS:
        if m.better and m.name in have:
            limit = "max_increase" if m.better == "lower" else "max_decrease"
            checks.append(Check(
                name=f"{m.title} vs baseline", path=parse_path(f"overview.{m.name}", "baseline"),
                limits={limit: DEFAULT_REGRESSION}, missing="fail",
            ))
    return checks


def load_report(path: Path) -> dict[str, Any]:
    """A JSON report written by ``rlperf analyze --format json``."""
    if path.is_dir():
        raise InputError(path, "is a folder, and a baseline is a JSON report: write one with "
                         f"rlperf analyze {path} --format json -o baseline.json")
    try:
        document = json.loads(_read(path))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("schema") != REPORT_SCHEMA:
        raise InputError(
            path,
            f'not an rlperf JSON report (no "schema": "{REPORT_SCHEMA}"; write one with rlperf '
            'analyze --format json)',
        )
    return document


def is_report(path: Path) -> bool:
    """Whether ``path`` is a JSON report rather than a trace (its first bytes name the schema)."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    with path.open("rb") as fh:
        head = fh.read(4096)
    return (
        f'"schema": "{REPORT_SCHEMA}"'.encode() in head
        or f'"schema":"{REPORT_SCHEMA}"'.encode() in head
    )


# --- evaluation ---------------------------------------------------------------------------------


def audit(
    document: dict[str, Any],
    checks: list[Check],
    baseline: dict[str, Any] | None = None,
    subject: str = "",
) -> Result:
    return Result(subject=subject, outcomes=[_evaluate(c, document, baseline) for c in checks])


def failed_sections(document: dict[str, Any]) -> dict[str, str]:
    """Section key → its internal error, from the report's ``failures``."""
    found = document.get("failures") or []
    return {
        str(f["failed"]).removeprefix("section "): f"{f.get('module', '')}: {f.get('error', '')}"
        for f in found if isinstance(f, dict) and str(f.get("failed", "")).startswith("section ")
    }


def _evaluate(check: Check, document: dict[str, Any], baseline: dict[str, Any] | None) -> Outcome:
    broken = failed_sections(document).get(check.path.section)
    if broken is not None:
        return Outcome(
            check,
            "error",
            message=f"section {check.path.section} failed: internal error in {broken}",
        )
    value, why = resolve(document, check.path)
    if value is None:
        status = "skip" if check.missing == "skip" else "fail"
        return Outcome(check, status, message=why)
    fmt = value_format(document, check.path)
    out = Outcome(check, "pass", value=value, format=fmt)
    relative = any(k in RELATIVE for k in check.limits)
    notes = [NO_BASELINE] if relative and baseline is None else []
    if relative and baseline is not None:
        broken = failed_sections(baseline).get(check.path.section)
        if broken is not None:
            return Outcome(
                check,
                "error",
                value=value,
                format=fmt,
                message=f"baseline: section {check.path.section} "
                        f"failed: internal error in {broken}",
            )
        base, why = resolve(baseline, check.path)
        if base is None:
            out.status, out.message = (
                ("skip" if check.missing == "skip" else "fail"),
                f"baseline: {why}",
            )
            return out
        out.baseline = base
        other = _other_ranks(document, baseline)
        if other and check.path.text in RANK_SUMMED:
            out.status = "skip" if check.missing == "skip" else "fail"
            out.message = f"not comparable: {other}, and the value is summed over ranks"
            return out
        notes += [other] if other else []
    problems = []
    for key, limit in check.limits.items():
        shown = cell(limit, fmt)
        if key == "max" and value > limit:
            problems.append(f"above the max {shown}")
        elif key == "min" and value < limit:
            problems.append(f"below the min {shown}")
        elif key in RELATIVE and out.baseline is not None:
            change = _change(value, out.baseline)
            worse = change if key == "max_increase" else -change
            if worse > limit:
                verb = "up" if key == "max_increase" else "down"
                problems.append(
                    f"{verb} {_pct(abs(change))} from the baseline, more than {_pct(limit)}"
                )
    if problems:
        out.status = "fail"
    elif baseline is None and all(k in RELATIVE for k in check.limits):
        out.status = "skip"
    out.message = "; ".join([*problems, *notes])
    return out


def _other_ranks(document: dict[str, Any], baseline: dict[str, Any]) -> str:
    """``the run has 1 rank, the baseline 2`` when their rank counts differ, else ""."""
    path = parse_path("overview.ranks", "ranks")
    mine, theirs = resolve(document, path)[0], resolve(baseline, path)[0]
    if mine == theirs:
        return ""
    run = "an unknown number of ranks" if mine is None else plural(int(mine), "rank")
    base = "an unknown number" if theirs is None else f"{int(theirs):,}"
    return f"the run has {run}, the baseline {base}"


def _change(value: float, base: float) -> float:
    if base == 0:
        return 0.0 if value == 0 else math.copysign(math.inf, value)
    return (value - base) / abs(base)


def _pct(fraction: float) -> str:
    return "∞" if math.isinf(fraction) else f"{100 * fraction:.1f}%"


def value_format(document: dict[str, Any], path: MetricPath) -> str:
    """How to print the path's values: the run summary's unit, else by the field's name."""
    if path.agg == "count":
        return "number"
    for row in document.get(path.section) or []:
        if isinstance(row, dict) and row.get("metric") == path.field and row.get("unit"):
            return unit_format(row["unit"])
    name = path.field
    if name.endswith("_ns"):
        return "duration"
    if name.endswith(("fraction", "share")):
        return "percent"
    if name == "bytes" or name.endswith("_bytes"):
        return "bytes"
    return "number"


# --- output -------------------------------------------------------------------------------------


def summary_lines(result: Result, width: int | None = None) -> list[str]:
    """The CI log view: one line per check with its verdict, value and limit, then the total.
    At ``width`` a check too long for one line keeps its verdict and name on the first and the
    rest wrapped under them (indented), so ``grep FAIL`` still finds each failed check."""
    name_width = max((len(o.check.name) for o in result.outcomes), default=0)
    lines = []
    for o in result.outcomes:
        shown = _shown(o, path=o.check.name != o.check.path.text)
        line = f"  {o.status.upper():4}  {o.check.name:<{name_width}}  {shown}"
        if width is None or cell_len(line) <= width:
            lines.append(line)
        else:
            lines.append(f"  {o.status.upper():4}  {o.check.name}")
            lines += wrap(shown, width, indent=CONTINUED, initial=CONTINUED)
    failed, skipped = len(result.failed), sum(o.status == "skip" for o in result.outcomes)
    errors = len(result.errors)
    verdict = "FAILED" if failed else "INCOMPLETE" if errors else "passed"
    head = f"rlperf audit {verdict}: {plural(len(result.outcomes), 'check')}, {failed} failed"
    head += f", {skipped} skipped" if skipped else ""
    head += f", {errors} not evaluated (internal error)" if errors else ""
    head += f" ({result.subject})" if result.subject else ""
    heading = [head] if width is None else wrap(head, width, indent="  ")
    return [*heading, *lines]


CONTINUED = " " * 8
"""Where a wrapped check's value and limits start: under its name."""


def _shown(o: Outcome, *, path: bool = True) -> str:
    """``path = value (baseline …) [limits]``, then why it failed or has no value."""
    name = f"{o.check.path.text} " if path else ""
    if o.value is None:
        return (
            f"{name}: {o.message}".lstrip(" :") if not path else f"{o.check.path.text}: {o.message}"
        )
    text = f"{name}= {cell(o.value, o.format)}"
    if o.baseline is not None:
        sign = "+" if o.value >= o.baseline else ""
        text += (
            f" (baseline {cell(o.baseline, o.format)}, {sign}{_pct(_change(o.value, o.baseline))})"
        )
    limits = ", ".join(
        f"{k.replace('_', ' ')} "
        f"{_pct(v) if k in ('max_increase', 'max_decrease') else cell(v, o.format)}"
        for k, v in o.check.limits.items()
    )
    text += f"  [{limits}]"
    return f"{text}  <- {o.message}" if o.message else text


def github_annotations(result: Result) -> list[str]:
    """``::error`` workflow commands, which GitHub Actions shows on the run's summary page."""
    return [
        "::error "
        f"title={escape_property(f'rlperf audit: {o.check.name}')}::{escape_data(_shown(o))}"
        for o in [*result.failed, *result.errors]
    ]


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's runner unescapes it."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``title=``): also ``:`` and ``,``, which would end
    it."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def junit_xml(result: Result, *, suite: str = "rlperf audit") -> str:
    """JUnit XML (the Ant/Jenkins shape CI systems read): one testcase per check, ``failure`` for a
    broken budget, ``skipped`` for a check without a value that may be skipped."""
    failed = len(result.failed)
    skipped = sum(o.status == "skip" for o in result.outcomes)
    counts = {
        "tests": str(len(result.outcomes)),
        "failures": str(failed),
        "errors": str(len(result.errors)),
    }
    root = ET.Element("testsuites", {"name": suite, **counts, "time": "0"})
    node = ET.SubElement(
        root,
        "testsuite",
        {
            "name": f"{suite}: {result.subject}" if result.subject else suite,
            **counts,
            "skipped": str(skipped),
            "time": "0",
        },
    )
    for o in result.outcomes:
        case = ET.SubElement(
            node, "testcase", {"name": o.check.name, "classname": "rlperf.audit", "time": "0"}
        )
        if o.status == "fail":
            failure = ET.SubElement(
                case, "failure", {"message": o.message or "budget exceeded", "type": "budget"}
            )
            failure.text = _shown(o)
        elif o.status == "error":
            error = ET.SubElement(case, "error", {"message": o.message, "type": "internal"})
            error.text = _shown(o)
        elif o.status == "skip":
            ET.SubElement(case, "skipped", {"message": o.message})
        out = ET.SubElement(case, "system-out")
        out.text = _shown(o)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _keys(unknown: set[str]) -> str:
    return f"key{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))}"
