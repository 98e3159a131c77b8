"""Reading inputs within bounds: decompression limited, only regular files read, a folder's bad
files skipped and counted, and names that cannot reach the terminal raw."""

from __future__ import annotations

import gzip
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from isal import isal_zlib
from report_truth import one_line_error

import parsers
from analyzer.assemble.ingest import ingest
from parsers import InputError
from parsers.discover import discover
from parsers.errors import printable
from parsers.reading import GZIP_ERRORS, GzipCut, gunzip, open_bytes

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
LOG = CORPUS / "VERL-Maze" / "verl_demo.log"
TRACE = CORPUS / "HolisticTraceAnalysis" / "nccl_data.json.gz"
MB = 2**20


def rlperf(*args: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", *args],
        capture_output=True, text=True, timeout=120,
        env={"RLPERF_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "COLUMNS": "1000", **env},
    )


def zeros_gzip(size: int, chunk: int = 16 * MB) -> bytes:
    """A gzip bomb: ``size`` zero bytes in one member, about size/1000 on disk."""
    packer = isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)
    block = bytes(min(chunk, size))
    parts = [packer.compress(block[: min(chunk, size - done)]) for done in range(0, size, chunk)]
    return b"".join([*parts, packer.flush()])


# --- decompression -----------------------------------------------------------------------------


def test_a_gzip_bomb_stops_at_the_limit_naming_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RLPERF_MAX_BYTES", str(MB))
    bomb = zeros_gzip(6 * MB)
    assert len(bomb) < 64 * 1024
    with pytest.raises(InputError) as caught:
        gunzip(bomb, "bomb.json.gz")
    assert caught.value.path == "bomb.json.gz"
    assert "1,048,576" in caught.value.problem and "RLPERF_MAX_BYTES" in caught.value.problem
    assert gunzip(zeros_gzip(MB)) == bytes(MB)  # exactly at the limit is within it


def test_a_bomb_through_the_cli_is_one_line(tmp_path: Path):
    path = tmp_path / "rank0.pt.trace.json.gz"
    path.write_bytes(zeros_gzip(4 * MB))
    one_line_error(rlperf("analyze", str(path), cache=tmp_path / "c", RLPERF_MAX_BYTES="1048576"),
                   str(path), "RLPERF_MAX_BYTES", "1,048,576")


BOUNDED = r"""
import os, resource, sys
from pathlib import Path
from parsers.reading import GzipCut, gunzip
from parsers.errors import InputError
raw = Path(sys.argv[1]).read_bytes()
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + 768 * 2**20, resource.RLIM_INFINITY))
try:
    data = gunzip(raw)
    print("whole", len(data))
except GzipCut as cut:
    print("cut", len(cut.data))
except InputError as exc:
    print("limit", exc.problem)
"""


def bounded(tmp_path: Path, raw: bytes, **env: str) -> str:
    """``gunzip`` in a process allowed 768 MB more address space than it holds after import."""
    path = tmp_path / "input.gz"
    path.write_bytes(raw)
    result = subprocess.run(
        [sys.executable, "-c", BOUNDED, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


def test_memory_stays_bounded_for_a_bomb_past_the_address_space(tmp_path: Path):
    bomb = zeros_gzip(2 * 2**30)
    assert bounded(tmp_path, bomb, RLPERF_MAX_BYTES=str(256 * MB)).startswith("limit")


def test_a_cut_stream_never_sizes_a_buffer_from_its_garbage_trailer(tmp_path: Path):
    raw = TRACE.read_bytes()
    end = next(n for n in range(len(raw) // 2, len(raw)) if raw[n - 1] >= 0x40)
    cut = raw[:end]
    assert int.from_bytes(cut[-4:], "little") > 2**30  # the size its last 4 bytes claim
    whole = len(gzip.decompress(raw))
    kind, size = bounded(tmp_path, cut).split()
    assert kind == "cut" and 0.3 * whole < int(size) < 0.7 * whole


def test_a_cut_stream_hands_back_what_it_held(tmp_path: Path):
    raw = TRACE.read_bytes()
    whole = gzip.decompress(raw)
    with pytest.raises(GzipCut) as caught:
        gunzip(raw[: int(len(raw) * 0.6)])
    assert isinstance(caught.value, GZIP_ERRORS) and isinstance(caught.value, EOFError)
    data = caught.value.data
    assert 0.4 * len(whole) < len(data) < 0.7 * len(whole) and whole.startswith(data)
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(raw[: int(len(raw) * 0.6)])
    parsed = parsers.parse_file(path)
    assert parsed.meta["truncated_gzip"] is True and parsed.events.height > 1000


def test_every_member_of_a_concatenated_gzip_is_read():
    first, second = b'{"a": 1}\n' * 1000, b'{"b": 2}\n' * 3000
    assert gunzip(gzip.compress(first) + gzip.compress(second)) == first + second


def test_a_corrupt_stream_is_a_gzip_error():
    raw = bytearray(gzip.compress(b"x" * 100_000))
    raw[-8] ^= 0xFF  # the CRC
    with pytest.raises(GZIP_ERRORS):
        gunzip(bytes(raw))


def test_an_uncompressed_file_past_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RLPERF_MAX_BYTES", "1000")
    path = tmp_path / "job.log"
    path.write_text("step 1 loss 0.5\n" * 200)
    with pytest.raises(InputError, match="RLPERF_MAX_BYTES"):
        open_bytes(path)


# --- only regular files ------------------------------------------------------------------------


def specials(folder: Path) -> list[Path]:
    """A FIFO, a link to /dev/zero, a link to a character device and a socket in ``folder``."""
    fifo = folder / "rank0.json"
    os.mkfifo(fifo)
    zero = folder / "rank1.json.gz"
    zero.symlink_to("/dev/zero")
    null = folder / "null.log"
    null.symlink_to("/dev/null")
    sock = folder / "s.log"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.close()
    return [fifo, zero, null, sock]


@pytest.mark.parametrize("kind", ["FIFO", "character device", "socket", "broken link"])
def test_a_named_special_file_is_one_line(tmp_path: Path, kind: str):
    fifo, zero, _, sock = specials(tmp_path)
    broken = tmp_path / "gone.json"
    broken.symlink_to(tmp_path / "nowhere.json")
    path = {"FIFO": fifo, "character device": zero, "socket": sock, "broken link": broken}[kind]
    line = one_line_error(rlperf("analyze", str(path), cache=tmp_path / "c"), str(path), kind)
    assert ("not a regular file" in line) == (kind != "broken link")


def test_special_files_in_a_folder_are_skipped_and_counted(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "verl.log").write_bytes(LOG.read_bytes())
    made = specials(run)
    (run / "loop").symlink_to(run)  # a folder linked into itself is entered once
    found = discover([run])
    assert [p.name for p, _ in found.sources] == ["verl.log"]
    assert sorted(p.name for p, _ in found.skipped) == sorted(p.name for p in made)
    result = rlperf("analyze", str(run), cache=tmp_path / "c")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stdout.splitlines() if "skipped 4 files" in line]
    assert len(notes) == 1 and "not a regular file" in notes[0]


# --- a folder's bad files ----------------------------------------------------------------------


def broken_traces(folder: Path, count: int) -> list[Path]:
    paths = [folder / f"broken{i}.json" for i in range(count)]
    for path in paths:
        path.write_text('{"traceEvents": 5, "schemaVersion": 1}')
    return paths


def test_a_file_that_fails_to_parse_in_a_folder_is_skipped(tmp_path: Path):
    (tmp_path / "verl.log").write_bytes(LOG.read_bytes())
    broken_traces(tmp_path, 1)
    found = ingest([tmp_path], use_cache=False)
    assert [s.path.name for s in found.sources] == ["verl.log"]
    assert len([n for n in found.notes if n.startswith("skipped 1 file ")]) == 1
    assert any("broken0.json (unexpected field type" in n for n in found.notes)


def test_the_skipped_line_counts_all_and_names_a_few(tmp_path: Path):
    (tmp_path / "verl.log").write_bytes(LOG.read_bytes())
    broken_traces(tmp_path, 5)
    result = rlperf("analyze", str(tmp_path), cache=tmp_path / "c")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stdout.splitlines() if "skipped 5 files" in line]
    assert len(notes) == 1
    assert (
        "broken2.json" in notes[0] and "broken3.json" not in notes[0] and "and 2 more" in notes[0]
    )


def test_a_named_file_that_fails_to_parse_stops_the_run(tmp_path: Path):
    (tmp_path / "verl.log").write_bytes(LOG.read_bytes())
    (bad,) = broken_traces(tmp_path, 1)
    one_line_error(rlperf("analyze", str(tmp_path / "verl.log"), str(bad), cache=tmp_path / "c"),
                   str(bad), "unexpected field type")


def test_a_folder_of_only_bad_files_says_why(tmp_path: Path):
    broken_traces(tmp_path, 2)
    one_line_error(rlperf("analyze", str(tmp_path), cache=tmp_path / "c"), "skipped 2 files")


def test_the_pipit_folder_reads_despite_its_provenance_notes(tmp_path: Path):
    # two unrelated captures (tests/test_run_grouping_clock.py): the first is analysed
    result = rlperf("analyze", str(CORPUS / "pipit"), "-q", "--run", "1", cache=tmp_path / "c")
    assert result.returncode == 0, result.stderr
    assert any("skipped" in line and "PROVENANCE.md" in line for line in result.stdout.splitlines())


def test_a_parse_error_crosses_a_process_pool_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(sys.modules["analyzer.engines.local"], "PARALLEL_MIN_BYTES", 0)
    (tmp_path / "verl.log").write_bytes(LOG.read_bytes())
    broken_traces(tmp_path, 1)
    found = ingest([tmp_path], jobs=2, use_cache=False)
    assert [s.path.name for s in found.sources] == ["verl.log"]
    assert any("broken0.json (unexpected field type" in n for n in found.notes)
    copy = pickle.loads(pickle.dumps(InputError("a.json", "bad")))
    assert (copy.path, copy.problem, str(copy)) == ("a.json", "bad", "a.json: bad")


# --- names on the terminal ---------------------------------------------------------------------


def test_control_and_bidi_characters_are_shown_escaped():
    assert (
        printable("a\nb\x1b[31mc\u202ed\u2066e\tf\x9b")
        == "a\\nb\\x1b[31mc\\u202ed\\u2066e\\tf\\x9b"
    )
    assert printable("ünïcödé 名前 [x]") == "ünïcödé 名前 [x]"
    assert str(InputError("x\ny.json", "bad\rthing")) == "x\\ny.json: bad\\rthing"


def test_a_hostile_file_name_reaches_stderr_as_one_escaped_line(tmp_path: Path):
    path = tmp_path / "evil\n\x1b[2J\u202etxt.json"
    path.write_text('{"traceEvents": 5, "schemaVersion": 1}')
    line = one_line_error(
        rlperf("analyze", str(path), cache=tmp_path / "c"), "evil\\n\\x1b[2J\\u202etxt.json"
    )
    assert "\x1b" not in line and "\u202e" not in line
