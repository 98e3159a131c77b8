"""JSON decoded with its nesting bounded by :data:`parsers.limits.NESTING`, for every parser
that reads JSON a user handed in (Chrome traces, span traces, trainer states): msgspec recurses
once per level, so deep nesting would otherwise escape as a RecursionError."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import msgspec
import numpy as np

from .errors import InputError
from .limits import NESTING

_NESTING_CEILING = 10_000
"""Deepest nesting the decoder is ever allowed, whatever RLPERF_MAX_NESTING says: its
recursion runs on the C stack."""


def decode_bounded(decoder: msgspec.json.Decoder, data: bytes, path: Path) -> Any:
    """``decoder.decode(data)`` with nesting bounded by :data:`parsers.limits.NESTING`.

    msgspec recurses once per nesting level under Python's recursion limit, so a limit set to the
    current recursion depth plus the bound makes the decoder enforce it, at no cost per byte (a
    scan of the bytes would cost a third of the parse). A refusal is checked against the real
    depth, so a Python whose recursion is counted otherwise never refuses a file within the bound.
    """
    allowed = min(NESTING.value, _NESTING_CEILING)
    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(_recursion_depth() + max(allowed, 3) - 2)
        return decoder.decode(data)
    except RecursionError:
        pass
    finally:
        sys.setrecursionlimit(old)
    NESTING.check(path, json_depth(data))
    try:
        sys.setrecursionlimit(old + allowed)
        return decoder.decode(data)
    except RecursionError:
        pass
    finally:
        sys.setrecursionlimit(old)
    raise InputError(
        path,
        f"JSON nested deeper than this Python lets rlperf decode ({json_depth(data):,} levels)",
    )


def decode_nested(decoder: msgspec.json.Decoder, data: bytes, levels: int) -> Any:
    """``decoder.decode(data)`` for a piece of a document that sits ``levels`` deep in it, with a
    RecursionError when the piece may nest deeper than the bound allows within the document: the
    caller then decodes the whole document, which names the problem (or finds it within the
    bound: a refusal here is never the error)."""
    allowed = min(NESTING.value, _NESTING_CEILING) - levels
    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(_recursion_depth() + max(allowed, 3) - 2)
        return decoder.decode(data)
    finally:
        sys.setrecursionlimit(old)


def decode_each(decoder: msgspec.json.Decoder, items: Sequence[bytes], path: Path) -> list[Any]:
    """Each item decoded as :func:`decode_bounded` would, the recursion limit set once for all
    (JSON lines, an event at a time); an item that fails is its exception, not raised."""
    allowed = min(NESTING.value, _NESTING_CEILING)
    old = sys.getrecursionlimit()
    results: list[Any] = []
    deep: list[int] = []
    try:
        sys.setrecursionlimit(_recursion_depth() + max(allowed, 3) - 2)
        for item in items:
            try:
                results.append(decoder.decode(item))
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                results.append(exc)
            except RecursionError:
                deep.append(len(results))
                results.append(None)
    finally:
        sys.setrecursionlimit(old)
    for i in deep:
        try:
            results[i] = decode_bounded(decoder, items[i], path)
        except (msgspec.DecodeError, msgspec.ValidationError, InputError) as exc:
            results[i] = exc
    return results


_DEPTH_IN_MESSAGE = re.compile(r"recursion depth (\d+)")


def _recursion_depth() -> int:
    """The interpreter's own count (C calls included, which a walk of the frames misses): asking
    for a limit of 1 fails with a message that states it."""
    try:
        sys.setrecursionlimit(1)
    except RecursionError as exc:
        m = _DEPTH_IN_MESSAGE.search(str(exc))
        if m:
            return int(m.group(1))
    frame: FrameType | None = sys._getframe(1)
    depth = 1
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)


def json_depth(data: bytes) -> int:
    """Deepest nesting of ``data``, brackets inside strings not counted (only for the error)."""
    skeleton = _STRING.sub(b"", data)
    skeleton = skeleton.translate(_BRACKETS, delete=bytes(set(range(256)) - set(b"[{]}")))
    if not skeleton:
        return 0
    return int(np.frombuffer(skeleton, dtype=np.int8).cumsum(dtype=np.int64).max())
