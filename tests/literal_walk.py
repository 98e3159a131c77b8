"""docs/analyses.md §3's critical path walked literally, one link at a time: the reference the
vectorised walk (analyzer/analyses/breakdown.py) is held against, on random timelines and on the
sample runs' truth."""

from __future__ import annotations

from analyzer.analyses.breakdown import CRITICAL_SLACK_NS

Row = tuple[int, int, str, int, int]  # rank, step, stage, start, end


def literal_chain(rows: list[Row]) -> set[tuple[int, str, int, int]]:
    """The chain of one step's stage intervals (rank, stage, start, end); touching ranges of one
    stage on one rank are one interval."""
    merged: list[list] = []
    for rank, _, stage, a, b in sorted(rows, key=lambda r: (r[0], r[3])):
        if merged and merged[-1][0] == rank and merged[-1][1] == stage and a <= merged[-1][3]:
            merged[-1][3] = max(merged[-1][3], b)
        else:
            merged.append([rank, stage, a, b])
    cur = min(merged, key=lambda m: (-m[3], m[0]))
    chain = {tuple(cur)}
    while True:
        cands = [m for m in merged if m[3] <= cur[2] + CRITICAL_SLACK_NS and m[2] < cur[2]]
        if not cands:
            return chain
        cur = min(cands, key=lambda m: (-m[3], m[0]))
        chain.add(tuple(cur))
