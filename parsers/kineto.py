"""PyTorch profiler (Kineto) Chrome-trace JSON → the event table.

Handles every writer version of 2021–2026 (docs/formats-kineto.md): integer and float ``ts``,
``baseTimeNanoseconds`` (relative ``ts``) or epoch-µs ``ts``, the ``displayTimeUnit`` trap
(always µs), capitalised 2021–22 categories, string or -1 pids, launches under
``cuda_driver``, big integers in args, ROCm traces with string-typed args, files cut short by a
killed rank (every complete event before the cut is salvaged, with a warning).

Speed: one typed msgspec pass decodes only the fields we keep, with ``args`` left as raw bytes;
args are decoded (again typed, again only the fields we keep) only for the categories that
carry correlation, stream, byte or collective information. Columns go straight to polars.

Memory: the file is streamed (:mod:`parsers.json_stream`): events are decoded a block of JSON at a
time, in the same chunks as a whole reading, and the other top-level keys at the end from a small
skeleton document; a file the stream does not take (damaged, cut, unusual) is read whole, which
states its problem (docs/formats-kineto.md, "Streaming").

Value ranges (docs/events.md, "Value ranges"), checked as column expressions after decoding,
in float before any integer arithmetic (which would wrap); every repair is counted with
:meth:`~parsers.source.ParsedSource.tally` and stated in one warning line:

- an event whose absolute start is before 1970 or at/after 2200-01-01, whose duration is over
  a year, whose number JSON's doubles cannot hold (``1e999``), or a GPU row whose device (its
  ``pid``) is outside 0..32767 or no integer at all is dropped; a negative duration becomes 0 (zero
  ones are counted);
- ``baseTimeNanoseconds`` or a file name's epoch outside 1970..2200 is ignored (the time base
  falls back as if it were missing); a rank outside 0..2**31-1 (from ``distributedInfo`` or
  the file name) is unknown (-1), a world size outside 1..2**31 unknown;
- ``pid``/``tid``, correlation, External id and byte counts beyond 64 bits (``2**80``,
  ``"0x" + 40×"f"``, ``1e300``) are null; a stream, group size, byte count or step outside its
  column's range is unknown; a nesting depth past 32767 is clamped;
- bounds of :mod:`parsers.limits`: nesting (``RLPERF_MAX_NESTING``) and events per file
  (``RLPERF_MAX_EVENTS``) are one error; an event longer than the string limit
  (``RLPERF_MAX_STRING``) is dropped unread.
"""

from __future__ import annotations

import math
import re
import zlib
from itertools import compress
from operator import attrgetter, not_
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
from msgspec import Raw, Struct, field

from .errors import InputError
from .events import (
    BOUNDS,
    DURATION_MAX_NS,
    GPU_ACTIVITY_KINDS,
    TIME_MAX_NS,
    bound,
    conform,
    describe,
    nesting_depth,
)
from .json_stream import SKELETON_ARRAY, ArrayStream, NotStreamed
from .jsonbound import decode_bounded, decode_each, decode_nested
from .kineto_export import OWN_CATEGORIES, processes, single, with_processes
from .limits import DECOMPRESSED_BYTES, EVENTS, STRING_BYTES
from .nccl import canonical_coll, canonical_ranks, dtype_bytes, kernel_coll_expr, op_coll_expr
from .reading import GZIP_ERRORS, GzipCut, gunzip
from .source import RANK_IN_NAME, ParsedSource

FORMAT = "kineto"
EXTENSIONS = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")

_KINETO_MARKERS = (
    b'"schemaVersion"',
    b'"deviceProperties"',
    b'"distributedInfo"',
    b'"baseTimeNanoseconds"',
    b'"cpu_op"',
    b'"cuda_runtime"',
    b'"user_annotation"',
    b'"Kernel"',
    b'"kernel"',
    b"ProfilerStep#",
    b"PyTorch Profiler",
)

# Category (lower-cased) → event kind. Categories not listed are not events of the table.
_KIND_OF_CAT: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "gpu_sync",
    "xpu_sync": "gpu_sync",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "driver": "runtime",
    "xpu_runtime": "runtime",
    "xpu_driver": "runtime",
    "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "python_function": "python",
    "cpu_instant_event": "marker",
}
_DEVICE_KINDS = frozenset({"kernel", "memcpy", "memset", "gpu_sync", "gpu_annotation"})

PROCESS_NAMES = 16
"""Process names kept per file (a trace has one per process; more is not a worker's)."""
_US_TO_NS = 1000.0
_EPOCH_US_FLOOR = 1e14
"""``ts`` values above this (≈ 1973 in epoch µs) are epoch µs; below, relative to a base."""


_Num = int | float | str | None


class _Args(Struct, gc=False, frozen=True):
    """The args we keep; collective fields stay raw and are decoded for collectives only."""

    correlation: _Num = None
    ext_id: _Num = field(default=None, name="External id")
    ext_id_old: _Num = field(default=None, name="external id")
    nbytes: _Num = field(default=None, name="bytes")
    size: _Num = None
    flops: _Num = None
    input_dims: Raw = field(default=Raw(b""), name="Input Dims")
    coll_name: Raw = field(default=Raw(b""), name="Collective name")
    dtype: Raw = Raw(b"")
    in_nelems: Raw = field(default=Raw(b""), name="In msg nelems")
    out_nelems: Raw = field(default=Raw(b""), name="Out msg nelems")
    label: Raw = field(default=Raw(b""), name="name")
    group_size: Raw = field(default=Raw(b""), name="Group size")
    pg_name: Raw = field(default=Raw(b""), name="Process Group Name")
    pg_desc: Raw = field(default=Raw(b""), name="Process Group Description")
    pg_ranks: Raw = field(default=Raw(b""), name="Process Group Ranks")
    seq: Raw = field(default=Raw(b""), name="Seq")


_NO_ARGS = _Args()


class _Event(Struct, gc=False):
    """One trace event; ``ph`` is not read: the category alone says what an event is."""

    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = 0.0
    dur: float = 0.0
    args: _Args = _NO_ARGS


class _Trace(Struct, gc=False):
    """Top-level keys we read; metadata is kept raw and decoded leniently (writers vary)."""

    traceEvents: list[Raw] = []
    distributedInfo: Raw = Raw(b"")
    deviceProperties: Raw = Raw(b"")
    baseTimeNanoseconds: Raw = Raw(b"")
    displayTimeUnit: Raw = Raw(b"")
    schemaVersion: Raw = Raw(b"")
    traceName: Raw = Raw(b"")
    host_name: Raw = Raw(b"")
    hostname: Raw = Raw(b"")
    roctracer_version: Raw = Raw(b"")
    hip_runtime_version: Raw = Raw(b"")
    rlperf: Raw = Raw(b"")


def _raw_value(raw: Raw) -> Any:
    """A metadata value decoded leniently: None when absent, malformed or longer than the string
    limit (a value that long is damage, and decoding it would materialise it)."""
    if not raw or len(raw) > STRING_BYTES.value:
        return None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


class _DistInfo(Struct, gc=False):
    rank: Any = None
    world_size: Any = None
    backend: str | None = None
    pg_count: int | None = None
    pg_config: list[dict[str, Any]] | None = None
    nccl_version: str | None = None


_TRACE_DECODER = msgspec.json.Decoder(_Trace)


BARE_ARRAY_SCORE = 60
"""A bare array of events with Kineto's markers: below the span traces' own markers (85)."""


def sniff(head: bytes, path: Path) -> int:
    """A JSON object with ``traceEvents`` and Kineto's markers, or a bare array of events (Chrome's
    JSON Array Format) with two of them."""
    text = head.lstrip()
    markers = sum(1 for m in _KINETO_MARKERS if m in head)
    if text.startswith(b"["):
        return BARE_ARRAY_SCORE if b'"ph"' in head and markers >= 2 else 0
    if not text.startswith(b"{"):
        return 0
    has_events = b'"traceEvents"' in head
    if has_events and markers:
        return 90
    if markers >= 2:
        return 70
    if has_events:
        return 40
    return 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    """The file streamed (memory bounded by a block); read whole when the stream reader does not
    take it (damaged, cut, unusual), which states each problem (module docstring)."""
    path = Path(path)
    try:
        return _parse_stream(path, source)
    except NotStreamed:
        return _parse_whole(path, source)


def _parse_whole(path: Path, source: int) -> ParsedSource:
    out = ParsedSource(path=path, format=FORMAT)
    data = _read(path, out)
    trace = _decode(path, data, out)
    _warn_gzip_cut(out)
    EVENTS.check(path, len(trace.traceEvents))
    _warn_bare(out)
    meta = _metadata(path, trace, out)
    size = len(data)
    del data
    out.events = _events(path, trace, meta, source, out, size)
    _graph_facts(out, meta)
    out.meta.update(meta)
    return out


def _parse_stream(path: Path, source: int) -> ParsedSource:
    """The events decoded a run of blocks at a time, in the whole reading's chunks of
    :data:`_CHUNK`; the other top-level keys, a small skeleton document, decoded at the end. What
    the events' chunks count goes to a scratch source, merged after the metadata's own counts, so
    that counts and warnings come in the whole reading's order."""
    out = ParsedSource(path=path, format=FORMAT)
    scratch = ParsedSource(path=path, format=FORMAT)
    try:
        DECOMPRESSED_BYTES.check(path, path.stat().st_size)
    except OSError:
        raise NotStreamed from None
    found: dict[str, Any] = {}
    chunks = _Chunks(found)
    stream = ArrayStream(path, b"traceEvents", _decode_run, bare=True)
    pending: list[_Event] = []
    for run in stream.runs():
        if stream.count > EVENTS.value:
            stream.decode, pending, chunks.frames = _validate_run, [], []
            continue
        pending += run
        while len(pending) >= _CHUNK:
            chunks.add(pending[:_CHUNK], scratch)
            del pending[:_CHUNK]
    if pending:
        chunks.add(pending, scratch)
    del pending
    trace = _skeleton(path, stream.skeleton(), stream.bare)
    EVENTS.check(path, stream.count)
    if stream.bare:
        out.meta[BARE] = True
        _warn_bare(out)
    meta = _metadata(path, trace, out)
    meta.update(found)
    _merge_counts(scratch, out)
    out.events = _table(chunks, meta, source, out)
    _graph_facts(out, meta)
    out.meta.update(meta)
    return out


_RAWS_DECODER = msgspec.json.Decoder(list[Raw])
_RUN_LEVELS = 2
"""A run of events decoded as ``[…]`` sits one level below its place in the document; one more
is margin: a run that may nest near the bound goes to the whole reading, which decides."""


def _decode_run(data: bytes) -> list[_Event]:
    try:
        return decode_nested(_EVENTS_DECODER, data, _RUN_LEVELS)
    except RecursionError:
        raise NotStreamed from None


def _validate_run(data: bytes) -> list[Raw]:
    """Past the event limit: runs only checked (the whole reading also decodes the document
    before it counts its events)."""
    try:
        return decode_nested(_RAWS_DECODER, data, _RUN_LEVELS)
    except RecursionError:
        raise NotStreamed from None


def _skeleton(path: Path, skeleton: bytes, bare: bool) -> _Trace:
    """The top-level keys but the events; the array found must be the one a decoder keeps (of a
    bare array: the document, nothing after it)."""
    if bare:
        if skeleton.strip() != SKELETON_ARRAY:
            raise NotStreamed
        return _Trace()
    try:
        trace = decode_bounded(_TRACE_DECODER, skeleton, path)
    except (msgspec.DecodeError, msgspec.ValidationError, InputError):
        raise NotStreamed from None
    if [bytes(r) for r in trace.traceEvents] != [SKELETON_ARRAY[1:-1]]:
        raise NotStreamed
    trace.traceEvents = []
    return trace


def _merge_counts(scratch: ParsedSource, out: ParsedSource) -> None:
    for key, value in scratch.meta.items():
        if key == "quality":
            for kind, count in value.items():
                out.tally(kind, count)
        else:
            out.meta[key] = value


# --- reading -----------------------------------------------------------------------------------


def _read(path: Path, out: ParsedSource) -> bytes:
    try:
        if path.is_file():
            DECOMPRESSED_BYTES.check(path, path.stat().st_size)
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw.strip():
        raise InputError(path, "empty file")
    if raw[:2] != b"\x1f\x8b":
        if path.name.endswith(".gz") and raw.lstrip()[:1] not in (b"{", b"["):
            raise InputError(path, "not gzip data (the name ends .gz), nor JSON")
        return raw
    try:
        return gunzip(raw)
    except GzipCut as cut:
        data = cut.data
    except GZIP_ERRORS:
        data = _members_before_damage(path, raw)
    DECOMPRESSED_BYTES.check(path, len(data))
    if not data.strip():
        raise InputError(path, "gzip stream ends early (truncated file?) before any content")
    out.meta["truncated_gzip"] = True
    out.meta[_GZIP_READ] = len(raw)
    return data


def _members_before_damage(path: Path, raw: bytes) -> bytes:
    """What the gzip members hold up to the first damage: every whole member, then what the
    damaged one gives before it (a later member's damage keeps the members before it, which a
    single decompressor, stopping at the first member's end, lost). Damage in the first member
    before any output is one :class:`InputError`."""
    limit = DECOMPRESSED_BYTES.value
    parts: list[bytes] = []
    total = 0
    rest = raw
    while rest[:2] == b"\x1f\x8b" and total <= limit:
        decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            part = decomp.decompress(rest, limit - total + 1)
        except zlib.error as exc:
            if not parts:
                raise InputError(path, f"corrupt gzip data ({exc})") from None
            break
        parts.append(part)
        total += len(part)
        if not decomp.eof:
            break
        rest = decomp.unused_data
    return b"".join(parts)


_GZIP_READ = "_gzip_bytes_read"
"""Compressed bytes a cut gzip stream held: all a cut stream says of its size (its trailer, with
the JSON's length, is what was cut)."""


def _gzip_cut(out: ParsedSource) -> str:
    return (
        f"gzip stream ends early (truncated file?) after {out.meta[_GZIP_READ]:,} compressed bytes"
    )


def _warn_gzip_cut(out: ParsedSource) -> None:
    """A cut gzip stream whose JSON is whole (only its trailer cut): nothing of the trace lost;
    one whose JSON is cut is stated by the salvage."""
    read = out.meta.pop(_GZIP_READ, None)
    if read is not None and "salvaged" not in out.meta:
        out.warn(f"gzip stream ends early (truncated file?) after {read:,} compressed bytes, but "
                 "the JSON it holds is complete: no event lost")


BARE = "json_array_format"
"""``meta`` flag: the file is a bare array of events (Chrome's JSON Array Format)."""
_UNCLOSED = "_unclosed_array"


def _warn_bare(out: ParsedSource) -> None:
    if not out.meta.get(BARE):
        return
    unclosed = (
        "; the array has no closing ']', which the format allows: events a killed writer never "
        "wrote cannot be told from a trace that ended"
        if out.meta.pop(_UNCLOSED, False)
        else ""
    )
    out.warn(
        "a bare JSON array of trace events (Chrome's JSON Array Format), read as a Kineto trace "
        "without its metadata (distributedInfo, deviceProperties, baseTimeNanoseconds): the rank "
        f"is known only from the file name, the devices' properties are unknown{unclosed}"
    )


_ARRAY_DECODER = msgspec.json.Decoder(list[Raw])
_BARE_START = re.compile(rb"[ \t\n\r]*\[")


def _decode(path: Path, data: bytes, out: ParsedSource) -> _Trace:
    try:
        if _BARE_START.match(data):
            out.meta[BARE] = True
            return _Trace(traceEvents=decode_bounded(_ARRAY_DECODER, data, path))
        return decode_bounded(_TRACE_DECODER, data, path)
    except msgspec.ValidationError as exc:
        raise InputError(path, f"unexpected field type: {exc}") from None
    except msgspec.DecodeError as exc:
        message = str(exc)
    if "UTF-8" not in message and is_cut(data, message):
        return _salvage(path, data, out)
    if "UTF-8" in message:
        out.warn("invalid UTF-8 in the file; bad bytes replaced")
        fixed = data.decode("utf-8", errors="replace").encode("utf-8")
        return _decode(path, fixed, out)
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        raise InputError(path, "not JSON (does not start with '{')")
    raise InputError(path, f"malformed JSON: {message}")


def _salvage(path: Path, data: bytes, out: ParsedSource) -> _Trace:
    """Keep every complete event before the cut of a file whose writer was killed. Of a cut gzip
    stream only the JSON read is known, not how much followed; of a bare array, an end after a
    complete event is no cut (its ``]`` is optional)."""
    bare = bool(out.meta.get(BARE))
    start = data.find(b"[") if bare else data.find(b'"traceEvents"')
    if start < 0:
        raise InputError(path, "JSON cut short before any trace events")
    # "]}" closes the events array and the document after a complete event; "}" the document
    # after a complete top-level value that follows the array. Nothing may close an event.
    closings, decoder = ((b"]",), _ARRAY_DECODER) if bare else ((b"]}", b"}"), _TRACE_DECODER)
    found = salvage_prefix(decoder, data, start, len(data), closings, path)
    if found is None:
        raise InputError(path, "JSON cut short and no complete event could be salvaged")
    value, kept = found
    trace = _Trace(traceEvents=value) if bare else value
    events = len(trace.traceEvents)
    gzip_cut = _GZIP_READ in out.meta
    if bare and not gzip_cut and data[kept:].strip(_BLANK_OR_COMMA) == b"":
        out.meta[_UNCLOSED] = True
        return trace
    lost = len(data) - kept
    if gzip_cut:
        out.warn(
            f"{_gzip_cut(out)}: salvaged {events:,} complete events from the {len(data):,} bytes "
            "of JSON read; the rest of the trace is lost, its size unknown (a cut gzip stream "
            "does not record it)"
        )
        out.meta["salvaged"] = {
            "events": events, "json_bytes_read": len(data), "gzip_bytes_read": out.meta[_GZIP_READ]
        }
        return trace
    out.warn(
        f"JSON cut short (writer killed?): salvaged {events:,} complete "
        f"events; the last {lost:,} bytes ({lost / len(data):.1%}) and every event the "
        "writer never wrote are lost"
    )
    out.meta["salvaged"] = {"events": events, "bytes_lost": lost}
    return trace


_BLANK_OR_COMMA = b" \t\n\r,"


# --- cut JSON, shared with the other Chrome-trace readers ------------------------------------

_BYTE_AT = re.compile(r"\(byte (\d+)\)")
_SALVAGE_TRIES = 64


def cut_at(data: bytes, message: str) -> int | None:
    """Where a decode error says ``data`` stops: its end when the text is cut short (msgspec says
    "truncated", or names the last byte: a cut after ``1.`` or ``-`` is an invalid number there),
    else the byte it names; None when it names none."""
    if "truncated" in message:
        return len(data)
    m = _BYTE_AT.search(message)
    return None if m is None else min(int(m.group(1)), len(data))


def is_cut(data: bytes, message: str) -> bool:
    """The decode error is the end of the text, not damage inside it."""
    at = cut_at(data, message)
    return at is not None and at >= len(data.rstrip())


def salvage_prefix(
    decoder: msgspec.json.Decoder,
    data: bytes,
    start: int,
    stop: int,
    closings: tuple[bytes, ...],
    path: Path,
) -> tuple[Any, int] | None:
    """The longest ``data[:k] + closing`` (``start < k <= stop``, k right after a ``}`` that ends
    a value) that decodes, and k; None when no such prefix does.

    A ``}`` ends a value when a ``,``, ``]`` or the end follows it; one followed by ``}`` closes
    a nested object, whose parent is the candidate. Each try decodes the whole prefix, so tries are
    few: the first candidate is nearly always the one.
    """
    end, tries = stop, 0
    while tries < _SALVAGE_TRIES:
        cut = data.rfind(b"}", start, end)
        if cut < 0:
            return None
        end = cut
        follows = data[cut + 1 : min(cut + 65, stop)].lstrip()[:1]
        if follows not in (b"", b",", b"]"):
            continue
        tries += 1
        head = data[: cut + 1]
        for closing in closings:
            try:
                return decode_bounded(decoder, head + closing, path), cut + 1
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
    return None


# --- run-level facts ---------------------------------------------------------------------------

_TB_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.(?P<ms>\d{13})\.pt\.trace\.json")


def _metadata(path: Path, trace: _Trace, out: ParsedSource) -> dict[str, Any]:
    meta: dict[str, Any] = {"schema_version": _raw_value(trace.schemaVersion)}
    dist = None
    if trace.distributedInfo and len(trace.distributedInfo) <= STRING_BYTES.value:
        try:
            dist = msgspec.json.decode(trace.distributedInfo, type=_DistInfo)
        except (msgspec.DecodeError, msgspec.ValidationError):
            out.warn("distributedInfo is not in the expected shape; ignored")
    rank_lo, rank_hi = BOUNDS["rank"]
    rank = _meta_int(
        dist.rank if dist else None, rank_lo, rank_hi, "distributedInfo.rank", "rank", out
    )
    if rank is not None:
        meta["rank_from"] = "distributedInfo"
    else:
        m = RANK_IN_NAME.search(path.name)
        rank = _meta_int(
            m.group(1) if m else None, rank_lo, rank_hi, "the rank in the file name", "rank", out
        )
        if rank is not None:
            meta["rank_from"] = "file name"
    meta["rank"] = rank if rank is not None else -1
    table = processes(_raw_value(trace.rlperf), out)
    if table:
        meta["processes"] = table
        meta["rank"] = single(table, "rank") if single(table, "rank") is not None else -1
    if dist:
        meta["world_size"] = _meta_int(
            dist.world_size, 1, rank_hi + 1, "distributedInfo.world_size", "world_size", out
        )
        meta["backend"] = dist.backend
        meta["nccl_version"] = dist.nccl_version
        if dist.pg_config:
            meta["pg_config"] = [
                {
                    "pg_name": str(pg.get("pg_name", "")),
                    "pg_desc": pg.get("pg_desc", pg.get("uid")),
                    "ranks": canonical_ranks(pg.get("ranks")),
                    "pg_size": _meta_int(
                        pg.get("pg_size"), 0, rank_hi + 1, "a pg_config pg_size", "pg_size", out
                    ),
                    "backend_config": pg.get("backend_config"),
                }
                for pg in dist.pg_config
                if isinstance(pg, dict)
            ]
    tb = _TB_HANDLER_NAME.match(path.name)
    host = (
        _raw_value(trace.host_name)
        or _raw_value(trace.hostname)
        or (tb.group("host") if tb else None)
    )
    host = str(host) if host is not None else None
    meta["host"] = single(table, "host") if table else host
    meta["rocm"] = bool(trace.roctracer_version or trace.hip_runtime_version)
    meta["device_properties"] = _named_devices(_raw_value(trace.deviceProperties), meta["rocm"])
    meta["trace_name"] = _raw_value(trace.traceName)
    meta["display_time_unit"] = _raw_value(trace.displayTimeUnit)
    base = _raw_value(trace.baseTimeNanoseconds)
    meta["base_time_ns"] = _meta_int(
        base, 0, TIME_MAX_NS - 1, "baseTimeNanoseconds", "base_time", out
    )
    ms_hi = (TIME_MAX_NS - 1) // 10**6
    meta["tb_epoch_ms"] = _meta_int(
        tb.group("ms") if tb else None, 0, ms_hi, "the file name's epoch ms", "base_time", out
    )
    return meta


_GIB = 1 << 30
UNNAMED_DEVICES: tuple[tuple[tuple[int, int], int, tuple[int, int], str], ...] = (
    ((9, 4), 304, (180, 200), "AMD Instinct MI300X"),
)
"""ROCm devices a trace leaves unnamed, by ``(computeMajor, computeMinor)``, compute units
(``numSms``) and memory in GiB: ROCm 7 profilers write ``"name": ""`` for every MI300X (vLLM and
SGLang traces), which left them without a peak and so without MFU. 304 CUs with 192 GiB is an
MI300X and nothing else (the MI325X has 256 GiB, the MI300A 228 CUs)."""


def _named_devices(props: Any, rocm: bool) -> Any:
    """``deviceProperties`` with each unnamed ROCm device named from its properties when they
    identify one model; the name says it was read from them, so no report passes it as stated."""
    if not rocm or not isinstance(props, list):
        return props
    return [_device_named(p) if isinstance(p, dict) and not p.get("name") else p for p in props]


def _device_named(entry: dict[str, Any]) -> dict[str, Any]:
    arch = (entry.get("computeMajor"), entry.get("computeMinor"))
    memory = entry.get("totalGlobalMem")
    if not isinstance(memory, int | float):
        return entry
    for want, units, (lo, hi), name in UNNAMED_DEVICES:
        if arch == want and entry.get("numSms") == units and lo * _GIB <= memory <= hi * _GIB:
            said = f"{units} CUs, {memory / _GIB:.0f} GiB, gfx{want[0]}{want[1]}x"
            return {**entry, "name": f"{name} (unnamed in the trace; from its properties: {said})"}
    return entry


def _meta_int(value: Any, lo: int, hi: int, what: str, kind: str, out: ParsedSource) -> int | None:
    """An integer the file states, or None: absent or -1 (unknown) silently; anything outside
    ``lo..hi`` (or not a number) with a warning and a count, never wrapped into a column."""
    if value is None:
        return None
    number = _as_int(value)
    if number is not None and lo <= number <= hi:
        return number
    if number == -1:
        return None
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    out.warn(f"{what} {shown} is out of range ({lo:,}..{hi:,}); ignored")
    out.tally(f"out_of_range_{kind}")
    return None


def _time_base_ns(
    trace_base: int | None, ts: pl.Series | None, meta: dict[str, Any], out: ParsedSource
) -> int:
    """Nanoseconds to add to ``ts·1000`` for absolute epoch time."""
    if trace_base is not None:
        meta["time_base"] = "baseTimeNanoseconds"
        return trace_base
    ts_typical = _typical_ts(ts) if ts is not None else 0.0
    if ts_typical >= _EPOCH_US_FLOOR or ts_typical == 0:
        meta["time_base"] = "epoch microseconds"
        return 0
    if meta.get("tb_epoch_ms"):
        base = _kineto_base_ns(meta["tb_epoch_ms"])
        meta["time_base"] = "quarter start from the file name's epoch ms"
        out.warn(
            "baseTimeNanoseconds missing (file cut?): time base taken from the file name's "
            "timestamp"
        )
        return base
    meta["time_base"] = "unknown (relative)"
    out.warn("timestamps are relative and baseTimeNanoseconds is missing: absolute time unknown")
    return 0


KINETO_BASE_PERIOD_S = 7_889_238
"""What libkineto floors its base time to: ``std::chrono::floor`` to three of C++'s average
months (2,629,746 s each), counted from the epoch, not calendar quarters (rl-insight's traces
state 1,767,189,312 s = 224 periods, 2025-12-31 13:55:12 UTC)."""


def _kineto_base_ns(epoch_ms: int) -> int:
    """The base time libkineto wrote for a trace saved at ``epoch_ms`` (the TensorBoard file
    name's stamp): the last multiple of :data:`KINETO_BASE_PERIOD_S` before it. A calendar
    quarter's start put rl-insight's rollout trace 10.08 h late."""
    period_ms = KINETO_BASE_PERIOD_S * 1000
    return epoch_ms // period_ms * period_ms * 1_000_000


# --- events ------------------------------------------------------------------------------------


def _events(
    path: Path, trace: _Trace, meta: dict[str, Any], source: int, out: ParsedSource, size: int
) -> pl.DataFrame:
    """Decode the events chunk by chunk (bounded memory) into one frame, then finish it; no event
    of a file within the string limit can be over it."""
    raws = (
        trace.traceEvents
        if size <= STRING_BYTES.value
        else _within_string_limit(trace.traceEvents, out)
    )
    chunks = _Chunks(meta)
    for offset in range(0, len(raws), _CHUNK):
        chunks.add(_decode_chunk(path, raws, offset, out), out)
    trace.traceEvents = []
    del raws
    return _table(chunks, meta, source, out)


class _Chunks:
    """The frames of the chunks decoded so far, the categories they skipped, and what their
    bookkeeping rows say (process names, the profiler's window) into ``found``."""

    def __init__(self, found: dict[str, Any]) -> None:
        self.found = found
        self.frames: list[pl.DataFrame] = []
        self.unknown: set[str] = set()

    def add(self, events: list[_Event], out: ParsedSource) -> None:
        cats = list(map(_CAT, events))
        self.unknown.update(
            c for c in set(cats) if c not in _KIND_OF_ANY_CASE and c not in _NOT_EVENTS
        )
        if "" in cats:
            _process_names(events, cats, self.found)
            _window_marks(events, cats, self.found)
        if "Trace" in cats:
            span = events[cats.index("Trace")]
            self.found["profiler_window_us"] = (span.ts, span.ts + span.dur)
        kinds = list(map(_KIND_OF_ANY_CASE.get, cats))
        picked = list(compress(events, kinds))
        if picked:
            self.frames.append(_chunk_frame(picked, list(filter(None, kinds)), out))


def _table(chunks: _Chunks, meta: dict[str, Any], source: int, out: ParsedSource) -> pl.DataFrame:
    """The chunks' frames as one finished event table."""
    if chunks.unknown:
        meta["skipped_categories"] = sorted(chunks.unknown)
    frames, chunks.frames = chunks.frames, []
    _window_from_marks(meta)
    if not frames:
        out.warn("no trace events of a known kind")
        _time_base_ns(meta["base_time_ns"], None, meta, out)
        return conform(pl.DataFrame(), source=source)
    frame = pl.concat(frames, how="diagonal_relaxed", rechunk=False)
    del frames
    base = _time_base_ns(meta["base_time_ns"], frame["ts"], meta, out)
    table = _finish(_in_range(frame, base, out), base, meta, source, out)
    warn_quality(out, _WARNED)
    return table


def _process_names(events: list[_Event], cats: list[str], meta: dict[str, Any]) -> None:
    """What the processes called themselves (``process_name`` rows, which have no category):
    ``ray::WorkerDict.actor_rollout_compute_log_prob``, ``VLLM::Worker_TP0``. The role a trace's
    content states, next to the one its folder names."""
    names = meta.setdefault("process_names", [])
    at = cats.index("")
    while len(names) < PROCESS_NAMES:
        event = events[at]
        value = _raw_value(event.args.label) if event.name == "process_name" else None
        if isinstance(value, str) and value not in names:
            names.append(value)
        try:
            at = cats.index("", at + 1)
        except ValueError:
            return


WINDOW_MARKS = {"Iteration Start: PyTorch Profiler": 0, "Record Window End": 1}
"""The instants Kineto writes at the start and end of what it recorded, with no category."""


def _window_marks(events: list[_Event], cats: list[str], meta: dict[str, Any]) -> None:
    """The profiler's start and end instants: the window a trace without a ``Trace`` span
    states (verl's trimmed per-role headers), which the data-quality check holds events to."""
    marks = meta.setdefault("_window_marks", [None, None])
    for event in compress(events, map(not_, cats)):
        at = WINDOW_MARKS.get(event.name)
        if at is not None and marks[at] is None:
            marks[at] = event.ts


def _window_from_marks(meta: dict[str, Any]) -> None:
    start, end = meta.pop("_window_marks", None) or (None, None)
    if "profiler_window_us" in meta or start is None or end is None or end <= start:
        return
    meta["profiler_window_us"] = (start, end)


def _typical_ts(ts: pl.Series) -> float:
    """The median plausible ``ts``: what decides epoch µs or relative, which one damaged value
    (a ``ts`` of 1e30) must not flip as it would flip the maximum."""
    plausible = ts.filter(ts.abs() < TIME_MAX_NS / _US_TO_NS)
    return float(plausible.median() or 0.0) if plausible.len() else 0.0


def _within_string_limit(raws: list[Raw], out: ParsedSource) -> list[Raw]:
    """The events whose JSON is no longer than the string limit: a longer one holds a string
    (or args) no trace writes, and decoding it would materialise it. Dropped and counted."""
    limit = STRING_BYTES.value
    if not raws or max(map(len, raws)) <= limit:
        return raws
    kept = [r for r in raws if len(r) <= limit]
    dropped = len(raws) - len(kept)
    out.tally("dropped_oversized_event", dropped)
    out.warn(
        f"{dropped:,} events longer than {STRING_BYTES.what} limit ({limit:,}) dropped; "
        f"set {STRING_BYTES.env} to raise it"
    )
    return kept


_CHUNK = 8192
"""Events decoded at a time: Python objects exist for one chunk only (~1.6 KB an event with its
args: 16,384 held 27 MB at once, 8,192 hold 14 MB; 4,096 decoded 10 % slower on
df_index_resolver, CPU-s best of 5)."""
_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_EVENT_DECODER = msgspec.json.Decoder(_Event)
_AT_INDEX = re.compile(r"`\$\[(\d+)\]")


def _decode_chunk(path: Path, raws: list[Raw], offset: int, out: ParsedSource) -> list[_Event]:
    chunk = raws[offset : offset + _CHUNK]
    try:
        return decode_bounded(_EVENTS_DECODER, b"[" + b",".join(chunk) + b"]", path)
    except msgspec.ValidationError as exc:
        if "out of range" not in str(exc):
            at = _events_at(out)
            where = _AT_INDEX.sub(lambda m: f"`{at}[{offset + int(m.group(1))}]", str(exc))
            raise InputError(path, f"unexpected field type: {where}") from None
    except msgspec.DecodeError as exc:
        if "UTF-8" not in str(exc):
            raise InputError(path, f"malformed JSON: {exc}") from None
        out.warn("invalid UTF-8 in the file; bad bytes replaced")
        chunk = [Raw(bytes(r).decode("utf-8", errors="replace").encode("utf-8")) for r in chunk]
    return _readable_events(path, chunk, offset, out)


def _readable_events(path: Path, chunk: list[Raw], offset: int, out: ParsedSource) -> list[_Event]:
    """One event at a time (the slow path, for a chunk that failed): an event holding a number
    JSON's doubles cannot hold (``1e999``) is dropped and counted; a wrong type is the error."""
    events: list[_Event] = []
    for i, result in enumerate(decode_each(_EVENT_DECODER, chunk, path)):
        if isinstance(result, _Event):
            events.append(result)
        elif isinstance(result, msgspec.ValidationError) and "out of range" in str(result):
            out.tally("dropped_number_out_of_range")
        elif isinstance(result, msgspec.ValidationError):
            where = str(result).replace("`$", f"`{_events_at(out)}[{offset + i}]")
            raise InputError(path, f"unexpected field type: {where}")
        else:
            raise result
    return events


def _events_at(out: ParsedSource) -> str:
    """The JSON path of the events array in an error message."""
    return "$" if out.meta.get(BARE) else "$.traceEvents"


def _chunk_frame(picked: list[_Event], kinds: list[str], out: ParsedSource) -> pl.DataFrame:
    args = list(map(_ARGS, picked))
    ext = list(map(_EXT, args))
    if ext.count(None) == len(ext):
        ext = list(map(_EXT_OLD, args))
    frame = pl.DataFrame(
        {
            "kind": kinds,
            "name": pl.Series(list(map(_NAME, picked)), dtype=pl.Categorical),
            "pid": _id_column(list(map(_PID, picked)), "pid", out),
            "tid": _id_column(list(map(_TID, picked)), "tid", out),
            "ts": pl.Series(list(map(_TS, picked)), dtype=pl.Float64),
            "dur": pl.Series(list(map(_DUR, picked)), dtype=pl.Float64),
            "corr": _opt_int(list(map(_CORR, args)), out),
            "ext_id": _opt_int(ext, out),
        }
    )
    frame = frame.with_columns(
        _sparse(frame, args, "bytes", ("memcpy", "memset"), _copy_bytes, out),
        _flops_column(frame, args, out),
    )
    collectives = _collective_args(args, out)
    return frame.hstack(collectives) if collectives is not None else frame


def _id_column(values: list[int | str], name: str, out: ParsedSource) -> pl.Series:
    """pid or tid: a string (Kineto's "Spans") is no id and becomes null quietly; an integer
    beyond 64 bits is damage, also null, and counted."""
    ids = pl.Series(values, dtype=pl.Int64, strict=False)
    if ids.null_count():
        out.tally(
            f"out_of_range_{name}",
            sum(1 for v in values if type(v) is int and not _I64_MIN <= v <= _I64_MAX),
        )
    return ids


_CAT = attrgetter("cat")
_NAME = attrgetter("name")
_PID = attrgetter("pid")
_TID = attrgetter("tid")
_TS = attrgetter("ts")
_DUR = attrgetter("dur")
_ARGS = attrgetter("args")
_CORR = attrgetter("correlation")
_EXT = attrgetter("ext_id")
_EXT_OLD = attrgetter("ext_id_old")
_COLL = attrgetter("coll_name")
_KIND_OF_ANY_CASE = {**_KIND_OF_CAT, **{k.capitalize(): v for k, v in _KIND_OF_CAT.items()}}
_NOT_EVENTS = frozenset({"", "ac2g", "fwdbwd", "async_gpu", "async_cpu_to_gpu", "Trace"}) | (
    OWN_CATEGORIES
)
"""Categories that are links or bookkeeping, not events (flows, the profiler's own span, the
derived tracks of rlperf's export)."""


def _sparse(
    frame: pl.DataFrame,
    args: list[_Args],
    column: str,
    kinds: tuple[str, ...],
    value,
    out: ParsedSource,
) -> pl.Series:
    """A column that only a few kinds carry: touch only those events' args."""
    rows = frame.with_row_index("i").filter(pl.col("kind").is_in(list(kinds)))["i"].to_list()
    values: list[object] = [None] * frame.height
    for i in rows:
        values[i] = value(args[i])
    return _opt_int(values, out).alias(column)


def _copy_bytes(a: _Args) -> object:
    return a.nbytes if a.nbytes is not None else a.size


_FLOPS = attrgetter("flops")
MATMUL_DIMS: dict[str, tuple[int, int]] = {
    "aten::mm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::bmm": (0, 1),
    "aten::baddbmm": (1, 2),
}
"""Matrix products whose FLOPs follow from their recorded shapes (``record_shapes``): the
positions of the two factors in ``Input Dims``; PyTorch's own ``with_flops`` counts them the
same way (2 × the product of the output's dims and the inner dim)."""
_DIMS = msgspec.json.Decoder(list[list[int]])


def _flops_column(frame: pl.DataFrame, args: list[_Args], out: ParsedSource) -> pl.Series:
    """``args.flops`` as recorded (``with_flops``); else, for the matrix products of
    :data:`MATMUL_DIMS`, computed from their ``Input Dims`` and counted in ``meta``."""
    values: list[object] = list(map(_FLOPS, args))
    ops = frame.with_row_index("i").filter(
        (pl.col("kind") == "cpu_op")
        & pl.col("name").cast(pl.String).is_in(list(MATMUL_DIMS))
    ).select("i", pl.col("name").cast(pl.String))
    computed = 0
    for i, name in ops.iter_rows():
        if values[i] is None and args[i].input_dims:
            values[i] = _matmul_flops(args[i].input_dims, MATMUL_DIMS[name])
            computed += values[i] is not None
    if computed:
        out.meta["flops_from_shapes"] = out.meta.get("flops_from_shapes", 0) + computed
    return _opt_int(values, out).alias("flops")


def _matmul_flops(raw: Raw, factors: tuple[int, int]) -> int | None:
    """2·(batch)·M·K·N from the factors' dims; None when the shapes are not a matrix product."""
    try:
        dims = _DIMS.decode(raw)
        left, right = dims[factors[0]], dims[factors[1]]
    except (msgspec.DecodeError, IndexError):
        return None
    if len(left) != len(right) or len(left) not in (2, 3) or left[-1] != right[-2]:
        return None
    if min(left + right) < 0:
        return None
    batch = left[0] if len(left) == 3 else 1
    return 2 * batch * left[-2] * left[-1] * right[-1]


def _collective_args(args: list[_Args], out: ParsedSource) -> pl.DataFrame | None:
    """Collective metadata from ``record_param_comms`` / NCCL kernel args, decoded for those
    only."""
    rows = list(compress(range(len(args)), map(_COLL, args)))
    if not rows:
        return None
    n = len(args)
    cols: dict[str, list[Any]] = {
        k: [None] * n
        for k in ("coll_name", "pg", "pg_desc", "pg_ranks", "group_size", "seq", "coll_bytes")
    }
    for i in rows:
        a = args[i]
        name = _raw_value(a.coll_name)
        cols["coll_name"][i] = canonical_coll(str(name)) if name is not None else None
        pg = _raw_value(a.pg_name)
        cols["pg"][i] = None if pg is None else str(pg)
        desc = _raw_value(a.pg_desc)
        cols["pg_desc"][i] = None if desc is None else str(desc)
        cols["pg_ranks"][i] = canonical_ranks(_raw_value(a.pg_ranks))
        cols["group_size"][i] = _raw_value(a.group_size)
        cols["seq"][i] = _raw_value(a.seq)
        size = dtype_bytes(_str_or_none(_raw_value(a.dtype)))
        nelems = max(
            _as_int(_raw_value(a.in_nelems), 0) or 0, _as_int(_raw_value(a.out_nelems), 0) or 0
        )
        cols["coll_bytes"][i] = nelems * size if size and nelems else None
    return pl.DataFrame(
        {
            "coll_name": pl.Series(cols["coll_name"], dtype=pl.String),
            "pg": pl.Series(cols["pg"], dtype=pl.String),
            "pg_desc": pl.Series(cols["pg_desc"], dtype=pl.String),
            "pg_ranks": pl.Series(cols["pg_ranks"], dtype=pl.String),
            "group_size": _opt_int(cols["group_size"], out),
            "seq": _opt_int(cols["seq"], out),
            "coll_bytes": _opt_int(cols["coll_bytes"], out),
        }
    )


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _opt_int(values: list[object], out: ParsedSource | None = None) -> pl.Series:
    """Integers as i64; a value that is no integer or beyond 64 bits (``2**80``, ``"0x" + 40×"f"``,
    ``1e300``) becomes null and is counted as ``unreadable_arg``."""
    try:
        return pl.Series(values, dtype=pl.Int64)
    except (TypeError, pl.exceptions.PolarsError, OverflowError, ValueError):
        series = pl.Series([_as_int(v) for v in values], dtype=pl.Int64)
    if out is not None:
        out.tally("unreadable_arg", series.null_count() - values.count(None))
    return series


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_INT_TEXT_MAX = 40
"""Characters of the longest integer text read: a longer one is no 64-bit integer."""


def _as_int(value: object, default: int | None = None) -> int | None:
    """``value`` as a 64-bit integer (ints, finite floats, decimal or ``0x`` text), else
    ``default``."""
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        number = int(value) if math.isfinite(value) and _I64_MIN <= value < 2.0**63 else None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str) and len(value) <= _INT_TEXT_MAX:
        number = _int_text(value.strip())
    else:
        number = None
    return number if number is not None and _I64_MIN <= number <= _I64_MAX else default


def _int_text(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and _I64_MIN <= number < 2.0**63 else None


def _in_range(frame: pl.DataFrame, base: int, out: ParsedSource) -> pl.DataFrame:
    """The events whose numbers can be true, the rest dropped and counted (module docstring):
    a start outside 1970..2200, a duration over a year, a GPU row on no possible device (a
    ``pid`` out of range, or unread: the contract has no GPU row off a device). Checked
    in float before any integer arithmetic, which would wrap. Negative durations are kept (set to
    0 later) and counted, as are zero durations of ranges."""
    start = pl.col("ts") * _US_TO_NS + float(base)
    bad_time = ~start.is_between(0.0, float(TIME_MAX_NS), closed="left")
    bad_dur = ~(pl.col("dur") * _US_TO_NS <= float(DURATION_MAX_NS))
    lo, hi = BOUNDS["device"]
    pid = pl.col("pid")
    bad_device = pl.col("kind").is_in(list(_DEVICE_KINDS)) & ~pid.is_between(lo, hi).fill_null(
        False
    )
    kept = ~(bad_time | bad_dur | bad_device)
    counts = frame.select(
        dropped_time_out_of_range=bad_time.sum(),
        dropped_duration_out_of_range=(~bad_time & bad_dur).sum(),
        dropped_device_out_of_range=(~bad_time & ~bad_dur & bad_device).sum(),
        negative_dur=(kept & (pl.col("dur") < 0)).sum(),
        zero_dur=(kept & (pl.col("dur") == 0) & (pl.col("kind") != "marker")).sum(),
    ).row(0, named=True)
    for kind, count in counts.items():
        out.tally(kind, count)
    dropped = counts["dropped_time_out_of_range"] + counts["dropped_duration_out_of_range"]
    return frame.filter(kept) if dropped + counts["dropped_device_out_of_range"] else frame


_WARNED = (
    "dropped_number_out_of_range", "dropped_time_out_of_range", "dropped_duration_out_of_range",
    "dropped_device_out_of_range", "negative_dur", "clamped_depth", "unreadable_arg",
    "out_of_range_pid", "out_of_range_tid", "out_of_range_stream", "out_of_range_group_size",
    "out_of_range_bytes", "out_of_range_flops", "out_of_range_step",
)
"""Counts of the event table stated in one warning line; metadata values warn one by one."""


def warn_quality(out: ParsedSource, kinds: tuple[str, ...]) -> None:
    """One warning line for the counts of ``kinds`` the parse tallied (none: no line)."""
    quality = out.meta.get("quality", {})
    line = describe({kind: quality.get(kind, 0) for kind in kinds})
    if line:
        out.warn(f"values out of range: {line}")


def _finish(
    frame: pl.DataFrame, base: int, meta: dict[str, Any], source: int, out: ParsedSource
) -> pl.DataFrame:
    """Absolute times, device/stream for GPU-side rows, collectives, steps, nesting depth."""
    kind = pl.col("kind")
    on_device = kind.is_in(list(_DEVICE_KINDS))
    whole_us = pl.col("ts").floor()
    # epoch µs × 1000 exceeds 2**53: scaled as one float it lands on a 256 ns grid
    fraction_ns = ((pl.col("ts") - whole_us) * _US_TO_NS).round(0).cast(pl.Int64)
    start = whole_us.cast(pl.Int64) * 1000 + fraction_ns + base
    dur = (pl.col("dur").clip(lower_bound=0.0) * _US_TO_NS).round(0).cast(pl.Int64)
    has_args = "coll_name" in frame.columns
    from_args = pl.col("coll_name") if has_args else pl.lit(None, dtype=pl.String)
    facts = _name_facts(frame["name"])
    coll = (
        pl.when(kind == "kernel")
        .then(pl.coalesce(from_args, facts["kernel_coll"]))
        .when(kind.is_in(["cpu_op", "annotation"]))
        .then(pl.coalesce(from_args, facts["op_coll"]))
        .otherwise(from_args)
    )
    collective = coll.is_not_null()
    columns = [
        pl.col("pid").fill_null(-1),
        pl.col("tid").fill_null(-1),
        pl.when(on_device).then(pl.col("pid").fill_null(-1)).otherwise(-1).alias("device"),
        pl.when(on_device).then(pl.col("tid").fill_null(-1)).otherwise(-1).alias("stream"),
        kind,
        pl.col("name"),
        start.alias("start_ns"),
        (start + dur).alias("end_ns"),
        pl.col("corr"),
        pl.col("ext_id"),
        coll.alias("coll"),
        pl.when(collective)
        .then(pl.col("coll_bytes") if has_args else None)
        .otherwise(pl.col("bytes"))
        .alias("bytes"),
        pl.col("flops"),
        facts["step"].alias("step"),
    ]
    if has_args:
        columns += [
            pl.when(collective).then(pl.col(c)).otherwise(None).alias(c)
            for c in ("pg", "pg_desc", "pg_ranks", "group_size", "seq")
        ]
    shaped = frame.select(columns)
    if meta.get("processes"):
        shaped = with_processes(shaped, meta["processes"])
    shaped, counts = bound(_with_depth(shaped, out))
    for problem, count in counts.items():
        out.tally(problem, count)
    if meta.get("processes"):
        return conform(shaped, source=source)
    return conform(shaped, source=source, rank=meta.get("rank", -1), host=meta.get("host"))


def _name_facts(names: pl.Series) -> dict[str, pl.Expr]:
    """What a name alone says (NCCL kernel collective, collective op, profiler step).

    Worked out once per distinct name; the few names that say something become small lookup
    tables applied to the column, so nothing per row is materialised.
    """
    name = pl.col("name")
    facts = pl.DataFrame({"name": names.unique().cast(pl.String)}).with_columns(
        kernel_coll=kernel_coll_expr(name),
        op_coll=op_coll_expr(name),
        step=name.str.extract(r"^ProfilerStep#(\d+)$", 1).cast(pl.Int32, strict=False),
    )
    lookups = {}
    for column, dtype in (("kernel_coll", pl.String), ("op_coll", pl.String), ("step", pl.Int32)):
        known = facts.filter(pl.col(column).is_not_null())
        mapping = dict(zip(known["name"].to_list(), known[column].to_list(), strict=True))
        lookups[column] = (
            name.replace_strict(mapping, default=None, return_dtype=dtype)
            if mapping
            else pl.lit(None, dtype=dtype)
        )
    return lookups


_NESTING_KINDS = ("annotation", "cpu_op", "python", "gpu_annotation")


def _with_depth(frame: pl.DataFrame, out: ParsedSource) -> pl.DataFrame:
    """Depth among events of the same kind on the same thread (or stream); flat kinds keep 0."""
    nests = pl.col("kind").is_in(_NESTING_KINDS)
    ranges = frame.with_row_index("_row").filter(nests)
    depth = pl.zeros(frame.height, dtype=pl.Int16, eager=True)
    if ranges.height:
        keys = ["kind", "pid", "tid", "device", "stream"]
        clamped = nesting_depth(ranges, keys, lambda n: out.tally("clamped_depth", n))
        depth = depth.scatter(ranges["_row"], clamped)
    return frame.with_columns(depth.alias("depth"))


# --- CUDA/HIP graphs ----------------------------------------------------------------------------
#
# Replay: one cudaGraphLaunch/hipGraphLaunch runs every kernel of the graph, and none of those
# kernels has a launch record of its own. CUPTI and roctracer give each of them the graph launch's
# correlation id (every real trace we have does), so they link to it like any launched kernel. A
# writer that leaves a replayed kernel without a correlation id (none, or 0) gets it attributed by
# time: to the last graph launch of the file that started at or before the kernel started (exact
# when a graph's kernels have all started before the next graph is launched); each such repair is
# counted (graph_kernels_linked_by_time). A row whose id no runtime call carries lost its launch
# record (a trimmed trace), which is no sign of a graph: it is left as it is.
#
# Capture: a trace recorded while the engine captures its graphs (StreamBeginCapture …
# StreamEndCapture) lists launches whose kernels were recorded into a graph, not run; meta
# "graph_capture" says so and a warning names the file.

GRAPH_LAUNCH = r"^(cuda|hip)GraphLaunch(_v\d+|_ptsz|_spt)?$"
"""Runtime calls that replay a graph."""
BEGIN_CAPTURE = r"^(cuda|hip)StreamBeginCapture(ToGraph)?(_v\d+|_ptsz|_spt)?$"
END_CAPTURE = r"^(cuda|hip)StreamEndCapture(_v\d+|_ptsz|_spt)?$"


def _runtime(table: pl.DataFrame, pattern: str) -> pl.DataFrame:
    """Runtime calls whose name matches: filtered on kind first, so only their names become
    strings (not every row's)."""
    calls = table.filter(pl.col("kind") == "runtime")
    return calls.filter(pl.col("name").cast(pl.String).str.contains(pattern))


def link_graph_replays(table: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """``table`` with every GPU row without a correlation id given the id of the graph launch
    that replayed it (by time, see above), and the facts: graph ``launches``, ``kernels``
    replayed by them, ``linked_by_time`` of those."""
    launches = _runtime(table, GRAPH_LAUNCH).filter(pl.col("corr").is_not_null())
    if launches.height == 0:
        return table, {}
    gpu = pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS))
    orphan = gpu & (pl.col("corr").is_null() | (pl.col("corr") <= 0))
    rows = table.with_row_index("_row")
    found = (
        rows.filter(orphan)
        .select("_row", "start_ns")
        .sort("start_ns")
        .join_asof(
            launches.select("start_ns", pl.col("corr").alias("_graph")).sort("start_ns"),
            on="start_ns",
            strategy="backward",
        )
        .filter(pl.col("_graph").is_not_null())
    )
    if found.height:
        table = (
            rows.join(found.select("_row", "_graph"), on="_row", how="left")
            .with_columns(pl.coalesce("_graph", "corr").alias("corr"))
            .drop("_row", "_graph")
        )
    replayed = table.filter(gpu & pl.col("corr").is_in(launches["corr"].implode())).height
    return table, {
        "launches": launches.height, "kernels": replayed, "linked_by_time": found.height,
    }


def graph_capture_facts(table: pl.DataFrame) -> dict[str, Any] | None:
    """Stream captures in the trace: how many, and the launches made inside them (recorded into
    a graph, not executed); None when the trace captured nothing."""
    begins = _runtime(table, BEGIN_CAPTURE)
    if begins.height == 0:
        return None
    ends = _runtime(table, END_CAPTURE)
    keys = ["pid", "tid"]
    windows = begins.select(*keys, pl.col("start_ns").alias("_from")).sort("_from").join_asof(
        ends.select(*keys, pl.col("end_ns").alias("_to"), pl.col("end_ns").alias("t")).sort("t"),
        left_on="_from", right_on="t", by=keys, strategy="forward", check_sortedness=False,
    )
    launches = (
        _runtime(table, r"Launch").filter(pl.col("corr").is_not_null()).select(*keys, "start_ns")
    )
    inside = launches.join(windows.select(*keys, "_from", "_to"), on=keys).filter(
        (pl.col("start_ns") >= pl.col("_from"))
        & (pl.col("start_ns") <= pl.col("_to").fill_null(pl.col("start_ns")))
    )
    return {"captures": begins.height, "captured_launches": inside.height}


def _graph_facts(out: ParsedSource, meta: dict[str, Any]) -> None:
    """Graph replays linked to their launches (``meta["graph_replay"]``), graph captures flagged
    (``meta["graph_capture"]``, with a warning)."""
    out.events, replay = link_graph_replays(out.events)
    if replay:
        meta["graph_replay"] = replay
        out.tally("graph_kernels_linked_by_time", replay["linked_by_time"])
    capture = graph_capture_facts(out.events)
    if capture:
        meta["graph_capture"] = capture
        n, launches = capture["captures"], capture["captured_launches"]
        out.warn(
            f"recorded during CUDA/HIP-graph capture ({n:,} stream capture{'s' * (n != 1)}, "
            f"{launches:,} launch{'es' * (launches != 1)} captured into a graph): captured kernels "
            "are not executed, so its device time is not the engine's execution time"
        )
