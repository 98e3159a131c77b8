"""Tests that kill surviving mutants of analyzer/assemble/ (docs/mutation.md)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from test_quality import BASE_NS, clean_events, write, x

from analyzer.assemble.collectives import _instances
from analyzer.assemble.ranks import assign_ranks
from parsers import kineto


def test_a_controller_named_by_its_file_says_so(tmp_path: Path) -> None:
    """A trace without a rank whose file name says ``driver`` is the single controller, and the
    note gives that reason; the worker keeps its stated rank 0."""
    driver = tmp_path / "driver.json"
    doc = {
        "schemaVersion": 1,
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [x("cpu_op", "aten::add", 10, 5)],
    }
    driver.write_text(json.dumps(doc), encoding="utf-8")
    worker = write(tmp_path / "rank0.json", clean_events())
    _, ranks, roles, notes = assign_ranks([kineto.parse(driver), kineto.parse(worker)])
    assert (ranks, roles) == ([-1, 0], ["driver", "worker"])
    assert [n for n in notes if "single controller" in n] == [
        "driver.json: the single controller (its file name); role driver, not a device"
    ]


def test_a_call_without_a_group_stays_unmatched_and_is_not_lost() -> None:
    """Ranks 0 and 1 run call seq 1 of group g (one instance); rank 0 also runs a call whose
    group is unknown: it is kept, as instance -1, not dropped by the join on the group."""
    calls = pl.DataFrame(
        {"group": ["g", "g", None], "seq": [1, 1, None], "rank": [0, 1, 0], "start_ns": [0, 5, 10]},
        schema={"group": pl.String, "seq": pl.Int64, "rank": pl.Int32, "start_ns": pl.Int64},
    )
    got = {
        (r["rank"], r["start_ns"]): r["instance"] for r in _instances(calls).iter_rows(named=True)
    }
    assert set(got) == {(0, 0), (1, 5), (0, 10)}
    assert got[(0, 10)] == -1 and got[(0, 0)] == got[(1, 5)] >= 0
