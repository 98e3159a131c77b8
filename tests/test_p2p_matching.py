"""Point-to-point calls are matched into instances by time, not by order (docs/assembly.md).

A rank's send/recv kernels go to different peers, some of them outside the trace (HTA's sampled
pair holds 2 of 128 ranks), so the n-th call on one rank is not the n-th on another: two calls
form an instance only when they overlap and each is the other's nearest-ending overlapping call.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import analyzer
from analyzer.assemble.collectives import _instances, collective_calls, pg_config
from parsers.events import EVENT_SCHEMA, empty_events

HTA = Path("../shared/corpus/HolisticTraceAnalysis")
SAMPLED = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
MS = 1_000_000


def calls(rows: list[tuple[int, str, int, int]], group: str = "0,1,2|pp") -> pl.DataFrame:
    """Calls ``(rank, coll, start_ms, end_ms)`` of one group, one source per rank, no ``seq``."""
    return pl.DataFrame(
        {
            "rank": [r for r, *_ in rows],
            "source": [r for r, *_ in rows],
            "coll": [c for _, c, *_ in rows],
            "group": [group] * len(rows),
            "seq": [None] * len(rows),
            "start_ns": [s * MS for *_, s, _ in rows],
            "end_ns": [e * MS for *_, e in rows],
        },
        schema={
            "rank": pl.Int32, "source": pl.UInt32, "coll": pl.String, "group": pl.String,
            "seq": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
        },
    )


def partners(frame: pl.DataFrame) -> set[frozenset[tuple[int, int]]]:
    """Each instance as the set of its members' (rank, start ms)."""
    got = _instances(frame).filter(pl.col("instance") >= 0)
    return {
        frozenset(zip(g["rank"].to_list(), (g["start_ns"] // MS).to_list(), strict=True))
        for g in got.partition_by("instance")
    }


def unmatched(frame: pl.DataFrame) -> set[tuple[int, int]]:
    got = _instances(frame).filter(pl.col("instance") < 0)
    return set(zip(got["rank"].to_list(), (got["start_ns"] // MS).to_list(), strict=True))


@pytest.fixture(scope="module")
def sampled() -> analyzer.Run:
    return analyzer.load([str(p) for p in SAMPLED])


def test_the_sampled_pair_matches_only_the_kernels_that_ran_together(sampled) -> None:
    """Rank 0's calls #1, #2, #4, #8, #9 with rank 1's #0, #2, #4, #8, #9: the five pairs that
    overlap (their ends lie 0–332 µs apart); the other ten kernels have no counterpart in the
    other file (the files are event-sampled). By order, 6 of the 10 instances paired kernels
    that never overlap. The SendRecv kernels are all_to_all, all_reduce and all_gather calls
    (their host ranges say so, tests/test_collective_kinds.py), matched by time because by
    order their instances do not end together."""
    c = sampled.product("collective_calls").sort("rank", "start_ns").with_columns(
        pl.int_range(pl.len()).over("rank").alias("n")
    )
    assert c.height == 20 and set(c["coll"]) == {"all_to_all", "all_reduce", "all_gather"}
    on = {r: dict(zip(g["n"], g["instance"], strict=True))
          for (r,), g in c.group_by(["rank"])}
    pairs = {(n0, n1) for n0, i0 in on[0].items() for n1, i1 in on[1].items() if i0 == i1 >= 0}
    assert pairs == {(1, 0), (2, 2), (4, 4), (8, 8), (9, 9)}
    assert sorted(n for n, i in on[0].items() if i < 0) == [0, 3, 5, 6, 7]
    assert sorted(n for n, i in on[1].items() if i < 0) == [1, 3, 5, 6, 7]


def test_the_sampled_pair_waits_what_its_five_pairs_say(sampled) -> None:
    """Rank 1 arrives last in all five pairs; rank 0 waits from its start to rank 1's, less
    what its own compute kernels cover: 4.859 − 0.260, 3.302 − 1.505, 0.084, 22.328 − 20.218
    and 1.292 ms (worked out from the two traces' kernels) = 9.882 ms, where matching by
    order gave 246 ms."""
    waits = sampled.product("collective_waits")
    assert waits.filter(pl.col("rank") == 0)["wait_ns"].sum() == 9_882_000
    assert waits.filter(pl.col("rank") == 1)["wait_ns"].sum() == 0
    stragglers = sampled.product("stragglers")
    assert stragglers.select("rank", "caused_wait_ns", "last_arrivals").rows() == [
        (1, 9_882_000, 5)
    ]


SHIFTS_US = [200, 1_000, 5_000, 8_000, -3_000, 20]


@pytest.fixture(scope="module")
def shifted(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The sampled pair with rank 1's clock moved by each of :data:`SHIFTS_US` (every event's
    ``ts``), one folder per shift."""
    with gzip.open(SAMPLED[1], "rt") as f:
        trace = json.load(f)
    folders = {}
    for us in SHIFTS_US:
        folder = tmp_path_factory.mktemp(f"shift{us}")
        moved = {**trace, "traceEvents": [
            {**e, "ts": e["ts"] + us} if "ts" in e else e for e in trace["traceEvents"]
        ]}
        with gzip.open(folder / SAMPLED[1].name, "wt") as f:
            json.dump(moved, f)
        folders[us] = folder
    return folders


@pytest.mark.parametrize("us", SHIFTS_US)
def test_a_clock_shift_changes_neither_pairs_nor_waits(shifted, us: int) -> None:
    """A clock shift changes nothing that ran: the same five pairs, rank 1's offset the shift
    (the median of the pairs' end differences, 0 unshifted), and rank 0's 9.882 ms of wait
    (only a shift below the offset's uncertainty, left unapplied, adds to it: rank 1 arrives
    last in all five). Rank 1's call #5 ends 15 µs before rank 0's #5 starts; once rank 1's
    clock is off by ~100 µs or more they overlap, and paired by overlap alone (their ends
    67.8 ms apart) they gave 6 pairs, a 972 µs offset for a 1 ms shift and 12.27 ms of wait
    on rank 1."""
    run = analyzer.load([str(SAMPLED[0]), str(shifted[us] / SAMPLED[1].name)])
    c = run.product("collective_calls").sort("rank", "start_ns").with_columns(
        pl.int_range(pl.len()).over("rank").alias("n")
    )
    on = {r: dict(zip(g["n"], g["instance"], strict=True)) for (r,), g in c.group_by(["rank"])}
    pairs = {(n0, n1) for n0, i0 in on[0].items() for n1, i1 in on[1].items() if i0 == i1 >= 0}
    assert pairs == {(1, 0), (2, 2), (4, 4), (8, 8), (9, 9)}
    clock = run.product("clock").filter(pl.col("rank") == 1).row(0, named=True)
    assert clock["estimate_ns"] == us * 1000 and clock["matched"] == 5
    left = us * 1000 - clock["offset_ns"]
    assert left == 0 or abs(left) <= 3 * clock["uncertainty_ns"]
    waits = run.product("collective_waits")
    assert waits.filter(pl.col("rank") == 0)["wait_ns"].sum() == 9_882_000 + 5 * left
    assert waits.filter(pl.col("rank") == 1)["wait_ns"].sum() == 0


def test_interleaved_sends_to_two_peers_pair_with_each_peer() -> None:
    """Rank 0 alternates sends to ranks 1 and 2; by order its 2nd call would pair with rank
    1's 2nd (the 3rd of rank 0), and rank 2 would join rank 0's and rank 1's first."""
    frame = calls([
        (0, "send", 0, 10), (0, "send", 12, 20), (0, "send", 22, 30), (0, "send", 32, 40),
        (1, "recv", 5, 10), (1, "recv", 25, 30),
        (2, "recv", 14, 20), (2, "recv", 33, 40),
    ])
    assert partners(frame) == {
        frozenset({(0, 0), (1, 5)}), frozenset({(0, 12), (2, 14)}),
        frozenset({(0, 22), (1, 25)}), frozenset({(0, 32), (2, 33)}),
    }


def test_a_call_whose_partner_is_not_traced_stays_unmatched() -> None:
    """Rank 0's first send goes to a rank outside the trace: it overlaps nothing, so it is no
    instance, and rank 1's only call pairs with rank 0's second."""
    frame = calls([(0, "send", 0, 10), (0, "send", 20, 30), (1, "recv", 22, 30)], "0,1|pp")
    assert partners(frame) == {frozenset({(0, 20), (1, 22)})}
    assert unmatched(frame) == {(0, 0)}


def test_equal_overlaps_go_to_the_nearest_end() -> None:
    """Rank 0's call overlaps rank 1's and rank 2's by 8 ms each; rank 1's ends with it (a real
    pair ends together), rank 2's 2 ms before: rank 1 is the partner, rank 2 stays alone."""
    frame = calls([(0, "send", 0, 10), (1, "recv", 2, 10), (2, "recv", -2, 8)])
    assert partners(frame) == {frozenset({(0, 0), (1, 2)})}
    assert unmatched(frame) == {(2, -2)}


def test_overlapping_calls_whose_ends_lie_apart_are_no_pair() -> None:
    """Rank 1's first recv starts 1 ms before rank 0's first send ends and ends 60 ms after it
    (a call to a rank not traced, its clock a little off): they overlap, but a transfer would
    have ended both, so no pair. Its second recv ends 4 ms after rank 0's second send, within
    the 5 ms that calls of 36–40 ms allow (``END_SHARE``, ``END_CAP_NS``): a pair."""
    frame = calls([(0, "send", 0, 40), (0, "send", 100, 140),
                   (1, "recv", 39, 100), (1, "recv", 104, 144)], "0,1|pp")
    assert partners(frame) == {frozenset({(0, 100), (1, 104)})}
    assert unmatched(frame) == {(0, 0), (1, 39)}


def test_the_nearest_end_wins_over_a_longer_overlap() -> None:
    """Rank 2 waits long for its data: its recv overlaps rank 0's send by 9 ms, rank 1's recv
    (which ends with the send) by only 3 ms; rank 1 is rank 0's partner all the same, and rank 2
    pairs with rank 1's next send, which ends with it."""
    frame = calls([
        (0, "send", 1, 10), (1, "recv", 7, 10), (1, "send", 12, 20), (2, "recv", 0, 20),
    ])
    assert partners(frame) == {frozenset({(0, 1), (1, 7)}), frozenset({(1, 12), (2, 0)})}


def test_a_pipeline_over_three_ranks_pairs_neighbours() -> None:
    """Stage 1 receives from stage 0 and sends to stage 2 while stage 2 already waits; every
    call has one partner, on the neighbouring stage."""
    frame = calls([
        (0, "send", 0, 5), (1, "recv", 1, 5), (1, "send", 6, 9), (2, "recv", 2, 9),
        (0, "send", 10, 14), (1, "recv", 11, 14), (1, "send", 15, 18), (2, "recv", 12, 18),
    ])
    assert partners(frame) == {
        frozenset({(0, 0), (1, 1)}), frozenset({(1, 6), (2, 2)}),
        frozenset({(0, 10), (1, 11)}), frozenset({(1, 15), (2, 12)}),
    }


def test_seq_on_point_to_point_calls_is_not_trusted() -> None:
    """PyTorch stamps a send or recv with the group's collective counter + 1: two sends to
    different peers carry the same ``Seq``. Rank 0's first send (seq 7) goes outside the trace;
    by (group, seq) all three calls were one instance."""
    frame = calls([(0, "send", 0, 10), (0, "send", 20, 30), (1, "recv", 22, 30)], "0,1|pp")
    frame = frame.with_columns(pl.lit(7, pl.Int64).alias("seq"))
    assert partners(frame) == {frozenset({(0, 20), (1, 22)})}


def test_collectives_keep_their_order_matching_beside_point_to_point() -> None:
    """In a group that also sends, the all-reduces still pair by order (ids apart from the
    point-to-point instances), and a send never joins an all-reduce instance."""
    frame = calls([
        (0, "all_reduce", 0, 4), (0, "send", 5, 9), (0, "all_reduce", 20, 24),
        (1, "all_reduce", 1, 4), (1, "all_reduce", 21, 24),
    ], "0,1|g")
    got = _instances(frame).select("rank", "start_ns", "instance").rows()
    inst = {(r, s // MS): i for r, s, i in got}
    assert inst[(0, 0)] == inst[(1, 1)] != inst[(0, 20)] == inst[(1, 21)]
    assert inst[(0, 5)] == -1


def test_skewed_clocks_pair_on_the_clock_the_collectives_give() -> None:
    """Rank 1's clock runs 50 ms ahead (its all-reduces all end 50 ms late). Its recvs, on its
    own clock, overlap nothing of rank 0's; on the collectives' clock they overlap rank 0's
    sends, and its first recv (from a rank not traced) stays alone."""
    skew = 50
    frame = calls([
        (0, "all_reduce", 0, 2), (0, "all_reduce", 100, 102), (0, "all_reduce", 200, 202),
        (0, "send", 10, 12), (0, "send", 110, 112),
        (1, "all_reduce", skew + 1, skew + 2), (1, "all_reduce", skew + 101, skew + 102),
        (1, "all_reduce", skew + 201, skew + 202),
        (1, "recv", skew + 5, skew + 7), (1, "recv", skew + 11, skew + 12),
        (1, "recv", skew + 111, skew + 112),
    ], "0,1|g")
    assert partners(frame) == {
        frozenset({(0, 0), (1, skew + 1)}), frozenset({(0, 100), (1, skew + 101)}),
        frozenset({(0, 200), (1, skew + 201)}),
        frozenset({(0, 10), (1, skew + 11)}), frozenset({(0, 110), (1, skew + 111)}),
    }
    assert unmatched(frame) == {(1, skew + 5)}


def test_point_to_point_alone_across_a_skew_pairs_where_the_ends_coincide() -> None:
    """Pipeline stages on two hosts, no collective between them: rank 1's clock runs 3 ms
    ahead, more than its kernels last (1–2 ms), so on the raw clock its recvs overlap none of
    rank 0's sends — or the wrong one. Their ends coincide at +3 ms four times out of five:
    that is the pair's offset, and the recv from a rank outside the trace stays alone."""
    skew = 3
    sends = [(0, 4), (10, 13), (20, 22), (30, 34)]
    recvs = [(2, 4), (11, 13), (21, 22), (25, 26), (32, 34)]
    frame = calls([(0, "send", s, e) for s, e in sends]
                  + [(1, "recv", s + skew, e + skew) for s, e in recvs], "0,1|pp")
    assert partners(frame) == {
        frozenset({(0, 0), (1, 2 + skew)}), frozenset({(0, 10), (1, 11 + skew)}),
        frozenset({(0, 20), (1, 21 + skew)}), frozenset({(0, 30), (1, 32 + skew)}),
    }
    assert unmatched(frame) == {(1, 25 + skew)}


def test_point_to_point_alone_across_clocks_apart_beyond_the_window_matches_nothing() -> None:
    """Rank 1 runs 50 ms ahead, beyond what two clocks are taken to differ by
    (``SKEW_WINDOW_NS``, 10 ms), and no collective says by how much: its recvs overlap none of
    rank 0's sends, so no instance (the clock then leaves rank 1 unaligned) rather than the
    pairs by order."""
    frame = calls([(0, "send", 0, 2), (0, "send", 10, 12), (1, "recv", 50, 52),
                   (1, "recv", 60, 62)], "0,1|pp")
    assert partners(frame) == set()


def pipeline_frame(pairs: int, per: int, group_ranks: int, skew_ns: int) -> pl.DataFrame:
    """``pairs`` pipeline pairs (ranks 2k, 2k+1), ``per`` calls each, all pairs busy at once
    (each call overlaps ~100 others in one group of 256), the receiver's kernel starting up to
    90 µs later and ending up to 5 µs later; groups of ``group_ranks`` ranks; each rank's clock
    off by up to ``skew_ns``; ``truth`` names the pair."""
    rng = np.random.default_rng(3)
    dur = rng.integers(100_000, 5_000_000, (pairs, per))
    gap = rng.integers(50_000, 5_000_000, (pairs, per))
    end = np.cumsum(dur + gap, axis=1)
    lead = rng.integers(0, 90_000, (pairs, per))
    ranks = np.concatenate([np.repeat(2 * np.arange(pairs), per),
                            np.repeat(2 * np.arange(pairs) + 1, per)])
    off = rng.integers(-skew_ns, skew_ns + 1, 2 * pairs)[ranks]
    starts = np.concatenate([(end - dur).ravel(), (end - dur + lead).ravel()]) + off
    ends = np.concatenate([end.ravel(), (end + rng.integers(0, 5_000, (pairs, per))).ravel()])
    return pl.DataFrame({
        "rank": ranks.astype(np.int32), "source": ranks.astype(np.uint32),
        "coll": "send_recv", "seq": None, "start_ns": starts, "end_ns": ends + off,
        "truth": np.concatenate([np.arange(pairs * per)] * 2),
    }, schema_overrides={"seq": pl.Int64}).with_columns(
        (pl.col("rank") // group_ranks).cast(pl.String).alias("group")
    )


def assert_true_pairs(frame: pl.DataFrame) -> float:
    t0 = time.perf_counter()
    got = _instances(frame)
    took = time.perf_counter() - t0
    assert (got["instance"] >= 0).all()
    per_instance = got.group_by("instance").agg(pl.col("truth").n_unique(), pl.len())
    assert (per_instance["truth"] == 1).all() and (per_instance["len"] == 2).all()
    return took


def test_256_ranks_in_one_group_match_in_seconds() -> None:
    """A trace without groups puts all 256 ranks in one: every true pair is found and no other
    (by order, each instance held 256 calls). 500 calls a rank here; at 2,000 (512,000 calls)
    the same holds in 3–9 s on the shared 2-core machine, by its load."""
    assert assert_true_pairs(pipeline_frame(128, 500, 256, 0)) < 30.0


def test_pipeline_groups_on_skewed_clocks_match_in_seconds() -> None:
    """64 ranks in pipeline groups of 8, each clock off by up to 3 ms (more than most kernels
    last) and no collective to say by how much: the offsets come from the coinciding ends and
    every true pair is found."""
    assert assert_true_pairs(pipeline_frame(32, 500, 8, 3_000_000)) < 60.0


def test_a_synthetic_pipeline_traced_in_part_pairs_what_the_generator_paired() -> None:
    """The committed one_step_off run trains on ranks 4–7 with pipeline pairs (4, 6) and
    (5, 7), every clock off by up to 3 ms. Traced without rank 7, rank 6's profiler starting
    after its first 3 send/recv calls, and ``Seq`` dropped (the generator's is its instance
    id, PyTorch's is not): the 29 calls of rank 4 whose partner is traced pair with the one
    the generator paired them with (the same ``seq``), the 3 others and rank 5's 32 calls (all
    to rank 7) stay alone. By order, every pair of ranks 4 and 6 was off by three calls."""
    folder = Path("sample_traces/synthetic/one_step_off")
    run = analyzer.load([folder / f"rank-{r}.synthetic.pt.trace.json.gz" for r in (4, 5, 6)])
    p2p = pl.col("coll").is_in(["send", "recv"])
    late = run.events.filter((pl.col("rank") == 6) & (pl.col("kind") == "kernel") & p2p)
    cut = late.sort("start_ns")["start_ns"][3]
    events = run.events.filter(
        (pl.col("rank") != 6) | (pl.col("start_ns") >= cut) | ~p2p.fill_null(False)
    ).with_columns(pl.lit(None, pl.Int64).alias("seq"))
    got = collective_calls(events, pg_config(run.sources)).filter(p2p)
    truth = run.product("collective_calls").filter(p2p)
    both = got.drop("seq").join(
        truth.select("rank", "start_ns", "seq"), on=["rank", "start_ns"]
    )
    assert both.height == got.height == 93
    traced = both.filter(pl.col("rank") == 6)["seq"]
    alone = both.filter((pl.col("rank") == 5) | ~pl.col("seq").is_in(traced.implode()))
    assert alone.height == 35 and (alone["instance"] == -1).all()
    paired = both.filter((pl.col("rank") != 5) & pl.col("seq").is_in(traced.implode()))
    per_instance = paired.group_by("instance").agg(pl.col("seq").n_unique(), pl.len())
    assert (paired["instance"] >= 0).all() and per_instance.height == 29
    assert (per_instance["seq"] == 1).all() and (per_instance["len"] == 2).all()


def test_a_pipeline_without_groups_pairs_though_its_stages_call_unequally() -> None:
    """Nsight or an old Kineto records no group: the group is inferred from the ranks that
    make calls of a kind, which for collectives must make them equally often. A pipeline's
    middle stage makes twice the calls of its ends; its send/recv still pair, by time."""
    rows = [(0, 0, 5), (1, 1, 5), (1, 6, 9), (2, 2, 9), (0, 10, 14), (1, 11, 14)]
    events = pl.DataFrame(
        {
            "source": [r for r, _, _ in rows], "rank": [r for r, _, _ in rows],
            "kind": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
            "coll": "send_recv", "start_ns": [s * MS for _, s, _ in rows],
            "end_ns": [e * MS for _, _, e in rows],
        },
        schema_overrides={"source": pl.UInt32, "rank": pl.Int32},
    )
    events = pl.concat(
        [empty_events(), events.with_columns(
            pl.col("kind").cast(EVENT_SCHEMA["kind"]), pl.col("coll").cast(EVENT_SCHEMA["coll"]),
            pl.col("name").cast(EVENT_SCHEMA["name"]),
        )],
        how="diagonal_relaxed",
    )
    got = collective_calls(events, {})
    assert set(got["group"]) == {"0,1,2|~send_recv"}
    inst = {(r, s // MS): i for r, s, i in got.select("rank", "start_ns", "instance").rows()}
    assert inst[(0, 0)] == inst[(1, 1)] >= 0 and inst[(1, 6)] == inst[(2, 2)] >= 0
    assert inst[(0, 10)] == inst[(1, 11)] >= 0
    assert len({inst[(0, 0)], inst[(1, 6)], inst[(0, 10)]}) == 3
