"""PyTorch profiler (Kineto) Chrome-trace JSON → the event table.

Handles every writer version in design/FORMATS.md §1 (2021–2026): integer and float ``ts``,
``baseTimeNanoseconds`` (relative ``ts``) or epoch-µs ``ts``, the ``displayTimeUnit`` trap
(always µs), capitalised 2021–22 categories, string or -1 pids, launches under
``cuda_driver``, big integers in args, ROCm traces with string-typed args, files cut short by a
killed rank (every complete event before the cut is salvaged, with a warning).

Speed: one typed msgspec pass decodes only the fields we keep, with ``args`` left as raw bytes;
args are decoded (again typed, again only the fields we keep) only for the categories that
carry correlation, stream, byte or collective information. Columns go straight to polars.
"""

from __future__ import annotations

import re
import zlib
from datetime import datetime, timezone
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
from msgspec import Raw, Struct, field

from .discover import GZIP_ERRORS, gunzip
from .errors import InputError
from .events import conform, nesting_depth
from .nccl import canonical_coll, canonical_ranks, dtype_bytes, kernel_coll_expr
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
    coll_name: Raw = field(default=Raw(b""), name="Collective name")
    dtype: Raw = Raw(b"")
    in_nelems: Raw = field(default=Raw(b""), name="In msg nelems")
    out_nelems: Raw = field(default=Raw(b""), name="Out msg nelems")
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
    baseTimeNanoseconds: int | None = None
    displayTimeUnit: Raw = Raw(b"")
    schemaVersion: Raw = Raw(b"")
    traceName: Raw = Raw(b"")
    host_name: Raw = Raw(b"")
    hostname: Raw = Raw(b"")
    roctracer_version: Raw = Raw(b"")
    hip_runtime_version: Raw = Raw(b"")


def _raw_value(raw: Raw) -> Any:
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


class _DistInfo(Struct, gc=False):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    pg_count: int | None = None
    pg_config: list[dict[str, Any]] | None = None
    nccl_version: str | None = None


_TRACE_DECODER = msgspec.json.Decoder(_Trace)


def sniff(head: bytes, path: Path) -> int:
    """A JSON object with ``traceEvents`` and Kineto's markers."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return 0
    has_events = b'"traceEvents"' in head
    markers = sum(1 for m in _KINETO_MARKERS if m in head)
    if has_events and markers:
        return 90
    if markers >= 2:
        return 70
    if has_events:
        return 40
    return 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    path = Path(path)
    out = ParsedSource(path=path, format=FORMAT)
    data = _read(path, out)
    trace = _decode(path, data, out)
    meta = _metadata(path, trace, out)
    del data
    out.events = _events(path, trace, meta, source, out)
    out.meta.update(meta)
    return out


# --- reading -----------------------------------------------------------------------------------


def _read(path: Path, out: ParsedSource) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw.strip():
        raise InputError(path, "empty file")
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gunzip(raw)
    except GZIP_ERRORS:
        pass
    decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decomp.decompress(raw)
    except zlib.error as exc:
        raise InputError(path, f"corrupt gzip data ({exc})") from None
    if not data.strip():
        raise InputError(path, "gzip stream ends early (truncated file?) before any content")
    out.warn(f"gzip stream ends early (truncated file?): read {len(data):,} bytes of JSON before the cut")
    out.meta["truncated_gzip"] = True
    return data


def _decode(path: Path, data: bytes, out: ParsedSource) -> _Trace:
    try:
        return _TRACE_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise InputError(path, f"unexpected field type: {exc}") from None
    except msgspec.DecodeError as exc:
        message = str(exc)
    if "truncated" in message:
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
    """Keep every complete event before the cut of a file whose writer was killed."""
    start = data.find(b'"traceEvents"')
    if start < 0:
        raise InputError(path, "JSON cut short before any trace events")
    end = len(data)
    for _ in range(64):
        cut = data.rfind(b"}", start, end)
        if cut < 0:
            break
        for closing in (b"]}", b"}", b"}]}"):
            try:
                trace = _TRACE_DECODER.decode(data[: cut + 1] + closing)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            lost = len(data) - cut - 1
            out.warn(
                f"JSON cut short (writer killed?): salvaged {len(trace.traceEvents):,} complete "
                f"events; the last {lost:,} bytes ({lost / len(data):.1%}) and every event the "
                "writer never wrote are lost"
            )
            out.meta["salvaged"] = {"events": len(trace.traceEvents), "bytes_lost": lost}
            return trace
        end = cut
    raise InputError(path, "JSON cut short and no complete event could be salvaged")


# --- run-level facts ---------------------------------------------------------------------------

_TB_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.(?P<ms>\d{13})\.pt\.trace\.json")


def _metadata(path: Path, trace: _Trace, out: ParsedSource) -> dict[str, Any]:
    meta: dict[str, Any] = {"schema_version": _raw_value(trace.schemaVersion)}
    dist = None
    if trace.distributedInfo:
        try:
            dist = msgspec.json.decode(trace.distributedInfo, type=_DistInfo)
        except (msgspec.DecodeError, msgspec.ValidationError):
            out.warn("distributedInfo is not in the expected shape; ignored")
    rank = dist.rank if dist and dist.rank is not None else None
    if rank is not None:
        meta["rank_from"] = "distributedInfo"
    else:
        m = RANK_IN_NAME.search(path.name)
        if m:
            rank = int(m.group(1))
            meta["rank_from"] = "file name"
    meta["rank"] = rank if rank is not None else -1
    if dist:
        meta["world_size"] = dist.world_size
        meta["backend"] = dist.backend
        meta["nccl_version"] = dist.nccl_version
        if dist.pg_config:
            meta["pg_config"] = [
                {
                    "pg_name": str(pg.get("pg_name", "")),
                    "pg_desc": pg.get("pg_desc", pg.get("uid")),
                    "ranks": canonical_ranks(pg.get("ranks")),
                    "pg_size": pg.get("pg_size"),
                    "backend_config": pg.get("backend_config"),
                }
                for pg in dist.pg_config
                if isinstance(pg, dict)
            ]
    tb = _TB_HANDLER_NAME.match(path.name)
    host = _raw_value(trace.host_name) or _raw_value(trace.hostname) or (tb.group("host") if tb else None)
    host = str(host) if host is not None else None
    meta["host"] = host
    meta["device_properties"] = _raw_value(trace.deviceProperties)
    meta["rocm"] = bool(trace.roctracer_version or trace.hip_runtime_version)
    meta["trace_name"] = _raw_value(trace.traceName)
    meta["display_time_unit"] = _raw_value(trace.displayTimeUnit)
    meta["base_time_ns"] = trace.baseTimeNanoseconds
    meta["tb_epoch_ms"] = int(tb.group("ms")) if tb else None
    return meta


def _time_base_ns(trace: _Trace, ts_max: float, meta: dict[str, Any], out: ParsedSource) -> int:
    """Nanoseconds to add to ``ts·1000`` for absolute epoch time."""
    if trace.baseTimeNanoseconds is not None:
        meta["time_base"] = "baseTimeNanoseconds"
        return int(trace.baseTimeNanoseconds)
    if ts_max >= _EPOCH_US_FLOOR or ts_max == 0:
        meta["time_base"] = "epoch microseconds"
        return 0
    if meta.get("tb_epoch_ms"):
        base = _quarter_start_ns(meta["tb_epoch_ms"])
        meta["time_base"] = "quarter start from the file name's epoch ms"
        out.warn("baseTimeNanoseconds missing (file cut?): time base taken from the file name's timestamp")
        return base
    meta["time_base"] = "unknown (relative)"
    out.warn("timestamps are relative and baseTimeNanoseconds is missing: absolute time unknown")
    return 0


def _quarter_start_ns(epoch_ms: int) -> int:
    when = datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)
    start = datetime(when.year, 3 * ((when.month - 1) // 3) + 1, 1, tzinfo=timezone.utc)
    return int(start.timestamp()) * 1_000_000_000


# --- events ------------------------------------------------------------------------------------


def _events(path: Path, trace: _Trace, meta: dict[str, Any], source: int, out: ParsedSource) -> pl.DataFrame:
    """Decode the events chunk by chunk (bounded memory) into one frame, then finish it."""
    raws = trace.traceEvents
    frames: list[pl.DataFrame] = []
    unknown: set[str] = set()
    for offset in range(0, len(raws), _CHUNK):
        events = _decode_chunk(path, raws, offset, out)
        cats = list(map(_CAT, events))
        unknown.update(c for c in set(cats) if c not in _KIND_OF_ANY_CASE and c not in _NOT_EVENTS)
        if "Trace" in cats:
            span = events[cats.index("Trace")]
            meta["profiler_window_us"] = (span.ts, span.ts + span.dur)
        kinds = list(map(_KIND_OF_ANY_CASE.get, cats))
        picked = list(compress(events, kinds))
        if picked:
            frames.append(_chunk_frame(picked, list(filter(None, kinds))))
        del events, cats, kinds, picked
    trace.traceEvents = []
    del raws
    if unknown:
        meta["skipped_categories"] = sorted(unknown)
    if not frames:
        out.warn("no trace events of a known kind")
        _time_base_ns(trace, 0.0, meta, out)
        return conform(pl.DataFrame(), source=source)
    frame = pl.concat(frames, how="diagonal_relaxed", rechunk=False)
    del frames
    base = _time_base_ns(trace, frame["ts"].max() or 0.0, meta, out)
    return _finish(frame, base, meta, source)


_CHUNK = 16384
"""Events decoded at a time: Python objects exist for one chunk only."""
_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_AT_INDEX = re.compile(r"`\$\[(\d+)\]")


def _decode_chunk(path: Path, raws: list[Raw], offset: int, out: ParsedSource) -> list[_Event]:
    data = b"[" + b",".join(raws[offset : offset + _CHUNK]) + b"]"
    try:
        return _EVENTS_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        where = _AT_INDEX.sub(lambda m: f"`$.traceEvents[{offset + int(m.group(1))}]", str(exc))
        raise InputError(path, f"unexpected field type: {where}") from None
    except msgspec.DecodeError as exc:
        if "UTF-8" not in str(exc):
            raise InputError(path, f"malformed JSON: {exc}") from None
    out.warn("invalid UTF-8 in the file; bad bytes replaced")
    return _EVENTS_DECODER.decode(data.decode("utf-8", errors="replace").encode("utf-8"))


def _chunk_frame(picked: list[_Event], kinds: list[str]) -> pl.DataFrame:
    args = list(map(_ARGS, picked))
    ext = list(map(_EXT, args))
    if ext.count(None) == len(ext):
        ext = list(map(_EXT_OLD, args))
    frame = pl.DataFrame(
        {
            "kind": kinds,
            "name": pl.Series(list(map(_NAME, picked)), dtype=pl.Categorical),
            "pid": pl.Series(list(map(_PID, picked)), dtype=pl.Int64, strict=False),
            "tid": pl.Series(list(map(_TID, picked)), dtype=pl.Int64, strict=False),
            "ts": pl.Series(list(map(_TS, picked)), dtype=pl.Float64),
            "dur": pl.Series(list(map(_DUR, picked)), dtype=pl.Float64),
            "corr": _opt_int(list(map(_CORR, args))),
            "ext_id": _opt_int(ext),
        }
    )
    frame = frame.with_columns(_sparse(frame, args, "bytes", ("memcpy", "memset"), _copy_bytes))
    collectives = _collective_args(args)
    return frame.hstack(collectives) if collectives is not None else frame


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
_NOT_EVENTS = frozenset({"", "ac2g", "fwdbwd", "async_gpu", "async_cpu_to_gpu", "Trace"})
"""Categories that are links or bookkeeping, not events (flows, the profiler's own span)."""


def _sparse(frame: pl.DataFrame, args: list[_Args], column: str, kinds: tuple[str, ...], value) -> pl.Series:
    """A column that only a few kinds carry: touch only those events' args."""
    rows = frame.with_row_index("i").filter(pl.col("kind").is_in(list(kinds)))["i"].to_list()
    values: list[int | None] = [None] * frame.height
    for i in rows:
        values[i] = value(args[i])
    return _opt_int(values).alias(column)


def _copy_bytes(a: _Args) -> int | None:
    return _as_int(a.nbytes if a.nbytes is not None else a.size)


def _collective_args(args: list[_Args]) -> pl.DataFrame | None:
    """Collective metadata from ``record_param_comms`` / NCCL kernel args, decoded for those only."""
    rows = list(compress(range(len(args)), map(_COLL, args)))
    if not rows:
        return None
    n = len(args)
    cols: dict[str, list[Any]] = {k: [None] * n for k in ("coll_name", "pg", "pg_desc", "pg_ranks", "group_size", "seq", "coll_bytes")}
    for i in rows:
        a = args[i]
        name = _raw_value(a.coll_name)
        cols["coll_name"][i] = canonical_coll(str(name)) if name is not None else None
        pg = _raw_value(a.pg_name)
        cols["pg"][i] = None if pg is None else str(pg)
        desc = _raw_value(a.pg_desc)
        cols["pg_desc"][i] = None if desc is None else str(desc)
        cols["pg_ranks"][i] = canonical_ranks(_raw_value(a.pg_ranks))
        cols["group_size"][i] = _as_int(_raw_value(a.group_size))
        cols["seq"][i] = _as_int(_raw_value(a.seq))
        size = dtype_bytes(_str_or_none(_raw_value(a.dtype)))
        nelems = max(_as_int(_raw_value(a.in_nelems), 0) or 0, _as_int(_raw_value(a.out_nelems), 0) or 0)
        cols["coll_bytes"][i] = nelems * size if size and nelems else None
    return pl.DataFrame(
        {
            "coll_name": pl.Series(cols["coll_name"], dtype=pl.String),
            "pg": pl.Series(cols["pg"], dtype=pl.String),
            "pg_desc": pl.Series(cols["pg_desc"], dtype=pl.String),
            "pg_ranks": pl.Series(cols["pg_ranks"], dtype=pl.String),
            "group_size": _opt_int(cols["group_size"]),
            "seq": _opt_int(cols["seq"]),
            "coll_bytes": _opt_int(cols["coll_bytes"]),
        }
    )


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _opt_int(values: list[object]) -> pl.Series:
    try:
        return pl.Series(values, dtype=pl.Int64)
    except (TypeError, pl.exceptions.PolarsError, OverflowError):
        return pl.Series([_as_int(v) for v in values], dtype=pl.Int64)


def _as_int(value: object, default: int | None = None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else default
    if isinstance(value, float):
        return int(value)
    text = str(value).strip()
    try:
        return int(text, 0)
    except ValueError:
        try:
            return int(float(text))
        except ValueError:
            return default


def _finish(frame: pl.DataFrame, base: int, meta: dict[str, Any], source: int) -> pl.DataFrame:
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
        pl.when(collective).then(pl.col("coll_bytes") if has_args else None).otherwise(pl.col("bytes")).alias("bytes"),
        facts["step"].alias("step"),
    ]
    if has_args:
        columns += [
            pl.when(collective).then(pl.col(c)).otherwise(None).alias(c)
            for c in ("pg", "pg_desc", "pg_ranks", "group_size", "seq")
        ]
    shaped = _with_depth(frame.select(columns))
    return conform(shaped, source=source, rank=meta.get("rank", -1), host=meta.get("host"))


def _name_facts(names: pl.Series) -> dict[str, pl.Expr]:
    """What a name alone says (NCCL kernel collective, collective op, profiler step).

    Worked out once per distinct name; the few names that say something become small lookup
    tables applied to the column, so nothing per row is materialised.
    """
    name = pl.col("name")
    op = pl.coalesce(
        name.str.extract(r"^(?:nccl|gloo|ucc|mpi|xccl):(\w+)", 1),
        name.str.extract(r"^c10d::(\w+)", 1),
    )
    facts = pl.DataFrame({"name": names.unique().cast(pl.String)}).with_columns(
        kernel_coll=kernel_coll_expr(name),
        op_coll=op.map_elements(canonical_coll, return_dtype=pl.String, skip_nulls=True),
        step=name.str.extract(r"^ProfilerStep#(\d+)$", 1).cast(pl.Int32, strict=False),
    )
    lookups = {}
    for column, dtype in (("kernel_coll", pl.String), ("op_coll", pl.String), ("step", pl.Int32)):
        known = facts.filter(pl.col(column).is_not_null())
        mapping = dict(zip(known["name"].to_list(), known[column].to_list(), strict=True))
        lookups[column] = name.replace_strict(mapping, default=None, return_dtype=dtype) if mapping else pl.lit(None, dtype=dtype)
    return lookups


_NESTING_KINDS = ("annotation", "cpu_op", "python", "gpu_annotation")


def _with_depth(frame: pl.DataFrame) -> pl.DataFrame:
    """Depth among events of the same kind on the same thread (or stream); flat kinds keep 0."""
    nests = pl.col("kind").is_in(_NESTING_KINDS)
    ranges = frame.with_row_index("_row").filter(nests)
    depth = pl.zeros(frame.height, dtype=pl.Int16, eager=True)
    if ranges.height:
        depth = depth.scatter(ranges["_row"], nesting_depth(ranges, ["kind", "pid", "tid", "device", "stream"]))
    return frame.with_columns(depth.alias("depth"))
