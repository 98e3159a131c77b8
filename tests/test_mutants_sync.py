"""Tests that kill surviving mutants of analyzer/analyses/sync.py (docs/mutation.md).

Each case is a few hand-built calls whose numbers are worked out in the comment beside it, so
a changed comparison, factor or sort order in the module changes a number the test checks.
"""

from __future__ import annotations

import polars as pl
import pytest
from product_frames import activity, collectives

from analyzer.analyses.sync import compute_by_dim, compute_stragglers, compute_waits
from analyzer.model import frames


def by_dim(calls: list[tuple], kernels: list[tuple] | None = None):
    kernels = kernels if kernels is not None else [(r, a, b, True) for _, r, *_, a, b, _ in calls]
    return compute_by_dim(compute_waits(collectives(calls), activity(kernels)))


def test_a_group_of_one_still_has_the_point_to_point_bus_bandwidth() -> None:
    """send in a group of size 1: factor 0·0/1 + 1 = 1, so 1000 B / 10 ns = 100 GB/s (a
    guard of n > 1 instead of n >= 1 would drop it)."""
    got = by_dim([(-1, 0, "send", "pp", 1, 1000, 0, 10, None)]).row(0, named=True)
    assert got["busbw_gbps"] == pytest.approx(100.0, rel=1e-12)


def test_a_call_that_only_waits_adds_no_bus_bandwidth() -> None:
    """Two-rank all-gather: rank 0 runs [0, 10) and waits all of it for rank 1, who arrives at
    10 and runs [10, 20). Rank 0's transfer is 0: it must add neither a number (no division by
    zero) nor weight. Rank 1: 1000 B in 10 ns × 1/2 = 50 GB/s, the mean over its bytes alone."""
    calls = [
        (0, 0, "all_gather", "dp", 2, 1000, 0, 10, None),
        (0, 1, "all_gather", "dp", 2, 1000, 10, 20, None),
    ]
    got = by_dim(calls).row(0, named=True)
    assert (got["count"], got["bytes"], got["time_ns"], got["wait_ns"], got["transfer_ns"]) == (
        2,
        2000,
        20,
        10,
        10,
    )
    assert got["busbw_gbps"] == pytest.approx(50.0, rel=1e-12)


def test_zero_bytes_give_no_bus_bandwidth_rather_than_nan() -> None:
    """A zero-byte all-reduce: nothing to weight by, so no number (0/0 would be NaN)."""
    got = by_dim([(-1, 0, "all_reduce", "dp", 4, 0, 0, 10, None)]).row(0, named=True)
    assert got["busbw_gbps"] is None
    assert got["time_ns"] == 10 and got["bytes"] == 0


def test_unknown_bytes_are_left_out_of_the_weighting() -> None:
    """Two broadcasts: 1000 B in 10 ns (100 GB/s) and one of unknown size in 5 ns; the mean is
    over the known one only: 100."""
    calls = [
        (-1, 0, "broadcast", "tp", 2, 1000, 0, 10, None),
        (-1, 0, "broadcast", "tp", 2, None, 20, 25, None),
    ]
    got = by_dim(calls).row(0, named=True)
    assert got["count"] == 2 and got["bytes"] == 1000 and got["time_ns"] == 15
    assert got["busbw_gbps"] == pytest.approx(100.0, rel=1e-12)


def test_rows_sorted_by_dimension_then_longest_first() -> None:
    """dp before tp; inside dp the all-reduce (30 ns) before the all-gather (10 ns)."""
    calls = [
        (-1, 0, "all_gather", "dp", 2, 100, 0, 10, None),
        (-1, 0, "broadcast", "tp", 2, 100, 20, 70, None),
        (-1, 0, "all_reduce", "dp", 2, 100, 100, 130, None),
    ]
    got = by_dim(calls).select("dim", "coll", "time_ns").rows()
    assert got == [("dp", "all_reduce", 30), ("dp", "all_gather", 10), ("tp", "broadcast", 50)]


def test_exposed_time_is_what_no_compute_hides() -> None:
    """An all-reduce [0, 100) on rank 0 with a compute kernel [20, 50): exposed 100 − 30 = 70;
    nobody else in the instance, so no wait."""
    calls = [(-1, 0, "all_reduce", "dp", 2, 1000, 0, 100, None)]
    got = by_dim(calls, [(0, 0, 100, True), (0, 20, 50, False)]).row(0, named=True)
    assert (got["exposed_ns"], got["wait_ns"], got["transfer_ns"]) == (70, 0, 100)
    assert got["busbw_gbps"] == pytest.approx(1000 / 100 * 2 * 1 / 2, rel=1e-12)


def test_two_member_instance_names_its_straggler() -> None:
    """Ranks 0 and 1 meet at instance 5; rank 1 arrives at 30, rank 0 at 0 waits 30. A
    single-member instance (rank 2 alone) names nobody."""
    calls = [
        (5, 0, "all_reduce", "dp", 2, 10, 0, 40, None),
        (5, 1, "all_reduce", "dp", 2, 10, 30, 40, None),
        (6, 2, "all_reduce", "dp", 2, 10, 0, 40, None),
    ]
    got = compute_stragglers(compute_waits(collectives(calls), activity([])))
    assert got.rows() == [(1, 30, 1)]


def test_arrival_ties_go_to_the_lowest_rank_and_order_is_by_wait_then_rank() -> None:
    """Instance 1: rank 0 arrives at 0, ranks 3 and 4 both last at 20; rank 0 waits 20, the two
    last wait 0, and the tie goes to rank 3: caused 20. Instance 2: rank 4 arrives at 100 and
    waits 20 for rank 0 at 120: caused 20. Equal caused waits: lower rank first."""
    calls = [
        (1, 0, "all_gather", "dp", 3, 10, 0, 50, None),
        (1, 3, "all_gather", "dp", 3, 10, 20, 50, None),
        (1, 4, "all_gather", "dp", 3, 10, 20, 50, None),
        (2, 4, "all_gather", "dp", 2, 10, 100, 150, None),
        (2, 0, "all_gather", "dp", 2, 10, 120, 150, None),
    ]
    got = compute_stragglers(compute_waits(collectives(calls), activity([])))
    assert got.rows() == [(0, 20, 1), (3, 20, 1)]


def test_no_collectives_give_the_empty_table_with_its_columns() -> None:
    waits = compute_waits(collectives([]), activity([]))
    got = compute_by_dim(waits)
    assert got.height == 0 and got.schema == pl.Schema(frames.COLLECTIVES_BY_DIM)


def test_a_one_nanosecond_transfer_counts() -> None:
    """send of 1000 B in 1 ns: factor 1, 1000 GB/s (the smallest transfer there is, not none)."""
    got = by_dim([(-1, 0, "send", "pp", 2, 1000, 0, 1, None)]).row(0, named=True)
    assert got["busbw_gbps"] == pytest.approx(1000.0, rel=1e-12)


def test_a_single_byte_has_a_bus_bandwidth() -> None:
    """broadcast of 1 B in 10 ns: 0.1 GB/s; one byte is weight enough."""
    got = by_dim([(-1, 0, "broadcast", "tp", 2, 1, 0, 10, None)]).row(0, named=True)
    assert got["busbw_gbps"] == pytest.approx(0.1, rel=1e-12)
