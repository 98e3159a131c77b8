"""Salvage of a trace cut short: exactly the complete events before the cut, never one more.

The truth is independent of the parser: the standard library's JSON decoder walks the full
file once and records where each event's closing brace ends; a cut at byte c leaves complete
exactly the events that end at or before c.
"""

from __future__ import annotations

import bisect
import gzip
import json
from pathlib import Path

import pytest

from parsers import InputError, kineto, spans
from parsers.source import ParsedSource

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
NCCL = CORPUS / "HolisticTraceAnalysis" / "nccl_data.json.gz"
VLLM = CORPUS / "TraceLens" / "inference" / "vllm_decode_full__graph_execution.json.gz"


def event_ends(text: str) -> list[int]:
    """Offset just past each event of ``traceEvents``, in file order."""
    decoder = json.JSONDecoder()
    at = text.index("[", text.index('"traceEvents"')) + 1
    ends: list[int] = []
    while True:
        while text[at] in " \t\r\n,":
            at += 1
        if text[at] == "]":
            return ends
        _, at = decoder.raw_decode(text, at)
        ends.append(at)


def prefix_document(doc: dict, k: int) -> str:
    """The file as if its writer had stopped cleanly after k events: the keys written before
    ``traceEvents`` (those a cut keeps) and the first k events."""
    keys = list(doc)
    head = {key: doc[key] for key in keys[: keys.index("traceEvents")]}
    return json.dumps({**head, "traceEvents": doc["traceEvents"][:k]})


def salvaged(path: Path) -> int:
    """How many events the parser kept from the cut file (0 when it refuses it)."""
    try:
        parsed = kineto.parse(path)
    except InputError as exc:
        assert "no complete event" in str(exc) or "before any trace events" in str(exc), exc
        return 0
    return parsed.meta["salvaged"]["events"]


def salvaged_events(text: str, cut: int) -> int:
    """The same count from the parser's reading step alone (no event table): fast enough for
    a 10 MB trace at every percent."""
    out = ParsedSource(path=Path("cut.json"), format="kineto")
    try:
        trace = kineto._decode(out.path, text[:cut].encode(), out)
    except InputError:
        return 0
    assert out.meta["salvaged"]["events"] == len(trace.traceEvents)
    return len(trace.traceEvents)


@pytest.mark.parametrize(
    ("trace", "whole_parse_every"), [(NCCL, 10), (VLLM, 1)], ids=["nccl_data", "vllm_graph"]
)
def test_every_percent_cut_keeps_exactly_the_complete_events(
    tmp_path: Path, trace: Path, whole_parse_every: int
):
    text = gzip.decompress(trace.read_bytes()).decode()
    assert text.isascii()  # character offsets are byte offsets
    ends = event_ends(text)
    assert len(ends) == len(json.loads(text)["traceEvents"])
    kept = []
    for percent in range(1, 100):
        cut = len(text) * percent // 100
        expected = bisect.bisect_right(ends, cut)
        if percent % whole_parse_every == 0:
            path = tmp_path / f"cut{percent}.json"
            path.write_text(text[:cut])
            assert salvaged(path) == expected, f"cut at {percent}% (byte {cut:,})"
        assert salvaged_events(text, cut) == expected, f"cut at {percent}% (byte {cut:,})"
        kept.append(expected)
    assert kept == sorted(kept) and kept[-1] > kept[0]
    assert kept[49] > 0.3 * len(ends)


@pytest.mark.parametrize("percent", [5, 37, 64, 93])
def test_a_cut_trace_gives_the_table_of_the_events_before_the_cut(tmp_path: Path, percent: int):
    """Not only the count: the salvaged table is the table of a file that ends cleanly there."""
    text = gzip.decompress(VLLM.read_bytes()).decode()
    cut = len(text) * percent // 100
    k = bisect.bisect_right(event_ends(text), cut)
    (tmp_path / "cut.json").write_text(text[:cut])
    (tmp_path / "clean.json").write_text(prefix_document(json.loads(text), k))
    cut_events = kineto.parse(tmp_path / "cut.json").events
    clean_events = kineto.parse(tmp_path / "clean.json").events
    assert cut_events.height > 0
    assert cut_events.equals(clean_events)


EVENTS = [
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "a",
        "pid": 1,
        "tid": 1,
        "ts": 1.5,
        "dur": 2.25,
        "args": {"External id": 1},
    },
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "b",
        "pid": 1,
        "tid": 1,
        "ts": 5.5,
        "dur": 1.5,
        "args": {"External id": 2},
    },
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "c",
        "pid": 1,
        "tid": 1,
        "ts": 9.5,
        "dur": 1.5,
        "args": {"External id": 3},
    },
]


def kineto_text() -> str:
    return json.dumps({"schemaVersion": 1, "traceEvents": EVENTS})


def spans_text() -> str:
    return json.dumps(EVENTS)


CUTS = [
    ("after the third event's args, before its own brace", '"External id": 3}', 1),
    ("just after a decimal point", '"dur": 1.', 1),
]
"""The two cuts an off-by-one salvage got wrong: one kept the half-written event, the other
took the cut number for damage and kept nothing."""


def after(text: str, marker: str, nth: int) -> int:
    at = -1
    for _ in range(nth):
        at = text.index(marker, at + 1)
    return at + len(marker)


@pytest.mark.parametrize(("where", "marker", "nth"), CUTS)
def test_kineto_cut_keeps_only_the_closed_events(tmp_path: Path, where: str, marker: str, nth: int):
    text = kineto_text()
    cut = after(text, marker, nth)
    path = tmp_path / "cut.json"
    path.write_text(text[:cut])
    parsed = kineto.parse(path)
    expected = bisect.bisect_right(event_ends(text), cut)
    assert expected == (2 if "args" in where else 1)
    assert parsed.meta["salvaged"]["events"] == expected, where
    assert parsed.events["name"].cast(str).to_list() == ["a", "b", "c"][:expected]


@pytest.mark.parametrize(("where", "marker", "nth"), CUTS)
def test_span_trace_cut_keeps_only_the_closed_events(
    tmp_path: Path, where: str, marker: str, nth: int
):
    text = spans_text()
    cut = after(text, marker, nth)
    path = tmp_path / "cut.json"
    path.write_text(text[:cut])
    parsed = spans.parse(path)
    expected = 2 if "args" in where else 1
    assert parsed.events["name"].cast(str).to_list() == ["a", "b", "c"][:expected], where
    assert any("cut short" in w and f"{expected} complete events" in w for w in parsed.warnings)


def test_kineto_cut_among_the_keys_after_the_events_keeps_every_event(tmp_path: Path):
    text = json.dumps(
        {
            "schemaVersion": 1,
            "traceEvents": EVENTS,
            "distributedInfo": {"rank": 3},
            "traceName": "t",
        }
    )
    path = tmp_path / "cut.json"
    path.write_text(text[: text.index('"traceName"') + 5])
    parsed = kineto.parse(path)
    assert parsed.meta["salvaged"]["events"] == 3
    assert parsed.meta["rank"] == 3  # the complete object after the array is kept too


def test_damage_inside_a_kineto_trace_is_not_taken_for_a_cut(tmp_path: Path):
    text = kineto_text()
    at = after(text, '"dur": 1.', 1)
    path = tmp_path / "damaged.json"
    path.write_text(text[:at] + "x" + text[at:])
    with pytest.raises(InputError, match="malformed JSON"):
        kineto.parse(path)
