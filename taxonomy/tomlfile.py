"""Reading the taxonomy's TOML data files (and users' files on top) with one-line errors, and
checking the regexes their rules hold."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
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


@functools.lru_cache(maxsize=4096)
def regex_problem(pattern: str) -> str | None:
    """Why polars (the Rust regex dialect: no look-around, no back-references) rejects
    ``pattern``, in one line; None when it compiles. Memoised: the same rules are read by several
    steps of one analysis, and each check is a polars call."""
    try:
        pl.Series([""], dtype=pl.String).str.contains(pattern)
    except pl.exceptions.ComputeError as exc:
        return str(exc).splitlines()[0]
    return None
