"""Tests that kill surviving mutants of analyzer/assemble.py (docs/mutation.md)."""

from __future__ import annotations

import json
from pathlib import Path

from test_quality import BASE_NS, clean_events, write, x

from analyzer.assemble.ranks import assign_ranks
from parsers import kineto


def test_a_controller_named_by_its_file_says_so(tmp_path: Path) -> None:
    """A trace without a rank whose file name says ``driver`` is the single controller, and the
    note gives that reason; the worker keeps its stated rank 0."""
    driver = tmp_path / "driver.json"
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": [x("cpu_op", "aten::add", 10, 5)]}
    driver.write_text(json.dumps(doc), encoding="utf-8")
    worker = write(tmp_path / "rank0.json", clean_events())
    _, ranks, roles, notes = assign_ranks([kineto.parse(driver), kineto.parse(worker)])
    assert (ranks, roles) == ([-1, 0], ["driver", "worker"])
    assert [n for n in notes if "single controller" in n] == [
        "driver.json: the single controller (its file name); role driver, not a device"
    ]
