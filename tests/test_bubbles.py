"""Idle time by cause (docs/analyses.md §4): a hand-built disaggregated step with every number
worked out, and random runs checked point by point against the seven rules applied literally,
with the invariants productive + Σ idle = window, no negative durations and independence from
the order of the input rows."""

from __future__ import annotations

import random

import polars as pl
from hypothesis import example, given, settings
from hypothesis import strategies as st
from product_frames import activity, collectives, frame, transposed

from analyzer.analyses.bubbles import RULES, compute_bubbles, compute_largest, compute_states
from analyzer.analyses.sync import compute_waits
from analyzer.model import frames, intervals
from taxonomy.vocab import IDLE_CAUSES

Range = tuple[int, int, str, int, int]  # rank, step, stage, start, end
Act = tuple[int, int, int, bool]  # rank, start, end, is_collective
Coll = tuple[int, int, int, int]  # instance, rank, start, end


def steps_frame(windows: list[tuple[int, int, int]]) -> pl.DataFrame:
    step, start, end = (list(c) for c in zip(*windows, strict=True))
    return frame(
        {"step": step, "start_ns": start, "end_ns": end, "source": ["ProfilerStep"] * len(step)},
        frames.STEPS,
    )


def pools_frame(pools: dict[int, str]) -> pl.DataFrame:
    n = len(pools)
    return frame(
        {
            "rank": list(pools),
            "pool": list(pools.values()),
            "host": ["h"] * n,
            "device": list(pools),
        },
        frames.POOLS,
    )


def ranges_frame(rows: list[Range]) -> pl.DataFrame:
    n = len(rows)
    rank, step, stage, start, end = transposed(rows, 5)
    return frame(
        {
            "rank": rank,
            "step": step,
            "stage": stage,
            "role": ["actor"] * n,
            "name": stage,
            "start_ns": start,
            "end_ns": end,
            "depth": [0] * n,
            "inferred": [False] * n,
            "confidence": [1.0] * n,
        },
        frames.STAGE_RANGES,
    )


def collectives_frame(rows: list[Coll]) -> pl.DataFrame:
    return collectives(
        [(inst, rank, "all_reduce", "dp", 2, 1 << 20, a, b, None) for inst, rank, a, b in rows]
    )


def analyse(windows, pools, ranges, acts, colls):
    kernels, steps = activity(acts), steps_frame(windows)
    waits = compute_waits(collectives_frame(colls), kernels)
    states = compute_states(steps, pools_frame(pools), ranges_frame(ranges), kernels, waits)
    return states, compute_bubbles(states, kernels, steps)


# A disaggregated step on [0, 100): ranks 0, 1 generate, ranks 2, 3 train; every cause but
# stage_gap appears, each worked out by hand below.
WINDOW = [(1, 0, 100)]
POOLS = {0: "rollout", 1: "rollout", 2: "train", 3: "train"}
RANGES: list[Range] = [
    (0, 1, "rollout", 0, 40), (0, 1, "weight_sync", 90, 95),
    (1, 1, "rollout", 0, 60), (1, 1, "weight_sync", 90, 95),
    (2, 1, "actor_update", 60, 90), (2, 1, "weight_sync", 90, 95),
    (3, 1, "actor_update", 60, 90),
]
ACTS: list[Act] = [
    (0, 0, 10, False),
    (0, 12, 40, False),
    (0, 92, 95, False),
    (1, 0, 60, False),
    (1, 90, 95, False),
    (2, 60, 70, False),
    (2, 70, 80, True),
    (2, 73, 74, False),
    (2, 80, 88, False),
    (2, 90, 95, False),
    (3, 60, 75, False),
    (3, 75, 80, True),
    (3, 80, 90, False),
]
COLLS: list[Coll] = [(0, 2, 70, 80), (0, 3, 75, 80)]
EXPECTED = {
    # rank 0: launch gap [10,12), rank 1 still generating [40,60), trainers at work [60,90),
    # waiting inside its weight-sync range [90,92), after its last range [95,100).
    0: {
        "productive": 41,
        "host_bound": 2,
        "rollout_tail": 20,
        "pool_wait": 30,
        "weight_sync": 2,
        "other": 5,
    },
    1: {"productive": 65, "pool_wait": 30, "other": 5},
    # rank 2: generation runs [0,60); the all-reduce waits for rank 3 over [70,75) except where
    # its own kernel [73,74) runs; a launch gap [88,90) inside actor_update.
    2: {"productive": 29, "pool_wait": 60, "sync_wait": 4, "host_bound": 2, "other": 5},
    # rank 3: no range of its own during [90,95) while the rollout pool syncs weights.
    3: {"productive": 30, "pool_wait": 65, "other": 5},
}


def test_every_cause_of_a_hand_built_disaggregated_step() -> None:
    states, bubbles = analyse(WINDOW, POOLS, RANGES, ACTS, COLLS)
    frames.check(states, frames.DEVICE_STATES, "device_states")
    frames.check(bubbles, frames.BUBBLES, "bubbles")
    for rank, want in EXPECTED.items():
        mine = bubbles.filter(pl.col("rank") == rank)
        assert mine.height == len(IDLE_CAUSES)
        assert mine["productive_ns"][0] == want["productive"], rank
        idle = {r["cause"]: r["idle_ns"] for r in mine.iter_rows(named=True)}
        assert idle == {c: want.get(c, 0) for c in IDLE_CAUSES}, rank
    assert bubbles.filter(pl.col("rank") == 2)["busy_ns"][0] == 33
    largest = frames.check(
        compute_largest(states, top=2), frames.LARGEST_BUBBLES, "largest_bubbles"
    )
    assert largest.rows() == [
        (3, 1, "pool_wait", 0, 60),
        (2, 1, "pool_wait", 0, 60),
    ] or largest.rows() == [(2, 1, "pool_wait", 0, 60), (3, 1, "pool_wait", 0, 60)]


def test_rollout_tail_needs_an_own_rollout_and_colocated_ranks_never_pool_wait() -> None:
    ranges = [(0, 1, "rollout", 0, 20), (1, 1, "rollout", 0, 50), (2, 1, "reward", 30, 50)]
    acts = [(0, 0, 20, False), (1, 0, 50, False), (2, 30, 50, False)]
    _, bubbles = analyse([(1, 0, 50)], {0: "rollout", 1: "rollout", 2: "train"}, ranges, acts, [])
    idle = {
        (r["rank"], r["cause"]): r["idle_ns"]
        for r in bubbles.filter(pl.col("idle_ns") > 0).iter_rows(named=True)
    }
    assert idle == {(0, "rollout_tail"): 30, (2, "pool_wait"): 30}
    _, shared = analyse([(1, 0, 50)], {0: "shared", 1: "shared", 2: "shared"}, ranges, acts, [])
    idle = {
        (r["rank"], r["cause"]): r["idle_ns"]
        for r in shared.filter(pl.col("idle_ns") > 0).iter_rows(named=True)
    }
    assert idle == {(0, "rollout_tail"): 30, (2, "other"): 30}  # no rollout of its own: no tail


# --- random runs against the rules applied one time point at a time --------------------------


def literal(windows, pools, ranges, acts, colls) -> dict[tuple[int, int], dict[str | None, int]]:
    """Every integer time point of every window classified by docs/analyses.md §4 as written
    (and, under ``"busy"``, how many points have activity)."""
    arrival = {}
    for inst, _, a, _ in colls:
        if inst >= 0:
            arrival[inst] = max(arrival.get(inst, a), a)
    compute = {(r, t) for r, a, b, coll in acts if not coll for t in range(a, b)}
    busy = {(r, t) for r, a, b, _ in acts for t in range(a, b)}
    waiting = {
        (r, t)
        for inst, r, a, b in colls
        for t in range(a, min(b, arrival.get(inst, a)))
        if (r, t) not in compute
    }
    out = {}
    for step, w0, w1 in windows:
        mine = {r: [x for x in ranges if x[0] == r and x[1] == step] for r in pools}
        rollout = [x for x in ranges if x[1] == step and x[2] == "rollout"]
        for r, pool in pools.items():
            counts: dict[str | None, int] = {c: 0 for c in (None, *RULES)}
            counts["busy"] = sum((r, t) in busy for t in range(w0, w1))
            own = mine[r]
            own_ro_end = max((x[4] for x in own if x[2] == "rollout"), default=None)
            first = min((x[3] for x in own), default=None)
            last = max((x[4] for x in own), default=None)
            for t in range(w0, w1):
                if (r, t) in busy and (r, t) not in waiting:
                    counts[None] += 1
                    continue
                inside = [x for x in ranges if x[0] == r and x[3] <= t < x[4]]  # of any step
                if any(x[2] == "weight_sync" for x in inside):
                    cause = "weight_sync"
                elif (
                    pool in ("rollout", "shared")
                    and own_ro_end is not None
                    and t >= own_ro_end
                    and any(x[0] != r and x[3] <= t < x[4] for x in rollout)
                ):
                    cause = "rollout_tail"
                elif (
                    pool in ("rollout", "train")
                    and not inside
                    and any(
                        pools.get(x[0]) not in (pool, "shared", None) and x[3] <= t < x[4]
                        for x in ranges
                    )
                ):
                    cause = "pool_wait"
                elif (r, t) in waiting:
                    cause = "sync_wait"
                elif inside:
                    cause = "host_bound"
                elif first is not None and first <= t < last:
                    cause = "stage_gap"
                else:
                    cause = "other"
                counts[cause] += 1
            out[(r, step)] = counts
    return out


@st.composite
def runs(draw):
    n = draw(st.integers(2, 4))
    kinds = draw(st.sampled_from(["colocated", "disaggregated"]))
    pools = {
        r: ("shared" if kinds == "colocated" else ("rollout" if r < n // 2 else "train"))
        for r in range(n)
    }
    cut = draw(st.integers(20, 40))
    overlap = draw(st.integers(0, 12))  # one-step-off: step 2 starts before step 1 ends
    windows = [(1, 0, cut), (2, cut - overlap, cut + draw(st.integers(15, 40)))]
    ranges, acts, colls = [], [], []
    for step, w0, w1 in windows:
        for r in range(n):
            t = w0 + draw(st.integers(0, 5))
            for stage in draw(
                st.lists(
                    st.sampled_from(["rollout", "reward", "actor_update", "weight_sync"]),
                    max_size=3,
                )
            ):
                length = draw(st.integers(1, 12))
                if t + length > w1 + 4:  # a range may reach past its window
                    break
                ranges.append((r, step, stage, t, t + length))
                t += length + draw(st.integers(0, 4))
        for _ in range(draw(st.integers(0, 12))):
            r, a = draw(st.integers(0, n - 1)), draw(st.integers(w0 - 3, w1))
            acts.append((r, a, a + draw(st.integers(1, 8)), False))
    for inst in range(draw(st.integers(0, 4))):
        members = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        end = draw(st.integers(5, windows[-1][2]))
        matched = inst if len(members) > 1 else -1
        for r in members:
            start = end - draw(st.integers(1, 10))
            colls.append((matched, r, start, end))
            acts.append((r, start, end, True))
    return windows, pools, ranges, acts, colls


@settings(max_examples=120, deadline=None)
@given(runs(), st.randoms(use_true_random=False))
@example(  # a range of the step beyond its window still bounds the rank's stage gap (rule 6)
    ([(1, 0, 20), (2, 20, 35)], {0: "shared", 1: "shared"},
     [(1, 2, "rollout", 20, 21), (1, 2, "rollout", 21, 31), (1, 2, "rollout", 35, 36)], [], []),
    random.Random(0),
)
def test_random_runs_follow_the_rules_point_by_point(run, rnd) -> None:
    windows, pools, ranges, acts, colls = run
    states, bubbles = analyse(windows, pools, ranges, acts, colls)
    want = literal(windows, pools, ranges, acts, colls)
    for row in bubbles.iter_rows(named=True):
        counts = want[(row["rank"], row["step"])]
        assert row["idle_ns"] == counts[row["cause"]], (row, counts)
        assert row["productive_ns"] == counts[None]
        assert row["busy_ns"] == counts["busy"]
        assert row["productive_ns"] + sum(counts[c] for c in RULES) == row["window_ns"]
    totals = bubbles.group_by("rank", "step").agg(
        pl.col("idle_ns").sum(), pl.col("productive_ns", "window_ns", "busy_ns").first()
    )
    assert (totals["idle_ns"] + totals["productive_ns"] == totals["window_ns"]).all()
    assert all(
        low >= 0
        for low in bubbles.select(pl.col("idle_ns", "productive_ns", "busy_ns").min()).row(0)
    )
    assert (
        (totals["busy_ns"] >= totals["productive_ns"]) & (totals["busy_ns"] <= totals["window_ns"])
    ).all()
    assert ((states["end_ns"] > states["start_ns"]).all())
    tiles = intervals.union_length(states, ["rank", "step"], "covered").join(
        totals, on=["rank", "step"]
    )
    assert (tiles["covered"] == tiles["window_ns"]).all()

    shuffled = [rows[:] for rows in (ranges, acts, colls)]
    for rows in shuffled:
        rnd.shuffle(rows)
    states2, bubbles2 = analyse(
        windows, dict(random.Random(1).sample(list(pools.items()), len(pools))), *shuffled
    )
    assert bubbles2.equals(bubbles) and states2.equals(states)
