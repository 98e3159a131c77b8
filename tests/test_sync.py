"""Synchronisation overhead (docs/analyses.md §4–§5): sync wait and exposed time per call,
collectives by dimension with the nccl-tests bus bandwidth, weight sync, stragglers."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from product_frames import activity, collectives, frame

from analyzer.analyses.sync import (
    BUSBW_FACTOR,
    compute_by_dim,
    compute_exposed,
    compute_exposed_intervals,
    compute_stragglers,
    compute_waits,
    compute_weight_sync,
)
from analyzer.model import frames, intervals

MB = 1 << 20


# One all-reduce over three ranks arriving at 0, 10 and 20, all leaving at 30; rank 0 runs a
# kernel [5, 8) meanwhile on another stream. Plus an unmatched broadcast on rank 1.
CALLS = [
    (0, 0, "all_reduce", "dp", 3, 8 * MB, 0, 30, "actor_update"),
    (0, 1, "all_reduce", "dp", 3, 8 * MB, 10, 30, "actor_update"),
    (0, 2, "all_reduce", "dp", 3, 8 * MB, 20, 30, "actor_update"),
    (-1, 1, "broadcast", "tp", 2, 2 * MB, 40, 50, None),
]
KERNELS = [(0, 5, 8, False), (1, 45, 47, False)] + [(r, a, b, True) for _, r, *_, a, b, _ in CALLS]


def test_wait_exposed_and_arrival_per_call() -> None:
    waits = frames.check(
        compute_waits(collectives(CALLS), activity(KERNELS)),
        frames.COLLECTIVE_WAITS,
        "collective_waits",
    )
    got = waits.select("rank", "coll", "arrival_ns", "wait_ns", "exposed_ns").rows()
    assert got == [
        (0, "all_reduce", 20, 17, 27),  # waits [0, 20) except the kernel's 3
        (1, "all_reduce", 20, 10, 20),
        (2, "all_reduce", 20, 0, 10),
        (1, "broadcast", 40, 0, 8),  # unmatched: no wait; 2 of 10 hidden behind a kernel
    ]


# Rank 0 runs two all-reduces at once on two threads ([0, 30) and [10, 40)) and a kernel [5, 8);
# rank 1 one broadcast [0, 10) fully behind a kernel [0, 12).
OVERLAPPING = [
    (0, 0, "all_reduce", "dp", 1, MB, 0, 30, None),
    (1, 0, "all_reduce", "dp", 1, MB, 10, 40, None),
    (2, 1, "broadcast", "tp", 1, MB, 0, 10, None),
]
OVERLAPPING_KERNELS = [(0, 5, 8, False), (1, 0, 12, False)] + [
    (r, a, b, True) for _, r, *_, a, b, _ in OVERLAPPING
]


def test_exposed_communication_counts_overlapping_calls_once() -> None:
    """The per-call exposed times sum to 27 + 30 = 57 on rank 0, more than the 40 its
    collectives span; the device's exposed time is the 40 less the kernel's 3."""
    calls, kernels = collectives(OVERLAPPING), activity(OVERLAPPING_KERNELS)
    waits = compute_waits(calls, kernels)
    assert waits.group_by("rank").agg(pl.col("exposed_ns").sum()).sort("rank").rows() == [
        (0, 57), (1, 0)
    ]
    pieces = frames.check(
        compute_exposed_intervals(calls, kernels), frames.EXPOSED_INTERVALS, "exposed_intervals"
    )
    assert pieces.rows() == [(0, 0, 5), (0, 8, 40)]
    exposed = frames.check(compute_exposed(calls, pieces), frames.EXPOSED_COMM, "exposed")
    assert exposed.rows() == [(0, 40, 37), (1, 10, 0)]
    assert compute_exposed(calls.clear(), pieces).height == 0
    assert compute_exposed_intervals(calls.clear(), kernels).height == 0


def test_exposed_time_within_groups_of_calls() -> None:
    """The first all-reduce alone ([0, 30): 27 exposed), the second alone ([10, 40): 30), both
    together (40, 37): a group's calls that overlap share their exposed moments."""
    from analyzer.analyses.sync import exposed_within

    calls = collectives(OVERLAPPING).with_columns(
        pl.Series("group", ["a", "b", "c"])
    )
    pieces = compute_exposed_intervals(calls, activity(OVERLAPPING_KERNELS))
    spans = calls.select("group", "rank", "start_ns", "end_ns")
    both = pl.concat([spans, spans.filter(pl.col("rank") == 0).with_columns(
        pl.lit("ab").alias("group"))])
    got = exposed_within(both, pieces, ["group", "rank"]).sort("group").rows()
    assert got == [("a", 0, 30, 27), ("ab", 0, 40, 37), ("b", 0, 30, 30), ("c", 1, 10, 0)]


def test_by_dimension_with_bus_bandwidth() -> None:
    by_dim = frames.check(
        compute_by_dim(compute_waits(collectives(CALLS), activity(KERNELS))),
        frames.COLLECTIVES_BY_DIM,
        "by_dim",
    )
    dp = by_dim.filter(pl.col("dim") == "dp").row(0, named=True)
    assert (
        dp["count"],
        dp["bytes"],
        dp["time_ns"],
        dp["exposed_ns"],
        dp["wait_ns"],
        dp["transfer_ns"],
    ) == (3, 24 * MB, 60, 57, 27, 33)
    # all-reduce: busbw = bytes / transfer × 2(n−1)/n, bytes-weighted (equal bytes: the mean)
    transfers = [30 - 17, 20 - 10, 10 - 0]
    assert dp["busbw_gbps"] == pytest.approx(sum(8 * MB / t * 4 / 3 for t in transfers) / 3)
    tp = by_dim.filter(pl.col("dim") == "tp").row(0, named=True)
    assert tp["busbw_gbps"] == pytest.approx(2 * MB / 10)  # broadcast: factor 1


@pytest.mark.parametrize(
    ("coll", "n", "factor"),
    [
        ("all_reduce", 8, 2 * 7 / 8),
        ("all_gather", 4, 3 / 4),
        ("reduce_scatter", 2, 1 / 2),
        ("all_to_all", 8, 7 / 8),
        ("broadcast", 8, 1.0),
        ("send", 2, 1.0),
    ],
)
def test_bus_bandwidth_factors_follow_nccl_tests(coll: str, n: int, factor: float) -> None:
    calls = [(-1, 0, coll, "dp", n, 1000, 0, 10, None)]
    got = compute_by_dim(compute_waits(collectives(calls), activity([(0, 0, 10, True)])))
    assert got["busbw_gbps"][0] == pytest.approx(100 * factor)
    a, b = BUSBW_FACTOR[coll]
    assert a * (n - 1) / n + b == pytest.approx(factor)


def test_barrier_has_no_bus_bandwidth() -> None:
    got = compute_by_dim(
        compute_waits(collectives([(-1, 0, "barrier", "world", 2, 0, 0, 10, None)]), activity([]))
    )
    assert got["busbw_gbps"][0] is None and got["time_ns"][0] == 10


def test_stragglers_are_the_last_to_arrive() -> None:
    calls = [
        *CALLS[:3],
        (1, 0, "all_reduce", "dp", 3, MB, 100, 130, None),
        (1, 1, "all_reduce", "dp", 3, MB, 125, 130, None),
        (1, 2, "all_reduce", "dp", 3, MB, 110, 130, None),
    ]
    got = frames.check(
        compute_stragglers(compute_waits(collectives(calls), activity(KERNELS))),
        frames.STRAGGLERS,
        "stragglers",
    )
    assert got.rows() == [(1, 40, 1), (2, 27, 1)]  # most wait caused first


def test_weight_sync_time_bytes_and_bandwidth() -> None:
    tl = frame(
        {
            "rank": [0, 1, 1],
            "step": [1, 1, 1],
            "stage": ["weight_sync", "weight_sync", "actor_update"],
            "role": ["actor", "rollout", "actor"],
            "name": ["update_weights"] * 3,
            "start_ns": [100, 110, 0],
            "end_ns": [150, 160, 100],
            "inferred": [False] * 3,
        },
        frames.STAGE_TIMELINE,
    )
    calls = [
        (7, 0, "broadcast", "weight_sync", 2, 1000, 120, 140, "weight_sync"),
        (7, 1, "broadcast", "weight_sync", 2, 1000, 125, 140, "weight_sync"),
        (-1, 1, "all_gather", "tp", 2, 500, 150, 155, "weight_sync"),
        (3, 0, "all_reduce", "dp", 2, 9999, 10, 20, "actor_update"),
    ]
    steps = frame(
        {"step": [1], "start_ns": [0], "end_ns": [200], "source": ["ProfilerStep"]}, frames.STEPS
    )
    got = frames.check(
        compute_weight_sync(tl, compute_waits(collectives(calls), activity([])), steps),
        frames.WEIGHT_SYNC,
        "weight_sync",
    )
    row = got.row(0, named=True)
    assert (row["step"], row["time_ns"], row["bytes"]) == (1, 60, 1500)  # each instance once
    assert row["bandwidth_gbps"] == pytest.approx(25.0) and row["share"] == pytest.approx(0.3)


call = st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(1, 20))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(call, min_size=1, max_size=12),
    st.lists(call, max_size=12),
    st.randoms(use_true_random=False),
)
def test_waits_are_bounded_and_order_free(calls: list, kernels: list, rnd) -> None:
    rows = [
        (i % 3 - (1 if i % 5 == 4 else 0), r, "all_reduce", "dp", 4, MB, a, a + d, None)
        for i, (r, a, d) in enumerate(calls)
    ]
    acts = [(r, a, a + d, False) for r, a, d in kernels] + [(r[1], r[6], r[7], True) for r in rows]
    waits = compute_waits(collectives(rows), activity(acts))
    dur = waits["end_ns"] - waits["start_ns"]
    assert ((waits["wait_ns"] >= 0) & (waits["wait_ns"] <= dur)).all()
    assert ((waits["exposed_ns"] >= 0) & (waits["exposed_ns"] <= dur)).all()
    compute = activity([k for k in acts if not k[3]])
    for row, w in zip(rows, waits.iter_rows(named=True), strict=True):
        covered = intervals.union(compute.filter(pl.col("rank") == row[1]))
        hidden = sum(
            max(0, min(b, row[7]) - max(a, row[6]))
            for a, b in covered.select("start_ns", "end_ns").rows()
        )
        assert w["exposed_ns"] == (row[7] - row[6]) - hidden
    shuffled_rows, shuffled_acts = rows[:], acts[:]
    rnd.shuffle(shuffled_rows)
    rnd.shuffle(shuffled_acts)
    again = compute_waits(collectives(shuffled_rows), activity(shuffled_acts))
    key = ["rank", "start_ns", "end_ns", "instance"]
    assert again.sort(key).equals(waits.sort(key))
    assert_frame_equal(
        compute_by_dim(again), compute_by_dim(waits), check_exact=False, rel_tol=1e-12
    )


def test_a_real_trace_with_collectives_on_two_threads_exposes_their_union_in_its_step() -> None:
    """HTA's rank-34 trace (CPU only, gloo): 10 all-reduces on two threads, 2 of them inside
    its one step, ProfilerStep#551 (210.1 ms). Measured by hand on the JSON: those two
    ``gloo:all_reduce`` ranges last 173,209.713 + 170,471.258 µs = 343.681 ms summed, and their
    union is 178.777 ms of the rank's time: the overview's exposed communication, and the
    finding's 179 ms per step. Over the whole trace the 10 calls are 2.14 s summed and 1.10 s
    of union; the headline read 1.1 s beside a finding of 179 ms, and an audit of the trace
    against a ``--steps`` baseline compared the two windows."""
    from pathlib import Path

    import analyzer

    trace = (Path(__file__).resolve().parents[2] / "shared" / "corpus" / "HolisticTraceAnalysis"
             / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    run = analyzer.load([trace], use_cache=False)
    assert run.collectives.height == 10
    assert run.collective_waits.height == 2
    assert run.collectives_by_dim["exposed_ns"].sum() == 343_680_971
    assert run.exposed_comm.rows() == [(34, 178_777_427, 178_777_427)]
    row = run.overview.filter(pl.col("metric") == "exposed_comm_ns").row(0, named=True)
    assert row["value"] == 178_777_427
    steps = run.steps
    assert row["value"] <= (steps["end_ns"] - steps["start_ns"]).sum() < 343_680_971
    picked = analyzer.load([trace], options=analyzer.Options(steps="551"))
    for name in ("collectives_by_dim", "exposed_comm", "collective_waits", "stragglers"):
        assert getattr(picked, name).equals(getattr(run, name)), name
    metric = pl.col("metric") == "exposed_comm_ns"
    assert picked.overview.filter(metric).equals(run.overview.filter(metric))
    from analyzer.report.sections import sync as sync_section

    shown = sync_section.section(run)
    assert shown is not None and shown.note.startswith(
        "calls inside the step windows only: 8 of the trace's 10 collective calls lie outside "
        "every step"
    )
    shown = sync_section.section(picked)
    assert shown is not None and "outside every step" not in shown.note

