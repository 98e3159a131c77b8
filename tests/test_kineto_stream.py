"""The streamed Kineto reading gives the whole-file reading's result on every file, at every block
boundary, and hands every file it does not take to the whole-file reading (which then states the
problem exactly as before)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from parsers import InputError, json_stream, kineto
from parsers.json_stream import ArrayStream, NotStreamed

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
HTA = CORPUS / "HolisticTraceAnalysis"
CORPUS_FILES = [
    HTA / "nccl_data.json.gz",
    HTA / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    HTA / "sampled_rank-0.json.gz",
    CORPUS / "TraceLens" / "inference" / "vllm_decode_full__graph_execution.json.gz",
    CORPUS / "TraceLens" / "sglang_Qwen3-8B_decode.json.gz",
    CORPUS / "rl-insight" / "actor_update__prof_rank-0_031904.json.gz",
]
SAMPLES = [
    ROOT / "sample_traces" / "synthetic" / "colocated" / "rank-0.synthetic.pt.trace.json.gz",
    ROOT / "sample_traces" / "runs" / "trl_grpo" / "profile" / "rank1.pt.trace.json.gz",
    ROOT / "sample_traces" / "runs" / "verl_grpo_colocated" / "profile" / "e2e"
    / "prof_rank-0.json.gz",
]


def same(path: Path) -> kineto.ParsedSource:
    """Both readings of ``path``, asserted equal (table, metadata with its key order, warnings);
    the streamed one returned. ``_parse_stream`` raises NotStreamed rather than fall back, so a
    file that passes here was streamed."""
    whole = kineto._parse_whole(path, 0)
    streamed = kineto._parse_stream(path, 0)
    assert streamed.events.equals(whole.events)
    assert streamed.meta == whole.meta and list(streamed.meta) == list(whole.meta)
    assert streamed.warnings == whole.warnings
    return streamed


@pytest.mark.parametrize("path", CORPUS_FILES + SAMPLES, ids=lambda p: p.name)
def test_corpus_and_samples_stream_to_the_same_table(path: Path):
    assert same(path).events.height > 0


@pytest.mark.parametrize("path", CORPUS_FILES[:2], ids=lambda p: p.name)
def test_plain_json_with_small_blocks_streams_to_the_same_table(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    plain = tmp_path / path.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    monkeypatch.setattr(json_stream, "BLOCK", 4099)
    same(plain)


def test_df_index_resolver_streams_in_bounded_runs(monkeypatch: pytest.MonkeyPatch):
    """The big HTA trace: the same 151,388 rows, decoded in runs of at most two blocks' events
    (the first run holds what the block that opens the array had left); events are >150 bytes."""
    path = HTA / "df_index_resolver.json.gz"
    assert same(path).events.height == 151_388
    monkeypatch.setattr(json_stream, "BLOCK", 2**20)
    stream = ArrayStream(path, b"traceEvents", kineto._RAWS_DECODER.decode)
    runs = [len(run) for run in stream.runs()]
    assert len(runs) > 40 and max(runs) < 2 * 2**20 // 150 and max(runs[1:]) < 2**20 // 150
    assert sum(runs) == stream.count == 216_092


# --- crafted documents at every block boundary --------------------------------------------------


def kernel(i: int, name: str = "k", **args: object) -> dict:
    return {
        "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 1000.0 + i,
        "dur": 0.5, "args": {"correlation": i, "device": 0, "stream": 7, **args},
    }


TRICKY = [
    kernel(0, 'quote \\" and backslash \\\\'),
    kernel(1, "braces } { ] [ and }, {\"x\": 1} in a name"),
    kernel(2, "ends in a backslash \\"),
    kernel(3, 'a "traceEvents": [ inside a string'),
    kernel(4, "unicode µs → 漢字 🚀", label="é"),
    kernel(5, "nested", shapes=[{"a": [1, 2]}, {"b": {"c": "}, {"}}]),
    kernel(6, "\\\\\\\"", **{"External id": 6}),
]


def document(events: list[dict], before: dict, after: dict, indent: int | None) -> str:
    return json.dumps({**before, "traceEvents": events, **after}, indent=indent,
                      ensure_ascii=False)


SHAPES = {
    "first, minified": ({}, {"traceName": "t"}, None),
    "after keys, pretty": (
        {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU [0] {x}"}],
         "traceName": "traceEvents", "decoy": {"traceEvents": [kernel(99)]}},
        {}, 2,
    ),
    "keys after": ({"x": "\\"}, {"baseTimeNanoseconds": 1_700_000_000_000_000_000,
                                  "distributedInfo": {"rank": 3, "world_size": 8}}, 1),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_block_boundary_gives_the_same_table(
    shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    before, after, indent = SHAPES[shape]
    path = tmp_path / "t.json"
    path.write_text(document(TRICKY, before, after, indent), encoding="utf-8")
    names = [e["name"] for e in TRICKY]
    for block in range(1, 65):
        monkeypatch.setattr(json_stream, "BLOCK", block)
        parsed = same(path)
        assert parsed.events["name"].cast(str).to_list() == names
        assert parsed.events["corr"].to_list() == list(range(7))
    assert parsed.meta["rank"] == (3 if shape == "keys after" else -1)
    trace_name = {"first, minified": "t", "after keys, pretty": "traceEvents"}.get(shape)
    assert parsed.meta["trace_name"] == trace_name


def test_empty_array_and_blank_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "t.json"
    for text in ('{"traceEvents": [ \n ], "traceName": "x"}', '{"traceEvents":[]}'):
        path.write_text(text)
        for block in (1, 3, 64):
            monkeypatch.setattr(json_stream, "BLOCK", block)
            parsed = same(path)
            assert parsed.events.height == 0
            assert parsed.warnings == ["t.json: no trace events of a known kind"]


def test_more_events_than_a_chunk_keep_the_chunks_of_the_whole_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """``External id`` is read per chunk of 8,192 events (the old key when a chunk has none):
    the stream must cut its chunks where the whole reading does."""
    events = [kernel(i) for i in range(8192 + 10)]
    for e in events[:8192]:
        e["args"]["external id"] = 5
    events[-1]["args"]["External id"] = 9
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(json_stream, "BLOCK", 10_007)
    ext = same(path).events.sort("corr")["ext_id"]
    assert ext[:8192].to_list() == [5] * 8192 and ext[8192:].null_count() == 9


def test_gzip_members_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    text = document(TRICKY, {}, {}, None).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text[:100]) + gzip.compress(text[100:]) + b"\0\0")
    monkeypatch.setattr(json_stream, "BLOCK", 17)
    assert same(path).events.height == len(TRICKY)


# --- what the stream hands to the whole reading -------------------------------------------------

GOOD = json.dumps({"traceEvents": [kernel(0), kernel(1)], "traceName": "t"})
DAMAGED = {
    "cut": GOOD[:-40],
    "non-object element": GOOD.replace('"traceEvents": [', '"traceEvents": [1, '),
    "trailing comma": GOOD.replace('}], "traceName"', '},], "traceName"'),
    "trailing garbage": GOOD + " x",
    "second traceEvents key": GOOD[:-1] + ', "traceEvents": []}',
    "no traceEvents": '{"traceName": "t"}',
    "wrong type": GOOD.replace('"ts": 1000.0', '"ts": "soon"', 1),
    "number out of range": GOOD.replace('"ts": 1000.0', '"ts": 1e999', 1),
}


def test_array_of_a_document_streams_as_a_bare_array(tmp_path: Path):
    """A top-level array is Chrome's JSON Array Format: its one element, a whole trace, is an event
    of no known kind, in both readings."""
    path = tmp_path / "t.json"
    path.write_text("[" + GOOD + "]")
    parsed = same(path)
    assert parsed.events.height == 0 and parsed.meta["json_array_format"] is True
    assert "no trace events of a known kind" in parsed.warnings[1]


@pytest.mark.parametrize("case", list(DAMAGED))
def test_damage_goes_to_the_whole_reading(case: str, tmp_path: Path):
    path = tmp_path / "t.json"
    path.write_text(DAMAGED[case])
    with pytest.raises(NotStreamed):
        kineto._parse_stream(path, 0)
    try:
        whole = kineto._parse_whole(path, 0)
    except InputError as exc:
        with pytest.raises(InputError) as got:
            kineto.parse(path)
        assert str(got.value) == str(exc)
        return
    parsed = kineto.parse(path)
    assert parsed.events.equals(whole.events) and parsed.warnings == whole.warnings


def test_invalid_utf8_and_cut_gzip_go_to_the_whole_reading(tmp_path: Path):
    path = tmp_path / "t.json.gz"
    bad = GOOD.replace("k", "\udcff", 1).encode("utf-8", "surrogateescape")
    path.write_bytes(gzip.compress(bad))
    with pytest.raises(NotStreamed):
        kineto._parse_stream(path, 0)
    assert kineto.parse(path).warnings[0] == (
        "t.json.gz: invalid UTF-8 in the file; bad bytes replaced"
    )
    path.write_bytes(gzip.compress(GOOD.encode())[:-12])
    with pytest.raises(NotStreamed):
        kineto._parse_stream(path, 0)
    assert kineto.parse(path).meta["truncated_gzip"] is True


def test_oversized_event_and_deep_nesting_go_to_the_whole_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [kernel(0, "x" * 600), kernel(1)]}))
    monkeypatch.setenv("RLPERF_MAX_STRING", "500")
    with pytest.raises(NotStreamed):
        kineto._parse_stream(path, 0)
    parsed = kineto.parse(path)
    assert parsed.events.height == 1 and parsed.meta["quality"]["dropped_oversized_event"] == 1
    monkeypatch.delenv("RLPERF_MAX_STRING")
    monkeypatch.setenv("RLPERF_MAX_NESTING", "20")
    text = json.dumps({"traceEvents": [kernel(0, x="@")]})
    path.write_text(text.replace('"@"', "[" * 16 + "]" * 16))
    with pytest.raises(NotStreamed):
        kineto._parse_stream(path, 0)
    assert kineto.parse(path).events.height == 1


def test_event_limit_is_raised_by_the_stream_with_the_whole_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [kernel(i) for i in range(50)]}))
    monkeypatch.setenv("RLPERF_MAX_EVENTS", "10")
    monkeypatch.setattr(json_stream, "BLOCK", 300)
    with pytest.raises(InputError, match=r"number of events in one file is over rlperf's limit "
                                         r"\(50 > 10\); set RLPERF_MAX_EVENTS"):
        kineto._parse_stream(path, 0)


def test_decompressed_limit_is_raised_by_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(GOOD.encode() + b" " * 5000))
    monkeypatch.setenv("RLPERF_MAX_BYTES", "3000")
    monkeypatch.setattr(json_stream, "BLOCK", 1000)
    with pytest.raises(InputError, match=r"decompressed size in bytes is over rlperf's limit"):
        kineto._parse_stream(path, 0)
