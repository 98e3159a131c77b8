"""Value ranges at the parser boundary (Kineto and framework span traces): a value no real trace
holds is dropped or made unknown and counted, never wrapped, never a traceback.

Each class of the damaged-corpus fuzz (issue 10: huge or negative times, time bases, ranks,
nesting, deep JSON, huge args, long strings, many events) and each sub-microsecond or negative
duration rule (issue 15) has its own test here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import polars as pl
import pytest

from parsers import InputError, kineto, spans
from parsers.events import DURATION_MAX_NS, TIME_MAX_NS, validate

BASE = 1_700_000_000_000_000_000
"""A baseTimeNanoseconds of 2023-11-14."""


def event(**fields) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": "op",
        "pid": 11,
        "tid": 7,
        "ts": 10,
        "dur": 5,
        "args": {},
    } | fields


def write_kineto(tmp_path: Path, events: list[dict], name: str = "trace.json", **top) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, **top}))
    return path


def write_spans(tmp_path: Path, events: list[dict], name: str = "timeline.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(events))
    return path


def quality(parsed) -> dict[str, int]:
    return parsed.meta.get("quality", {})


def warned(parsed, *words: str) -> bool:
    return any(all(w in line for w in words) for line in parsed.warnings)


# --- class 1: times, time bases, ranks, devices, depths beyond the columns ----------------------


@pytest.mark.parametrize(
    "ts", [1e30, 2**70, -1e16, 7.3e15], ids=["1e30", "2**70", "-1e16", "year-2201"]
)
def test_kineto_start_out_of_range_drops_the_event_and_counts_it(tmp_path: Path, ts: float):
    path = write_kineto(
        tmp_path, [event(name="good"), event(name="bad", ts=ts)], baseTimeNanoseconds=0
    )
    parsed = kineto.parse(path)
    validate(parsed.events)
    assert parsed.events["name"].cast(str).to_list() == ["good"]
    assert parsed.events["start_ns"].to_list() == [10_000]
    assert quality(parsed) == {"dropped_time_out_of_range": 1}
    assert warned(parsed, "1 events dropped: start before 1970 or after 2200")


def test_kineto_start_just_inside_the_range_is_kept(tmp_path: Path):
    last_us = (TIME_MAX_NS - 1000) // 1000
    path = write_kineto(
        tmp_path, [event(ts=0, dur=0), event(ts=last_us, dur=0)], baseTimeNanoseconds=0
    )
    parsed = kineto.parse(path)
    assert sorted(parsed.events["start_ns"].to_list()) == [0, last_us * 1000]
    assert "dropped_time_out_of_range" not in quality(parsed)


def test_kineto_number_beyond_doubles_drops_only_that_event(tmp_path: Path):
    path = write_kineto(
        tmp_path, [event(name="good"), event(name="bad", ts=123456)], baseTimeNanoseconds=BASE
    )
    path.write_text(path.read_text().replace("123456", "1e999"))
    parsed = kineto.parse(path)
    assert parsed.events["name"].cast(str).to_list() == ["good"]
    assert quality(parsed) == {"dropped_number_out_of_range": 1}


def test_kineto_duration_over_a_year_drops_the_event(tmp_path: Path):
    year_us = DURATION_MAX_NS // 1000
    events = [
        event(name="year", dur=year_us),
        event(name="more", dur=year_us + 1),
        event(name="huge", dur=1e30),
    ]
    parsed = kineto.parse(write_kineto(tmp_path, events, baseTimeNanoseconds=BASE))
    assert parsed.events["name"].cast(str).to_list() == ["year"]
    assert parsed.events.select(pl.col("end_ns") - pl.col("start_ns")).item() == DURATION_MAX_NS
    assert quality(parsed)["dropped_duration_out_of_range"] == 2


@pytest.mark.parametrize(
    "base", [2**63, 2**70, -5, TIME_MAX_NS], ids=["2**63", "2**70", "negative", "year-2200"]
)
def test_kineto_time_base_out_of_range_is_ignored_and_counted(tmp_path: Path, base: int):
    parsed = kineto.parse(write_kineto(tmp_path, [event(ts=10)], baseTimeNanoseconds=base))
    assert parsed.meta["base_time_ns"] is None
    assert parsed.meta["time_base"] == "unknown (relative)"
    assert parsed.events["start_ns"].to_list() == [10_000]
    assert quality(parsed) == {"out_of_range_base_time": 1}
    assert warned(parsed, "baseTimeNanoseconds", "out of range")


@pytest.mark.parametrize(
    "rank", [2**40, 2**70, -7, "three", 2**31], ids=["2**40", "2**70", "-7", "text", "2**31"]
)
def test_kineto_rank_out_of_range_is_unknown_and_counted(tmp_path: Path, rank):
    path = write_kineto(tmp_path, [event()], distributedInfo={"rank": rank, "world_size": 2**70})
    parsed = kineto.parse(path)
    validate(parsed.events)
    assert parsed.meta["rank"] == -1 and parsed.events["rank"].to_list() == [-1]
    assert parsed.meta["world_size"] is None
    assert quality(parsed) == {"out_of_range_rank": 1, "out_of_range_world_size": 1}
    assert warned(parsed, "distributedInfo.rank", "out of range")


def test_kineto_largest_rank_is_kept_and_a_bad_one_falls_back_to_the_file_name(tmp_path: Path):
    top = kineto.parse(write_kineto(tmp_path, [event()], distributedInfo={"rank": 2**31 - 1}))
    assert top.events["rank"].to_list() == [2**31 - 1] and "quality" not in top.meta
    named = kineto.parse(
        write_kineto(tmp_path, [event()], name="job_rank-5.json", distributedInfo={"rank": 2**40})
    )
    assert named.meta["rank"] == 5 and named.meta["rank_from"] == "file name"
    huge = kineto.parse(write_kineto(tmp_path, [event()], name="job_rank-99999999999.json"))
    assert huge.meta["rank"] == -1 and quality(huge) == {"out_of_range_rank": 1}


def test_kineto_gpu_row_on_an_impossible_device_is_dropped(tmp_path: Path):
    events = [
        event(cat="kernel", name="ok", pid=0, tid=7),
        event(cat="kernel", name="no-device", pid=2**40, tid=7),
        event(cat="kernel", name="wide-stream", pid=1, tid=2**40),
        event(cat="cpu_op", name="wide-pid", pid=2**70, tid=3),
    ]
    parsed = kineto.parse(write_kineto(tmp_path, events, baseTimeNanoseconds=BASE))
    validate(parsed.events)
    rows = {r["name"]: r for r in parsed.events.iter_rows(named=True)}
    assert set(rows) == {"ok", "wide-stream", "wide-pid"}
    assert (rows["wide-stream"]["device"], rows["wide-stream"]["stream"]) == (1, -1)
    assert rows["wide-pid"]["pid"] == -1
    assert quality(parsed) == {
        "dropped_device_out_of_range": 1,
        "out_of_range_stream": 1,
        "out_of_range_pid": 1,
    }


@pytest.mark.parametrize("pid", ["gpu", 2**70], ids=["text", "2**70"])
def test_kineto_gpu_row_whose_pid_is_unread_is_dropped_and_counted(tmp_path: Path, pid):
    events = [
        event(cat="kernel", name="ok", pid=0, tid=7),
        event(cat="kernel", name="no-pid", pid=pid, tid=7),
        event(cat="gpu_memcpy", name="copy-no-pid", pid=pid, tid=7),
        event(cat="cpu_op", name="host-no-pid", pid=pid, tid=3),
    ]
    parsed = kineto.parse(write_kineto(tmp_path, events, baseTimeNanoseconds=BASE))
    validate(parsed.events)
    assert sorted(parsed.events["name"].cast(str).to_list()) == ["host-no-pid", "ok"]
    assert quality(parsed)["dropped_device_out_of_range"] == 2


def nested(n: int, **fields) -> list[dict]:
    """n ranges on one thread, each inside the one before: depths 0..n-1."""
    return [event(ts=i, dur=2 * (n - i), **fields) for i in range(n)]


def test_kineto_depth_beyond_i16_is_clamped_and_counted(tmp_path: Path):
    n = 33_000
    parsed = kineto.parse(write_kineto(tmp_path, nested(n), baseTimeNanoseconds=BASE))
    validate(parsed.events)
    depth = parsed.events.sort("start_ns")["depth"]
    assert depth.len() == n and depth.max() == 32_767
    assert depth[:32_768].to_list() == list(range(32_768))
    assert quality(parsed) == {"clamped_depth": n - 32_768}
    assert warned(parsed, f"{n - 32_768} nesting depths clamped to 32767")


# --- issue 15: sub-microsecond rounding, negative and zero durations ----------------------------


def test_kineto_sub_microsecond_times_are_rounded_not_truncated(tmp_path: Path):
    events = [
        event(name="a", ts=1.0004, dur=0.0004),
        event(name="b", ts=1.0006, dur=0.0006),
        event(name="c", ts=2.4996, dur=1.9996),
    ]
    parsed = kineto.parse(write_kineto(tmp_path, events, baseTimeNanoseconds=BASE))
    rows = parsed.events.sort("name").select("start_ns", "end_ns").rows()
    assert rows == [
        (BASE + 1000, BASE + 1000),
        (BASE + 1001, BASE + 1002),
        (BASE + 2500, BASE + 4500),
    ]


def test_kineto_epoch_microseconds_keep_their_fraction_exactly(tmp_path: Path):
    """1.7e15 µs × 1000 is past 2**53: one float product would land on a 256 ns grid."""
    parsed = kineto.parse(write_kineto(tmp_path, [event(ts=1712345678901234.75, dur=0.5)]))
    assert parsed.meta["time_base"] == "epoch microseconds"
    assert parsed.events.select("start_ns", "end_ns").row(0) == (
        1712345678901234750,
        1712345678901235250,
    )


def test_kineto_negative_duration_becomes_zero_and_both_are_counted(tmp_path: Path):
    events = [
        event(name="neg", ts=10, dur=-3),
        event(name="zero", ts=20, dur=0),
        event(name="pos", ts=30, dur=2),
    ]
    parsed = kineto.parse(write_kineto(tmp_path, events, baseTimeNanoseconds=BASE))
    validate(parsed.events)
    spans_ns = dict(
        parsed.events.select(pl.col("name").cast(str), pl.col("end_ns") - pl.col("start_ns")).rows()
    )
    assert spans_ns == {"neg": 0, "zero": 0, "pos": 2000}
    assert parsed.events.filter(pl.col("name") == "neg")["start_ns"].item() == BASE + 10_000
    assert quality(parsed) == {"negative_dur": 1, "zero_dur": 1}
    assert warned(parsed, "1 negative durations set to 0")


def test_spans_sub_microsecond_times_are_rounded_not_truncated(tmp_path: Path):
    events = [event(name="a", ts=1.0004, dur=0.0004), event(name="b", ts=1.0006, dur=0.0006)]
    parsed = spans.parse(write_spans(tmp_path, events))
    assert parsed.events.sort("name").select("start_ns", "end_ns").rows() == [
        (1000, 1000),
        (1001, 1002),
    ]


def test_spans_negative_duration_becomes_zero_and_both_are_counted(tmp_path: Path):
    events = [
        event(name="neg", ts=10, dur=-3),
        event(name="zero", ts=20, dur=0),
        event(name="pos", ts=30, dur=2),
    ]
    parsed = spans.parse(write_spans(tmp_path, events))
    validate(parsed.events)
    spans_ns = dict(
        parsed.events.select(pl.col("name").cast(str), pl.col("end_ns") - pl.col("start_ns")).rows()
    )
    assert spans_ns == {"neg": 0, "zero": 0, "pos": 2000}
    assert parsed.events.filter(pl.col("name") == "neg")["start_ns"].item() == 10_000
    assert quality(parsed) == {"negative_dur": 1, "zero_dur": 1}
    assert warned(parsed, "1 negative durations set to 0")


# --- class 1 in span traces ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "dur", [-1e33, -9223372036854778, -(2**63)], ids=["-1e33", "-9.2e18ns", "-2**63"]
)
def test_spans_huge_negative_duration_becomes_zero_and_is_counted(tmp_path: Path, dur):
    events = [event(name="neg", ts=10, dur=dur), event(name="pos", ts=30, dur=2)]
    parsed = spans.parse(write_spans(tmp_path, events))
    validate(parsed.events)
    spans_ns = dict(
        parsed.events.select(pl.col("name").cast(str), pl.col("end_ns") - pl.col("start_ns")).rows()
    )
    assert spans_ns == {"neg": 0, "pos": 2000}
    assert quality(parsed) == {"negative_dur": 1}


@pytest.mark.parametrize("ts", [1e30, 2**70, -1e16, "1e30"], ids=["1e30", "2**70", "-1e16", "text"])
def test_spans_start_out_of_range_drops_the_event(tmp_path: Path, ts):
    parsed = spans.parse(write_spans(tmp_path, [event(name="good"), event(name="bad", ts=ts)]))
    validate(parsed.events)
    assert parsed.events["name"].cast(str).to_list() == ["good"]
    assert quality(parsed) == {"dropped_time_out_of_range": 1}
    assert warned(parsed, "1 events dropped: start before 1970 or after 2200")


def test_spans_duration_over_a_year_drops_the_event(tmp_path: Path):
    events = [event(name="good"), event(name="bad", dur=DURATION_MAX_NS // 1000 + 1)]
    parsed = spans.parse(write_spans(tmp_path, events))
    assert parsed.events["name"].cast(str).to_list() == ["good"]
    assert quality(parsed) == {"dropped_duration_out_of_range": 1}


def test_spans_integer_args_out_of_range_are_unknown_and_counted(tmp_path: Path):
    args = {
        "rank": 2**40,
        "global_step": 2**70,
        "device": 2**20,
        "stream": 2**40,
        "correlation": 2**80,
    }
    events = [
        event(name="bad", cat="kernel", args=args),
        event(name="good", ts=20, args={"rank": 3, "global_step": 4}),
    ]
    parsed = spans.parse(write_spans(tmp_path, events))
    validate(parsed.events)
    rows = {r["name"]: r for r in parsed.events.iter_rows(named=True)}
    bad = rows["bad"]
    assert (bad["rank"], bad["step"], bad["device"], bad["stream"], bad["corr"]) == (
        -1,
        None,
        -1,
        -1,
        None,
    )
    assert bad["kind"] == "annotation"  # GPU activity with no possible device stays a range
    assert (rows["good"]["rank"], rows["good"]["step"]) == (3, 4)
    assert quality(parsed) == {
        f"out_of_range_{c}": 1 for c in ("rank", "step", "device", "stream", "corr")
    }


def test_spans_rank_in_a_process_name_beyond_i32_is_unknown(tmp_path: Path):
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "rank 99999999999"}},
        event(name="task:execute", pid=1, args={"name": "x"}),
    ]
    parsed = spans.parse(write_spans(tmp_path, events))
    validate(parsed.events)
    assert parsed.events["rank"].to_list() == [-1]
    assert quality(parsed) == {"out_of_range_rank": 1}


def test_spans_depth_beyond_i16_is_clamped_and_counted(tmp_path: Path):
    n = 33_000
    parsed = spans.parse(write_spans(tmp_path, nested(n, name="task:execute", args={"name": "x"})))
    validate(parsed.events)
    assert parsed.events["depth"].max() == 32_767 and parsed.events.height == n
    assert quality(parsed) == {"clamped_depth": n - 32_768}


# --- class 2: JSON nesting -----------------------------------------------------------------------


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("where", ["deviceProperties", "args", "unknown top-level key"])
def test_kineto_json_nested_1000_deep_is_one_error_naming_the_limit(tmp_path: Path, where: str):
    path = write_kineto(tmp_path, [event(args={"x": "@"})], deviceProperties="%", extra="&")
    marker = {"deviceProperties": '"%"', "args": '"@"', "unknown top-level key": '"&"'}[where]
    path.write_text(path.read_text().replace(marker, deep(1000)))
    with pytest.raises(
        InputError,
        match=r"JSON nesting depth is over rlperf's limit \(1,00\d > 256\); set RLPERF_MAX_NESTING",
    ):
        kineto.parse(path)


def test_nesting_limit_is_exact_and_raised_by_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The document, traceEvents and the event are three levels; args one more; then the value."""
    path = tmp_path / "t.json"
    monkeypatch.setenv("RLPERF_MAX_NESTING", "20")
    path.write_text(json.dumps({"traceEvents": [event(args={"x": "@"})]}).replace('"@"', deep(16)))
    assert kineto.parse(path).events.height == 1
    path.write_text(json.dumps({"traceEvents": [event(args={"x": "@"})]}).replace('"@"', deep(17)))
    with pytest.raises(InputError, match=r"\(21 > 20\)"):
        kineto.parse(path)
    monkeypatch.setenv("RLPERF_MAX_NESTING", "3000")
    path.write_text(
        json.dumps({"traceEvents": [event(args={"x": "@"})]}).replace('"@"', deep(2500))
    )
    assert kineto.parse(path).events.height == 1


def test_spans_json_nested_too_deep_is_an_error_or_a_skipped_line(tmp_path: Path):
    array = write_spans(tmp_path, [event(args={"x": "@"})])
    array.write_text(array.read_text().replace('"@"', deep(1000)))
    with pytest.raises(InputError, match="RLPERF_MAX_NESTING"):
        spans.parse(array)
    lines = tmp_path / "traces-r0.jsonl"
    good = json.dumps(event(name="train.step", cat="compute", args={"global_step": 1}))
    lines.write_text(
        "\n".join([good, json.dumps(event(args={"x": "@"})).replace('"@"', deep(1000)), good])
        + "\n"
    )
    parsed = spans.parse(lines)
    assert parsed.events.height == 2
    assert warned(parsed, "1 unreadable lines skipped (lines 2", "too deep")


def test_deep_json_through_the_cli_is_one_line_and_status_2(tmp_path: Path):
    path = write_kineto(tmp_path, [event()], deviceProperties="%")
    path.write_text(path.read_text().replace('"%"', deep(5000)))
    result = subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", str(path)],
        capture_output=True, text=True, timeout=120,
        env={"RLPERF_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "RLPERF_MAX_NESTING" in lines[0]


# --- class 3: huge integers, hex strings, huge floats in args ------------------------------------


def test_kineto_args_beyond_64_bits_are_left_empty_and_counted(tmp_path: Path):
    events = [
        event(
            cat="kernel",
            name="k",
            pid=0,
            tid=7,
            args={
                "correlation": "0x" + 40 * "f",
                "External id": 2**80,
                "stream": 1e300,
                "device": 1e300,
            },
        ),
        event(
            cat="cuda_runtime", name="launch", args={"correlation": 1e300, "External id": "0x10"}
        ),
        event(cat="gpu_memcpy", name="big", pid=0, tid=7, args={"bytes": 1e300}),
        event(cat="gpu_memcpy", name="negative", pid=0, tid=7, args={"bytes": -5}),
        event(cat="gpu_memcpy", name="fine", pid=0, tid=7, args={"bytes": "0x100"}),
    ]
    parsed = kineto.parse(write_kineto(tmp_path, events, baseTimeNanoseconds=BASE))
    validate(parsed.events)
    rows = {r["name"]: r for r in parsed.events.iter_rows(named=True)}
    assert (rows["k"]["corr"], rows["k"]["ext_id"]) == (None, None)
    assert (rows["launch"]["corr"], rows["launch"]["ext_id"]) == (None, 16)
    assert [rows[n]["bytes"] for n in ("big", "negative", "fine")] == [None, None, 256]
    assert quality(parsed) == {"unreadable_arg": 4, "out_of_range_bytes": 1}
    assert warned(parsed, "4 args values unreadable or beyond 64-bit integers")


def test_kineto_collective_args_beyond_their_columns(tmp_path: Path):
    args = {
        "Collective name": "allreduce",
        "Group size": 2**40,
        "In msg nelems": 2**62,
        "Out msg nelems": 1,
        "dtype": "Float",
        "Process Group Ranks": [1e300, "x"],
        "Seq": 2**70,
        "Process Group Name": "0",
    }
    good = args | {
        "Group size": 2,
        "In msg nelems": 1024,
        "Process Group Ranks": "[0, 1]",
        "Seq": 5,
    }
    events = [
        event(name="record_param_comms", args=args),
        event(name="record_param_comms", ts=30, args=good),
    ]
    parsed = kineto.parse(write_kineto(tmp_path, events, baseTimeNanoseconds=BASE))
    validate(parsed.events)
    bad, fine = (
        parsed.events.sort("start_ns").select("group_size", "bytes", "pg_ranks", "seq").rows()
    )
    assert bad == (None, None, None, None)
    assert fine == (2, 4096, "0,1", 5)
    assert quality(parsed) == {"unreadable_arg": 2, "out_of_range_group_size": 1}


# --- class 5: string length and event count ------------------------------------------------------


def test_kineto_event_longer_than_the_string_limit_is_dropped_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RLPERF_MAX_STRING", "1000000")
    long = "x" * 30_000_000
    path = write_kineto(
        tmp_path, [event(name="short"), event(name=long)], baseTimeNanoseconds=BASE, traceName=long
    )
    size = path.stat().st_size
    tracemalloc.start()
    try:
        parsed = kineto.parse(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parsed.events["name"].cast(str).to_list() == ["short"]
    assert parsed.meta["trace_name"] is None
    assert quality(parsed) == {"dropped_oversized_event": 1}
    assert warned(parsed, "1 events longer than", "RLPERF_MAX_STRING")
    # the file's bytes are read once; neither long string is decoded or copied on top of them
    assert peak < size + 20_000_000


def test_spans_event_longer_than_the_string_limit_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RLPERF_MAX_STRING", "1000")
    parsed = spans.parse(write_spans(tmp_path, [event(name="short"), event(name="x" * 5000)]))
    assert parsed.events["name"].cast(str).to_list() == ["short"]
    assert quality(parsed) == {"dropped_oversized_event": 1}
    assert warned(parsed, "RLPERF_MAX_STRING")


@pytest.mark.parametrize("form", ["kineto", "span array", "span lines"])
def test_event_count_limit_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
):
    monkeypatch.setenv("RLPERF_MAX_EVENTS", "10")

    def parse(n: int):
        events = [event(ts=i) for i in range(n)]
        if form == "kineto":
            return kineto.parse(write_kineto(tmp_path, events))
        if form == "span array":
            return spans.parse(write_spans(tmp_path, events))
        lines = tmp_path / "traces-r0.jsonl"
        lines.write_text("".join(json.dumps(e | {"cat": "compute"}) + "\n" for e in events))
        return spans.parse(lines)

    assert parse(10).events.height == 10
    with pytest.raises(
        InputError,
        match=r"number of events in one file is over rlperf's limit \(11 > 10\); set "
            r"RLPERF_MAX_EVENTS",
    ):
        parse(11)
