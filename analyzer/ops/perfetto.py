"""A run as one Chrome-trace JSON for the Perfetto UI and chrome://tracing: every rank a process,
its events on their threads and streams, plus a *stages* track (the stage timeline), a *bubbles*
track (idle time by cause, the largest marked) and flow arrows for weight sync.

The file is written in the shape of a PyTorch profiler (Kineto) trace, so rlperf's own Kineto
parser reads it back: ``baseTimeNanoseconds`` plus relative ``ts`` in µs with three decimals
(nanoseconds survive exactly), Kineto categories (``kernel``, ``cpu_op``, ``user_annotation``,
…) and args (``correlation``, ``External id``, ``Collective name``, …). Rank r is process r;
device work sits on thread = CUDA stream as in Kineto. Stage slices are ``user_annotation``
events named by their stage on thread :data:`STAGE_TID` of the rank's process; bubbles use the
category ``rlperf_bubble``, which trace readers that do not know it skip. Framework-log rows are
not exported (their times may be synthesised from step order).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl

from ..analyses.overview import frame_of
from ..model.scalars import as_int
from ..report.files import atomic_binary

STAGE_TID = 10_000_001
BUBBLE_TID = 10_000_002
"""Thread ids of the two added tracks (above any Linux thread id, far above CUDA stream ids)."""
BUBBLE_CATEGORY = "rlperf_bubble"
FLOW_CATEGORY = "weight_sync"

CATEGORY: dict[str, str] = {
    "kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "gpu_sync": "cuda_sync",
    "gpu_annotation": "gpu_user_annotation", "runtime": "cuda_runtime", "cpu_op": "cpu_op",
    "annotation": "user_annotation", "python": "python_function", "marker": "cpu_instant_event",
}
"""Event kind → the Kineto category the parser maps back to that kind."""
DEVICE_KINDS = ("kernel", "memcpy", "memset", "gpu_sync", "gpu_annotation")


def export(run, output: Path) -> dict[str, Any]:
    """Write ``run`` to ``output`` (gzip when it ends in ``.gz``); returns what was written."""
    events = run.events.filter(
        (pl.col("rank") >= 0) & pl.col("kind").cast(pl.String).is_in(list(CATEGORY))
    )
    stages = frame_of(run, "stage_timeline", "rank", "step", "stage", "name", "start_ns", "end_ns")
    bubbles = _bubbles(run)
    starts = [
        as_int(f["start_ns"].min()) for f in (events, stages, bubbles) if f is not None and f.height
    ]
    if not starts:
        raise ValueError("nothing to export: the run has no trace events")
    t0 = (min(starts) // 1000) * 1000
    parts = [_events(events, t0)]
    counts = {"events": events.height, "stage_slices": 0, "bubble_slices": 0, "flows": 0}
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
    meta = _metadata(run, events, stages, bubbles)
    header = {
        "schemaVersion": 1,
        "baseTimeNanoseconds": t0,
        "traceName": "rlperf export",
        "rlperf": {"stage_tid": STAGE_TID, "bubble_tid": BUBBLE_TID, "ranks": run.ranks, **counts},
    }
    text = (
        json.dumps(header)[:-1]
        + ',"traceEvents":[\n'
        + ",\n".join([*meta, *body.to_list()])
        + "\n]}\n"
    )
    _write(output, text.encode())
    return {"path": str(output), "bytes": output.stat().st_size, **counts}


def _write(output: Path, data: bytes) -> None:
    """``data`` at ``output`` atomically (gzipped for ``.gz``): a failed write leaves no half
    trace."""
    with atomic_binary(output) as fh:
        if not output.name.endswith(".gz"):
            fh.write(data)
            return
        with gzip.GzipFile(filename=output.name, mode="wb", fileobj=fh, compresslevel=6) as packed:
            packed.write(data)


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
        .then(_slice(cat, name, pl.col("rank"), tid, t0, args, ph="i"))
        .otherwise(_slice(cat, name, pl.col("rank"), tid, t0, args))
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
        _slice(pl.lit("user_annotation"), name, pl.col("rank"), pl.lit(STAGE_TID), t0, args)
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


def _bubble_slices(bubbles: pl.DataFrame, t0: int) -> pl.Series:
    args = pl.struct("cause", "step", "largest").struct.json_encode()
    name = (
        pl.when(pl.col("largest"))
        .then(_text('"largest bubble: ', pl.col("cause"), '"'))
        .otherwise(_text('"bubble: ', pl.col("cause"), '"'))
    )
    color = pl.when(pl.col("largest")).then(pl.lit("terrible")).otherwise(pl.lit("bad"))
    rows = bubbles.select(
        _slice(pl.lit(BUBBLE_CATEGORY), name, pl.col("rank"), pl.lit(BUBBLE_TID), t0, args),
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
        '{"ph":"s",' + head,
        pl.col("id"),
        ',"pid":',
        pl.col("src"),
        f',"tid":{STAGE_TID},"ts":',
        _ts("src_mid", t0),
        "}",
    )
    finish = _text(
        '{"ph":"f","bp":"e",' + head,
        pl.col("id"),
        ',"pid":',
        pl.col("rank"),
        f',"tid":{STAGE_TID},"ts":',
        _ts("mid", t0),
        "}",
    )
    return pl.concat([pairs.select(start).to_series(), pairs.select(finish).to_series()])


def _metadata(
    run, events: pl.DataFrame, stages: pl.DataFrame | None, bubbles: pl.DataFrame | None
) -> list[str]:
    """Process and thread names and orders: rank r is "rank r (pool, host)", stages on top."""
    pools = frame_of(run, "pools", "rank", "pool")
    pool_of = (
        {}
        if pools is None
        else dict(
            zip(pools["rank"].to_list(), pools["pool"].cast(pl.String).to_list(), strict=True)
        )
    )
    hosts = events.group_by("rank").agg(pl.col("host").cast(pl.String).drop_nulls().first())
    host_of = dict(zip(hosts["rank"].to_list(), hosts["host"].to_list(), strict=True))
    out = []
    ranks = sorted(
        set(events["rank"].to_list()) | set(stages["rank"].to_list() if stages is not None else [])
    )
    for rank in ranks:
        label = ", ".join(str(x) for x in (pool_of.get(rank), host_of.get(rank)) if x)
        out.append(
            _meta(
                "process_name",
                rank,
                None,
                {"name": f"rank {rank}" + (f" ({label})" if label else "")},
            )
        )
        out.append(_meta("process_sort_index", rank, None, {"sort_index": rank}))
    tracks = events.select(
        "rank", pl.col("kind").cast(pl.String).is_in(DEVICE_KINDS).alias("gpu"),
        pl.when(pl.col("kind").cast(pl.String).is_in(DEVICE_KINDS)).then(pl.col("stream").cast(pl.Int64)).otherwise(pl.col("tid")).alias("tid"),
    ).unique().sort("rank", "gpu", "tid", descending=[False, True, False])
    for rank, gpu, tid in tracks.iter_rows():
        out.append(
            _meta("thread_name", rank, tid, {"name": f"stream {tid}" if gpu else f"thread {tid}"})
        )
    for frame, tid, title, order in (
        (stages, STAGE_TID, "stages", -2),
        (bubbles, BUBBLE_TID, "bubbles (idle by cause)", -1),
    ):
        if frame is None or frame.height == 0:
            continue
        for rank in sorted(frame["rank"].unique().to_list()):
            out.append(_meta("thread_name", rank, tid, {"name": title}))
            out.append(_meta("thread_sort_index", rank, tid, {"sort_index": order}))
    return out


def _meta(name: str, pid: int, tid: int | None, args: dict[str, Any]) -> str:
    event: dict[str, Any] = {"ph": "M", "name": name, "pid": pid}
    if tid is not None:
        event["tid"] = tid
    event["args"] = args
    return json.dumps(event)
