"""Configuration dicts that logs print with ``pprint`` (verl, NeMo-RL) and a few facts from them."""

from __future__ import annotations

from typing import Any

import polars as pl

from .values import python_literal

MAX_CONFIG_LINES = 5000


def printed_dict(
    lines: pl.DataFrame, start_marker: str = "{'"
) -> tuple[dict[str, Any] | None, int | None]:
    """The first multi-line dict repr printed by one process, and the line it starts on.

    Lines of other processes interleaved with it are skipped (same Ray actor and pid only), and so
    are the process's own unindented lines after the first (its stderr — warnings — written
    between the lines of the ``pprint`` output, whose continuation lines are always indented).
    """
    starts = lines.filter(pl.col("text").str.starts_with(start_marker)).head(20)
    for first_line, actor, pid in starts.select("line", "actor", "pid").iter_rows():
        same = (
            lines.filter(
                (pl.col("line") >= first_line)
                & pl.col("actor").eq_missing(actor)
                & pl.col("pid").eq_missing(pid)
                & ((pl.col("line") == first_line) | pl.col("text").str.contains(r"^\s"))
            )
            .head(MAX_CONFIG_LINES)["text"]
            .to_list()
        )
        parsed = _balanced_literal(same)
        if isinstance(parsed, dict):
            return parsed, first_line
    return None, None


def _balanced_literal(texts: list[str]) -> Any:
    depth = 0
    chunk: list[str] = []
    for text in texts:
        chunk.append(text)
        depth += text.count("{") + text.count("[") - text.count("}") - text.count("]")
        if depth <= 0:
            try:
                return python_literal("\n".join(chunk))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                if depth < 0:
                    return None
    return None


def dig(config: dict[str, Any] | None, *path: str) -> Any:
    """``config[a][b]…`` or None when any level is missing."""
    node: Any = config
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node
