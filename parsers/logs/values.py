"""Numbers as frameworks print them: ``.3f`` and ``repr`` floats, ``np.float64(…)`` wrappers,
Python dict reprs with numpy scalars inside, ``H:MM:SS`` durations."""

from __future__ import annotations

import ast
import re
from typing import Any

import polars as pl

NUMPY_WRAPPER = (
    r"^(?:np|numpy|torch)?\.?(?:float|int|uint|bool_?)(?:\d+)?\((.*)\)$|^tensor\((.*)\)$"
)
_NUMPY_IN_TEXT = re.compile(
    r"\b(?:np|numpy)\.(?:float|int|uint|bool_?)\d*\(([^()]*)\)|\btensor\(([^()]*)\)"
)
_BARE_SPECIAL = re.compile(r"(?<![\w'\".])(nan|inf)(?![\w'\"])")

MAX_STEP = 2**31 - 1
"""Largest step, epoch or record number (the ``step`` column is Int32); larger ones are damage."""

FIXED3 = r"^-?(?:\d+\.\d{3}|nan|inf)$"
"""How verl ≤ 0.4 printed every value (``f"{v:.3f}"``); anything else is full precision."""


def step_number(raw: pl.Expr) -> pl.Expr:
    """A printed step (epoch, id, …) as Int32; null when it is no number in 0…:data:`MAX_STEP`,
    so an overflow is never wrapped or cast into an error."""
    value = raw.cast(pl.String).str.strip_chars().cast(pl.Int64, strict=False)
    return pl.when(value.is_between(0, MAX_STEP)).then(value).cast(pl.Int32)


def header_step(is_header: pl.Expr, step: pl.Expr) -> pl.Expr:
    """The step of the last header line at or above each line; null under a header whose step
    is unusable, so its block is not given the previous header's step."""
    filled = pl.when(is_header).then(step.cast(pl.Int64).fill_null(-1)).forward_fill()
    return pl.when(filled >= 0).then(filled).cast(pl.Int32)


def py_step(value: Any) -> int | None:
    """:func:`step_number` for a decoded value (JSON or a dict repr): whole numbers only."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (value.is_integer() and 0 <= value <= MAX_STEP):
        return None
    return int(value) if 0 <= value <= MAX_STEP else None


def number(raw: pl.Expr) -> pl.Expr:
    """Float value of a printed number; null when the text is not a number."""
    text = raw.str.strip_chars()
    unwrapped = pl.coalesce(
        text.str.extract(NUMPY_WRAPPER, 1), text.str.extract(NUMPY_WRAPPER, 2), text
    ).str.strip_chars()
    lowered = unwrapped.str.to_lowercase()
    as_bool = pl.when(lowered == "true").then(1.0).when(lowered == "false").then(0.0)
    return pl.coalesce(unwrapped.cast(pl.Float64, strict=False), as_bool)


def numbers(raw: pl.Series) -> pl.Series:
    """:func:`number` for a whole column, with the slow unwrapping only where a plain cast fails."""
    values = raw.cast(pl.Float64, strict=False)
    where = (values.is_null() & raw.is_not_null()).arg_true()
    if where.len():
        fixed = pl.select(number(pl.lit(raw.gather(where)))).to_series()
        values = values.scatter(where, fixed)
    return values


def python_literal(text: str) -> Any:
    """``ast.literal_eval`` of a dict/list repr after unwrapping numpy scalars and bare nan/inf.

    Raises ValueError (or SyntaxError) when the text is not a literal.
    """
    cleaned = _NUMPY_IN_TEXT.sub(
        lambda m: m.group(1) if m.group(1) is not None else m.group(2), text
    )
    cleaned = _BARE_SPECIAL.sub(lambda m: f"float('{m.group(1)}')", cleaned)
    if "float(" in cleaned:
        return _literal_with_floats(cleaned)
    return ast.literal_eval(cleaned)


def _literal_with_floats(text: str) -> Any:
    """literal_eval that also accepts the ``float('nan')`` calls put in for bare nan/inf."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            ok = (
                isinstance(node.func, ast.Name)
                and node.func.id == "float"
                and len(node.args) == 1
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value) in {"nan", "inf"}
            )
            if not ok:
                raise ValueError("not a literal")
        elif (isinstance(node, ast.Name) and node.id != "float") or not isinstance(
            node,
            (ast.Expression, ast.Constant, ast.Dict, ast.List, ast.Tuple, ast.Set, ast.UnaryOp,
             ast.USub, ast.UAdd, ast.Name, ast.Load),
        ):
            raise ValueError("not a literal")
    return eval(compile(tree, "<log>", "eval"), {"__builtins__": {"float": float}}, {})


def scalar(value: Any) -> float | None:
    """A dict value as a float (bools as 0/1); None for strings, lists and other non-scalars."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):
        return float(value) if abs(value) < 2**1023 else float("inf") * (1 if value > 0 else -1)
    if isinstance(value, float):
        return value
    return None


def flat_scalars(data: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Scalar leaves of a nested dict, keys joined with ``/`` (how trackers flatten them)."""
    out: dict[str, float] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_scalars(value, f"{name}/"))
            continue
        number_ = scalar(value)
        if number_ is not None:
            out[name] = number_
    return out


def hms_seconds(text: str) -> float | None:
    """Seconds of ``H:MM:SS[.ffffff]`` (Python ``timedelta`` printing), or of ``12.3s``."""
    text = text.strip()
    match = re.fullmatch(r"(?:(\d+) days?, )?(\d+):(\d{2}):(\d{2}(?:\.\d+)?)", text)
    if match:
        days, hours, minutes, seconds = match.groups()
        return int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    match = re.fullmatch(r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*s", text)
    if match:
        return float(match.group(1))
    return None
