"""The event-table contract: code, docs and the validator agree."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from parsers.events import (
    COLLECTIVES,
    EVENT_SCHEMA,
    KINDS,
    SchemaError,
    conform,
    empty_events,
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
    table = conform({"kind": ["kernel"], "name": ["k"], "start_ns": [5], "end_ns": [9], "device": [0], "stream": [7]}, source=3)
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
    base = {"kind": ["kernel"], "name": ["k"], "start_ns": [5], "end_ns": [9], "device": [0], "stream": [7], "bytes": [1]}
    table = conform({**base, **change})
    with pytest.raises(SchemaError, match=message):
        validate(table)


def test_validator_rejects_wrong_columns_and_dtypes():
    table = empty_events()
    with pytest.raises(SchemaError, match="columns"):
        validate(table.drop("seq"))
    with pytest.raises(SchemaError, match="dtype"):
        validate(table.with_columns(pl.col("rank").cast(pl.Int64)))
