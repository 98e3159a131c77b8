"""Bad Nsight Systems input → one line naming the file and the problem, exit status 2."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import parsers
from parsers import nsys, nsys_rep, nsys_stats
from parsers.errors import InputError
from parsers.events import validate

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
PIPIT = CORPUS / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
REPORT = CORPUS / "nvFuser" / "report1.nsys-rep"


def one_line_error(path: Path, parse=parsers.parse_file) -> str:
    with pytest.raises(InputError) as err:
        parse(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message[len(str(path)) + 2 :]


def test_text_file_named_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "capture.sqlite"
    bad.write_text("this is not a database\n")
    assert parsers.sniff(bad) is None
    assert "not a format rlperf reads" in one_line_error(bad)
    assert one_line_error(bad, nsys.parse) == "not an SQLite database (the file header is wrong)"


def test_sqlite_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    other = tmp_path / "optuna.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE trials (id INTEGER, value REAL)")
    con.execute("INSERT INTO trials VALUES (1, 0.5)")
    con.commit()
    con.close()
    assert parsers.sniff(other) is None
    assert "not a format rlperf reads" in one_line_error(other)
    assert "not an Nsight Systems export" in one_line_error(other, nsys.parse)


@pytest.mark.parametrize("keep", [4096, 65536, 800_000])
def test_truncated_export(tmp_path: Path, keep: int) -> None:
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(PIPIT.read_bytes()[:keep])
    problem = one_line_error(cut, nsys.parse)
    assert "truncated or corrupt" in problem or "not an Nsight Systems export" in problem
    if parsers.sniff(cut) == "nsys-sqlite":
        assert one_line_error(cut) == problem


def test_report_without_nsys_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "nsys CLI, which is not on PATH" in one_line_error(REPORT)


def test_csv_without_a_stats_table(tmp_path: Path) -> None:
    bad = tmp_path / "notes_nvtxpptrace.csv"
    bad.write_text("a,b,c\n1,2,3\n")
    assert "no nsys stats CSV table" in one_line_error(bad, nsys_stats.parse)


def test_stats_csv_with_broken_numbers(tmp_path: Path) -> None:
    bad = tmp_path / "x_nvtxpptrace.csv"
    text = (CORPUS / "pipit" / "trace.csv").read_text().splitlines()
    bad.write_text(
        "\n".join([text[0], text[1].replace("982845927", "9,82845927x"), *text[2:]]) + "\n"
    )
    assert "cannot read" in one_line_error(bad)


@pytest.mark.parametrize("suffix", [".sqlite", ".nsys-rep"])
def test_cli_exit_status_two_with_one_line(tmp_path: Path, suffix: str) -> None:
    """``rlperf analyze`` on a bad export: one line naming the file, exit status 2."""
    bad = tmp_path / f"capture{suffix}"
    bad.write_bytes(
        b"SQLite format 3\x00" + b"\x00" * 100 if suffix == ".sqlite" else b"not a report"
    )
    run = subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "RLPERF_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlperf: error: {bad}: ")


NVFUSER = CORPUS / "nvFuser" / "report1.sqlite"
PIPIT_KINDS = {"kernel": 5, "memcpy": 15, "runtime": 57, "annotation": 22}
PIPIT_FIRST_NS = 65117824
"""Session time of pipit's first kept row (``min(start)`` over its kernel, copy, runtime and
range rows), the time an event keeps when the session start is unusable."""


def damaged(tmp_path: Path, original: Path, *statements: str, params: tuple = ()) -> Path:
    """A writable copy of ``original`` with ``statements`` applied by sqlite3."""
    copy = tmp_path / original.name
    copy.write_bytes(original.read_bytes())
    con = sqlite3.connect(copy)
    for statement in statements:
        con.execute(statement, params if "?" in statement else ())
    con.commit()
    con.close()
    return copy


def kinds_of(source: parsers.ParsedSource) -> dict[str, int]:
    counts = source.events.group_by(pl.col("kind").cast(pl.String)).len()
    return dict(counts.iter_rows())


BIG = 2**63 - 1
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
CELLS = [
    # (table, column, SQL value, quality counts, events of each kind that remain)
    ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "'abc'", {"unusable_time_base": 1}, {}),
    ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "x'0102'", {"unusable_time_base": 1}, {}),
    ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", str(BIG), {"unusable_time_base": 1}, {}),
    ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "-5", {"unusable_time_base": 1}, {}),
    ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "1.5e300", {"unusable_time_base": 1}, {}),
    ("TARGET_INFO_GPU", "cuDevice", "'x'", {"wrong_type_cells": 1}, {}),
    (KERNEL, "start", "'abc'", {"wrong_type_cells": 5, "dropped_no_time": 5}, {"kernel": 0}),
    (KERNEL, "start", "1.5", {"wrong_type_cells": 5, "dropped_no_time": 5}, {"kernel": 0}),
    (KERNEL, "start", str(BIG), {"dropped_out_of_range": 5}, {"kernel": 0}),
    (KERNEL, "end", str(-BIG - 1), {"dropped_out_of_range": 5}, {"kernel": 0}),
    (KERNEL, "start", "end + 1", {"negative_dur": 5}, {"kernel": 0}),
    (KERNEL, "deviceId", "'x'", {"wrong_type_cells": 5, "dropped_out_of_range": 5}, {"kernel": 0}),
    (KERNEL, "deviceId", "70000", {"dropped_out_of_range": 5}, {"kernel": 0}),
    (KERNEL, "streamId", "x'00'", {"wrong_type_cells": 5}, {}),
    (KERNEL, "streamId", "-7", {"clamped_stream": 5}, {}),
    (KERNEL, "globalPid", "NULL", {"dropped_no_process": 5}, {"kernel": 0}),
    (KERNEL, "demangledName", "'zz'", {"wrong_type_cells": 5}, {}),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "bytes", "'many'", {"wrong_type_cells": 15}, {}),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "bytes", "-1", {"negative_bytes": 15}, {}),
    (
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "globalTid",
        "NULL",
        {"dropped_no_process": 57},
        {"runtime": 0},
    ),
    (
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "globalTid",
        "'t'",
        {"wrong_type_cells": 95, "dropped_no_process": 57},
        {"runtime": 0},
    ),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "eventClass", "'x'", {"wrong_type_cells": 95}, {"runtime": 0}),
    ("StringIds", "value", "x'ff00'", {"wrong_type_cells": 697}, {}),
    ("StringIds", "value", "CAST(x'ff41' AS TEXT)", {"undecodable_text": 697}, {}),
    ("NVTX_EVENTS", "text", "x'ff'", {"wrong_type_cells": 24}, {}),
    (
        "NVTX_EVENTS",
        "start",
        "'abc'",
        {"wrong_type_cells": 24, "dropped_no_time": 22},
        {"annotation": 0},
    ),
    ("NVTX_EVENTS", "domainId", "'d'", {"wrong_type_cells": 24}, {}),
    ("NVTX_EVENTS", "globalTid", "NULL", {"dropped_no_process": 22}, {"annotation": 0}),
    ("TARGET_INFO_SYSTEM_ENV", "globalVid", "'x'", {"wrong_type_cells": 74}, {}),
    ("PROCESSES", "pid", "'x'", {"wrong_type_cells": 1667}, {}),
]


@pytest.mark.parametrize(
    ("table", "column", "value", "quality", "left"), CELLS, ids=lambda v: str(v)[:24]
)
def test_wrong_typed_or_out_of_range_cells_are_counted_never_a_crash_or_a_wrap(
    tmp_path: Path, table: str, column: str, value: str, quality: dict, left: dict
) -> None:
    path = damaged(tmp_path, PIPIT, f'UPDATE "{table}" SET "{column}" = {value}')
    source = nsys.parse(path)
    validate(source.events, where=path.name)
    assert source.meta["quality"] == quality
    assert kinds_of(source) == {k: n for k, n in {**PIPIT_KINDS, **left}.items() if n}
    assert len(source.warnings) >= len(quality)
    if table == "TARGET_INFO_SESSION_START_TIME":
        assert source.events["start_ns"].min() == PIPIT_FIRST_NS
        assert source.meta["time_base"].startswith("session-relative")
        assert any("utcEpochNs" in w and "session-relative" in w for w in source.warnings)
    else:
        base = 1687813257637297504
        assert base + PIPIT_FIRST_NS <= source.events["start_ns"].min()
        assert source.events["end_ns"].max() < base + 10 * 10**9


def test_a_time_shift_that_is_not_a_whole_number_is_ignored_and_counted(tmp_path: Path) -> None:
    path = damaged(
        tmp_path,
        NVFUSER,
        "UPDATE META_DATA_EXPORT SET value = '1.5' WHERE name = 'EXPORT_PARAM_TIME_SHIFT'",
    )
    source = nsys.parse(path)
    assert source.meta["quality"] == {"unreadable_metadata": 1}
    assert any("EXPORT_PARAM_TIME_SHIFT is '1.5'" in w for w in source.warnings)
    assert source.meta["session_start_ns"] == 1741793819042497997


def test_a_rank_variable_past_int32_is_no_evidence(tmp_path: Path) -> None:
    con = sqlite3.connect(PIPIT.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    env = con.execute(
        "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'"
    ).fetchone()[0]
    con.close()
    for var in ("SLURM_PROCID", "PMI_RANK"):
        assert f"{var}=0\x00" in env
        env = env.replace(f"{var}=0\x00", f"{var}=99999999999\x00")
    path = damaged(
        tmp_path,
        PIPIT,
        "UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'",
        params=(env,),
    )
    source = nsys.parse(path)
    assert source.meta["processes"][0]["rank_source"] == "NVTX thread name 'MPI Rank 0'"
    assert set(source.events["rank"]) == {0}
    assert any(
        "SLURM_PROCID, PMI_RANK in the captured environment" in w and "ignored" in w
        for w in source.warnings
    )


def test_a_missing_time_column_leaves_that_table_out_with_a_count(tmp_path: Path) -> None:
    path = damaged(tmp_path, PIPIT, f"ALTER TABLE {KERNEL} DROP COLUMN start")
    source = nsys.parse(path)
    assert kinds_of(source) == {k: n for k, n in PIPIT_KINDS.items() if k != "kernel"}
    assert source.meta["quality"] == {"dropped_no_time": 5}
    assert any("5 rows without a start or end time were left out" in w for w in source.warnings)


def test_a_missing_kind_table_is_an_ordinary_export_without_that_kind(tmp_path: Path) -> None:
    path = damaged(tmp_path, PIPIT, "DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY")
    source = nsys.parse(path)
    assert kinds_of(source) == {k: n for k, n in PIPIT_KINDS.items() if k != "memcpy"}
    assert "quality" not in source.meta


def test_a_table_name_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """SQLite refuses the schema with a message quoting the damaged name, which Python cannot
    decode: UnicodeDecodeError (no sqlite3.Error) escaped."""
    path = damaged(
        tmp_path,
        PIPIT,
        "PRAGMA writable_schema=ON",
        "UPDATE sqlite_master SET name = CAST(x'ac41' AS TEXT) WHERE name = "
        "'CUPTI_ACTIVITY_KIND_MEMCPY'",
    )
    assert (
        one_line_error(path, nsys.parse)
        == "SQLite database is truncated or corrupt (a schema name is not UTF-8)"
    )


def test_a_missing_string_table_is_not_an_export(tmp_path: Path) -> None:
    path = damaged(tmp_path, PIPIT, "DROP TABLE StringIds")
    assert "not an Nsight Systems export" in one_line_error(path, nsys.parse)


PPTRACE = CORPUS / "pipit" / "trace.csv"


def test_a_stats_csv_cut_anywhere_keeps_exactly_its_complete_rows(tmp_path: Path) -> None:
    """Every cut in the last three rows: the rows before the cut, never the cut one (whose end
    time would be a prefix of the real one, before its start)."""
    text = PPTRACE.read_text()
    assert parsers.parse_file(PPTRACE).events.height == text.count("\n") - 1 == 131
    tail = len(text) - len("\n".join(text.splitlines()[-3:])) - 1
    for offset in range(tail, len(text) + 1):
        cut = tmp_path / f"cut{offset}_nvtxpptrace.csv"
        cut.write_text(text[:offset])
        source = nsys_stats.parse(cut)
        complete = text[:offset].count("\n") - 1
        assert source.events.height == complete, offset
        assert (source.events["end_ns"] >= source.events["start_ns"]).all()
        partial = not text[:offset].endswith("\n")
        assert source.meta.get("quality", {}) == ({"dropped_cut_row": 1} if partial else {}), offset
        assert any("ends inside a row" in w for w in source.warnings) == partial


@pytest.mark.parametrize(
    ("field", "value", "quality"),
    [
        (0, "99999999999999999999", {"dropped_no_time": 1}),
        (0, "-5", {"dropped_no_time": 1}),
        (1, "1e30", {"dropped_no_time": 1}),
        (1, "abc", {"dropped_no_time": 1}),
        (1, "5", {"negative_dur": 1}),
        (6, "99999999999999999999", {"dropped_out_of_range": 1}),
        (8, "70000", {"dropped_out_of_range": 1}),
    ],
)
def test_stats_csv_values_out_of_range_are_dropped_and_counted(
    tmp_path: Path, field: int, value: str, quality: dict
) -> None:
    lines = PPTRACE.read_text().splitlines()
    cells = lines[5].split(",")
    cells[field] = value
    bad = tmp_path / "bad_nvtxpptrace.csv"
    bad.write_text("\n".join([*lines[:5], ",".join(cells), *lines[6:]]) + "\n")
    source = nsys_stats.parse(bad)
    validate(source.events)
    assert source.meta["quality"] == quality
    assert source.events.height == (131 if field in (6, 8) else 130)
    assert source.events["start_ns"].min() >= 0 and source.events["end_ns"].max() < 2 * 10**9


def test_a_markdown_file_that_names_stats_columns_is_no_stats_csv() -> None:
    provenance = CORPUS / "pipit" / "PROVENANCE.md"
    assert "Start (ns), End (ns), Duration (ns)" in provenance.read_text()
    assert nsys_stats.sniff(provenance.read_bytes()[:65536], provenance) == 0
    assert parsers.sniff(provenance) is None
    assert nsys_stats.sniff(PPTRACE.read_bytes(), PPTRACE) == 90


def test_an_empty_report_is_one_line_without_calling_nsys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLPERF_CACHE_DIR", str(tmp_path / "cache"))
    empty = tmp_path / "capture.nsys-rep"
    empty.write_bytes(b"")
    assert (
        one_line_error(empty, nsys_rep.parse)
        == "empty file (0 bytes), not an Nsight Systems report"
    )


def test_a_report_nsys_cannot_read_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLPERF_CACHE_DIR", str(tmp_path / "cache"))
    junk = tmp_path / "junk.nsys-rep"
    junk.write_bytes(nsys_rep.REPORT_MAGIC + bytes(range(256)) * 8)
    assert one_line_error(junk).startswith("nsys export failed: ")


def test_a_hanging_nsys_is_stopped_at_the_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every nsys call is bounded: a stand-in nsys that never returns is killed (with its
    children) after ``$RLPERF_NSYS_TIMEOUT`` seconds; an unreadable value means the default."""
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    marker = tmp_path / "child.pid"
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {marker}\nwait\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("RLPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RLPERF_NSYS_TIMEOUT", "abc")
    assert nsys_rep.export_timeout() == nsys_rep.EXPORT_TIMEOUT_S
    monkeypatch.setenv("RLPERF_NSYS_TIMEOUT", "1")
    started = time.monotonic()
    assert "did not finish within the time limit" in one_line_error(REPORT)
    assert time.monotonic() - started < 30
    status = Path(f"/proc/{int(marker.read_text())}/status")
    deadline = time.monotonic() + 10  # the kill is delivered at once, acted on when scheduled
    while status.exists() and "State:\tZ" not in status.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not status.exists() or "State:\tZ" in status.read_text()
