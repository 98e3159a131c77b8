"""Tests that kill surviving mutants of analyzer/model/intervals.py (docs/mutation.md).

Intervals are [start, end) in ns; every expectation is the union, overlap or cut worked out by
hand on a number line, small enough to check by eye.
"""

from __future__ import annotations

import polars as pl

from analyzer.model import intervals as iv


def spans(rows: list[tuple], by: str | None = None) -> pl.DataFrame:
    if by is None:
        return pl.DataFrame(rows, schema={"start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")
    return pl.DataFrame(
        rows, schema={by: pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row"
    )


def test_touching_intervals_merge_and_empty_ones_vanish() -> None:
    """[0,10) and [10,20) touch: one piece [0,20). [30,30) is empty and [40,35) reversed: gone.
    [50,60) inside [45,70): one piece."""
    got = iv.union(spans([(10, 20), (0, 10), (30, 30), (40, 35), (50, 60), (45, 70)])).rows()
    assert got == [(0, 20), (45, 70)]


def test_union_is_per_group() -> None:
    """Rank 0: [0,10) and [5,15) → [0,15); rank 1: [12,20) stays apart from rank 0's."""
    got = (
        iv.union(spans([(0, 0, 10), (1, 12, 20), (0, 5, 15)], "rank"), ["rank"]).sort("rank").rows()
    )
    assert got == [(0, 0, 15), (1, 12, 20)]


def test_a_gap_of_one_nanosecond_keeps_two_pieces() -> None:
    assert iv.union(spans([(0, 10), (11, 20)])).rows() == [(0, 10), (11, 20)]


def test_union_length_of_nothing_is_zero() -> None:
    assert iv.union_length(spans([])).item() == 0
    assert iv.union_length(spans([(5, 5)])).item() == 0
    assert iv.union_length(spans([(0, 10), (5, 25), (30, 31)])).item() == 26


def test_union_length_per_group_and_its_name() -> None:
    got = iv.union_length(
        spans([(0, 0, 10), (0, 5, 20), (1, 0, 3)], "rank"), ["rank"], "busy"
    ).sort("rank")
    assert got.columns == ["rank", "busy"] and got.rows() == [(0, 20), (1, 3)]


def test_length_sums_without_merging() -> None:
    assert iv.length(spans([(0, 10), (20, 25)])).item() == 15
    assert iv.length(spans([])).item() == 0
    got = (
        iv.length(spans([(0, 0, 4), (1, 0, 6), (1, 10, 11)], "rank"), ["rank"]).sort("rank").rows()
    )
    assert got == [(0, 4), (1, 7)]


def test_intersection_and_difference_by_hand() -> None:
    """a = [0,10) ∪ [20,30), b = [5,25): a ∩ b = [5,10) ∪ [20,25); a − b = [0,5) ∪ [25,30)."""
    a, b = spans([(0, 10), (20, 30)]), spans([(5, 25)])
    assert iv.intersection(a, b).rows() == [(5, 10), (20, 25)]
    assert iv.difference(a, b).rows() == [(0, 5), (25, 30)]
    assert iv.difference(b, a).rows() == [(10, 20)]
    assert iv.intersection(a, spans([(10, 20)])).height == 0


def test_clip_leaves_out_intervals_that_only_touch_a_window() -> None:
    """Window 1 = [0,10), window 2 = [10,20). [10,15) touches window 1's end: only in window 2;
    [5,12) is cut into [5,10) of step 1 and [10,12) of step 2."""
    windows = pl.DataFrame({"step": [1, 2], "start_ns": [0, 10], "end_ns": [10, 20]})
    got = iv.clip_to_windows(spans([(10, 15), (5, 12)]), windows).sort("step", "start_ns", "end_ns")
    assert got.select("step", "start_ns", "end_ns").rows() == [(1, 5, 10), (2, 10, 12), (2, 10, 15)]


def test_clip_per_rank_window() -> None:
    """Rank 0's window [0,10), rank 1's [100,110): rank 1's interval [5,105) is cut to [100,105)."""
    windows = pl.DataFrame(
        {"rank": [0, 1], "step": [1, 1], "start_ns": [0, 100], "end_ns": [10, 110]},
        schema={"rank": pl.Int32, "step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    got = iv.clip_to_windows(spans([(1, 5, 105), (0, 8, 12)], "rank"), windows, on=["rank"]).sort(
        "rank"
    )
    assert got.select("rank", "step", "start_ns", "end_ns").rows() == [
        (0, 1, 8, 10),
        (1, 1, 100, 105),
    ]


def test_overlap_each_by_hand() -> None:
    """cover = [10,20) ∪ [30,40). [0,15) → 5; [15,35) → 5 + 5 = 10; [40,50) → 0; [12,18) → 6;
    [0,100) → 20; [25,28) → 0 (in the gap)."""
    frame = spans([(0, 15), (15, 35), (40, 50), (12, 18), (0, 100), (25, 28)])
    got = iv.overlap_each(frame, spans([(30, 40), (10, 20)])).to_list()
    assert got == [5, 10, 0, 6, 20, 0]


def test_overlap_each_per_group_keeps_row_order() -> None:
    """Rank 1's cover [0,10) does not count for rank 0; rank 0's cover [5,8) does."""
    frame = spans([(1, 0, 20), (0, 0, 20), (1, 5, 6)], "rank")
    cover = spans([(1, 0, 10), (0, 5, 8)], "rank")
    assert iv.overlap_each(frame, cover, ["rank"]).to_list() == [10, 3, 1]


def test_overlap_each_of_a_merged_cover() -> None:
    """A cover already disjoint (``merged``: not merged again), its pieces out of order and in
    two groups: the same answers as :func:`test_overlap_each_by_hand`, rank 1's cover [0,10)
    apart; a row ending inside a piece counts up to its end ([12,18) → 6)."""
    frame = spans([(0, 0, 15), (0, 15, 35), (1, 0, 20), (0, 40, 50), (0, 12, 18), (0, 25, 28)],
                  "rank")
    cover = spans([(0, 30, 40), (1, 0, 10), (0, 10, 20)], "rank")
    got = iv.overlap_each(frame, cover, ["rank"], merged=True).to_list()
    assert got == [5, 10, 10, 0, 6, 0]
    assert iv.overlap_each(frame, cover, ["rank"]).to_list() == got


def test_labelled_sweep_lower_label_wins() -> None:
    """label 0 on [5,15), label 1 on [0,20): pieces 1 [0,5), 0 [5,15), 1 [15,20)."""
    tagged = pl.DataFrame(
        {"rank": [0, 0], "label": [1, 0], "start_ns": [0, 5], "end_ns": [20, 15]},
        schema={"rank": pl.Int32, "label": pl.Int8, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    got = iv.labelled_sweep(tagged, ["rank"], 2).select("label", "start_ns", "end_ns").rows()
    assert got == [(1, 0, 5), (0, 5, 15), (1, 15, 20)]
