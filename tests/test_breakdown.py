"""Stage breakdown and critical path (docs/analyses.md §3) on hand-built timelines, and the
vectorised walk against a literal step-by-step walk on random timelines."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from literal_walk import literal_chain

from analyzer.analyses.breakdown import (
    CRITICAL_SLACK_NS,
    compute_breakdown,
    compute_critical_path,
    critical_summary,
)
from analyzer.model import frames
from taxonomy.vocab import ROLE, STAGE

MS = 1_000_000
US = 1_000


def timeline(rows: list[tuple[int, int, str, int, int]]) -> pl.DataFrame:
    """(rank, step, stage, start, end) rows as a STAGE_TIMELINE frame."""
    frame = pl.DataFrame(
        {
            "rank": pl.Series([r[0] for r in rows], dtype=pl.Int32),
            "step": pl.Series([r[1] for r in rows], dtype=pl.Int32),
            "stage": pl.Series([r[2] for r in rows], dtype=STAGE),
            "role": pl.Series(["actor"] * len(rows), dtype=ROLE),
            "name": [r[2] for r in rows],
            "start_ns": pl.Series([r[3] for r in rows], dtype=pl.Int64),
            "end_ns": pl.Series([r[4] for r in rows], dtype=pl.Int64),
            "inferred": [False] * len(rows),
        }
    )
    return frames.check(frame, frames.STAGE_TIMELINE, "stage_timeline")


def steps(*windows: tuple[int, int, int]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "step": pl.Series([w[0] for w in windows], dtype=pl.Int32),
            "start_ns": [w[1] for w in windows],
            "end_ns": [w[2] for w in windows],
            "source": ["ProfilerStep"] * len(windows),
        }
    )


def test_stage_time_other_and_shares() -> None:
    tl = timeline(
        [
            (0, 1, "rollout", 0, 20 * MS),  # the driver range …
            (0, 1, "rollout", 20 * MS, 50 * MS),  # … and the worker range inside it: one stage
            (0, 1, "old_logprob", 60 * MS, 80 * MS),
            (0, 1, "other", 85 * MS, 90 * MS),
            (1, 1, "rollout", 5 * MS, 70 * MS),
            (1, 1, "actor_update", 75 * MS, 100 * MS),
            (-1, 1, "reward", 50 * MS, 55 * MS),
        ]
    )
    got = frames.check(
        compute_breakdown(tl, steps((1, 0, 100 * MS))), frames.BREAKDOWN, "breakdown"
    )
    table = {(r["rank"], r["stage"]): (r["time_ns"], r["share"]) for r in got.iter_rows(named=True)}
    assert table == {
        (-1, "reward"): (5 * MS, 0.05),
        (0, "rollout"): (50 * MS, 0.5),
        (0, "old_logprob"): (20 * MS, 0.2),
        (0, "other"): (10 * MS, 0.1),
        (1, "rollout"): (65 * MS, 0.65),
        (1, "actor_update"): (25 * MS, 0.25),
        (1, "other"): (5 * MS, 0.05),
        (-1, "other"): (0, 0.0),
    }


def test_segments_are_cut_to_their_step_window() -> None:
    tl = timeline([(0, 1, "rollout", -5 * MS, 30 * MS), (0, 2, "rollout", 30 * MS, 45 * MS)])
    got = compute_breakdown(tl, steps((1, 0, 30 * MS), (2, 30 * MS, 40 * MS))).filter(
        pl.col("stage") == "rollout"
    )
    assert got["time_ns"].to_list() == [30 * MS, 10 * MS]


def test_critical_path_follows_the_latest_end_with_slack() -> None:
    tl = timeline(
        [
            (0, 1, "rollout", 0, 50 * MS),
            (1, 1, "rollout", 0, 70 * MS),
            # overlaps rank 1's rollout by 50 µs
            (
                0,
                1,
                "actor_update",
                70 * MS - 50 * US,
                100 * MS,
            ),
            (1, 1, "actor_update", 72 * MS, 95 * MS),
        ]
    )
    chain = frames.check(
        compute_critical_path(tl, steps((1, 0, 100 * MS))), frames.CRITICAL_PATH, "critical_path"
    )
    assert chain.select("rank", "stage").rows() == [(1, "rollout"), (0, "actor_update")]
    summary = critical_summary(chain).row(0, named=True)
    assert (summary["rank"], summary["stage"], summary["depth_ns"]) == (1, "rollout", 100 * MS)
    assert summary["chain_ns"] == 70 * MS + 30 * MS + 50 * US


def test_overlap_beyond_the_slack_breaks_the_link() -> None:
    late = 70 * MS - CRITICAL_SLACK_NS - 100 * US
    tl = timeline(
        [
            (0, 1, "rollout", 0, 50 * MS),
            (1, 1, "rollout", 0, 70 * MS),
            (0, 1, "actor_update", late, 100 * MS),
        ]
    )
    chain = compute_critical_path(tl, steps((1, 0, 100 * MS)))
    assert chain.select("rank", "stage").rows() == [(0, "rollout"), (0, "actor_update")]


def test_equal_ends_go_to_the_lowest_rank_and_the_driver_is_not_on_the_path() -> None:
    tl = timeline(
        [
            (3, 1, "rollout", 0, 40 * MS),
            (2, 1, "rollout", 10 * MS, 40 * MS),
            (-1, 1, "advantage", 40 * MS, 45 * MS),
            (2, 1, "actor_update", 45 * MS, 60 * MS),
            (3, 1, "actor_update", 45 * MS, 60 * MS),
        ]
    )
    chain = compute_critical_path(tl, steps((1, 0, 60 * MS)))
    assert chain.select("rank", "stage").rows() == [(2, "rollout"), (2, "actor_update")]


def test_each_step_has_its_own_chain() -> None:
    tl = timeline(
        [
            (0, 1, "rollout", 0, 10 * MS),
            (1, 1, "rollout", 0, 12 * MS),
            (0, 2, "rollout", 20 * MS, 40 * MS),
            (1, 2, "rollout", 20 * MS, 30 * MS),
            (1, 2, "weight_sync", 41 * MS, 45 * MS),
        ]
    )
    summary = critical_summary(
        compute_critical_path(tl, steps((1, 0, 15 * MS), (2, 15 * MS, 50 * MS)))
    )
    assert summary.select("step", "rank", "stage", "depth_ns").rows() == [
        (1, 1, "rollout", 12 * MS),
        (2, 0, "rollout", 25 * MS),
    ]


segment = st.tuples(
    st.integers(0, 3), st.sampled_from(["rollout", "old_logprob", "actor_update", "weight_sync"]),
    st.integers(0, 40), st.integers(1, 12),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(segment, min_size=1, max_size=25), st.randoms(use_true_random=False))
def test_vectorised_walk_equals_the_literal_walk(raw: list, rnd) -> None:
    scale = 50 * US  # slack = 2 units: overlaps of 0–2 units count as "before"
    per_rank: dict[int, list] = {}
    for rank, stage, start, length in raw:
        per_rank.setdefault(rank, []).append((start, length, stage))
    rows = []
    for rank, segs in per_rank.items():
        t = 0
        for start, length, stage in sorted(segs):
            a = max(t, start)
            rows.append((rank, 1, stage, a * scale, (a + length) * scale))
            t = a + length
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    got = compute_critical_path(timeline(shuffled), steps((1, 0, 10_000 * scale)))
    assert {
        (r["rank"], r["stage"], r["start_ns"], r["end_ns"]) for r in got.iter_rows(named=True)
    } == literal_chain(rows)
    assert (got["end_ns"] > got["start_ns"]).all()
