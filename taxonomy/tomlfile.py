"""Reading the taxonomy's TOML data files (and users' files on top) with one-line errors, and
checking the regexes their rules hold."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import polars as pl

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def read_toml(path: Path, error: Callable[[Path, str], Exception]) -> dict[str, Any]:
    """The parsed file; an unreadable or invalid one raises ``error(path, problem)``."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise error(path, f"cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(path, f"not valid TOML ({exc})") from None


_PROBLEMS: dict[str, str | None] = {}
"""Every pattern checked so far and its problem (None: it compiles): the same rules are read by
several steps of one analysis."""


def regex_problem(pattern: str) -> str | None:
    """Why polars (the Rust regex dialect: no look-around, no back-references) rejects
    ``pattern``, in one line; None when it compiles."""
    check_regexes([pattern])
    return _PROBLEMS[pattern]


def check_regexes(patterns: Iterable[str]) -> None:
    """Checks every pattern not checked yet, all in one polars call (a profile's few hundred
    rules cost one call, not one each); when that call fails, each pattern alone says whose
    problem it is. :func:`regex_problem` then answers from what was found."""
    new = list(dict.fromkeys(p for p in patterns if p not in _PROBLEMS))
    if not new:
        return
    try:
        pl.DataFrame({"s": [""]}, schema={"s": pl.String}).select(
            pl.col("s").str.contains(p).alias(str(i)) for i, p in enumerate(new)
        )
    except pl.exceptions.ComputeError as exc:
        if len(new) == 1:
            _PROBLEMS[new[0]] = str(exc).splitlines()[0]
            return
        for pattern in new:
            check_regexes([pattern])
        return
    _PROBLEMS.update(dict.fromkeys(new))
