"""Ground truth of one run: what every process measured, the waits that follow from it, and how
the program's clock (``time.time_ns``) relates to the profiler's timestamps."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

from .scenarios import Scenario

FORMAT = "rlperf-truth/1"
MIN_WAIT_NS = 1000
"""Waits shorter than a microsecond are below what the clocks can tell apart; not listed."""


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def intersect(gap: tuple[int, int], busy: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(max(gap[0], a), min(gap[1], b)) for a, b in busy if min(gap[1], b) > max(gap[0], a)]


def derive_waits(
    sc: Scenario, stages: list[dict[str, Any]], run_start: int
) -> list[dict[str, Any]]:
    """Idle gaps between a rank's own stages that the run's structure explains.

    ``rollout_tail``: after a rank's rollout, until the slowest rollout rank of that step ends.
    ``pool_wait`` (disaggregated): the parts of a gap during which the other pool works.
    """
    workers = [s for s in stages if s["rank"] >= 0]
    gen_end: dict[int, int] = {}
    for s in workers:
        if s["stage"] == "rollout":
            gen_end[s["step"]] = max(gen_end.get(s["step"], 0), s["end_ns"])
    busy = {
        pool: union(
            [(s["start_ns"], s["end_ns"]) for s in workers if sc.pool_of(s["rank"]) == pool]
        )
        for pool in ("rollout", "train")
    }
    waits = []
    for rank in range(sc.world_size):
        own = sorted((s for s in workers if s["rank"] == rank), key=lambda s: s["start_ns"])
        prev_end, prev = run_start, None
        for s in own:
            gap = (prev_end, s["start_ns"])
            if gap[1] > gap[0]:
                if sc.placement == "colocated":
                    if prev is not None and prev["stage"] == "rollout":
                        end = min(gen_end[prev["step"]], gap[1])
                        if end > gap[0]:
                            waits.append(_wait(rank, prev["step"], "rollout_tail", gap[0], end))
                else:
                    other = "train" if sc.pool_of(rank) == "rollout" else "rollout"
                    for a, b in intersect(gap, busy[other]):
                        waits.append(_wait(rank, s["step"], "pool_wait", a, b))
            prev_end, prev = max(prev_end, s["end_ns"]), s
    return [w for w in waits if w["end_ns"] - w["start_ns"] >= MIN_WAIT_NS]


def _wait(rank: int, step: int, cause: str, a: int, b: int) -> dict[str, Any]:
    return {"rank": rank, "step": step, "cause": cause, "start_ns": a, "end_ns": b}


def paired_collectives(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each rank's Python collective calls (``collectives``: coll, index, start_ns, end_ns, in
    call order) as truth rows: the n-th call of every rank is one instance, its ``wait_ns``
    the time from this rank's entry to the last member's (what it waited for the others),
    ``step`` the rank's step at entry. Runs recorded before this existed have none."""
    entries: dict[int, int] = {}
    for r in ranks:
        for c in r.get("collectives", []):
            entries[c["index"]] = max(entries.get(c["index"], 0), c["start_ns"])
    rows = []
    for r in ranks:
        starts = sorted((s["start_ns"], s["step"]) for s in r.get("steps", []))
        for c in r.get("collectives", []):
            step = max((k for t, k in starts if t <= c["start_ns"]), default=None)
            rows.append({"rank": r["rank"], "step": step, "coll": c["coll"],
                         "instance": c["index"], "start_ns": c["start_ns"],
                         "end_ns": c["end_ns"], "wait_ns": entries[c["index"]] - c["start_ns"]})
    return sorted(rows, key=lambda c: (c["start_ns"], c["rank"]))


def kineto_ranges(path: Path) -> tuple[list[tuple[str, int, int]], tuple[int, int]]:
    """User annotations of a Kineto trace as (name, start epoch ns, end epoch ns), and the
    window."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    base = int(doc.get("baseTimeNanoseconds", 0))
    rows, lo, hi = [], None, None
    for e in doc["traceEvents"]:
        if (
            e.get("ph") != "X"
            or not isinstance(e.get("ts"), (int, float))
            or e.get("cat") == "Trace"
        ):
            continue
        start = base + round(e["ts"] * 1000)
        end = start + round(e.get("dur", 0) * 1000)
        lo = start if lo is None else min(lo, start)
        hi = end if hi is None else max(hi, end)
        if e.get("cat") == "user_annotation":
            rows.append((e["name"], start, end))
    return rows, (lo or 0, hi or 0)


def match_clock(truth_rows: list[dict[str, Any]], trace_rows: list[tuple[str, int, int]],
                window: tuple[int, int], where: str) -> dict[str, Any]:
    """Pair each truth interval inside the trace window with its range; offsets in ns."""
    by_name: dict[str, list[tuple[int, int]]] = {}
    for name, a, b in trace_rows:
        by_name.setdefault(name, []).append((a, b))
    starts, ends = [], []
    for row in truth_rows:
        if not (window[0] <= row["start_ns"] and row["end_ns"] <= window[1]):
            continue
        cands = by_name.get(row["name"], [])
        if not cands:
            raise RuntimeError(
                f"{where}: range {row['name']!r} of step {row['step']} not in the trace"
            )
        a, b = min(cands, key=lambda c: abs(c[0] - row["start_ns"]))
        starts.append(row["start_ns"] - a)
        ends.append(b - row["end_ns"])
    if not starts:
        raise RuntimeError(f"{where}: no truth interval inside the trace window")
    return {
        "matched": len(starts),
        "start_offset_ns": {
            "median": int(statistics.median(starts)),
            "min": min(starts),
            "max": max(starts),
        },
        "end_offset_ns": {
            "median": int(statistics.median(ends)),
            "min": min(ends),
            "max": max(ends),
        },
    }


CLOCK_NOTE = (
    "Every interval was taken with time.time_ns() in the process that ran it, just inside the "
    "profiler range of the same name (start right after the range opens, end right before it "
    "closes). Kineto on CPU writes ts in microseconds relative to baseTimeNanoseconds, so epoch "
    "ns = baseTimeNanoseconds + ts*1000; per_rank gives, for every interval inside that rank's "
    "trace, truth start minus trace start and trace end minus truth end (both small and "
    "non-negative when the clocks agree). All processes share one host clock."
)


def write(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")

NSYS_CLOCK_NOTE = (
    "Every interval was taken with time.time_ns() in the process that ran it, just inside the "
    "NVTX range of the same name. Nsight Systems stores NVTX times relative to the session start, "
    "so epoch ns = TARGET_INFO_SESSION_START_TIME.utcEpochNs + NVTX_EVENTS.start; per_rank gives "
    "the offsets as for Kineto (truth start minus trace start, trace end minus truth end)."
)

TRL_CLOCK_NOTE = (
    "Intervals are TRL's own ProfilingContext blocks, each wrapped to take time.time_ns() on "
    "entry and exit (TRL itself uses perf_counter and reports only durations), and the HF "
    "trainer's steps (on_step_begin/on_step_end). TRL adds no ranges to the trace: the stage "
    "names here do not appear in it; ProfilerStep#N marks the recorded steps (N = step - 1). "
    "Kineto on CPU: epoch ns = baseTimeNanoseconds + ts*1000."
)
