"""Span traces that RL frameworks write themselves, in Chrome trace-event form.

- verl / ROLL **Ray timeline** (``ray.timeline()``, verl ``ray_kwargs.timeline_json_file``): a
  JSON array of ``X`` events in epoch µs; ``pid`` is the node (``"Node 10.0.0.2"`` or an index
  named by a ``process_name`` event), ``tid`` the worker; names are Ray task names such as
  ``WorkerDict.actor_rollout_generate_sequences`` plus ``task:execute``, ``ray.get`` …;
- **AReaL perf_tracer** (``perf_tracer/<role>/traces-r<rank>.jsonl``): one event per line, ``ts``
  in µs from the tracer's start, ``cat`` ∈ compute/comm/io/sync/scheduler/instr/misc,
  ``args.global_step`` and ``args.rank``; on profiled steps torch-profiler events are merged in;
- **NeMo-RL trace** (``NEMORL_TRACE_FILE``, ``nemo_rl/utils/trace.py``): a JSON array of
  ``B``/``E`` pairs, ``X`` async spans, ``i`` and ``C`` events in µs of ``time.monotonic()``; a
  ``step`` span carries ``args.step``.

Ranges become ``annotation`` rows named as recorded (the taxonomy maps names to stages), torch
events merged into a trace keep their Kineto kinds. Files that carry Kineto's own markers
belong to :mod:`parsers.kineto` and score 0 here.

Value ranges are those of the Kineto parser (docs/events.md, "Value ranges"): a start outside
1970..2200 or a duration over a year drops the event, a negative ``X`` duration becomes 0,
``args`` ranks, steps, devices, streams and correlations outside their columns are unknown,
depths past 32767 clamped; all counted. An event longer than ``RLPERF_MAX_STRING`` or of the
wrong shape is dropped; a JSON line too deep, too long or damaged is skipped; a whole file too
deep or with too many events is one error. A cut array or document keeps its complete events.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from .errors import InputError
from .events import BOUNDS, DURATION_MAX_NS, TIME_MAX_NS, as_int, bound, conform, nesting_depth
from .jsonbound import decode_bounded, decode_each
from .kineto import cut_at, is_cut, salvage_prefix, warn_quality
from .limits import EVENTS, STRING_BYTES
from .reading import open_bytes
from .source import METRICS_SCHEMA, ParsedSource

FORMAT = "framework-spans"
EXTENSIONS: tuple[str, ...] = (".json", ".jsonl", ".json.gz", ".jsonl.gz")

KINETO_MARKERS: tuple[bytes, ...] = (
    b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"', b'"baseTimeNanoseconds"',
    b'"cuda_runtime"', b'"ProfilerStep#', b'"displayTimeUnit"', b'"traceName"',
)
RAY_MARKERS: tuple[bytes, ...] = (
    b'"task:execute"',
    b'"worker_idle"',
    b'"task::',
    b'"cname"',
    b'"Node ',
    b'"worker:',
)
AREAL_MARKERS: tuple[bytes, ...] = (
    b'"cat": "compute"',
    b'"cat": "comm"',
    b'"cat": "instr"',
    b'"cat": "io"',
    b'"cat": "scheduler"',
    b'", Process"',
    b'"train.',
)
NEMO_MARKERS: tuple[bytes, ...] = (b'"tracer_name"',)

KIND_OF_CATEGORY: dict[str, str] = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_runtime": "runtime",
    "cuda_driver": "runtime", "cpu_op": "cpu_op", "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation", "python_function": "python",
}
"""Kineto categories that AReaL merges into its perf-tracer stream; everything else is a range."""
GPU_CATEGORIES: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset")
"""GPU activity needs its device; without one it is kept as a plain range."""
STEP_SPANS: tuple[str, ...] = ("step", "pipeline_step", "train_step")
STEP_ARGS: tuple[str, ...] = ("global_step", "step")
EPOCH_NS = 100_000_000_000_000_000
"""Below this (1973 in ns) a trace's clock is relative to its own start, not the epoch."""


class _Event(msgspec.Struct):
    name: str | None = None
    ph: str | None = None
    ts: float | int | str | None = None
    dur: float | int | str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    cat: str | None = None
    args: dict[str, Any] | None = None


class _Doc(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []  # the Chrome trace field name


_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_DOC = msgspec.json.Decoder(_Doc)
_EVENT = msgspec.json.Decoder(_Event)
_EVENTS = msgspec.json.Decoder(list[_Event])


def sniff(head: bytes, path: Path) -> int:
    """Framework span traces score 85; other Chrome traces without Kineto markers a weak 20–35."""
    text = head.lstrip()
    if text[:1] not in (b"[", b"{") or any(m in head for m in KINETO_MARKERS):
        return 0
    if b'"ph"' not in head or b'"ts"' not in head:
        return 0
    jsonl = text.startswith(b"{") and re.match(rb"\{[^\n]*\}\s*\n\s*\{", text) is not None
    if sum(m in head for m in NEMO_MARKERS) or sum(m in head for m in RAY_MARKERS) >= 2:
        return 85
    if jsonl and sum(m in head for m in AREAL_MARKERS):
        return 85
    if text.startswith(b"{") and not jsonl:
        return 20 if b'"traceEvents"' in head else 0
    return 35 if b"aten::" not in head and b'"cpu_op"' not in head else 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    path = Path(path)
    out = ParsedSource(path=path, format=FORMAT)
    events = _decode(path, open_bytes(path), out)
    if not events:
        out.warn("no trace events")
        return out
    frame = _frame(events, out)
    out.meta.update(_producer(frame))
    meta = frame.filter(pl.col("ph") == "M")
    procs, threads = _names(meta)
    frame = _timed(frame.filter(pl.col("ph") != "M"), out)
    spans = pl.concat(
        [_complete(frame), _paired(frame, out), _instants(frame)], how="diagonal_relaxed"
    )
    ignored = frame.filter(~pl.col("ph").is_in(["X", "B", "E", "i", "I", "n", "C"]))
    if ignored.height:
        phases = ", ".join(sorted(set(ignored["ph"].drop_nulls().to_list())))
        out.warn(
            f"{ignored.height} events of phases {phases} ignored (flows and async pairs carry no "
            f"range)"
        )
    out.metrics = _counters(frame, source)
    if spans.height == 0:
        warn_quality(out, _WARNED)
        return out
    spans = _identities(spans, procs, threads)
    spans = spans.with_columns(
        depth=nesting_depth(spans, ["pid", "tid"], lambda n: out.tally("clamped_depth", n))
    )
    spans = _steps(spans)
    spans, counts = bound(spans)
    for kind, count in counts.items():
        out.tally(kind, count)
    warn_quality(out, _WARNED)
    base = as_int(spans["start_ns"].min())
    if base < EPOCH_NS:
        out.meta["time_base"] = (
            "relative: the trace clock starts at the tracer, not the epoch; align before merging"
        )
    else:
        out.meta["time_base"] = "epoch µs from the trace"
    ranks = sorted(set(spans["rank"].drop_nulls().to_list()) - {-1})
    if len(ranks) == 1:
        out.meta["rank"] = ranks[0]
    out.events = conform(spans.sort("start_ns"), source=source)
    return out


def _timed(frame: pl.DataFrame, out: ParsedSource) -> pl.DataFrame:
    """ns start and duration; a start outside 1970..2200 or a duration over a year is damage
    (dropped and counted), checked in float before the integer cast that would fail or wrap;
    a negative duration (of any size: -2**63 µs too) is set to 0 before the cast and counted."""
    start = pl.col("ts") * 1000
    dur = pl.col("dur").fill_null(0) * 1000
    timed = pl.col("ph").is_in(["X", "B", "E", "i", "I", "C"])
    unread = pl.col("ts").is_null()
    bad_time = ~unread & ~start.is_between(0.0, float(TIME_MAX_NS), closed="left")
    bad_dur = ~unread & ~bad_time & ~(dur <= float(DURATION_MAX_NS))
    complete = pl.col("ph") == "X"
    counts = frame.select(
        unread=(unread & timed).sum(),
        dropped_time_out_of_range=bad_time.sum(),
        dropped_duration_out_of_range=bad_dur.sum(),
        negative_dur=(complete & ~unread & ~bad_time & ~bad_dur & (pl.col("dur") < 0)).sum(),
        zero_dur=(complete & ~unread & ~bad_time & ~bad_dur & (dur == 0)).sum(),
    ).row(0, named=True)
    if counts.pop("unread"):
        out.warn(
            f"{frame.filter(unread & timed).height} events without a readable timestamp skipped"
        )
    for kind, count in counts.items():
        out.tally(kind, count)
    kept = frame.filter(~unread & ~bad_time & ~bad_dur)
    return kept.with_columns(
        start.round(0).cast(pl.Int64).alias("start_ns"),
        dur.clip(lower_bound=0.0).round(0).cast(pl.Int64).alias("dur_ns"),
    )


_WARNED = (
    "dropped_time_out_of_range", "dropped_duration_out_of_range", "negative_dur", "clamped_depth",
    *(f"out_of_range_{c}" for c in ("rank", "device", "stream", "step", "corr")),
)
"""Counts stated in one warning line; dropped unreadable or oversized events warn on their own."""


def _decode(path: Path, data: bytes, out: ParsedSource) -> list[_Event]:
    """The events of an array, a ``traceEvents`` document or JSON lines, each bounded (nesting,
    string length, count) and one bad event dropped rather than the file refused."""
    text = data.lstrip()
    if text.startswith(b"{") and re.match(rb"\{[^\n]*\}\s*\n\s*\{", text):
        return _lines(path, data, out)
    array = text.startswith(b"[")
    try:
        raws = (
            decode_bounded(_RAWS, data, path)
            if array
            else decode_bounded(_DOC, data, path).traceEvents
        )
    except msgspec.ValidationError as exc:
        raise InputError(path, f"not a trace-event file ({exc})") from None
    except msgspec.DecodeError as exc:
        raws = _salvage(path, data, str(exc), array, out)
    return _events(path, raws, out)


def _events(path: Path, raws: list[msgspec.Raw], out: ParsedSource) -> list[_Event]:
    """Typed events from raw ones: one longer than the string limit is dropped unread (decoding
    would materialise it), one of the wrong shape is dropped; both counted."""
    EVENTS.check(path, len(raws))
    limit = STRING_BYTES.value
    kept = [r for r in raws if len(r) <= limit]
    if len(kept) < len(raws):
        long = len(raws) - len(kept)
        out.tally("dropped_oversized_event", long)
        out.warn(
            f"{long:,} events longer than {STRING_BYTES.what} limit ({limit:,}) dropped; set "
            f"{STRING_BYTES.env} to raise it"
        )
    try:
        return _EVENTS.decode(b"[" + b",".join(kept) + b"]")
    except (msgspec.DecodeError, RecursionError):
        pass
    events: list[_Event] = []
    for raw in kept:
        try:
            events.append(_EVENT.decode(raw))
        except (msgspec.DecodeError, RecursionError):
            continue
    if not events:
        raise InputError(path, "not a trace-event file (no element is a trace event)")
    wrong = len(kept) - len(events)
    out.tally("dropped_unreadable_event", wrong)
    out.warn(f"{wrong:,} events of the wrong shape (a field of the wrong type) dropped")
    return events


def _salvage(
    path: Path, data: bytes, message: str, array: bool, out: ParsedSource
) -> list[msgspec.Raw]:
    """A file cut short (a killed process) keeps its complete events before the cut; an array
    damaged inside keeps those before the damage."""
    at = cut_at(data, message)
    if at is None or not (array or is_cut(data, message)):
        raise InputError(path, "not valid JSON")
    start = data.find(b"[") if array else data.find(b'"traceEvents"')
    decoder, closings = (_RAWS, (b"]",)) if array else (_DOC, (b"]}", b"}"))
    found = salvage_prefix(decoder, data, max(start, 0), at, closings, path) if start >= 0 else None
    if found is None:
        raise InputError(path, "not valid JSON and nothing before the damage could be read")
    value, kept = found
    raws = value if array else value.traceEvents
    where = "cut short" if is_cut(data, message) else f"damaged at byte {at:,}"
    out.warn(f"the file is {where}; {len(raws)} complete events before it are kept")
    out.meta["salvaged"] = round(kept / len(data), 4)
    return raws


def _lines(path: Path, data: bytes, out: ParsedSource) -> list[_Event]:
    lines = data.split(b"\n")
    EVENTS.check(path, len(lines) - lines.count(b""))
    limit = STRING_BYTES.value
    numbered = [
        (n, line) for n, line in enumerate(lines, start=1) if line.strip() and len(line) <= limit
    ]
    bad = [n for n, line in enumerate(lines, start=1) if len(line) > limit]
    events: list[_Event] = []
    for (number, _), result in zip(
        numbered, decode_each(_EVENT, [line for _, line in numbered], path), strict=True
    ):
        if isinstance(result, _Event):
            events.append(result)
        else:
            bad.append(number)
    if bad:
        bad.sort()
        shown = ", ".join(str(n) for n in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        out.warn(
            f"{len(bad)} unreadable lines skipped (lines {shown}{more}: damaged, nested too deep "
            f"or too long)"
        )
    return events


def _arg(events: list[_Event], key: str) -> list[Any]:
    return [e.args.get(key) if e.args else None for e in events]


def _frame(events: list[_Event], out: ParsedSource) -> pl.DataFrame:
    def floats(values: list[Any]) -> pl.Series:
        return (
            pl.Series(values, dtype=pl.String, strict=False).cast(pl.Float64, strict=False)
            if any(isinstance(v, str) for v in values)
            else pl.Series(values, dtype=pl.Float64, strict=False)
        )

    def ints(values: list[Any], column: str, lo: int = -(2**63), hi: int = 2**63 - 1) -> pl.Series:
        """The integers in ``lo..hi``; any other integer is damage: null, and counted unless it is
        -1, the usual "unknown"."""
        numbers = [v if type(v) is int and v != -1 else None for v in values]
        kept = [v if v is None or lo <= v <= hi else None for v in numbers]
        out.tally(f"out_of_range_{column}", kept.count(None) - numbers.count(None))
        return pl.Series(kept, dtype=pl.Int64)

    step = [
        a if a is not None else b
        for a, b in zip(_arg(events, STEP_ARGS[0]), _arg(events, STEP_ARGS[1]), strict=False)
    ]
    return pl.DataFrame(
        {
            "name": pl.Series([e.name for e in events], dtype=pl.String),
            "ph": pl.Series([e.ph for e in events], dtype=pl.String),
            "cat": pl.Series([e.cat for e in events], dtype=pl.String),
            "ts": floats([e.ts for e in events]),
            "dur": floats([e.dur for e in events]),
            "pid_raw": pl.Series(
                [None if e.pid is None else str(e.pid) for e in events], dtype=pl.String
            ),
            "tid_raw": pl.Series(
                [None if e.tid is None else str(e.tid) for e in events], dtype=pl.String
            ),
            "arg_name": pl.Series(
                [str(v) if v is not None else None for v in _arg(events, "name")], dtype=pl.String
            ),
            "arg_rank": ints(_arg(events, "rank"), "rank", *BOUNDS["rank"]),
            "arg_step": ints(step, "step", *BOUNDS["step"]),
            "arg_device": ints(_arg(events, "device"), "device", *BOUNDS["device"]),
            "arg_stream": ints(_arg(events, "stream"), "stream", *BOUNDS["stream"]),
            "arg_corr": ints(_arg(events, "correlation"), "corr"),
            "arg_value": floats(
                [v if isinstance(v, (int, float)) else None for v in _arg(events, "value")]
            ),
            "arg_tracer": pl.Series(
                [str(v) if v is not None else None for v in _arg(events, "tracer_name")],
                dtype=pl.String,
            ),
        }
    )


def _producer(frame: pl.DataFrame) -> dict[str, Any]:
    names = frame["name"].drop_nulls()
    cats = set(frame["cat"].drop_nulls().unique().to_list())
    if (
        frame["arg_name"].is_not_null().any()
        and names.str.contains(r"^task(::|:execute)|^ray\.(get|put|wait)$").any()
    ):
        producer = "ray-timeline"
    elif cats & {"compute", "comm", "io", "sync", "scheduler", "instr"}:
        producer = "areal-perf-tracer"
    elif frame["arg_tracer"].is_not_null().any():
        producer = "nemo-rl-trace"
    elif names.str.contains(r"^(task(::|:)|worker_idle|submit_task|ray\.)").any():
        producer = "ray-timeline"
    else:
        producer = "chrome-trace"
    meta: dict[str, Any] = {"producer": producer}
    framework = {"areal-perf-tracer": "areal", "nemo-rl-trace": "nemo_rl"}.get(producer)
    if names.str.contains(r"WorkerDict\.|TaskRunner\.|actor_rollout_").any():
        framework = "verl"
    elif names.str.contains(r"^(load_states|offload_states)$|ActorWorker\.|pipeline_step").any():
        framework = "roll"
    elif names.str.contains(r"_genertion|policy_worker/").any() or (
        producer == "chrome-trace"
        and names.str.contains(
            r"^(generation|policy_training|policy_and_reference_logprobs)$"
        ).any()
    ):
        framework = "nemo_rl"
    if framework:
        meta["framework"] = framework
    return meta


def _names(meta: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    procs = meta.filter(pl.col("name") == "process_name").select(
        "pid_raw", pl.col("arg_name").alias("process")
    ).unique(subset=["pid_raw"], keep="last")
    threads = meta.filter(pl.col("name") == "thread_name").select(
        "pid_raw", "tid_raw", pl.col("arg_name").alias("thread")
    ).unique(subset=["pid_raw", "tid_raw"], keep="last")
    return procs, threads


def _complete(frame: pl.DataFrame) -> pl.DataFrame:
    x = frame.filter(pl.col("ph") == "X")
    return x.with_columns(
        (pl.col("start_ns") + pl.col("dur_ns").clip(lower_bound=0)).alias("end_ns")
    )


def _paired(frame: pl.DataFrame, out: ParsedSource) -> pl.DataFrame:
    """``B``/``E`` pairs matched per thread by nesting level: the k-th ``B`` that opens level d
    closes with the k-th ``E`` that leaves level d."""
    be = frame.filter(pl.col("ph").is_in(["B", "E"])).with_row_index("_order")
    if be.height == 0:
        return be.drop("_order")
    be = be.sort("pid_raw", "tid_raw", "start_ns", "_order").with_columns(
        pl.when(pl.col("ph") == "B").then(1).otherwise(-1).alias("_d")
    ).with_columns(pl.col("_d").cum_sum().over("pid_raw", "tid_raw").alias("_after"))
    be = be.with_columns(
        pl.when(pl.col("ph") == "B")
        .then(pl.col("_after"))
        .otherwise(pl.col("_after") + 1)
        .alias("_level")
    ).with_columns(pl.int_range(pl.len()).over("pid_raw", "tid_raw", "_level", "ph").alias("_k"))
    opens = be.filter(pl.col("ph") == "B")
    closes = be.filter(pl.col("ph") == "E").select(
        "pid_raw", "tid_raw", "_level", "_k", pl.col("start_ns").alias("end_ns")
    )
    paired = opens.join(
        closes, on=["pid_raw", "tid_raw", "_level", "_k"], how="left", nulls_equal=True
    )
    unclosed = paired.filter(pl.col("end_ns").is_null())
    if unclosed.height:
        out.warn(f"{unclosed.height} ranges never closed (the trace ends inside them); dropped")
    return paired.filter(
        pl.col("end_ns").is_not_null() & (pl.col("end_ns") >= pl.col("start_ns"))
    ).drop("_order", "_d", "_after", "_level", "_k")


def _instants(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("ph").is_in(["i", "I", "n"])).with_columns(
        pl.col("start_ns").alias("end_ns")
    )


def _counters(frame: pl.DataFrame, source: int) -> pl.DataFrame:
    counters = frame.filter(
        (pl.col("ph") == "C") & pl.col("arg_value").is_not_null() & pl.col("arg_step").is_not_null()
    )
    return counters.select(
        pl.lit(source, dtype=pl.UInt32).alias("source"),
        pl.col("arg_step").cast(pl.Int32).alias("step"),
        pl.col("name").alias("key"),
        pl.col("arg_value").alias("value"),
    ).cast(METRICS_SCHEMA)


def _identities(spans: pl.DataFrame, procs: pl.DataFrame, threads: pl.DataFrame) -> pl.DataFrame:
    """Numeric pid/tid (string ids get dense indexes), host and rank from the names."""
    spans = spans.join(procs, on="pid_raw", how="left").join(
        threads, on=["pid_raw", "tid_raw"], how="left"
    )
    label = pl.coalesce(pl.col("process"), pl.col("pid_raw"))
    return spans.with_columns(
        pl.coalesce(
            pl.col("pid_raw").cast(pl.Int64, strict=False),
            pl.col("pid_raw").rank("dense").cast(pl.Int64) - 1,
        ).alias("pid"),
        pl.coalesce(
            pl.col("tid_raw").cast(pl.Int64, strict=False),
            pl.col("tid_raw").rank("dense").cast(pl.Int64) - 1,
        ).alias("tid"),
        label.str.extract(r"^Node (\S+)", 1).alias("host"),
        pl.coalesce(
            pl.col("arg_rank"),
            label.str.extract(r"(?i)\brank[ _-]?(\d+)", 1).cast(pl.Int64, strict=False),
        )
        .fill_null(-1)
        .alias("rank"),
        pl.when(pl.col("ph").is_in(["i", "I", "n"]))
        .then(pl.lit("marker"))
        .when(pl.col("cat").is_in(list(GPU_CATEGORIES)) & pl.col("arg_device").is_null())
        .then(pl.lit("annotation"))
        .otherwise(pl.col("cat").replace_strict(KIND_OF_CATEGORY, default="annotation"))
        .fill_null("annotation")
        .alias("kind"),
        pl.col("arg_device").alias("device"),
        pl.col("arg_stream").alias("stream"),
        pl.col("arg_corr").alias("corr"),
        pl.col("name").fill_null(""),
    )


def _steps(spans: pl.DataFrame) -> pl.DataFrame:
    """Step from the event's own args, else from the innermost range on the same thread that
    carries one, else from an enclosing ``step`` span anywhere (a driver's step range)."""
    spans = spans.sort("start_ns")
    own = (
        spans.filter(pl.col("arg_step").is_not_null() & (pl.col("end_ns") > pl.col("start_ns")))
        .select(
            "pid",
            "tid",
            pl.col("start_ns").alias("_s"),
            pl.col("end_ns").alias("_e"),
            pl.col("arg_step").alias("_step"),
        )
        .sort("_s")
    )
    step = pl.col("arg_step")
    if own.height:
        spans = spans.join_asof(
            own,
            left_on="start_ns",
            right_on="_s",
            by=["pid", "tid"],
            strategy="backward",
            check_sortedness=False,
        )
        step = pl.coalesce(
            step,
            pl.when(pl.col("_e").is_not_null() & (pl.col("end_ns") <= pl.col("_e"))).then(
                pl.col("_step")
            ),
        )
        spans = spans.with_columns(step.alias("arg_step")).drop("_s", "_e", "_step")
    marks = (
        spans.filter(pl.col("name").is_in(list(STEP_SPANS)) & pl.col("arg_step").is_not_null())
        .select(
            pl.col("start_ns").alias("_s"),
            pl.col("end_ns").alias("_e"),
            pl.col("arg_step").alias("_step"),
        )
        .sort("_s")
    )
    if marks.height == 0:
        return spans.with_columns(pl.col("arg_step").cast(pl.Int32).alias("step"))
    spans = spans.join_asof(marks, left_on="start_ns", right_on="_s", strategy="backward")
    inside = pl.col("_e").is_not_null() & (pl.col("start_ns") <= pl.col("_e"))
    return spans.with_columns(
        pl.coalesce(pl.col("arg_step"), pl.when(inside).then(pl.col("_step")))
        .cast(pl.Int32)
        .alias("step")
    ).drop("_s", "_e", "_step")
