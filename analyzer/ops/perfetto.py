"""A run as one Chrome-trace JSON for the Perfetto UI and chrome://tracing: every rank a process,
its events on their threads and streams, plus a *stages* track (the stage timeline), a *bubbles*
track (idle time by cause, the largest marked, tiny runs aggregated) and flow arrows for weight
sync.

The file is written in the shape of a PyTorch profiler (Kineto) trace, so rlperf's own Kineto
parser reads it back as the same run: ``baseTimeNanoseconds`` plus relative ``ts`` in µs with
three decimals (nanoseconds survive exactly), Kineto categories (``kernel``, ``cpu_op``,
``user_annotation``, …) and args (``correlation``, ``External id``, ``Collective name``, process
group name, description and ranks, …). Rank r is process r, the single controller process
:data:`DRIVER_PID`; the header's process table (``rlperf.processes``, read by
:mod:`parsers.kineto_export`) names each process's rank, host and device, which one Kineto file
cannot say otherwise. Device work sits on thread = CUDA stream as in Kineto. Events are exported
on the run's aligned clock, with the FLOPs the run counted (``args.flops``), every source's
``deviceProperties`` (the peak FLOP/s of MFU) and correlation ids renumbered where two sources'
ids would collide in the one file (the reader links launches to kernels by file and id). What
cannot come back is said by :func:`losses`, one warning each. The derived tracks (stages on
thread :data:`STAGE_TID`, bubbles on :data:`BUBBLE_TID`, flows) carry rlperf's own categories,
which its reader and other trace readers skip: reading the export back derives the stages again
from the exported ranges.
Framework-log rows are not exported (their times may be synthesised from step order).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl

from parsers.discover import format_traits
from parsers.errors import InputError
from parsers.kineto_export import BUBBLE_CATEGORY, FLOW_CATEGORY, STAGE_CATEGORY
from parsers.source import CORRELATION_PER_PROCESS

from ..analyses.overview import frame_of
from ..model.scalars import as_int
from ..report.files import atomic_binary

STAGE_TID = 10_000_001
BUBBLE_TID = 10_000_002
"""Thread ids of the two added tracks (above any Linux thread id, far above CUDA stream ids)."""
DRIVER_PID = 10_000_000
"""The single controller's process (rank -1 in the run; no rank can be this high in a Perfetto
view one can read, and a Chrome-trace pid must be a number)."""
MERGE_BELOW_NS = 10_000
"""Idle runs shorter than this (10 µs) that follow each other on one rank, of one cause in one
step, are exported as one bubble slice: a CPU-only run has thousands of 1–10 µs host gaps that
would otherwise bury the bubbles worth looking at. The slice starts at the first run and lasts
their total, so the bubble slices sum to the idle time exactly; its args say how many runs it
holds (``merged``) and over what span (``span_us``)."""

CATEGORY: dict[str, str] = {
    "kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "gpu_sync": "cuda_sync",
    "gpu_annotation": "gpu_user_annotation", "runtime": "cuda_runtime", "cpu_op": "cpu_op",
    "annotation": "user_annotation", "python": "python_function", "marker": "cpu_instant_event",
}
"""Event kind → the Kineto category the parser maps back to that kind."""
DEVICE_KINDS = ("kernel", "memcpy", "memset", "gpu_sync", "gpu_annotation")


def export(run, output: Path) -> dict[str, Any]:
    """Write ``run`` to ``output`` (gzip when it ends in ``.gz``); returns what was written."""
    events = _unique_correlations(_with_groups(_trace_events(run), run), run)
    stages = frame_of(run, "stage_timeline", "rank", "step", "stage", "name", "start_ns", "end_ns")
    idle = _bubbles(run)
    bubbles = None if idle is None else merge_bubbles(idle)
    starts = [
        as_int(f["start_ns"].min()) for f in (events, stages, bubbles) if f is not None and f.height
    ]
    if not starts:
        names = ", ".join(Path(str(s.path)).name for s in run.sources) or "the input"
        raise InputError(names, "nothing to export: no trace events, stage ranges or idle time "
                         "in these sources (a Perfetto timeline needs a trace)")
    t0 = (min(starts) // 1000) * 1000
    parts = [_events(events, t0)]
    counts = {"events": events.height, "stage_slices": 0, "bubble_slices": 0,
              "idle_runs": 0 if idle is None else idle.height, "flows": 0}
    if stages is not None and stages.height:
        parts.append(_stage_slices(stages, t0))
        counts["stage_slices"] = stages.height
        flows = _flows(run, stages, t0)
        parts.append(flows)
        counts["flows"] = flows.len() // 2
    if bubbles is not None and bubbles.height:
        parts.append(_bubble_slices(bubbles, t0))
        counts["bubble_slices"] = bubbles.height
    body = (
        pl.concat([p for p in parts if p.len()])
        if any(p.len() for p in parts)
        else pl.Series([], dtype=pl.String)
    )
    table = processes(run, events, stages)
    header = {
        "schemaVersion": 1,
        "baseTimeNanoseconds": t0,
        "traceName": "rlperf export",
        **_distributed(run),
        **_devices(run),
        "rlperf": {
            "stage_tid": STAGE_TID, "bubble_tid": BUBBLE_TID, "driver_pid": DRIVER_PID,
            "ranks": run.ranks, "merge_below_ns": MERGE_BELOW_NS, **counts, "processes": table,
        },
    }
    meta = _metadata(run, events, stages, bubbles, table)
    text = (
        json.dumps(header)[:-1]
        + ',"traceEvents":[\n'
        + ",\n".join([*meta, *body.to_list()])
        + "\n]}\n"
    )
    _write(output, text.encode())
    return {"path": str(output), "bytes": output.stat().st_size, **counts,
            "warnings": losses(run)}


def losses(run) -> list[str]:
    """What the export cannot carry, one line each: sources with no trace events (framework
    logs: their metrics and step numbers), and device models that one file cannot tell apart
    by rank (several sources naming different devices, or one device id two ways)."""
    out = []
    kinds = pl.col("kind").cast(pl.String).is_in(list(CATEGORY))
    kept = set(run.events.lazy().filter(kinds).select(pl.col("source").unique())
               .collect()["source"].to_list())
    left = [Path(str(s.path)).name for s in run.sources if s.index not in kept]
    if left:
        out.append(f"{', '.join(left)}: not exported (no trace events: a framework log's "
                   "metrics and step numbers do not come back on reading the export)")
    names = {
        (entry["id"], str(entry.get("name") or ""))
        for entry in _device_entries(run)
    }
    models = {n for _, n in names}
    sources = {s.index for s in run.sources if s.meta.get("device_properties")}
    if (len(models) > 1 and len(sources) > 1) or len(names) > len({i for i, _ in names}):
        out.append(f"the sources name {len(models)} device models ({', '.join(sorted(models))}):"
                   " one exported file cannot say which rank ran on which, so MFU read back "
                   "from the export may use another rank's peak")
    return out


def _device_entries(run) -> list[dict[str, Any]]:
    """Every source's ``deviceProperties`` entries that have an integer id, in source order."""
    return [
        entry
        for s in run.sources
        for entry in (s.meta.get("device_properties") or [])
        if isinstance(entry, dict) and isinstance(entry.get("id"), int)
    ]


def _devices(run) -> dict[str, Any]:
    """A ``deviceProperties`` with each device id once (the first source's entry): MFU's peak
    is looked up from the device names there."""
    first: dict[int, dict[str, Any]] = {}
    for entry in _device_entries(run):
        first.setdefault(entry["id"], entry)
    return {"deviceProperties": [first[i] for i in sorted(first)]} if first else {}


def _unique_correlations(events: pl.DataFrame, run) -> pl.DataFrame:
    """Correlation ids shifted per id space (a source, or a process of a source whose ids are
    per process) where its ids would overlap the previous space's: in the one exported file
    the reader links a kernel to its launch by id alone, so rank 1's kernel 7 would otherwise
    find rank 0's launch 7. Spaces that do not overlap keep their ids."""
    per_process = [
        s.index for s in run.sources if CORRELATION_PER_PROCESS in format_traits(s.format)
    ]
    space = pl.when(pl.col("source").is_in(per_process)).then(pl.col("pid")).otherwise(-1)
    keyed = events.with_columns(space.alias("_space"))
    ranges = (
        keyed.filter(pl.col("corr").is_not_null())
        .group_by("source", "_space")
        .agg(pl.col("corr").min().alias("_lo"), pl.col("corr").max().alias("_hi"))
        .sort("source", "_space")
    )
    if ranges.height <= 1:
        return events
    shifts, end = [], None
    for lo, hi in ranges.select("_lo", "_hi").iter_rows():
        shift = 0 if end is None else max(0, end + 1 - lo)
        shifts.append(shift)
        end = hi + shift
    table = ranges.select("source", "_space").with_columns(
        pl.Series("_shift", shifts, dtype=pl.Int64)
    )
    return (
        keyed.join(table, on=["source", "_space"], how="left", maintain_order="left")
        .with_columns((pl.col("corr") + pl.col("_shift").fill_null(0)).alias("corr"))
        .drop("_space", "_shift")
    )


def _write(output: Path, data: bytes) -> None:
    """``data`` at ``output`` atomically (gzipped for ``.gz``): a failed write leaves no half
    trace."""
    with atomic_binary(output) as fh:
        if not output.name.endswith(".gz"):
            fh.write(data)
            return
        with gzip.GzipFile(filename=output.name, mode="wb", fileobj=fh, compresslevel=6) as packed:
            packed.write(data)


def _pid(rank: pl.Expr) -> pl.Expr:
    """Rank r is process r; the single controller (rank -1) is :data:`DRIVER_PID`."""
    return pl.when(rank >= 0).then(rank.cast(pl.Int64)).otherwise(pl.lit(DRIVER_PID, pl.Int64))


def _trace_events(run) -> pl.DataFrame:
    """The trace events on the run's one clock (within ``--ranks``): every rank's and the single
    controller's, not the framework logs'."""
    events = run.product("aligned") if run.provides("aligned") else run.events
    return events.filter(pl.col("kind").cast(pl.String).is_in(list(CATEGORY))).with_columns(
        _pid(pl.col("rank")).alias("_pid")
    )


def _with_groups(events: pl.DataFrame, run) -> pl.DataFrame:
    """Collectives that name only their group get its ranks and description from their source's
    ``pg_config``: the export is one file, whose reader has no per-rank configuration."""
    rows = [
        {"source": s.index, "pg": str(g.get("pg_name")), "_desc": g.get("pg_desc"),
         "_ranks": g.get("ranks")}
        for s in run.sources
        for g in s.meta.get("pg_config") or []
    ]
    if not rows:
        return events
    config = pl.DataFrame(
        rows, schema={"source": pl.UInt32, "pg": pl.String, "_desc": pl.String, "_ranks": pl.String}
    ).unique(["source", "pg"], keep="first")
    keyed = events.with_columns(pl.col("pg").cast(pl.String).alias("_pg"))
    return keyed.join(
        config.rename({"pg": "_pg"}), on=["source", "_pg"], how="left", maintain_order="left"
    ).with_columns(
        pl.coalesce(pl.col("pg_ranks").cast(pl.String), "_ranks").alias("pg_ranks"),
        pl.coalesce(pl.col("pg_desc").cast(pl.String), "_desc").alias("pg_desc"),
    ).drop("_pg", "_desc", "_ranks")


def processes(run, events: pl.DataFrame, stages: pl.DataFrame | None) -> list[dict[str, Any]]:
    """The header's process table: per process its rank, host, device (the first device its GPU
    work ran on) and role, so that the reader gives every event back its rank."""
    ranks = set(events["rank"].to_list()) | set(
        stages["rank"].to_list() if stages is not None else []
    )
    per_rank = events.group_by("rank").agg(
        pl.col("host").cast(pl.String).drop_nulls().first().alias("host"),
        pl.col("device")
        .filter(pl.col("kind").cast(pl.String).is_in(DEVICE_KINDS) & (pl.col("device") >= 0))
        .first()
        .alias("device"),
    )
    facts = {r: (h, d) for r, h, d in per_rank.iter_rows()}
    table = []
    for rank in sorted(ranks):
        host, device = facts.get(rank, (None, None))
        table.append({
            "pid": rank if rank >= 0 else DRIVER_PID, "rank": rank, "host": host,
            "device": -1 if device is None else int(device),
            "role": "worker" if rank >= 0 else "driver",
        })
    return table


def _distributed(run) -> dict[str, Any]:
    """A ``distributedInfo`` without a rank (the file holds all of them): backend and world size
    as the sources state them."""
    metas = [s.meta for s in run.sources]
    backend = next((m["backend"] for m in metas if m.get("backend")), None)
    sizes = [m["world_size"] for m in metas if isinstance(m.get("world_size"), int)]
    info = {k: v for k, v in (("backend", backend), ("world_size", max(sizes, default=None)))
            if v is not None}
    return {"distributedInfo": info} if info else {}


def _text(*parts: str | pl.Expr) -> pl.Expr:
    """Literal strings and columns joined into one string column."""
    return pl.concat_str([pl.lit(p) if isinstance(p, str) else p.cast(pl.String) for p in parts])


def _micros(ns: pl.Expr) -> pl.Expr:
    """Nanoseconds as µs with exactly three decimals, built from integers (no float rounding)."""
    return _text(ns // 1000, ".", (ns % 1000).cast(pl.String).str.zfill(3))


def _ts(column: str, t0: int) -> pl.Expr:
    return _micros(pl.col(column) - t0)


def _dur() -> pl.Expr:
    return _micros((pl.col("end_ns") - pl.col("start_ns")).clip(lower_bound=0))


def _json_strings(column: pl.Expr, values: pl.Series) -> pl.Expr:
    """A string column as JSON string literals (each distinct value escaped once)."""
    distinct = values.cast(pl.String).fill_null("").unique().to_list()
    return (
        column.cast(pl.String)
        .fill_null("")
        .replace_strict({v: json.dumps(v) for v in distinct}, return_dtype=pl.String)
    )


def _slice(
    cat: pl.Expr, name: pl.Expr, pid: pl.Expr, tid: pl.Expr, t0: int, args: pl.Expr, ph: str = "X"
) -> pl.Expr:
    dur = _text(',"dur":', _dur()) if ph == "X" else pl.lit(',"s":"t"')
    return _text(
        f'{{"ph":"{ph}","cat":"', cat, '","name":', name, ',"pid":', pid, ',"tid":', tid,
        ',"ts":', _ts("start_ns", t0), dur, ',"args":', args, "}",
    )


def _events(events: pl.DataFrame, t0: int) -> pl.Series:
    if events.height == 0:
        return pl.Series([], dtype=pl.String)
    kind = pl.col("kind").cast(pl.String)
    on_device = kind.is_in(DEVICE_KINDS)
    collective = pl.col("coll").is_not_null()
    args = pl.struct(
        pl.when(on_device).then(pl.col("device")).alias("device"),
        pl.when(on_device).then(pl.col("stream")).alias("stream"),
        pl.col("corr").alias("correlation"),
        pl.col("ext_id").alias("External id"),
        pl.when(~collective).then(pl.col("bytes")).alias("bytes"),
        pl.col("flops").alias("flops"),
        pl.when(collective).then(pl.col("coll").cast(pl.String)).alias("Collective name"),
        pl.when(collective).then(pl.col("pg").cast(pl.String)).alias("Process Group Name"),
        pl.when(collective)
        .then(pl.col("pg_desc").cast(pl.String))
        .alias("Process Group Description"),
        pl.when(collective).then(pl.col("pg_ranks")).alias("Process Group Ranks"),
        pl.when(collective).then(pl.col("group_size")).alias("Group size"),
        pl.when(collective & pl.col("bytes").is_not_null()).then(pl.lit("Byte")).alias("dtype"),
        pl.when(collective).then(pl.col("bytes")).alias("In msg nelems"),
        pl.when(collective).then(pl.col("bytes")).alias("Out msg nelems"),
        pl.when(collective).then(pl.col("seq")).alias("Seq"),
        pl.col("step").alias("rlperf step"),
    ).struct.json_encode()
    args = args.str.replace_all(r'"[^"]+":null,?', "").str.replace(r",}$", "}")
    tid = pl.when(on_device).then(pl.col("stream").cast(pl.Int64)).otherwise(pl.col("tid"))
    cat = kind.replace_strict(CATEGORY, return_dtype=pl.String)
    name = _json_strings(pl.col("name"), events["name"])
    instant = kind == "marker"
    out = events.select(
        pl.when(instant)
        .then(_slice(cat, name, pl.col("_pid"), tid, t0, args, ph="i"))
        .otherwise(_slice(cat, name, pl.col("_pid"), tid, t0, args))
    )
    return out.to_series()


def _stage_slices(stages: pl.DataFrame, t0: int) -> pl.Series:
    args = pl.struct(
        pl.col("stage").cast(pl.String).alias("stage"),
        pl.col("step"),
        pl.col("name").cast(pl.String).alias("range"),
        *[pl.col(c).cast(pl.String) for c in ("role",) if c in stages.columns],
        *[pl.col(c) for c in ("inferred",) if c in stages.columns],
    ).struct.json_encode()
    name = _json_strings(pl.col("stage"), stages["stage"])
    return stages.select(
        _slice(
            pl.lit(STAGE_CATEGORY), name, _pid(pl.col("rank")), pl.lit(STAGE_TID), t0, args
        )
    ).to_series()


def _bubbles(run) -> pl.DataFrame | None:
    """Idle runs by cause (``device_states``); ``largest`` marks the runs that overlap one of the
    largest bubbles (computed from the same states) of the same rank and cause."""
    states = frame_of(run, "device_states", "rank", "step", "cause", "start_ns", "end_ns")
    if states is None or states.height == 0:
        return None
    largest = frame_of(run, "largest_bubbles", "rank", "step", "cause", "start_ns", "end_ns")
    idle = states.filter(pl.col("cause").is_not_null()).select(
        "rank", "step", pl.col("cause").cast(pl.String), "start_ns", "end_ns"
    ).filter(pl.col("end_ns") > pl.col("start_ns")).with_row_index("_i")
    marked: list[int] = []
    if largest is not None and largest.height:
        top = largest.select(
            "rank",
            pl.col("cause").cast(pl.String),
            pl.col("start_ns").alias("_s"),
            pl.col("end_ns").alias("_e"),
        )
        hits = idle.join(top, on=["rank", "cause"]).filter(
            (pl.col("start_ns") < pl.col("_e")) & (pl.col("end_ns") > pl.col("_s"))
        )
        marked = hits["_i"].unique().to_list()
    return idle.with_columns(pl.col("_i").is_in(marked).alias("largest")).drop("_i")


def merge_bubbles(idle: pl.DataFrame, below_ns: int = MERGE_BELOW_NS) -> pl.DataFrame:
    """Idle runs with consecutive runs under ``below_ns`` of one rank, cause and step joined
    (:data:`MERGE_BELOW_NS`): ``start_ns`` of the first, ``end_ns`` = start + their total idle,
    ``span_end_ns`` where the last ends, ``merged`` how many."""
    ordered = idle.sort("rank", "start_ns").with_columns(
        ((pl.col("end_ns") - pl.col("start_ns")) < below_ns).alias("_small")
    )
    same = (
        pl.col("_small")
        & pl.col("_small").shift(1).over("rank")
        & (pl.col("cause") == pl.col("cause").shift(1).over("rank"))
        & (pl.col("step").eq_missing(pl.col("step").shift(1).over("rank")))
    )
    grouped = ordered.with_columns((~same.fill_null(False)).cum_sum().alias("_g"))
    return (
        grouped.group_by("_g", maintain_order=True)
        .agg(
            pl.col("rank").first(), pl.col("step").first(), pl.col("cause").first(),
            pl.col("start_ns").first(),
            (pl.col("start_ns").first() + (pl.col("end_ns") - pl.col("start_ns")).sum())
            .alias("end_ns"),
            pl.col("end_ns").last().alias("span_end_ns"),
            pl.col("largest").any(),
            pl.len().cast(pl.Int64).alias("merged"),
        )
        .drop("_g")
    )


def _bubble_slices(bubbles: pl.DataFrame, t0: int) -> pl.Series:
    span = _micros(pl.col("span_end_ns") - pl.col("start_ns"))
    args = pl.when(pl.col("merged") > 1).then(
        _text(
            pl.struct("cause", "step", "largest", "merged").struct.json_encode().str.strip_suffix(
                "}"
            ),
            ',"span_us":', span, "}",
        )
    ).otherwise(pl.struct("cause", "step", "largest").struct.json_encode())
    label = pl.when(pl.col("merged") > 1).then(
        _text("bubbles: ", pl.col("cause"), " (", pl.col("merged"), " under 10 µs)")
    ).otherwise(_text("bubble: ", pl.col("cause")))
    name = (
        pl.when(pl.col("largest"))
        .then(_text('"largest ', label, '"'))
        .otherwise(_text('"', label, '"'))
    )
    color = pl.when(pl.col("largest")).then(pl.lit("terrible")).otherwise(pl.lit("bad"))
    rows = bubbles.select(
        _slice(pl.lit(BUBBLE_CATEGORY), name, _pid(pl.col("rank")), pl.lit(BUBBLE_TID), t0, args),
        color.alias("c"),
    )
    return rows.select(
        _text(pl.col(rows.columns[0]).str.strip_suffix("}"), ',"cname":"', pl.col("c"), '"}')
    ).to_series()


def _flows(run, stages: pl.DataFrame, t0: int) -> pl.Series:
    """Per step: an arrow from the first train-pool rank's weight-sync slice to every rollout-pool
    rank's (disaggregated runs; colocated ranks sync weights locally, so there are none)."""
    pools = frame_of(run, "pools", "rank", "pool")
    sync = stages.filter(pl.col("stage").cast(pl.String) == "weight_sync")
    if pools is None or sync.height == 0:
        return pl.Series([], dtype=pl.String)
    tagged = sync.join(
        pools.select("rank", pl.col("pool").cast(pl.String)), on="rank"
    ).with_columns(((pl.col("start_ns") + pl.col("end_ns")) // 2).alias("mid"))
    sources = (
        tagged.filter(pl.col("pool") == "train")
        .sort("rank", "start_ns")
        .group_by("step", maintain_order=True)
        .first()
    )
    targets = (
        tagged.filter(pl.col("pool") == "rollout")
        .sort("step", "rank", "start_ns")
        .group_by("step", "rank", maintain_order=True)
        .first()
    )
    pairs = targets.join(
        sources.select("step", pl.col("rank").alias("src"), pl.col("mid").alias("src_mid")),
        on="step",
    ).with_row_index("id", offset=1)
    if pairs.height == 0:
        return pl.Series([], dtype=pl.String)
    head = f'"cat":"{FLOW_CATEGORY}","name":"weight sync","id":'
    start = _text(
        '{"ph":"s",' + head, pl.col("id"), ',"pid":', pl.col("src"),
        f',"tid":{STAGE_TID},"ts":', _ts("src_mid", t0), "}",
    )
    finish = _text(
        '{"ph":"f","bp":"e",' + head, pl.col("id"), ',"pid":', pl.col("rank"),
        f',"tid":{STAGE_TID},"ts":', _ts("mid", t0), "}",
    )
    return pl.concat([pairs.select(start).to_series(), pairs.select(finish).to_series()])


def _metadata(
    run,
    events: pl.DataFrame,
    stages: pl.DataFrame | None,
    bubbles: pl.DataFrame | None,
    table: list[dict[str, Any]],
) -> list[str]:
    """Process and thread names and orders: rank r is "rank r (pool, host)", the single
    controller "driver" above them, stages on top of each process."""
    pools = frame_of(run, "pools", "rank", "pool")
    pool_of = (
        {}
        if pools is None
        else dict(
            zip(pools["rank"].to_list(), pools["pool"].cast(pl.String).to_list(), strict=True)
        )
    )
    out = []
    for entry in table:
        rank, pid = entry["rank"], entry["pid"]
        label = ", ".join(str(x) for x in (pool_of.get(rank), entry["host"]) if x)
        title = f"rank {rank}" if rank >= 0 else "driver (single controller)"
        out.append(
            _meta("process_name", pid, None, {"name": title + (f" ({label})" if label else "")})
        )
        out.append(_meta("process_sort_index", pid, None, {"sort_index": rank}))
    gpu = pl.col("kind").cast(pl.String).is_in(DEVICE_KINDS)
    tracks = events.select(
        "_pid", gpu.alias("gpu"),
        pl.when(gpu).then(pl.col("stream").cast(pl.Int64)).otherwise(pl.col("tid")).alias("tid"),
    ).unique().sort("_pid", "gpu", "tid", descending=[False, True, False])
    for pid, on_gpu, tid in tracks.iter_rows():
        name = f"stream {tid}" if on_gpu else f"thread {tid}"
        out.append(_meta("thread_name", pid, tid, {"name": name}))
    for frame, tid, title, order in (
        (stages, STAGE_TID, "stages", -2),
        (bubbles, BUBBLE_TID, "bubbles (idle by cause)", -1),
    ):
        if frame is None or frame.height == 0:
            continue
        for rank in sorted(frame["rank"].unique().to_list()):
            pid = rank if rank >= 0 else DRIVER_PID
            out.append(_meta("thread_name", pid, tid, {"name": title}))
            out.append(_meta("thread_sort_index", pid, tid, {"sort_index": order}))
    return out


def _meta(name: str, pid: int, tid: int | None, args: dict[str, Any]) -> str:
    event: dict[str, Any] = {"ph": "M", "name": name, "pid": pid}
    if tid is not None:
        event["tid"] = tid
    event["args"] = args
    return json.dumps(event)
