"""The event-table contract: code, docs and the validator agree."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.events import (
    BOUNDS,
    COLLECTIVES,
    EVENT_SCHEMA,
    KINDS,
    QUALITY_TEXT,
    SchemaError,
    bound,
    conform,
    empty_events,
    nesting_depth,
    validate,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "events.md"


def documented_columns() -> list[str]:
    return re.findall(r"^\| `(\w+)` \|", DOC.read_text(), flags=re.MULTILINE)


def test_docs_list_exactly_the_schema_columns_in_order():
    assert documented_columns() == list(EVENT_SCHEMA)


def test_docs_name_every_kind_and_collective():
    text = DOC.read_text()
    for word in (*KINDS, *COLLECTIVES):
        assert f"`{word}`" in text, word


def test_empty_table_validates():
    validate(empty_events())


def test_conform_fills_defaults_and_casts():
    table = conform(
        {
            "kind": ["kernel"],
            "name": ["k"],
            "start_ns": [5],
            "end_ns": [9],
            "device": [0],
            "stream": [7],
        },
        source=3,
    )
    validate(table)
    row = table.row(0, named=True)
    assert row["source"] == 3 and row["rank"] == -1 and row["pid"] == -1 and row["depth"] == 0
    assert row["synthetic_time"] is False and row["coll"] is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"end_ns": [1]}, "negative"),
        ({"device": [-1]}, "gpu off device"),
        ({"bytes": [-5]}, "bytes negative"),
    ],
)
def test_validator_rejects_broken_rows(change, message):
    base = {
        "kind": ["kernel"],
        "name": ["k"],
        "start_ns": [5],
        "end_ns": [9],
        "device": [0],
        "stream": [7],
        "bytes": [1],
    }
    table = conform({**base, **change})
    with pytest.raises(SchemaError, match=message):
        validate(table)


def test_validator_rejects_wrong_columns_and_dtypes():
    table = empty_events()
    with pytest.raises(SchemaError, match="columns"):
        validate(table.drop("seq"))
    with pytest.raises(SchemaError, match="dtype"):
        validate(table.with_columns(pl.col("rank").cast(pl.Int64)))


def test_depth_edge_cases() -> None:
    frame = pl.DataFrame(
        {
            "tid": [1, 1, 1, 1, 1, 2],
            "start_ns": [0, 10, 10, 20, 20, 5],
            "end_ns": [100, 20, 10, 30, 20, 6],
        }
    )
    # 0 encloses all on thread 1; [10,20] ends as [20,30] starts (siblings); zero-length ones
    # enclose nothing; thread 2 is separate.
    assert nesting_depth(frame, ["tid"]).to_list() == [0, 1, 2, 1, 2, 0]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 50), st.integers(0, 50)),
        min_size=1,
        max_size=40,
    )
)
def test_depth_counts_open_ranges(spec: list[tuple[int, int, int, int]]) -> None:
    """Depth = ranges of the same keys before it in (start, longest first, row) order that are
    still open at its start; groups of several key columns never mix."""
    frame = pl.DataFrame(
        {
            "pid": [p for p, _, _, _ in spec],
            "tid": [t for _, t, _, _ in spec],
            "start_ns": [min(a, b) for _, _, a, b in spec],
            "end_ns": [max(a, b) for _, _, a, b in spec],
        }
    )
    got = nesting_depth(frame, ["pid", "tid"]).to_list()
    rows = frame.rows()
    for i, (pid, tid, start, end) in enumerate(rows):
        open_before = sum(
            1
            for j, (p, t, s, e) in enumerate(rows)
            if (p, t) == (pid, tid) and (s, -e, j) < (start, -end, i) and e > start
        )
        assert got[i] == open_before, (i, rows[i])


def test_bound_makes_values_outside_the_columns_unknown_and_counts_them():
    frame = pl.DataFrame(
        {
            "rank": [0, 2**40, -1, -5],
            "stream": [7, 2**31, -1, 2**31 - 1],
            "group_size": [2, 2**40, None, -3],
            "bytes": [-1, 5, None, 0],
            "step": [2**31 - 1, 2**31, 3, None],
        }
    )
    fixed, counts = bound(frame)
    assert fixed.to_dict(as_series=False) == {
        "rank": [0, -1, -1, -1],
        "stream": [7, -1, -1, 2**31 - 1],
        "group_size": [2, None, None, None],
        "bytes": [None, 5, None, 0],
        "step": [2**31 - 1, None, 3, None],
    }
    assert counts == {
        "out_of_range_rank": 2,
        "out_of_range_stream": 1,
        "out_of_range_group_size": 2,
        "out_of_range_bytes": 1,
        "out_of_range_step": 1,
    }
    table = conform(
        fixed.with_columns(kind=pl.lit("cpu_op"), name=pl.lit("x"), start_ns=0, end_ns=0)
    )
    validate(table)


def test_bound_leaves_a_clean_frame_alone():
    frame = pl.DataFrame({"rank": [0, 3], "bytes": [None, 8], "start_ns": [1, 2]})
    fixed, counts = bound(frame)
    assert counts == {} and fixed.equals(frame)


def test_nesting_depth_past_i16_is_clamped_and_reported():
    n = 32_800
    frame = pl.DataFrame(
        {"tid": [1] * n, "start_ns": list(range(n)), "end_ns": [2 * n - i for i in range(n)]}
    )
    reported: list[int] = []
    depth = nesting_depth(frame, ["tid"], reported.append)
    assert depth.dtype == pl.Int16
    assert depth.to_list() == [*range(32_767), *[32_767] * (n - 32_767)]
    assert reported == [n - 32_768]


def test_docs_state_every_value_range_and_count():
    ranges = DOC.read_text().split("## Value ranges", 1)[1]
    for column in BOUNDS:
        assert f"`{column}`" in ranges, column
    for kind in QUALITY_TEXT:
        assert f"`{kind}`" in ranges, kind
