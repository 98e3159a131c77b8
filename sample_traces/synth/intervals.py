"""Sets of time as sorted, disjoint half-open intervals ``[s, e)`` in two int64 arrays.

Deliberately small and independent of ``analyzer/`` (the ground truth must not be computed
by the code it grades). Every set operation cuts time at all boundaries of both operands and
asks, for each elementary piece, whether its left end lies in each operand — so correctness
rests on one membership test.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Span = tuple[np.ndarray, np.ndarray]

EMPTY: Span = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def span(starts: np.ndarray | list[int], ends: np.ndarray | list[int]) -> Span:
    """The union of possibly overlapping, unsorted intervals."""
    s = np.asarray(starts, dtype=np.int64).ravel()
    e = np.asarray(ends, dtype=np.int64).ravel()
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def covered(a: Span, points: np.ndarray) -> np.ndarray:
    """Whether each point lies in ``a``."""
    s, e = a
    if s.size == 0:
        return np.zeros(points.shape, dtype=bool)
    i = np.searchsorted(s, points, side="right") - 1
    ok = i >= 0
    ok[ok] = points[ok] < e[i[ok]]
    return ok


def combine(a: Span, b: Span, keep: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Span:
    cuts = np.sort(np.concatenate([a[0], a[1], b[0], b[1]]))
    cuts = cuts[np.r_[True, cuts[1:] != cuts[:-1]]] if cuts.size else cuts
    if cuts.size < 2:
        return EMPTY
    left, right = cuts[:-1], cuts[1:]
    mask = keep(covered(a, left), covered(b, left))
    return span(left[mask], right[mask])


def union(a: Span, b: Span) -> Span:
    return combine(a, b, np.logical_or)


def intersect(a: Span, b: Span) -> Span:
    return combine(a, b, np.logical_and)


def subtract(a: Span, b: Span) -> Span:
    return combine(a, b, lambda x, y: x & ~y)


def measure(a: Span) -> int:
    return int((a[1] - a[0]).sum())


def overlap_each(starts: np.ndarray, ends: np.ndarray, a: Span) -> np.ndarray:
    """For each interval ``[starts[i], ends[i])``, how much of it lies in ``a``."""
    s, e = a
    if s.size == 0:
        return np.zeros(starts.shape, dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(e - s)])

    def upto(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, x, side="right") - 1
        inside = np.where(i >= 0, np.clip(x - s[np.maximum(i, 0)], 0, (e - s)[np.maximum(i, 0)]), 0)
        return before[np.maximum(i, 0)] * (i >= 0) + inside

    return np.maximum(upto(ends) - upto(starts), 0)
