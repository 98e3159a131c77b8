"""Bus bandwidth of every collective kind, by the definitions of nccl-tests' PERFORMANCE.md.

nccl-tests reports ``algbw = S / t`` (S the bytes of the operation, t its time) and
``busbw = algbw × factor``, the factor making the number comparable with the hardware's link
bandwidth whatever the algorithm:

====================  ==============  ==================================================
kind                  factor          why (PERFORMANCE.md)
====================  ==============  ==================================================
all_reduce            2(n−1)/n        a reduce-scatter then an all-gather
all_gather            (n−1)/n         each rank receives the n−1 shares it lacks
reduce_scatter        (n−1)/n         each rank sends the n−1 shares it does not keep
all_to_all            (n−1)/n         each rank keeps 1/n of its own data
gather, scatter       (n−1)/n         the root's link carries the n−1 shares of the others
broadcast, reduce     1               the data crosses every link once, whatever n
send, recv, send_recv 1               point to point: one link, the bytes once
barrier, other        none            no payload to speak of
====================  ==============  ==================================================

Each case below is one call moving 1000 bytes in 10 ns (algbw 100 B/ns = 100 GB/s, no wait),
and the expected bus bandwidth is the worked number written out, not a formula of the code.
"""

from __future__ import annotations

import pytest
from product_frames import activity, collectives

from analyzer.analyses.sync import compute_by_dim, compute_waits
from parsers.events import COLLECTIVES

WORKED: list[tuple[str, int, float]] = [
    ("all_reduce", 2, 100.0),  # 100 × 2·1/2
    ("all_reduce", 4, 150.0),  # 100 × 2·3/4
    ("all_reduce", 8, 175.0),  # 100 × 2·7/8
    ("all_gather", 2, 50.0),  # 100 × 1/2
    ("all_gather", 8, 87.5),  # 100 × 7/8
    ("reduce_scatter", 4, 75.0),  # 100 × 3/4
    ("reduce_scatter", 16, 93.75),  # 100 × 15/16
    ("all_to_all", 4, 75.0),
    ("all_to_all", 8, 87.5),
    ("gather", 4, 75.0),
    ("gather", 8, 87.5),
    ("scatter", 2, 50.0),
    ("scatter", 8, 87.5),
    ("broadcast", 2, 100.0),
    ("broadcast", 8, 100.0),
    ("reduce", 4, 100.0),
    ("reduce", 8, 100.0),
    ("send", 2, 100.0),
    ("recv", 2, 100.0),
    ("send_recv", 2, 100.0),
    ("send_recv", 8, 100.0),  # a p2p call in a larger group still crosses one link
]
NO_BUS_BANDWIDTH = ("barrier", "other")


def one_call(coll: str, n: int, moved: int = 1000) -> dict:
    calls = [(-1, 0, coll, "dp", n, moved, 0, 10, None)]
    return compute_by_dim(compute_waits(collectives(calls), activity([(0, 0, 10, True)]))).row(
        0, named=True
    )


@pytest.mark.parametrize(("coll", "n", "busbw"), WORKED, ids=lambda v: str(v))
def test_bus_bandwidth_of_each_kind(coll: str, n: int, busbw: float) -> None:
    got = one_call(coll, n)
    assert got["transfer_ns"] == 10 and got["bytes"] == 1000
    assert got["busbw_gbps"] == pytest.approx(busbw, rel=1e-12)


@pytest.mark.parametrize("coll", NO_BUS_BANDWIDTH)
def test_kinds_without_a_payload_have_no_bus_bandwidth(coll: str) -> None:
    assert one_call(coll, 4)["busbw_gbps"] is None


def test_every_collective_kind_is_covered() -> None:
    assert {c for c, _, _ in WORKED} | set(NO_BUS_BANDWIDTH) == set(COLLECTIVES)


def test_mixed_kinds_are_bytes_weighted() -> None:
    """Two all-gathers of one dimension, 8 ranks: 3000 B in 10 ns (300 × 7/8 = 262.5) and 1000 B
    in 20 ns (50 × 7/8 = 43.75); bytes-weighted: (3000·262.5 + 1000·43.75) / 4000 = 207.8125."""
    calls = [
        (-1, 0, "all_gather", "dp", 8, 3000, 0, 10, None),
        (-1, 0, "all_gather", "dp", 8, 1000, 20, 40, None),
    ]
    kernels = [(0, 0, 10, True), (0, 20, 40, True)]
    got = compute_by_dim(compute_waits(collectives(calls), activity(kernels))).row(0, named=True)
    assert got["busbw_gbps"] == pytest.approx(207.8125, rel=1e-12)


def test_a_size_no_call_recorded_is_null_not_zero() -> None:
    """HTA's test trace and the harness' gloo runs record no collective sizes, and their rows
    read 0 B, a size never measured; a row of sized and unsized calls sums the sizes it has."""
    calls = [
        (-1, 0, "all_gather", "dp", 8, None, 0, 10, None),
        (-1, 0, "all_gather", "dp", 8, None, 20, 40, None),
        (-1, 0, "all_reduce", "tp", 2, 3000, 50, 60, None),
        (-1, 0, "all_reduce", "tp", 2, None, 70, 80, None),
    ]
    kernels = [(0, 0, 10, True), (0, 20, 40, True), (0, 50, 60, True), (0, 70, 80, True)]
    waits = compute_waits(collectives(calls), activity(kernels))
    got = compute_by_dim(waits)
    assert sorted(got.select("coll", "count", "bytes").rows()) == [
        ("all_gather", 2, None), ("all_reduce", 2, 3000)
    ]
    from types import SimpleNamespace

    from analyzer.report.sections.sync import unsized

    assert unsized(SimpleNamespace(collective_waits=waits)) == [  # type: ignore[arg-type]
        "bytes –: the trace records no size for those calls",
        "tp all_reduce bytes are of 1 of its 2 calls (the others have no size)",
    ]
