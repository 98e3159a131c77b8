"""Tests that kill surviving mutants of taxonomy/collectives.py (docs/mutation.md).

The rank-layout arithmetic decides which parallelism dimension a collective's time is reported
under; each expectation below is worked out by hand from Megatron's order (tp fastest, then
cp, ep, dp, pp), not taken from the module.
"""

from __future__ import annotations

import polars as pl
import pytest

from taxonomy import collectives as tc

POOL8 = list(range(8))


def test_degrees_name_every_dimension_of_an_eight_rank_pool() -> None:
    """tp=2, pp=2 leave dp = 8 / (2·2) = 2: rank r sits at tp = r % 2, dp = (r // 2) % 2,
    pp = r // 4. So {0,1} varies tp, {0,2} dp, {0,4} pp, {0,1,2,3} tp and dp (no single dim)."""
    layout = tc.parse_layout("tp=2,pp=2")
    got = tc.layout_dims(["0,1", "0,2", "0,4", "0,1,2,3", "1,3", "5,7"], POOL8, layout)
    assert got == ["tp", "dp", "pp", None, "dp", "dp"]


def test_a_group_smaller_than_its_degree_is_not_that_dimension() -> None:
    """tp=4: {0,1} varies only tp but holds 2 of the 4 tp ranks, so it is no tp group."""
    assert tc.layout_dims(["0,1", "0,1,2,3"], POOL8, tc.parse_layout("tp=4")) == [None, "tp"]


def test_expert_and_data_parallel_together_are_data_parallel() -> None:
    """ep=2, dp=2 over 4 ranks (order tp-cp-ep-dp-pp): ep = r % 2, dp = r // 2. All four vary
    ep and dp and number dp·ep = 4: data parallel. {0,2} varies dp alone (size 2 = dp)."""
    layout = tc.parse_layout("ep=2,dp=2")
    assert tc.layout_dims(["0,1,2,3", "0,2", "0,1"], [0, 1, 2, 3], layout) == ["dp", "dp", "ep"]


def test_degrees_that_do_not_multiply_to_the_pool_are_ignored() -> None:
    """tp=2, dp=3 describe 6 ranks, not 8: no degrees, only the rank pattern is read
    (consecutive: tp; the whole pool: dp; stride 2: dp; stride 1 then 2: nothing)."""
    layout = tc.parse_layout("tp=2,dp=3")
    assert not tc.has_degrees(layout, 8)
    assert tc.has_degrees(tc.parse_layout("tp=2,dp=4"), 8)
    assert tc.layout_dims(["2,3", "0,1,2,3,4,5,6,7", "0,2,4", "0,1,3"], POOL8, layout) == [
        "tp",
        "dp",
        "dp",
        None,
    ]


def test_one_rank_or_a_rank_outside_the_pool_says_nothing() -> None:
    assert tc.layout_dims(["3", "7,8", ""], POOL8, tc.Layout()) == [None, None, None]


def test_dp_is_what_the_other_degrees_leave() -> None:
    """tp=2 over 8 ranks: dp = 8 // 2 = 4; {0,2,4,6} is then the dp group, {0,2} is not."""
    layout = tc.parse_layout("tp=2")
    assert tc.layout_dims(["0,2,4,6", "0,2", "0,1"], POOL8, layout) == ["dp", None, "tp"]


def test_degree_one_alone_is_no_degree() -> None:
    """tp=1 says nothing about the pool (only degrees above 1 count): the pattern rules apply."""
    assert not tc.has_degrees(tc.parse_layout("tp=1"), 8)
    assert tc.layout_dims(["0,1"], POOL8, tc.parse_layout("tp=1")) == ["tp"]


def test_pool_positions_not_rank_numbers_decide() -> None:
    """A pool of ranks 8..15 with tp=2, pp=2: rank 8 is position 0, so {8,9} is tp, {8,12} pp."""
    layout = tc.parse_layout("tp=2,pp=2")
    assert tc.layout_dims(["8,9", "8,12", "9,11"], list(range(8, 16)), layout) == ["tp", "pp", "dp"]


def test_inferred_degrees_come_from_known_groups_within_the_pool() -> None:
    """A tp group of 2 sets tp=2; a dp 'group' of 1 rank or of more ranks than the pool sets
    nothing; a dimension already given keeps its degree; non-layout dims are skipped."""
    base = tc.Layout(degrees={"pp": 2})
    got = tc.infer_layout(
        [
            ("tp", "0,1"),
            ("dp", "0"),
            ("cp", "0,1,2,3,4,5,6,7,8"),
            ("pp", "0,1,2,3"),
            ("weight_sync", "0,4"),
        ],
        base,
        8,
    )
    assert dict(got.degrees) == {"pp": 2, "tp": 2}
    assert tc.infer_layout([("ep", "0,1,2,3,4,5,6,7")], tc.Layout(), 8).degrees == {"ep": 8}


@pytest.mark.parametrize(
    ("text", "order", "degrees"),
    [
        ("tp=2,pp=4", tc.MEGATRON_ORDER, {"tp": 2, "pp": 4}),
        ("dp-tp", ("dp", "tp", "cp", "ep", "pp"), {}),
        ("PP-TP, DP=2", ("pp", "tp", "cp", "ep", "dp"), {"dp": 2}),
        ("  tp = 2 ", tc.MEGATRON_ORDER, {"tp": 2}),
    ],
)
def test_layout_text_is_read(text: str, order: tuple, degrees: dict) -> None:
    got = tc.parse_layout(text.replace(" = ", "="))
    assert got.order == order and dict(got.degrees) == degrees and got.given


@pytest.mark.parametrize("text", ["tp=0", "tp=-1", "xp=2", "tp=", "tp-tp", "tp-zz", "tp=1.5"])
def test_bad_layout_text_is_refused(text: str) -> None:
    with pytest.raises(tc.CollectiveRulesError, match="bad layout"):
        tc.parse_layout(text)


def test_a_group_spans_pools_only_with_ranks_of_both() -> None:
    pool_of = {0: "train", 1: "train", 2: "rollout", 3: "shared"}
    assert tc.spans_pools(["0,2", "0,1", "2,3", None, "0,9"], pool_of) == [
        True,
        False,
        False,
        False,
        False,
    ]


def test_pattern_size_bounds_are_inclusive_below_and_exclusive_above() -> None:
    """Built-in rules: an actor-update all-reduce of at least 16 MiB is dp, below it tp; a size
    of exactly 16 MiB is dp (min_bytes inclusive, max_bytes exclusive); unknown size: neither
    size rule holds, so the next rule (none for all-reduce in actor_update) gives unknown."""
    rules = tc.load_rules()
    size = 16 * 1024 * 1024
    frame = pl.DataFrame(
        {
            "coll": ["all_reduce"] * 4 + ["send", "barrier", "all_to_all"],
            "stage": ["actor_update"] * 4 + ["rollout", None, "weight_sync"],
            "bytes": [size, size - 1, size + 1, None, 10, 0, 10],
        },
        schema={"coll": pl.String, "stage": pl.String, "bytes": pl.Int64},
    )
    got = frame.select(tc.pattern_dim(rules).cast(pl.String).alias("d"))["d"].to_list()
    assert got == ["dp", "tp", "dp", "unknown", "pp", "world", "weight_sync"]
