"""Point-to-point calls (send, recv, send/recv) matched into instances by time (docs/assembly.md);
so are the calls of a collective group whose order fails (the trace lacks some of its calls:
HTA's event-sampled pair, :func:`analyzer.assemble.collectives._out_of_order`).

Order and ``seq`` both fail for them: a rank's calls go to different peers, some outside the
trace (a pipeline traced in part), and PyTorch stamps a send or recv with the
group's *collective* counter + 1, the same on every point-to-point call between two collectives.
What does hold is time: the transfer ends both kernels of a pair, so they overlap and end
together. Calls are put on the clock the collectives give (:func:`provisional_offsets`) and
paired when each is the other's nearest-ending overlapping call on another rank of the group,
between peers only (a rank's peers are few and fixed: its pipeline neighbours), which drops the
chance pairs of two unrelated kernels ending close together: in a small group, the pairs of
ranks whose ends coincide often, each on its own offset (:func:`_by_couple`); in a large one,
the pairs of ranks that pair often in a first pass (:func:`_between_peers`). Overlap alone is
not enough: two unrelated calls a few µs apart overlap once a clock is off by more, so the ends
of a pair must also coincide (:data:`END_SHARE`).
"""

from __future__ import annotations

import polars as pl

from .clock import estimate_clock, one_clock_per_file

P2P: tuple[str, ...] = ("send", "recv", "send_recv")
"""Point-to-point kinds: each call has one peer, so calls are matched by time, not by order."""
P2P_ROUNDS = 3
"""Rounds of mutual-nearest pairing: a call whose nearest overlapping call paired with a nearer
one tries the nearest of those left."""
PEER_SHARE = 0.25
"""Two ranks are peers when they pair at least this share of the times either pairs with its
most frequent peer; the other pairs are chance. Measured on 128 busy pipeline pairs in one group
of 256 ranks, 2,000 calls each: with ends 0–5 µs apart a true peer pairs 1,612–1,700 times, a
chance one at most 8; with ends 0–300 µs apart 49–66 against at most 20 (p99 14)."""

END_SHARE = 0.5
"""Two calls pair only when their ends lie within this share of the shorter call apart (within
:data:`END_FLOOR_NS` and :data:`END_CAP_NS`): the transfer ends both kernels, so a real pair's
ends lie 0–332 µs apart on HTA's sampled pair, at most 0.8% of the shorter call (8–63 ms),
while the chance pair its rank 1 gets once its clock is off by 100 µs or more (two calls 15 µs
apart, then overlapping) ends 67.8 ms apart, 1.7 times the shorter call."""
END_FLOOR_NS = 500_000
"""Ends this close coincide however short the calls: the clocks are put together no closer
(per-couple offsets come in :data:`SKEW_BIN_NS` bins) and a real pair's ends lie up to 332 µs
apart on HTA's sampled pair, more than half of a pipeline's shortest kernels (100 µs) last."""
END_CAP_NS = 5_000_000
"""Ends further apart than this never coincide however long the calls: waiting for a late peer
lengthens both kernels of a pair, not the gap between their ends (HTA's sampled pair: 332 µs
at most, in calls of 8–63 ms)."""


def end_tolerance(shorter: pl.Expr) -> pl.Expr:
    """How far apart two calls' ends may lie and still coincide, from the shorter call's
    length (:data:`END_SHARE`, clipped to :data:`END_FLOOR_NS` … :data:`END_CAP_NS`)."""
    return (shorter * END_SHARE).clip(END_FLOOR_NS, END_CAP_NS)


SKEW_WINDOW_NS = 10_000_000
"""Two ranks' clocks may differ by up to this much: the ends of a pair of ranks' calls are
compared within it to find the offset at which they coincide (:func:`_by_couple`)."""
SKEW_BIN_NS = 200_000
"""Resolution of that search: ends that coincide within it count together (a real pair's ends
lie 0–332 µs apart on HTA's sampled pair)."""
SKEW_MIN_PAIRS = 3
"""An offset between two ranks needs at least this many coinciding ends (and
:data:`PEER_SHARE` of the rarer rank's calls)."""
SKEW_SAMPLE = 128
"""Calls of the lower rank of a pair whose ends are compared with the other's (evenly spread over
its calls): enough to find an offset, and the search stays linear in the calls."""
SKEW_MAX_RANKS = 16
"""Groups of at most this many ranks (pipeline groups) get an offset per pair of ranks; larger
ones (every rank of a trace without groups) pair on the collectives' clock alone."""

_NO_PAIRS = pl.Schema({"_id": pl.UInt32, "_pair": pl.UInt32})


def match(calls: pl.DataFrame, collective: pl.DataFrame, first: int) -> pl.DataFrame:
    """``calls`` (point-to-point) with ``instance``: ``first`` + the pair's number, in the
    order the pairs start, or -1; ``collective`` (its instances matched) gives the clock."""
    offsets = provisional_offsets(collective)
    rows = (
        calls.sort("start_ns", "rank")
        .with_row_index("_id")
        .join(offsets, on="rank", how="left")
        .with_columns(
            (pl.col("start_ns") - pl.col("offset_ns").fill_null(0)).alias("_s"),
            (pl.col("end_ns") - pl.col("offset_ns").fill_null(0)).alias("_e"),
        )
    )
    live = rows.filter(pl.col("group").is_not_null()).select(
        "_id", pl.col("group").alias("_key"), "rank", "_s", "_e"
    )
    sizes = live.group_by("_key").agg(pl.col("rank").n_unique().alias("_n"))
    small = pl.col("_key").is_in(
        sizes.filter(pl.col("_n") <= SKEW_MAX_RANKS)["_key"].implode()
    )
    few, many = live.filter(small), live.filter(~small)
    pairs = _rounds(pl.concat([_by_couple(few), _between_peers(many, _rounds(many))]))
    ident = pl.col("_pair").rank("dense").cast(pl.Int64) - 1 + first
    return (
        rows.join(pairs, on="_id", how="left")
        .with_columns(
            pl.when(pl.col("_pair").is_not_null()).then(ident).otherwise(-1).alias("instance")
        )
        .drop("_id", "offset_ns", "_s", "_e", "_pair")
    )


def provisional_offsets(collective: pl.DataFrame) -> pl.DataFrame:
    """Per rank, the clock offset the matched collectives alone give (the ``clock`` product's
    estimate, on these instances): calls are matched on timestamps corrected by it, so ranks
    whose clocks differ by more than a transfer still pair up."""
    if collective.height == 0 or not {"coll", "source", "end_ns"} <= set(collective.columns):
        return pl.DataFrame(schema={"rank": pl.Int32, "offset_ns": pl.Int64})
    ranks = sorted(collective["rank"].unique().to_list())
    table = one_clock_per_file(estimate_clock(collective, ranks), collective)
    return table.select(pl.col("rank").cast(pl.Int32), "offset_ns")


def _rounds(live: pl.DataFrame) -> pl.DataFrame:
    """``_id`` → ``_pair`` over :data:`P2P_ROUNDS` rounds of :func:`_mutual_nearest`, each over
    the calls still unpaired."""
    found = []
    for _ in range(P2P_ROUNDS):
        pairs = _mutual_nearest(live)
        if pairs.height == 0:
            break
        found.append(pairs)
        live = live.join(pairs, on="_id", how="anti")
    return pl.concat(found) if found else pl.DataFrame(schema=_NO_PAIRS)


def _by_couple(live: pl.DataFrame) -> pl.DataFrame:
    """``live`` once per pair of ranks of its group, keyed by group and pair, with the higher
    rank's times moved by the offset at which the two ranks' ends coincide most often within
    :data:`SKEW_WINDOW_NS` — pipeline stages on different hosts are linked by nothing else, and
    their clocks can differ by more than a transfer lasts. A pair of ranks without such an
    offset keeps the collectives' clock, and is left out when either rank has one with another
    rank (its peers are known)."""
    ends = live.select("_key", "rank", "_e", (pl.col("_e") // SKEW_WINDOW_NS).alias("_b"))
    each = pl.max_horizontal(pl.len().over("_key", "rank") // SKEW_SAMPLE, pl.lit(1))
    sample = ends.sort("_key", "rank", "_e").filter(
        pl.int_range(pl.len()).over("_key", "rank") % each == 0
    )
    near = pl.concat([ends.with_columns(pl.col("_b") + k) for k in (-1, 0, 1)])
    diffs = (
        sample.join(near, on=["_key", "_b"], suffix="_h")
        .filter(pl.col("rank") < pl.col("rank_h"))
        .select(
            "_key", pl.col("rank").alias("lo"), pl.col("rank_h").alias("hi"),
            (pl.col("_e_h") - pl.col("_e")).alias("_d"),
        )
        .filter(pl.col("_d").abs() <= SKEW_WINDOW_NS)
        .with_columns((pl.col("_d") // SKEW_BIN_NS).alias("_bin"))
    )
    couple = ["_key", "lo", "hi"]
    peak = (
        diffs.group_by(*couple, "_bin")
        .len("_n")
        .sort("_n", pl.col("_bin").abs(), descending=[True, False])
        .unique(couple, keep="first", maintain_order=True)
        .select(*couple, pl.col("_bin").alias("_peak"))
    )
    calls = live.group_by("_key", "rank").len("_calls")
    sampled = sample.group_by("_key", "rank").len("_calls")
    offsets = (
        diffs.join(peak, on=couple)
        .filter((pl.col("_bin") - pl.col("_peak")).abs() <= 1)
        .group_by(couple)
        .agg(pl.col("_d").median().round(0).cast(pl.Int64).alias("_shift"), pl.len().alias("_n"))
        .join(sampled.rename({"rank": "lo", "_calls": "_lo"}), on=["_key", "lo"])
        .join(calls.rename({"rank": "hi", "_calls": "_hi"}), on=["_key", "hi"])
        .filter(
            (pl.col("_n") >= SKEW_MIN_PAIRS)
            & (pl.col("_n") >= PEER_SHARE * pl.min_horizontal("_lo", "_hi"))
        )
        .select(*couple, "_shift")
    )
    ranks = calls.select("_key", "rank")
    every = (
        ranks.join(ranks, on="_key", suffix="_h")
        .filter(pl.col("rank") < pl.col("rank_h"))
        .select("_key", pl.col("rank").alias("lo"), pl.col("rank_h").alias("hi"))
        .join(offsets, on=couple, how="left")
    )
    known = pl.concat([
        offsets.select("_key", pl.col("lo").alias("rank")),
        offsets.select("_key", pl.col("hi").alias("rank")),
    ]).unique()
    unknown = every.filter(pl.col("_shift").is_null())
    for side in ("lo", "hi"):
        unknown = unknown.join(known.rename({"rank": side}), on=["_key", side], how="anti")
    kept = pl.concat([every.filter(pl.col("_shift").is_not_null()), unknown]).with_columns(
        pl.col("_shift").fill_null(0),
        pl.concat_str([pl.col("_key"), pl.col("lo"), pl.col("hi")], separator="|").alias("_couple"),
    )
    low = live.join(kept.select("_key", pl.col("lo").alias("rank"), "_couple"), on=["_key", "rank"])
    high = live.join(
        kept.select("_key", pl.col("hi").alias("rank"), "_couple", "_shift"), on=["_key", "rank"]
    ).with_columns(pl.col("_s") - pl.col("_shift"), pl.col("_e") - pl.col("_shift"))
    return pl.concat([
        frame.select("_id", pl.col("_couple").alias("_key"), "rank", "_s", "_e")
        for frame in (low, high)
    ])


def _between_peers(live: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    """``live`` once per pair of peer ranks (:data:`PEER_SHARE`) its rank belongs to, keyed by
    group and that pair: a call of a rank without peers is left out."""
    ranked = pairs.join(live.select("_id", "_key", "rank"), on="_id")
    couples = (
        ranked.group_by("_pair")
        .agg(
            pl.col("_key").first(),
            pl.col("rank").min().alias("lo"),
            pl.col("rank").max().alias("hi"),
        )
        .group_by("_key", "lo", "hi")
        .len("n")
    )
    sides = (
        pl.concat(
            [
                couples.select("_key", pl.col("lo").alias("rank"), "n"),
                couples.select("_key", pl.col("hi").alias("rank"), "n"),
            ]
        )
        .group_by("_key", "rank")
        .agg(pl.col("n").max().alias("top"))
    )
    peers = (
        couples.join(sides.rename({"rank": "lo", "top": "top_lo"}), on=["_key", "lo"])
        .join(sides.rename({"rank": "hi", "top": "top_hi"}), on=["_key", "hi"])
        .filter(pl.col("n") >= PEER_SHARE * pl.max_horizontal("top_lo", "top_hi"))
        .with_columns(
            pl.concat_str([pl.col("_key"), pl.col("lo"), pl.col("hi")], separator="|").alias(
                "_couple"
            )
        )
    )
    members = pl.concat(
        [
            peers.select("_key", pl.col("lo").alias("rank"), "_couple"),
            peers.select("_key", pl.col("hi").alias("rank"), "_couple"),
        ]
    )
    return live.join(members, on=["_key", "rank"]).select(
        "_id", pl.col("_couple").alias("_key"), "rank", "_s", "_e"
    )


def _mutual_nearest(rows: pl.DataFrame) -> pl.DataFrame:
    """``_id`` → ``_pair`` (the pair's lower ``_id``) for the calls that are each other's
    nearest-ending overlapping call on another rank of their ``_key`` whose end coincides with
    theirs (:data:`END_SHARE`; ties: the larger overlap, then the lower id); a call listed under
    several keys takes its best over all.
    Real pairs end together where a long unrelated kernel can overlap more. Exact without
    comparing all pairs: in end order, two mutually nearest calls have only calls of the later
    one's rank between them, so the one candidate each call needs is the last call before its
    run of same-rank calls."""
    ordered = rows.sort("_key", "_e", "_s", "_id")
    boundary = (pl.col("rank") != pl.col("rank").shift(1)) | (
        pl.col("_key") != pl.col("_key").shift(1)
    )
    same_key = pl.col("_key") == pl.col("_key").shift(1)
    ordered = ordered.with_columns(
        boundary.fill_null(True).cum_sum().alias("_run"),
        *(
            pl.when(same_key).then(pl.col(c).shift(1)).alias(f"_prev{c}")
            for c in ("_id", "_s", "_e")
        ),
    ).with_columns(pl.col(f"_prev{c}").first().over("_run") for c in ("_id", "_s", "_e"))
    overlap = pl.min_horizontal("_e", "_prev_e") - pl.max_horizontal("_s", "_prev_s")
    gap = pl.col("_e") - pl.col("_prev_e")
    shorter = pl.min_horizontal(pl.col("_e") - pl.col("_s"), pl.col("_prev_e") - pl.col("_prev_s"))
    coincide = gap <= end_tolerance(shorter)
    cand = ordered.filter(pl.col("_prev_id").is_not_null() & (overlap > 0) & coincide).select(
        pl.col("_id").alias("a"),
        pl.col("_prev_id").alias("b"),
        gap.alias("_gap"),
        overlap.alias("_overlap"),
    )
    both = pl.concat(
        [cand, cand.select(pl.col("b").alias("a"), pl.col("a").alias("b"), "_gap", "_overlap")]
    )
    best = (
        both.sort("_gap", "_overlap", "b", descending=[False, True, False])
        .unique("a", keep="first", maintain_order=True)
        .select("a", "b")
    )
    mutual = best.join(best, left_on=["a", "b"], right_on=["b", "a"])
    return mutual.select(
        pl.col("a").alias("_id"), pl.min_horizontal("a", "b").cast(pl.UInt32).alias("_pair")
    )
