"""Tests that kill surviving mutants of parsers/kineto.py (docs/mutation.md)."""

from __future__ import annotations

import json
from pathlib import Path

from parsers import kineto
from parsers.source import ParsedSource


def test_a_salvaged_file_loses_exactly_the_bytes_after_its_last_complete_event() -> None:
    """Two complete events, the third cut inside its name: the kept prefix ends right after the
    second event's closing brace, so the bytes lost are the 17 of ``, {"ph": "X", "na``."""
    head = (
        b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, '
        b'{"ph": "X", "name": "b", "ts": 5, "dur": 1, "pid": 1, "tid": 1}'
    )
    data = head + b', {"ph": "X", "na'
    out = ParsedSource(path=Path("cut.json"), format="kineto")
    trace = kineto._decode(out.path, data, out)
    assert len(trace.traceEvents) == 2
    assert out.meta["salvaged"] == {"events": 2, "bytes_lost": 17}
    assert "the last 17 bytes" in " ".join(out.warnings)


def test_a_tensorboard_file_name_gives_the_host_and_the_time_base(tmp_path: Path) -> None:
    """No host name and no baseTimeNanoseconds in the file: the host is the name's ``node7`` and
    the base the start of the quarter of its epoch ms 1700000000123 (2023-11-14 22:13:20 UTC):
    2023-10-01 00:00 UTC = 1672531200 s (2023-01-01) + 273 days × 86400 s = 1696118400 s."""
    path = tmp_path / "node7_4242.1700000000123.pt.trace.json"
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}
    path.write_text(json.dumps({"traceEvents": [event]}), encoding="utf-8")
    parsed = kineto.parse(path)
    assert parsed.meta["host"] == "node7"
    assert parsed.meta["time_base"] == "quarter start from the file name's epoch ms"
    assert parsed.events["start_ns"].to_list() == [1_696_118_400 * 10**9 + 10_000]
