"""Aggregates of polars columns as the Python numbers they are.

polars types ``Series.sum()``, ``.min()``, ``.item()`` and the like as any Python value (a date,
a string, a list, ...), so arithmetic on them does not type-check; these narrow such a result to
the number it is, unchanged, and raise on anything else.
"""

from __future__ import annotations

from parsers.events import as_int

__all__ = ["as_float", "as_int", "number", "number_or_none"]


def number(value: object) -> float:
    """``value`` itself (an int stays an int) when it is a number."""
    if isinstance(value, (int, float)):
        return value
    raise TypeError(f"expected a number, got {value!r}")


def number_or_none(value: object) -> float | None:
    """:func:`number`, with None (the aggregate of no rows) passed through."""
    return None if value is None else number(value)


def as_float(value: object) -> float:
    return float(number(value))
