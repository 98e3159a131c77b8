"""Tests that kill surviving mutants of parsers/kineto.py (docs/mutation.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from conftest import CORPUS

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
    the base what libkineto floors its clock to, before the name's epoch ms 1700000000123
    (2023-11-14 22:13:20 UTC): 215 periods of 7,889,238 s = 1696186170 s (2023-10-01 18:49:30
    UTC), not the calendar quarter's 1696118400 s, which put every event 18.8 h early."""
    path = tmp_path / "node7_4242.1700000000123.pt.trace.json"
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}
    path.write_text(json.dumps({"traceEvents": [event]}), encoding="utf-8")
    parsed = kineto.parse(path)
    assert parsed.meta["host"] == "node7"
    assert parsed.meta["time_base"] == "quarter start from the file name's epoch ms"
    assert parsed.events["start_ns"].to_list() == [1_696_186_170 * 10**9 + 10_000]


def test_a_real_trace_without_its_base_lands_where_its_base_put_it(tmp_path: Path) -> None:
    """rl-insight's rollout trace states baseTimeNanoseconds 1767189312 s (224 of libkineto's
    7,889,238 s periods). With the field gone (a writer killed before the metadata at the
    file's end) and the TensorBoard name's epoch ms left, its first event is where the stated
    base put it, 2026-02-22 03:18:02 UTC; the calendar quarter's start put it 10.08 h later."""
    src = CORPUS / "rl-insight" / (
        "agent_loop_rollout_replica_0__huawei_372640.1771730291744166997.pt.trace.json.gz")
    doc = json.loads(gzip.decompress(src.read_bytes()))
    assert doc.pop("baseTimeNanoseconds") == 224 * kineto.KINETO_BASE_PERIOD_S * 10**9
    path = tmp_path / "huawei_372640.1771730291744.pt.trace.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    stated = kineto.parse(src).events["start_ns"].min()
    parsed = kineto.parse(path)
    assert parsed.meta["time_base"] == "quarter start from the file name's epoch ms"
    assert parsed.events["start_ns"].min() == stated == 1_771_730_282_808_621_755
