"""A bare JSON array of Kineto events (Chrome's JSON Array Format, which Perfetto and
chrome://tracing open) reads as the trace it was taken from, less the metadata it cannot carry;
streamed and whole readings agree; its optional closing ``]`` may be missing."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from parsers import InputError, json_stream, kineto
from parsers.discover import sniff
from tests.test_bad_input import rlperf
from tests.test_kineto_stream import same

HTA = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "HolisticTraceAnalysis"
TRACE = HTA / "sampled_rank-1.json.gz"
EVENTS = 4675
"""Events of the kinds rlperf keeps in TRACE (of its 4,720 trace events)."""


@pytest.fixture
def events() -> bytes:
    return json.dumps(json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]).encode()


def test_bare_array_is_the_trace_without_its_metadata(tmp_path: Path, events: bytes):
    path = tmp_path / "trace.json"
    path.write_bytes(events)
    assert sniff(path) == "kineto"
    parsed = same(path)
    whole = kineto.parse(TRACE)
    assert parsed.events.height == EVENTS
    assert parsed.events.drop("rank").equals(whole.events.drop("rank"))
    assert whole.meta["rank"] == 1 and parsed.meta["rank"] == -1
    assert parsed.meta["json_array_format"] is True
    assert parsed.meta["device_properties"] is None
    assert parsed.meta["time_base"] == whole.meta["time_base"] == "epoch microseconds"
    (warning,) = parsed.warnings
    assert "bare JSON array of trace events (Chrome's JSON Array Format)" in warning
    assert "closing" not in warning


def test_bare_array_with_small_blocks_and_a_rank_in_its_name(
    tmp_path: Path, events: bytes, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "rank3.json"
    path.write_bytes(b"\n  " + events.replace(b"}, {", b"},\n{") + b"\n")
    monkeypatch.setattr(json_stream, "BLOCK", 4099)
    parsed = same(path)
    assert parsed.events.height == EVENTS
    assert parsed.meta["rank"] == 3 and parsed.meta["rank_from"] == "file name"


def test_analyze_reads_a_bare_array(tmp_path: Path, events: bytes):
    path = tmp_path / "trace.json"
    path.write_bytes(events)
    result = rlperf("analyze", str(path), env_cache=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Chrome's JSON Array Format" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("end", [b"", b",", b",\n", b"\n"])
def test_unclosed_bare_array_keeps_every_event(tmp_path: Path, events: bytes, end: bytes):
    """The format allows the closing ``]`` to be missing: nothing is cut, and the warning says a
    killed writer's missing events cannot be told."""
    path = tmp_path / "trace.json"
    path.write_bytes(events.rstrip()[:-1] + end)
    parsed = kineto.parse(path)
    assert parsed.events.height == EVENTS
    assert "salvaged" not in parsed.meta
    (warning,) = parsed.warnings
    assert "no closing ']', which the format allows" in warning


def test_cut_bare_array_salvages_the_complete_events(tmp_path: Path, events: bytes):
    path = tmp_path / "trace.json"
    cut = events[:600_000]
    path.write_bytes(cut)
    parsed = kineto.parse(path)
    kept = parsed.meta["salvaged"]["events"]
    assert kept == len(json.loads(cut[: cut.rindex(b"}, {") + 1] + b"]"))
    assert parsed.meta["salvaged"]["bytes_lost"] == len(cut) - cut.rindex(b"}, {") - 1
    assert parsed.warnings[0].startswith(f"trace.json: JSON cut short (writer killed?): "
                                         f"salvaged {kept:,} complete events")


def test_wrong_element_of_a_bare_array_names_its_place(tmp_path: Path):
    path = tmp_path / "trace.json"
    good = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
            "args": {"Trace name": "PyTorch Profiler"}}
    path.write_text(json.dumps([good, good, 7]))
    with pytest.raises(InputError, match=r"unexpected field type: .* at `\$\[2\]`"):
        kineto.parse(path)


def test_arrays_without_kinetos_markers_are_not_claimed():
    ray = b'[{"ph": "X", "cat": "task", "name": "task::f", "pid": "Node 1", "ts": 1, "dur": 2}]'
    assert kineto.sniff(ray, Path("t.json")) == 0
    torch = b'[{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "args": {"Trace name": ' \
        b'"PyTorch Profiler"}, "ts": 1}]'
    assert kineto.sniff(torch, Path("t.json")) == kineto.BARE_ARRAY_SCORE
