"""Human formatting of durations, sizes and fractions for reports."""

from __future__ import annotations

from collections.abc import Iterable


def duration(ns: float | int | None) -> str:
    if ns is None:
        return "–"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return (
                f"{ns / scale:.3g} {unit}" if abs(ns) < 100 * scale else f"{ns / scale:,.0f} {unit}"
            )
    return f"{ns:.0f} ns"


def percent(fraction: float | None) -> str:
    return "–" if fraction is None else f"{100 * fraction:.1f}%"


def size(nbytes: float | int | None) -> str:
    if nbytes is None:
        return "–"
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB"):
        if abs(value) < 1024:
            return f"{value:.3g} {unit}" if unit != "B" else f"{value:.0f} B"
        value /= 1024
    return f"{value:.3g} GiB"


def bandwidth(gbps: float | None) -> str:
    return "–" if gbps is None else f"{gbps:.3g} GB/s"


def plural(n: float | int, noun: str, many: str | None = None) -> str:
    """``1 device``, ``2 devices``, ``1,024 launches``: a count with its noun agreeing (``many``
    for an irregular plural)."""
    shown = f"{n:,}" if isinstance(n, int) else number(n)
    if n == 1:
        return f"{shown} {noun}"
    if many is None:
        many = f"{noun}es" if noun.endswith(("s", "sh", "ch", "x", "z")) else f"{noun}s"
    return f"{shown} {many}"


def number(value: float | int | None) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return f"{value:,}"


UNIT_FORMATS: dict[str, str] = {
    "ns": "duration",
    "fraction": "percent",
    "count": "number",
    "ratio": "number",
    "bytes": "bytes",
}
"""A run-summary unit (``overview``'s ``unit`` column) → the cell format its values print in."""


def unit_format(unit: str | None) -> str:
    return UNIT_FORMATS.get(unit or "", "number")


def cell(value: object, fmt: str) -> str:
    """A value as a report cell in one of the section formats."""
    if value is None:
        return "–"
    match fmt:
        case "duration":
            return duration(value)  # type: ignore[arg-type]  # a column of this format holds numbers
        case "percent":
            return percent(value)  # type: ignore[arg-type]  # a column of this format holds numbers
        case "bytes":
            return size(value)  # type: ignore[arg-type]  # a column of this format holds numbers
        case "bandwidth":
            return bandwidth(value)  # type: ignore[arg-type]  # a column of this format holds numbers
        case "number":
            return number(value)  # type: ignore[arg-type]  # a column of this format holds numbers
    return str(value)


def consecutive_runs(numbers: Iterable[int]) -> list[tuple[int, int]]:
    """Distinct numbers as (first, last) runs of consecutive ones, ascending."""
    runs: list[tuple[int, int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def spans(numbers: Iterable[int], sep: str = ",", dash: str = "-") -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``: rank lists as runs of consecutive numbers."""
    return sep.join(str(a) if a == b else f"{a}{dash}{b}" for a, b in consecutive_runs(numbers))
