"""How a table fits a terminal width: whole, with its long text wrapped, split into parts that
repeat the key columns, or stacked (one record per block).

A header is never cut: every column is at least as wide as the longest word of its title, so
a title wraps between words at most; a value is never cut either, and it wraps only when it is
long text (a recommendation, a detail) that cannot fit on one line anyway.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

from rich.cells import cell_len

SEP = 3
"""What each column adds to its content in the terminal table: a space of padding either side
and the rule between columns (the outer edges are not drawn, so one rule fewer)."""
LONG_TEXT = 24
"""A text column whose widest value is longer than this may wrap (at least this wide)."""
MAX_WRAPPED = 2
"""At most this many long text columns wrap in one table; more is read as records (stacked)."""
MAX_PARTS = 3
"""A table split into more parts than this is read as records (stacked) instead."""
MAX_KEYS = 2


@dataclass(frozen=True)
class Plan:
    """``kind`` is ``table`` (``parts`` holds one part), ``split`` (several) or ``stacked``;
    each part is the columns it shows (indices, keys first) and their widths."""

    kind: str
    parts: list[list[tuple[int, int]]] = field(default_factory=list)
    keys: int = 1
    numbered: bool = False
    """A ranked list: each block keyed ``place. title``."""


def span(widths: list[int]) -> int:
    """The printed width of a table whose columns hold ``widths`` characters."""
    return sum(widths) + SEP * len(widths) - 1 if widths else 0


def longest_word(text: str) -> int:
    """The widest piece of ``text`` that :func:`wrap` never breaks: a word, or in a list written
    without spaces (``110,120,130,…``, longer than :data:`LONG_TEXT`) one of its items."""
    return max((_unbreakable(w) for w in text.split()), default=0)


def _unbreakable(word: str) -> int:
    if cell_len(word) <= LONG_TEXT or "," not in word:
        return cell_len(word)
    return max(cell_len(piece) for piece in _LIST_COMMA.split(word))


def plan(titles: list[str], columns: list[list[str]], text: list[bool], width: int) -> Plan:
    """How to print a table of ``columns`` (cell strings per column) under ``titles`` at
    ``width``; ``text`` marks the text (not numeric) columns."""
    content = [max((cell_len(v) for v in col), default=0) for col in columns]
    natural = [max(c, cell_len(t)) for c, t in zip(content, titles, strict=True)]
    least = [max(c, longest_word(t)) for c, t in zip(content, titles, strict=True)]
    everything = list(range(len(titles)))
    if span(least) <= width:
        return Plan("table", [_grown(everything, least, natural, width)])
    wrapped = _wrapped(columns, text, content, least, width)
    if wrapped is not None:
        return Plan("table", [wrapped])
    if len(titles) == 2 and text[1]:
        return Plan("table", [_pair(columns, content, least, width)])
    if any(t and c > LONG_TEXT for t, c in zip(text, content, strict=True)):
        return Plan("stacked")
    keys = _keys(text, least, width)
    parts = _split(keys, least, natural, width)
    if parts is None or len(parts) > MAX_PARTS:
        return Plan("stacked")
    return Plan("split", parts, keys=len(keys))


def _grown(
    shown: list[int], least: list[int], natural: list[int], width: int
) -> list[tuple[int, int]]:
    """``shown`` at their least widths, widened towards their natural ones (unwrapped titles)
    while there is room, left to right."""
    room = width - span([least[i] for i in shown])
    out = []
    for i in shown:
        extra = max(0, min(room, natural[i] - least[i]))
        room -= extra
        out.append((i, least[i] + extra))
    return out


def _wrapped(
    columns: list[list[str]], text: list[bool], content: list[int], least: list[int], width: int
) -> list[tuple[int, int]] | None:
    """Every column whole but the widest long text one, else the two widest (at most
    :data:`MAX_WRAPPED`), which share the room left in proportion to their widest value; ``None``
    when one would get less than :data:`LONG_TEXT` or less than its longest word. A long name
    beside a long detail stays whole when the detail alone can wrap."""
    long = [i for i, (t, c) in enumerate(zip(text, content, strict=True)) if t and c > LONG_TEXT]
    if not long or len(long) > MAX_WRAPPED:
        return None
    widest = sorted(long, key=lambda i: -content[i])
    for n in range(1, len(widest) + 1):
        shared = _shared(columns, content, least, width, sorted(widest[:n]))
        if shared is not None:
            return shared
    return None


def _shared(
    columns: list[list[str]], content: list[int], least: list[int], width: int, long: list[int]
) -> list[tuple[int, int]] | None:
    """The room beside the other columns (whole) shared by the ``long`` ones."""
    fixed = [least[i] for i in range(len(least)) if i not in long]
    room = width - span(fixed) - SEP * len(long) - (0 if fixed else -1)
    total = sum(content[i] for i in long)
    share = {i: room * content[i] // total for i in long}
    for i in long:
        need = max(LONG_TEXT, max((longest_word(v) for v in columns[i]), default=0))
        if share[i] < need:
            return None
    widths = [share.get(i, least[i]) for i in range(len(least))]
    return list(enumerate(widths))


def _pair(
    columns: list[list[str]], content: list[int], least: list[int], width: int
) -> list[tuple[int, int]]:
    """A name and its value (a headline table) stay a table at any width: the name whole while
    the value keeps :data:`LONG_TEXT` columns (else wrapped between its words), the value
    wrapped in the rest."""
    value_least = max(LONG_TEXT, longest_word_of(columns[1]))
    name = max(longest_word_of(columns[0]), min(least[0], width - SEP * 2 + 1 - value_least))
    value = max(longest_word_of(columns[1]), width - span([name]) - SEP)
    return [(0, name), (1, min(value, content[1]))]


def longest_word_of(column: list[str]) -> int:
    return max((longest_word(v) for v in column), default=0)


def _keys(text: list[bool], least: list[int], width: int) -> list[int]:
    """The leading columns every part repeats: the first, and the text columns right after it
    while they take at most half the width."""
    keys = [0]
    for i in range(1, min(MAX_KEYS, len(text))):
        if not text[i] or span([least[k] for k in [*keys, i]]) > width // 2:
            break
        keys.append(i)
    return keys


def _split(
    keys: list[int], least: list[int], natural: list[int], width: int
) -> list[list[tuple[int, int]]] | None:
    """The other columns packed in order into parts that fit beside the keys; ``None`` when one
    column does not fit beside them at all."""
    parts: list[list[int]] = []
    for i in range(len(least)):
        if i in keys:
            continue
        if span([least[k] for k in keys] + [least[i]]) > width:
            return None
        if parts and span([least[k] for k in [*keys, *parts[-1], i]]) <= width:
            parts[-1].append(i)
        else:
            parts.append([i])
    return [_grown([*keys, *part], least, natural, width) for part in parts]


class _Wrapper(textwrap.TextWrapper):
    """Breaks between words; a word longer than the line (and than :data:`LONG_TEXT`) that is a
    list (``110,120,130,…``) breaks after a comma, so no number is split; only what has no comma
    (a kernel name) is cut. A shorter word keeps its commas (``1,234,567`` is one number)."""

    def _split(self, text: str) -> list[str]:
        chunks = super()._split(text)
        return [
            piece
            for chunk in chunks
            for piece in (_LIST_COMMA.split(chunk) if _is_list(chunk, self.width) else [chunk])
            if piece
        ]


def _is_list(chunk: str, width: int) -> bool:
    return len(chunk) > max(width, LONG_TEXT) and "," in chunk


_LIST_COMMA = re.compile(r"(?<=,)(?=[^\s,])")


def wrap(text: str, width: int, *, indent: str = "", initial: str = "") -> list[str]:
    """``text`` as lines of at most ``width`` characters, broken at spaces or a list's commas;
    the first line starts with ``initial``, the others with ``indent`` (a wrapped title keeps its
    place)."""
    return _Wrapper(
        width, initial_indent=initial, subsequent_indent=indent, break_on_hyphens=False
    ).wrap(text)
