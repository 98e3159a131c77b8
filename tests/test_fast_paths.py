"""The faster forms of two classification steps give what the general forms they replace gave.

``window_step`` searches the few step windows for each point where an as-of join sorted every
point; ``stage_at`` sorts points by time, then stably by rank (``by_rank``). Beside them, the
thread-crossing check on ranges nested, copied, touching and crossing, whose depth-based
parent lookup a faster depth must keep.
"""

from __future__ import annotations

import polars as pl

from analyzer.analyses.quality import _per_source, thread_crossings
from analyzer.classify.timeline import by_rank, window_step

UNIT = 10_000
"""10 µs: past the timer resolution the crossing check forgives."""


def host_rows() -> pl.DataFrame:
    """Thread 1: A ⊃ B ⊃ C, F a copy of C, D after B (touching it), E crossing A's end from
    inside D; thread 2: G and H touching."""
    spans = [(1, 0, 100), (1, 10, 50), (1, 20, 30), (1, 50, 60), (1, 55, 120), (1, 20, 30),
             (2, 0, 10), (2, 10, 20)]
    return pl.DataFrame(
        {
            "rank": pl.Series([0] * len(spans), dtype=pl.Int32),
            "source": pl.Series([0] * len(spans), dtype=pl.UInt32),
            "pid": [1] * len(spans),
            "tid": [t for t, _, _ in spans],
            "kind": ["cpu_op"] * len(spans),
            "start_ns": [s * UNIT for _, s, _ in spans],
            "end_ns": [e * UNIT for _, _, e in spans],
        }
    )


def test_the_crossing_range_is_counted_once():
    found = _per_source(thread_crossings(host_rows()))
    assert found.select("source", "count").rows() == [(0, 1)]
    assert found["detail"].to_list() == ["1 cpu_op"]


def test_window_step_takes_the_latest_starting_window():
    """As the as-of join did: the window starting last at or before the point, if the point is
    inside it (77 is in step 1's window, but step 3 started later and has ended)."""
    steps = pl.DataFrame(
        {"step": [1, 2, 3], "start_ns": [0, 50, 70], "end_ns": [100, 80, 75]},
        schema={"step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    points = pl.DataFrame(
        {"t": [-5, 0, 49, 55, 72, 77, 100, None]}, schema={"t": pl.Int64}
    ).with_row_index("_row")
    assert window_step(points, steps).to_list() == [None, 1, 1, 2, 3, None, None, None]


def test_by_rank_orders_as_a_two_key_sort():
    frame = pl.DataFrame({"rank": [1, 0, 1, 0, 2], "t": [5, 9, 1, 3, 0]})
    assert by_rank(frame, "t").rows() == [(0, 3), (0, 9), (1, 1), (1, 5), (2, 0)]
