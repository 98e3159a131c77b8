"""Bad PyTorch-profiler input: one clear line naming the file, exit status 2 — or a salvage."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import parsers
from parsers import InputError

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
TRACE = CORPUS / "HolisticTraceAnalysis" / "nccl_data.json.gz"


def rlperf(*args: str, env_cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"RLPERF_CACHE_DIR": str(env_cache), "PATH": "/usr/bin:/bin"},
    )


def assert_one_line_error(result: subprocess.CompletedProcess, path: Path, words: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rlperf: error: ") and str(path) in lines[0]
    assert words in lines[0]
    assert "Traceback" not in result.stderr


@pytest.fixture
def raw() -> bytes:
    return gzip.decompress(TRACE.read_bytes())


def test_empty_file(tmp_path: Path):
    path = tmp_path / "rank0.json"
    path.write_bytes(b"")
    assert_one_line_error(rlperf("analyze", str(path), env_cache=tmp_path), path, "empty file")


def test_non_json_file(tmp_path: Path):
    path = tmp_path / "rank0.json"
    path.write_bytes(b"\x00\x01binary junk that is not json")
    assert_one_line_error(rlperf("analyze", str(path), env_cache=tmp_path), path, "not JSON")


def test_truncated_gzip_with_nothing_usable(tmp_path: Path):
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(TRACE.read_bytes()[:12])
    assert_one_line_error(rlperf("analyze", str(path), env_cache=tmp_path), path, "gzip")


def test_wrong_typed_field_names_the_place(tmp_path: Path):
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 1}
        ],
        "schemaVersion": 1,
    }
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    result = rlperf("analyze", str(path), env_cache=tmp_path)
    assert_one_line_error(result, path, "traceEvents[0].ts")


def test_missing_file(tmp_path: Path):
    path = tmp_path / "nope.json"
    assert_one_line_error(rlperf("analyze", str(path), env_cache=tmp_path), path, "no such file")


def test_cut_mid_array_salvages_complete_events(tmp_path: Path, raw: bytes):
    """What a rank killed while writing leaves: every complete event before the cut is kept."""
    cut = raw[: len(raw) // 2]
    path = tmp_path / "rank0.json"
    path.write_bytes(cut)
    parsed = parsers.parse_file(path)
    full = parsers.parse_file(TRACE)
    kept = parsed.meta["salvaged"]["events"]
    total = len(json.loads(raw)["traceEvents"])
    assert 0 < kept < total
    assert any("cut short" in w and f"{kept:,}" in w for w in parsed.warnings)
    # every salvaged row is a row of the full trace (the cut lost the time base: compare relative)
    base = full.meta["base_time_ns"]
    key = ["kind", "name", "start_ns", "end_ns"]
    whole = full.events.with_columns(pl.col("start_ns") - base, pl.col("end_ns") - base).select(key)
    assert parsed.events.height > 1000
    assert parsed.events.select(key).join(whole, on=key, how="anti").height == 0
    # the file lost its trailing baseTimeNanoseconds: rlperf says absolute time is unknown
    assert any("absolute time unknown" in w for w in parsed.warnings)


def test_cut_gzip_mid_stream_salvages_with_a_warning(tmp_path: Path):
    data = TRACE.read_bytes()
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(data[: int(len(data) * 0.7)])
    parsed = parsers.parse_file(path)
    assert parsed.meta["truncated_gzip"] is True
    assert parsed.events.height > 1000
    assert any("gzip stream ends early" in w for w in parsed.warnings)
    result = rlperf("analyze", str(path), env_cache=tmp_path)
    assert result.returncode == 0
    assert "gzip stream ends early" in result.stdout + result.stderr


def test_cut_before_any_event_is_an_error(tmp_path: Path, raw: bytes):
    head = raw[: raw.index(b'"traceEvents"') + 20]
    path = tmp_path / "rank0.json"
    path.write_bytes(head)
    with pytest.raises(InputError, match="no complete event"):
        parsers.parse_file(path)


def test_invalid_utf8_is_replaced_with_a_warning(tmp_path: Path):
    doc = (
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op\xff", "pid": 1, "tid": 1, '
        b'"ts": 5, "dur": 2}], "schemaVersion": 1}'
    )
    path = tmp_path / "t.json"
    path.write_bytes(doc)
    parsed = parsers.parse_file(path)
    assert parsed.events["name"].cast(pl.String).to_list() == ["op\ufffd"]
    assert any("UTF-8" in w for w in parsed.warnings)


def test_unknown_file_in_a_directory_is_listed_not_fatal(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "rank0.json.gz").write_bytes(TRACE.read_bytes())
    result = rlperf("analyze", str(tmp_path), env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    # the terminal report wraps a long path at 80 columns wherever the folder lies
    listed = f"skipped (not a format rlperf reads): {tmp_path / 'notes.txt'}"
    assert listed in result.stdout.replace("\n", "")


SAMPLED = CORPUS / "HolisticTraceAnalysis" / "sampled_rank-1.json.gz"
"""119,799 bytes of gzip holding 1,690,403 bytes of JSON, 4,675 events rlperf keeps."""


def test_cut_gzip_states_what_is_known_not_a_share(tmp_path: Path):
    """50,000 of its 119,799 compressed bytes hold 633,275 bytes of JSON, 2,195 complete events:
    more than half the trace is lost, which no count inside the JSON read can say."""
    path = tmp_path / "rank1.json.gz"
    path.write_bytes(SAMPLED.read_bytes()[:50_000])
    parsed = parsers.parse_file(path)
    assert parsed.events.height == 2195
    assert parsed.meta["salvaged"] == {
        "events": 2195, "json_bytes_read": 633_275, "gzip_bytes_read": 50_000
    }
    (warning,) = parsed.warnings
    assert warning == (
        "rank1.json.gz: gzip stream ends early (truncated file?) after 50,000 compressed bytes: "
        "salvaged 2,195 complete events from the 633,275 bytes of JSON read; the rest of the "
        "trace is lost, its size unknown (a cut gzip stream does not record it)"
    )
    result = rlperf("analyze", str(path), env_cache=tmp_path)
    assert result.returncode == 0, result.stderr
    report = " ".join(result.stdout.split())
    assert (
        "the gzip stream ends after 50,000 compressed bytes (633,275 bytes of JSON read): the "
        "rest of the trace lost, its size unknown" in report
    )
    assert "bytes lost" not in report and "%) and every event" not in report


def test_gzip_cut_in_its_trailer_loses_nothing(tmp_path: Path):
    path = tmp_path / "rank1.json.gz"
    path.write_bytes(SAMPLED.read_bytes()[:-4])
    parsed = parsers.parse_file(path)
    assert parsed.events.height == 4675 and "salvaged" not in parsed.meta
    assert parsed.warnings == [
        "rank1.json.gz: gzip stream ends early (truncated file?) after 119,795 compressed bytes, "
        "but the JSON it holds is complete: no event lost"
    ]


def test_cut_plain_json_states_the_bytes_lost(tmp_path: Path):
    """Of a plain file the bytes after the last complete event are all that is in it and lost."""
    path = tmp_path / "rank1.json"
    path.write_bytes(gzip.decompress(SAMPLED.read_bytes())[:633_275])
    parsed = parsers.parse_file(path)
    assert parsed.meta["salvaged"] == {"events": 2195, "bytes_lost": 191}
    assert parsed.warnings == [
        "rank1.json: JSON cut short (writer killed?): salvaged 2,195 complete events; the last "
        "191 bytes (0.0%) and every event the writer never wrote are lost"
    ]


def test_a_cut_in_a_later_gzip_member_keeps_the_members_before_it(tmp_path: Path):
    """A trace written as two gzip members (a writer that appends, or ``cat a.gz b.gz``), cut in
    the second: the salvage read only the first member and lost the whole members' worth that
    came before the cut."""
    json_bytes = gzip.decompress(SAMPLED.read_bytes())
    half = len(json_bytes) // 2
    second = gzip.compress(json_bytes[half:], mtime=0)
    path = tmp_path / "rank1.json.gz"
    path.write_bytes(gzip.compress(json_bytes[:half], mtime=0) + second[: len(second) // 2])
    parsed = parsers.parse_file(path)
    read = parsed.meta["salvaged"]["json_bytes_read"]
    assert half + 400_000 < read < len(json_bytes)  # here 1,273,067 of 1,690,403
    alone = tmp_path / "first.json.gz"
    alone.write_bytes(gzip.compress(json_bytes[:half], mtime=0))
    first_only = parsers.parse_file(alone).events.height
    assert first_only == 2757
    assert first_only + 800 < parsed.events.height < 4675  # here 3,747
