"""Generic GPU findings: what any trace with GPU activity shows, stages known or not.

A trace without RL stage annotations (a plain torchrun or nsys capture) still says where its
time goes: the kernels that dominate, the gaps where the GPU waits for the host, the host
blocked in synchronisation, copies nothing overlaps, collectives whose duration varies or that
wait for a straggler, and idle gaps. Each check runs over the whole trace (``stage`` empty) and,
when stages are known, inside each stage. Thresholds, names and wording are data
(``taxonomy/gpu_findings.toml``); the numbers and their definitions are in docs/analyses.md
("Generic GPU findings"). :func:`measure` returns the numbers (polars, one frame per check);
:func:`compute` turns the rows that reach a threshold into :data:`frames.FINDING_CANDIDATES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from parsers.events import GPU_ACTIVITY_KINDS
from taxonomy.tomlfile import read_toml

from ..model import frames, intervals
from ..model.products import provides
from ..model.query import collect
from ..model.units import duration, percent, plural, size, spans
from . import queued
from .findings import Workload, workload
from .findings import rules as finding_rules
from .sync import exposed_within

RULES_FILE = Path(__file__).parents[2] / "taxonomy" / "gpu_findings.toml"
WHOLE = ""
"""The scope of a finding over the whole trace (its ``stage`` column)."""
SPAN = ["start_ns", "end_ns"]


def _rules_error(path: Path, problem: str) -> Exception:
    return ValueError(f"{path}: {problem}")


def rules(path: Path = RULES_FILE) -> dict[str, Any]:
    return read_toml(path, _rules_error)


# --- scopes and windows ------------------------------------------------------------------------


def _scoped(frame: pl.DataFrame) -> pl.DataFrame:
    """Every row once in the whole-trace scope and once more in its stage's, when it has one."""
    whole = frame.with_columns(pl.lit(WHOLE).alias("scope"))
    if "stage" not in frame.columns:
        return whole
    staged = frame.filter(pl.col("stage").is_not_null()).with_columns(
        pl.col("stage").cast(pl.String).alias("scope")
    )
    return pl.concat([whole, staged])


def _stage_spans(stage_timeline: pl.DataFrame) -> pl.DataFrame:
    """Per rank and stage, the union of the stage's ranges (rank, scope, start_ns, end_ns)."""
    staged = stage_timeline.filter(pl.col("stage").is_not_null()).select(
        "rank", pl.col("stage").cast(pl.String).alias("scope"), *SPAN
    )
    return intervals.union(staged, ["rank", "scope"])


def windows(events: pl.DataFrame | pl.LazyFrame, stage_timeline: pl.DataFrame) -> pl.DataFrame:
    """Per scope and rank: the wall window (all its events; in a stage, the stage's ranges) and
    the GPU window (first to last GPU activity; in a stage, the stage's ranges again)."""
    gpu = events.lazy().filter(_is_gpu())
    wall = events.lazy().filter(pl.col("rank") >= 0).group_by("rank").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("wall_ns")
    ).pipe(collect)
    dev = gpu.group_by("rank").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("gpu_window_ns")
    ).pipe(collect)
    whole = wall.join(dev, on="rank", how="inner").with_columns(pl.lit(WHOLE).alias("scope"))
    spans_ = _stage_spans(stage_timeline)
    staged = intervals.union_length(spans_, ["rank", "scope"], "wall_ns").with_columns(
        pl.col("wall_ns").alias("gpu_window_ns")
    )
    cols = ["scope", "rank", "wall_ns", "gpu_window_ns"]
    return pl.concat([whole.select(cols), staged.select(cols)]).filter(pl.col("wall_ns") > 0)


def _clip_scoped(spans_: pl.DataFrame, stage_spans: pl.DataFrame) -> pl.DataFrame:
    """Intervals (rank + start/end, one per row) in the whole scope, and their parts inside
    each stage; each piece keeps ``_id``, the interval it came from."""
    base = spans_.select("rank", *SPAN, "_id")
    whole = base.with_columns(pl.lit(WHOLE).alias("scope"))
    if stage_spans.height == 0 or base.height == 0:
        return whole
    hit = base.join(stage_spans, on="rank", suffix="_s").with_columns(
        pl.max_horizontal("start_ns", "start_ns_s").alias("start_ns"),
        pl.min_horizontal("end_ns", "end_ns_s").alias("end_ns"),
    ).filter(pl.col("end_ns") > pl.col("start_ns"))
    return pl.concat([whole, hit.select("rank", *SPAN, "_id", "scope")])


# --- the numbers -------------------------------------------------------------------------------


FAMILY_CHARS = 60


def _family(name: pl.Expr) -> pl.Expr:
    """A kernel's short name: ``void ns::kern<…>(…)`` and ``void (anonymous namespace)::kern<…>``
    → ``kern``; the name itself (cut to :data:`FAMILY_CHARS`) when that leaves nothing."""
    full = name.cast(pl.String)
    bare = full.str.replace(r"^void ", "").str.replace_all(r"\(anonymous namespace\)::", "")
    head = bare.str.extract(r"^([^<(]*)", 1)
    short = head.str.split("::").list.last().str.strip_chars()
    short = pl.when(short.str.len_chars() > 0).then(short).otherwise(full)
    return pl.when(short.str.len_chars() > FAMILY_CHARS).then(
        short.str.slice(0, FAMILY_CHARS - 1) + "…"
    ).otherwise(short)


DETAIL_CHARS = 80


def _detail(name: pl.Expr) -> pl.Expr:
    """A kernel's name without ``void``, parameters and namespaces, cut to
    :data:`DETAIL_CHARS`: what tells two kernels of one short name apart
    (``vectorized_elementwise_kernel<4, FillFunctor<int>, …`` and ``<…<long>, …``)."""
    text = name.cast(pl.String).str.replace(r"^void ", "").str.replace(r">\(.*\)$", ">")
    text = text.str.replace_all(r"(\(anonymous namespace\)|[A-Za-z_]\w*)::", "")
    return pl.when(text.str.len_chars() > DETAIL_CHARS).then(
        text.str.slice(0, DETAIL_CHARS - 1) + "…"
    ).otherwise(text)


def _labels(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (one scope's kernels, by place) with ``label``: the short name, or where two
    listed kernels share it, their :func:`_detail` (and their place, should that collide too)."""
    label = pl.when(pl.len().over("family") > 1).then(_detail(pl.col("name"))).otherwise("family")
    rows = rows.with_columns(label.alias("label"))
    again = pl.len().over("label") > 1
    return rows.with_columns(
        pl.when(again).then(pl.col("label") + " #" + pl.col("place").cast(pl.String))
        .otherwise("label").alias("label")
    )


def _dur() -> pl.Expr:
    return pl.col("end_ns") - pl.col("start_ns")


def _ranks_of(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per ``keys`` group, its ranks sorted (``ranks``): from the distinct (keys, rank) pairs,
    as a list aggregation over every row would first gather each group's rows."""
    pairs = frame.lazy().select(*keys, "rank").unique()
    return pairs.group_by(keys).agg(pl.col("rank").sort().alias("ranks")).pipe(collect)


def top_kernels(kernels: pl.DataFrame, rule: dict[str, Any]) -> pl.DataFrame:
    """Per scope and kernel name: total time, launches, mean/max/min, share of the scope's
    kernel time over all ranks, and its place by total time (1 = most)."""
    per = kernels.lazy().group_by("scope", "name").agg(
        _dur().sum().alias("total_ns"), pl.len().alias("count"),
        _dur().mean().alias("mean_ns"), _dur().max().alias("max_ns"), _dur().min().alias("min_ns"),
    ).pipe(collect).join(_ranks_of(kernels, ["scope", "name"]), on=["scope", "name"])
    # ties in total time take their place by name, not by the group-by's arbitrary order
    per = per.sort(
        "scope", "total_ns", pl.col("name").cast(pl.String), descending=[False, True, False]
    )
    comm = pl.col("name").cast(pl.String).str.contains(rule["communication"])
    compute_ns = pl.when(~pl.col("comm")).then("total_ns")
    return per.with_columns(comm.alias("comm")).with_columns(
        (pl.col("total_ns") / pl.col("total_ns").sum().over("scope")).alias("share"),
        pl.col("total_ns").rank("ordinal", descending=True).over("scope").alias("place"),
        compute_ns.rank("ordinal", descending=True).over("scope").alias("compute_place"),
        (pl.col("total_ns").filter("comm").sum().over("scope") / pl.col("total_ns").sum()
         .over("scope")).fill_null(0.0).alias("comm_share"),
        _family(pl.col("name")).alias("family"),
        (pl.col("max_ns") / pl.col("mean_ns")).alias("ratio"),
    ).with_columns(
        pl.len().over("scope", "family").alias("variants"),
        pl.col("share").sum().over("scope", "family").alias("family_share"),
    ).sort("scope", "place")


def _share_said(r: dict[str, Any]) -> str:
    """A listed kernel's share, and, when it is listed by a short name other kernels of the
    scope share (template instantiations: nsys-ai's mfu_2gpu_before has 8
    ``elementwise_kernel``s, 4.9% the largest and 16.2% together), how many there are and
    their share together."""
    said = percent(r["share"])
    if r["variants"] > 1 and r["label"] == r["family"]:
        said += (f" (1 of {r['variants']} {r['family']} variants, "
                 f"{percent(r['family_share'])} together)")
    return said


def small_kernels(kernels: pl.DataFrame, launches: pl.DataFrame, wall: pl.DataFrame,
                  rule: dict[str, Any], graphs: pl.DataFrame) -> pl.DataFrame:
    """Per scope: kernels shorter than ``max_ns``, their share of launches, their GPU time, the
    host time of their launch calls (each call once) and its share of the ranks' wall time;
    ``family``: the short name launched most often. Kernels a graph launch started
    (``graphs``: its rank and corr) are no launch overhead and not counted (``in_graphs``)."""
    in_graph = kernels.join(graphs, on=["rank", "corr"], how="semi")
    kernels = kernels.join(graphs, on=["rank", "corr"], how="anti")
    tiny = kernels.lazy().select("scope", "name", "rank", "corr", *SPAN).filter(
        _dur() < rule["max_ns"]
    ).pipe(collect)
    names = tiny.select(pl.col("name").unique())
    names = names.with_columns(_family(pl.col("name")).alias("family")).with_columns(
        pl.col("family").rank("dense").alias("_fam")
    )
    tiny = tiny.join(names.select("name", "_fam"), on="name")
    per = kernels.group_by("scope").agg(pl.len().alias("launches")).join(
        in_graph.group_by("scope").agg(pl.len().alias("in_graphs")), on="scope", how="left"
    ).join(
        tiny.group_by("scope").agg(pl.len().alias("count"), _dur().sum().alias("gpu_ns"))
        .join(_ranks_of(tiny, ["scope"]), on="scope"), on="scope", how="inner",
    )
    calls = tiny.select("scope", "rank", "corr").unique().join(
        launches, on=["rank", "corr"], how="inner"
    )
    per = per.join(calls.group_by("scope").agg(pl.col("api_ns").sum()), on="scope", how="left")
    fam_calls = tiny.select("scope", "_fam", "rank", "corr").unique().join(
        launches, on=["rank", "corr"], how="inner"
    ).group_by("scope", "_fam").agg(pl.col("api_ns").sum().alias("api"))
    top = tiny.group_by("scope", "_fam").agg(pl.len().alias("n"), _dur().mean().alias("mean"))
    family = names.select("_fam", "family").unique("_fam")
    top = top.join(family, on="_fam").select("scope", "family", "n", "mean", "_fam")
    top = top.join(fam_calls, on=["scope", "_fam"], how="left").drop("_fam").sort(
        "n", "family", descending=[True, False]
    ).group_by("scope", maintain_order=True).first()
    walls = wall.group_by("scope").agg(pl.col("wall_ns").sum())
    return per.join(top, on="scope", how="left").join(walls, on="scope", how="left").with_columns(
        pl.col("api_ns").fill_null(0), pl.col("api").fill_null(0),
        pl.col("in_graphs").fill_null(0),
        (pl.col("count") / pl.col("launches")).alias("launch_share"),
    ).with_columns((pl.col("api_ns") / pl.col("wall_ns")).alias("api_share"))


@dataclass(frozen=True)
class Busy:
    """Per rank, the union of all GPU activity and that of its kernels, merged once for the
    checks that read them (a union of a union is itself, so they serve as covers too)."""

    gpu: pl.DataFrame
    kernels: pl.DataFrame

    @classmethod
    def of(cls, gpu: pl.DataFrame) -> Busy:
        kernels = gpu.lazy().filter(pl.col("kind") == "kernel")
        return cls(intervals.union(gpu, ["rank"]), intervals.union(kernels, ["rank"]))


@dataclass(frozen=True)
class Pending:
    """Per rank, when launched work was queued: it started more than ``queue_lag_ns`` after
    its launch call returned (:func:`queued.spans`). An idle GPU starts launched work within
    microseconds, so idle then waited for something other than the host (an event of another
    stream, device work the trace does not hold): no launch overhead, and a host blocked then
    waited for that GPU. ``spans``: their union; ``longest``: per rank its longest queued work
    (``work_name``, ``work_stream``, ``lag_ns``) and the stream-wait call the host issued
    before launching it (``wait_name``, ``wait_before_ns`` before the launch; null if none
    since the stream's previous launch)."""

    spans: pl.DataFrame
    longest: pl.DataFrame

    @classmethod
    def of(cls, gpu: pl.DataFrame, runtime: pl.LazyFrame, waits: pl.Series, lag_ns: int
           ) -> Pending:
        calls = queued.launch_calls(runtime)
        launched = gpu.select("rank", "corr", "name", "stream", "start_ns").join(
            calls, on=["rank", "corr"], how="inner"
        ).sort("rank", "stream", "launch_end_ns").with_columns(
            pl.col("launch_end_ns").shift(1).over("rank", "stream").fill_null(-(2**62))
            .alias("prev_ns")
        )
        late = queued.spans(launched, lag_ns)
        spans_ = intervals.union(late.select("rank", *SPAN), ["rank"])
        waited = runtime.filter(pl.col("name").is_in(waits.implode())).select(
            "rank", pl.col("end_ns").alias("wait_end_ns"),
            pl.col("name").cast(pl.String).alias("wait_name"),
        ).pipe(collect).sort("wait_end_ns")
        longest = late.with_columns(
            (pl.col("end_ns") - pl.col("work_launch_end_ns")).alias("lag_ns")
        ).sort("lag_ns", descending=True).group_by("rank", maintain_order=True).first()
        longest = longest.sort("work_launch_start_ns").join_asof(
            waited, left_on="work_launch_start_ns", right_on="wait_end_ns", by="rank",
            strategy="backward", check_sortedness=False,
        ).with_columns(
            pl.when(pl.col("wait_end_ns") > pl.col("work_prev_ns")).then("wait_name")
            .alias("wait_name"),
            pl.when(pl.col("wait_end_ns") > pl.col("work_prev_ns"))
            .then(pl.col("work_launch_start_ns") - pl.col("wait_end_ns")).alias("wait_before_ns"),
        )
        return cls(spans_, longest.select(
            "rank", _family(pl.col("work_name")).alias("work_family"), "work_stream", "lag_ns",
            "wait_name", "wait_before_ns",
        ))

    def marked(self, pieces: pl.DataFrame) -> pl.DataFrame:
        """``pieces`` (rank + span) with ``queued_ns``, the part of each spent queued."""
        return pieces.with_columns(
            intervals.overlap_each(pieces, self.spans, ["rank"], merged=True).alias("queued_ns")
        )

    def idle(self, gaps: pl.DataFrame) -> pl.DataFrame:
        """The parts of ``gaps`` (disjoint) spent queued."""
        return intervals.intersection(gaps.select("rank", *SPAN), self.spans, ["rank"])


def _busy_gaps(merged: pl.DataFrame, min_gap_ns: int) -> pl.DataFrame:
    """Per rank, the gaps of at least ``min_gap_ns`` between the pieces of a union
    (``intervals.union`` by rank)."""
    gaps = merged.sort("rank", "start_ns", maintain_order=True).select(
        "rank",
        pl.col("end_ns").shift(1).over("rank").alias("start_ns"),
        pl.col("start_ns").alias("end_ns"),
    ).filter(pl.col("start_ns").is_not_null() & (_dur() >= min_gap_ns))
    return gaps.with_row_index("_id")


def idle_gaps(gpu: pl.DataFrame, busy: Busy, stage_spans: pl.DataFrame, win: pl.DataFrame,
              rule: dict[str, Any], pending: Pending) -> pl.DataFrame:
    """Per scope and rank: gaps of at least ``min_gap_ns`` with no kernel running on any
    stream, their count, total and longest, the part no copy or memset fills either
    (``empty_ns``), the part of that with no launched work queued either (``free_ns``: the
    GPU waited for nothing but the host, :class:`Pending`), and the total's share of the
    kernel window (in a stage: of the stage's time)."""
    gaps = _busy_gaps(busy.kernels, rule["min_gap_ns"])
    cover = intervals.union(pl.concat([busy.gpu.select("rank", *SPAN), pending.spans]), ["rank"])
    uncovered = gaps.with_columns(
        (_dur() - intervals.overlap_each(gaps, busy.gpu, ["rank"], merged=True)).alias("empty_ns"),
        (_dur() - intervals.overlap_each(gaps, cover, ["rank"], merged=True)).alias("free_ns"),
    )
    pieces = _clip_scoped(gaps, stage_spans).join(
        uncovered.select("_id", "empty_ns", "free_ns", _dur().alias("_whole")), on="_id"
    )
    per = pieces.group_by("scope", "rank").agg(
        pl.len().alias("gaps"), _dur().sum().alias("idle_ns"), _dur().max().alias("longest_ns"),
        *[(pl.col(c) * _dur() / pl.col("_whole")).sum().round().cast(pl.Int64).alias(c)
          for c in ("empty_ns", "free_ns")],
    )
    kwin = gpu.lazy().filter(pl.col("kind") == "kernel").group_by("rank").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("kernel_window_ns")
    ).pipe(collect)
    out = per.join(win, on=["scope", "rank"]).join(kwin, on="rank", how="left").with_columns(
        pl.when(pl.col("scope") == WHOLE).then("kernel_window_ns").otherwise("gpu_window_ns")
        .alias("window_ns")
    )
    return out.with_columns((pl.col("idle_ns") / pl.col("window_ns")).alias("share"))


def host_bound(gpu: pl.DataFrame, gaps: pl.DataFrame, launches: pl.DataFrame,
               stage_spans: pl.DataFrame, win: pl.DataFrame, pending: Pending) -> pl.DataFrame:
    """Per scope and rank: gaps in all GPU activity (at least ``min_gap_ns``) whose closing
    work was launched by a call that ended after the gap had begun — the GPU ran dry waiting
    for the host; their count, total less the time launched work was queued in them
    (``queued_ns``: the GPU waited for something else, :class:`Pending`) and share of the GPU
    window. ``gaps``: those of at least ``min_gap_ns`` in all GPU activity (:func:`_busy_gaps`)."""
    closing = gpu.select("rank", "corr", "start_ns").join(
        launches, on=["rank", "corr"], how="inner"
    ).group_by(
        "rank", pl.col("start_ns").alias("end_ns")
    ).agg(pl.col("launch_end_ns").min())
    starved = gaps.join(closing, on=["rank", "end_ns"], how="inner").filter(
        pl.col("launch_end_ns") > pl.col("start_ns")
    )
    pieces = pending.marked(_clip_scoped(starved, stage_spans))
    per = pieces.group_by("scope", "rank").agg(
        pl.len().alias("gaps"), (_dur() - pl.col("queued_ns")).sum().alias("starved_ns"),
        pl.col("queued_ns").sum(),
    )
    return per.join(win, on=["scope", "rank"]).with_columns(
        (pl.col("starved_ns") / pl.col("gpu_window_ns")).alias("share")
    )


def sync_blocking(events: pl.DataFrame | pl.LazyFrame, gaps: pl.DataFrame,
                  stage_spans: pl.DataFrame, win: pl.DataFrame, names: dict[str, Any],
                  distinct: dict[str, pl.Series], pending: Pending) -> pl.DataFrame:
    """Per scope and rank: the union of the host's blocking waits (blocking runtime calls and
    host-side CUDA sync records), its share of the wall window, the part of it the GPU spent
    idle (``gaps`` in all GPU activity, those of :func:`host_bound`: the wait is the gap's
    cause, ``idle_ns``), of that the part with launched work queued (``queued_ns``: the host
    waited for a GPU that waited for something else, :class:`Pending`) and the call that
    waits most. ``distinct``: the names of the runtime calls and sync records
    (:func:`_distinct_names`)."""
    runtime, host = distinct["runtime"], distinct["gpu_sync"]
    blocking = (
        (pl.col("kind") == "runtime") & _name_matches(runtime, names["blocking"])
        & ~_name_matches(runtime, names["not_blocking"])
    ) | ((pl.col("kind") == "gpu_sync") & _name_matches(host, names["host_waits"]))
    waits = events.lazy().filter(blocking & (pl.col("rank") >= 0)).select(
        "rank", "start_ns", "end_ns", pl.col("name").cast(pl.String)
    ).pipe(collect)
    merged = intervals.union(waits, ["rank"]).with_row_index("_id")
    pieces = _clip_scoped(merged, stage_spans)
    pieces = pieces.with_columns(
        intervals.overlap_each(pieces, gaps, ["rank"], merged=True).alias("idle_ns"),
        intervals.overlap_each(pieces, pending.idle(gaps), ["rank"], merged=True)
        .alias("queued_ns"),
    )
    per = pieces.group_by("scope", "rank").agg(
        _dur().sum().alias("blocked_ns"), pl.col("idle_ns").sum(), pl.col("queued_ns").sum()
    )
    top = waits.filter(pl.col("name").str.starts_with("cu") | pl.col("name").str.starts_with("hip"))
    top = top.group_by("rank", "name").agg(_dur().sum().alias("call_ns"), pl.len().alias("calls"))
    top = top.sort("call_ns", descending=True).group_by("rank", maintain_order=True).first()
    return per.join(win, on=["scope", "rank"]).join(top, on="rank", how="left").with_columns(
        (pl.col("blocked_ns") / pl.col("wall_ns")).alias("share")
    )


def copies(gpu: pl.DataFrame, busy: Busy, win: pl.DataFrame, names: dict[str, Any],
           rule: dict[str, Any], stage_spans: pl.DataFrame) -> pl.DataFrame:
    """Per scope and copy direction: copies, bytes, time, those of at least ``large_bytes``,
    the longest copy, the time no kernel overlaps (exposed), shares of the GPU window, the
    rank's kernel time with no copy running (``room_ns``: all that copies moved beside kernels
    could hide behind) and ``hideable_ns``, the smaller of that and the exposed time."""
    copy = gpu.filter(pl.col("kind") == "memcpy").with_columns(
        pl.col("name").cast(pl.String).str.extract(names["copy_direction"], 1)
        .fill_null("other").alias("direction")
    )
    if copy.height:
        copy = copy.with_columns(
            (_dur() - intervals.overlap_each(copy, busy.kernels, ["rank"], merged=True))
            .alias("exposed_ns")
        )
    else:
        copy = copy.with_columns(pl.lit(0, pl.Int64).alias("exposed_ns"))
    room = _kernels_without_copies(busy.kernels, copy, stage_spans)
    copy = _scoped(copy)
    by_rank = copy.group_by("scope", "direction", "rank").agg(
        pl.len().alias("count"), pl.col("bytes").sum().alias("bytes"),
        pl.col("bytes").null_count().alias("unsized"), _dur().sum().alias("time_ns"),
        (pl.col("bytes") >= rule["large_bytes"]).sum().alias("large"),
        pl.col("exposed_ns").sum().alias("exposed_ns"),
        pl.col("bytes").sort_by(_dur()).last().alias("longest_bytes"),
        _dur().max().alias("longest_ns"),
    ).join(win, on=["scope", "rank"])
    by_rank = by_rank.join(room, on=["scope", "rank"], how="left").with_columns(
        (pl.col("time_ns") / pl.col("gpu_window_ns")).alias("share"),
        (pl.col("exposed_ns") / pl.col("gpu_window_ns")).alias("exposed_share"),
        pl.col("room_ns").fill_null(0),
    ).with_columns(pl.min_horizontal("exposed_ns", "room_ns").alias("hideable_ns"))
    return by_rank.sort("scope", "direction", "rank")


def _kernels_without_copies(kernels: pl.DataFrame, copy: pl.DataFrame,
                            stage_spans: pl.DataFrame) -> pl.DataFrame:
    """Per scope and rank, the kernel time (``kernels``: a union per rank) with no copy
    running: the most that overlapping the exposed copies with kernels can hide."""
    pieces = _clip_scoped(kernels.with_row_index("_id"), stage_spans)
    if pieces.height == 0:
        return pl.DataFrame(schema={"scope": pl.String, "rank": pieces.schema["rank"],
                                    "room_ns": pl.Int64})
    covered = intervals.overlap_each(pieces, copy.select("rank", *SPAN), ["rank"])
    return pieces.with_columns((_dur() - covered).alias("room_ns")).group_by(
        "scope", "rank").agg(pl.col("room_ns").sum())


def nccl_variability(waits: pl.DataFrame, rule: dict[str, Any]) -> pl.DataFrame:
    """Per scope, rank and collective: instances, mean/max/min duration, max ÷ mean, the
    share of the rank's communication time, what bringing every slower instance to the median
    of its size (``bytes``) saves (``balanced_ns``), the part of that the calls' exposed time
    bounds (``freed_ns``: what a call shortened frees of the rank's time is at most its exposed
    part; the rest ran beside compute) and how many instances have a size (``sized``; those
    without one are in neither sum). Instances of different sizes differ by design: the
    fastest of df_index_resolver's 2,020 all-reduces of unrecorded sizes (4 µs, median 11 µs)
    is no target for a 4.98 ms one."""
    keys = ["scope", "rank", "coll"]
    over = (_dur() - _dur().median().over([*keys, "bytes"])).clip(lower_bound=0)
    calls = _scoped(waits).with_columns(
        pl.when(pl.col("bytes").is_not_null()).then(over).alias("_over")
    ).with_columns(pl.min_horizontal("_over", pl.col("exposed_ns")).alias("_free"))
    per = calls.group_by(keys).agg(
        pl.len().alias("count"), _dur().sum().alias("total_ns"), _dur().mean().alias("mean_ns"),
        _dur().max().alias("max_ns"), _dur().min().alias("min_ns"),
        _dur().median().alias("median_ns"),
        pl.col("_over").sum().round().cast(pl.Int64).alias("balanced_ns"),
        pl.col("_free").sum().round().cast(pl.Int64).alias("freed_ns"),
        pl.col("bytes").is_not_null().sum().alias("sized"),
    )
    return per.with_columns(
        (pl.col("max_ns") / pl.col("mean_ns")).alias("ratio"),
        (pl.col("total_ns") / pl.col("total_ns").sum().over("scope", "rank")).alias("share"),
    )


def stragglers(waits: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """Per scope and rank: matched collective instances (two members or more) it reached last,
    out of all it took part in, and the others' wait there (the longest wait per instance)."""
    matched = _scoped(waits.filter(pl.col("instance") >= 0))
    inst = matched.group_by("scope", "instance").agg(
        pl.len().alias("_members"), pl.col("wait_ns").max().alias("delay_ns"),
        pl.col("rank").sort_by("start_ns", "rank", descending=[True, False]).first().alias("rank"),
    ).filter(pl.col("_members") >= 2)
    took = matched.group_by("scope", "rank").agg(pl.col("instance").n_unique().alias("instances"))
    per = inst.group_by("scope", "rank").agg(
        pl.len().alias("last"), pl.col("delay_ns").sum().alias("delay_ns")
    )
    return per.join(took, on=["scope", "rank"]).join(win, on=["scope", "rank"]).with_columns(
        (pl.col("delay_ns") / pl.col("wall_ns")).alias("share")
    )


def exposed_comm(waits: pl.DataFrame, exposed: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """Per scope and rank: the time some collective runs, the part of it no other device work
    overlaps (the rank's ``exposed_intervals``), each moment counted once however many calls
    run in it, the overlapped fraction and the exposed share of the GPU window."""
    calls = _scoped(waits.select("rank", "stage", *SPAN)).select("scope", "rank", *SPAN)
    per = exposed_within(calls, exposed, ["scope", "rank"])
    return per.join(win, on=["scope", "rank"]).with_columns(
        (pl.col("exposed_ns") / pl.col("gpu_window_ns")).alias("share"),
        (1 - pl.col("exposed_ns") / pl.col("comm_ns")).alias("overlap"),
    )


COLUMNS = ["rank", "kind", "name", "stream", "stage", "start_ns", "end_ns", "corr", "bytes"]
"""The columns of the classified events the checks read: the rest of its ~30 columns would be
copied by every filter of the events for nothing."""


def _distinct_names(events: pl.LazyFrame, kinds: tuple[str, ...]) -> dict[str, pl.Series]:
    """Per kind, its distinct names, read in one pass over the events."""
    pairs = events.filter(pl.col("kind").is_in(list(kinds))).select(
        pl.col("kind").cast(pl.String), "name"
    ).unique().drop_nulls("name").pipe(collect)
    return {k: pairs.filter(pl.col("kind") == k)["name"] for k in kinds}


def _name_matches(distinct: pl.Series, pattern: str | list[str]) -> pl.Expr:
    """Rows whose name matches ``pattern`` (a regular expression, or a list of whole names),
    matched once per distinct name (``distinct``: those the rows may have, or more): casting
    the categorical column to strings would materialise every row's name."""
    text = distinct.cast(pl.String)
    hit = text.is_in(pattern) if isinstance(pattern, list) else text.str.contains(pattern)
    return pl.col("name").is_in(distinct.filter(hit))


def _is_gpu() -> pl.Expr:
    return pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("stream") >= 0)


def measure(classified: pl.DataFrame, stage_timeline: pl.DataFrame,
            collective_waits: pl.DataFrame, exposed_intervals: pl.DataFrame,
            table: dict[str, Any]) -> dict[str, pl.DataFrame]:
    """Every check's numbers, one frame per check (see each function)."""
    names = table["names"]
    ev = classified.lazy().select(COLUMNS).filter(pl.col("rank") >= 0)
    gpu = ev.filter(_is_gpu()).pipe(collect)
    distinct = _distinct_names(ev, ("runtime", "gpu_sync"))
    runtime = ev.filter((pl.col("kind") == "runtime") & pl.col("corr").is_not_null())
    names_rt = distinct["runtime"]
    pending = Pending.of(gpu, runtime, names_rt.filter(
        names_rt.cast(pl.String).str.contains(names["stream_wait"])
    ), finding_rules().queue_lag_ns)
    launching = runtime.filter(_name_matches(distinct["runtime"], names["launch"]))
    launch = launching.group_by("rank", "corr").agg(
        _dur().sum().alias("api_ns"), pl.col("end_ns").max().alias("launch_end_ns")
    ).pipe(collect)
    spans_ = _stage_spans(stage_timeline)
    win = windows(ev, stage_timeline)
    kernels = _scoped(
        gpu.filter(pl.col("kind") == "kernel").select("rank", "name", "stage", "corr", *SPAN)
    )
    top = top_kernels(kernels, table["top_kernel"] | names)
    graphs = launching.filter(_name_matches(distinct["runtime"], names["graph_launch"])).select(
        "rank", "corr"
    ).unique().pipe(collect)
    small = small_kernels(kernels, launch, win, table["small_kernels"], graphs)
    del kernels
    waits = collective_waits.filter(pl.col("rank") >= 0)
    busy = Busy.of(gpu)
    gaps = _busy_gaps(busy.gpu, table["host_bound"]["min_gap_ns"])
    return {
        "top_kernel": top,
        "small_kernels": small,
        "idle_gaps": idle_gaps(gpu, busy, spans_, win, table["idle_gaps"], pending),
        "host_bound": host_bound(gpu, gaps, launch, spans_, win, pending),
        "sync_blocking": sync_blocking(ev, gaps, spans_, win, names, distinct, pending),
        "queued": pending.longest,
        "copies": copies(gpu, busy, win, names, table["copies"], spans_),
        "nccl_variability": nccl_variability(waits, table["nccl_variability"]),
        "straggler": stragglers(waits, win),
        "exposed_comm": exposed_comm(waits, exposed_intervals, win),
    }


# --- the findings ------------------------------------------------------------------------------
# Each builder below reads the few rows per scope that reach a threshold (polars) and writes one
# finding per scope (and direction or collective): the loops run over findings, not events.


def _level(value: float, info: float, warn: float) -> str | None:
    return "warn" if value >= warn else "info" if value >= info else None


def _ranks(values: list[int]) -> str:
    return spans(sorted(set(values)))


def _finding(key: str, rule: dict[str, Any], scope: str, severity: str, ranks: str,
             evidence: str, saving: int | None, confidence: str, suffix: str = "",
             title: str = "", subject: str = "", rank: int | None = None) -> dict[str, Any]:
    return {
        SUBJECT: subject or suffix,
        RANK: rank,
        "id": f"gpu.{key}" + (f".{suffix}" if suffix else ""),
        "kind": "gpu",
        "title": title or rule["title"],
        "severity": severity,
        "ranks": ranks,
        "steps": "",
        "stage": scope,
        "evidence": evidence,
        "saving_ns": saving,
        "saving_basis": rule["saving"],
        "measured_on": "trace",
        "recommendation": rule["recommendation"],
        "confidence": confidence,
    }


def _compute_listed(n: int, listed: str) -> str:
    """The scope's leading compute kernels beside the top one; a lone one is said as such (its
    share is already the top's)."""
    if n == 0:
        return ""
    return "; the only compute kernel" if n == 1 else f"; top {n} compute kernels: {listed}"


def _top_kernel(m: pl.DataFrame, rule: dict[str, Any], n_steps: int, capture: bool = False
                ) -> list[dict[str, Any]]:
    """The scope's top compute kernel (Tensor Core and fusion advice is for compute): the
    communication kernels' share is said beside it, and a scope whose kernel time is all
    communication gets communication advice instead. A scope with under ``warn_min_ns`` of
    kernel time, or a graph-capture trace (``capture``: its captured kernels do not run, the
    kernels it holds are the few run beside the capture), gets an info finding at most."""
    out = []
    m = m.with_columns(pl.col("total_ns").sum().over("scope").alias("_scope_ns"))
    big = (pl.col("scope") == WHOLE) | (pl.col("_scope_ns") >= rule["stage_min_ns"])
    shown = (pl.col("compute_place") <= rule["listed"]) | (pl.col("comm") & (pl.col("place") == 1))
    for (scope,), rows in m.filter(big).filter(shown).group_by("scope", maintain_order=True):
        rows = _labels(rows)
        compute = rows.filter(~pl.col("comm")).sort("compute_place")
        comm = rows.filter(pl.col("comm"))
        top = (compute if compute.height else comm).row(0, named=True)
        severity = _level(top["share"], rule["share_info"], rule["share_warn"])
        if severity is None:
            continue
        if capture or top["_scope_ns"] < rule["warn_min_ns"]:
            severity = "info"
        listed = "; ".join(f"{r['label']} {_share_said(r)}" for r in compute.iter_rows(named=True))
        evidence = (
            f"{top['label']}: {duration(top['total_ns'])} in {plural(top['count'], 'launch')} "
            f"(mean {duration(top['mean_ns'])}) = {percent(top['share'])} of all kernel time"
            f"{'' if scope == WHOLE else ' in the stage'} (sum of kernel durations over ranks)"
            + _compute_listed(compute.height, listed)
            + _comm_said(top, comm)
            + (f"; a graph-capture trace: {duration(top['_scope_ns'])} of kernel time ran beside "
               "the capture, the captured kernels do not run" if capture else "")
        )
        title, advice = (rule["title"], rule["recommendation"]) if compute.height else (
            rule["title_comm"], rule["recommendation_comm"])
        if capture:
            advice = rule["recommendation_capture"]
        out.append(_finding("top_kernel", rule, scope, severity, _ranks(top["ranks"]), evidence,
                            None, "low" if capture else "high", title=f"{title}: {top['label']}",
                            subject=top["family"]) | {"recommendation": advice})
    return out


def _comm_said(top: dict[str, Any], comm: pl.DataFrame) -> str:
    """The communication kernels' share of the scope's kernel time, when they lead it."""
    if comm.height == 0 or not top["comm_share"]:
        return ""
    first = comm.row(0, named=True)
    lead = "" if top["comm"] else \
        f" (the first kernel overall is {first['family']}, {percent(first['share'])})"
    return (f"; communication kernels take {percent(top['comm_share'])} of kernel time{lead}: "
            "the exposed-communication and collective findings judge them")


def _kernel_variability(m: pl.DataFrame, rule: dict[str, Any], n_steps: int
                        ) -> list[dict[str, Any]]:
    hit = m.filter(
        (pl.col("place") <= rule["among_top"]) & (pl.col("count") >= rule["min_count"])
        & (pl.col("ratio") >= rule["ratio_info"])
    ).sort("scope", "ratio", descending=[False, True])
    out = []
    for (scope,), rows in hit.group_by("scope", maintain_order=True):
        r = rows.row(0, named=True)
        severity = _level(r["ratio"], rule["ratio_info"], rule["ratio_warn"]) or "info"
        evidence = (
            f"{r['family']}: longest call {duration(r['max_ns'])} vs mean "
            f"{duration(r['mean_ns'])} ({r['ratio']:.1f}× max ÷ mean over {r['count']} calls)"
            + "".join(
                f"; {o['family']} {o['ratio']:.1f}× ({duration(o['max_ns'])} vs "
                f"{duration(o['mean_ns'])}, {o['count']} calls)"
                for o in rows.slice(1, rule["listed"] - 1).iter_rows(named=True)
            )
        )
        out.append(_finding("kernel_variability", rule, scope, severity, _ranks(r["ranks"]),
                            evidence, None, "medium", subject=r["family"]))
    return out


def _small_kernels(m: pl.DataFrame, rule: dict[str, Any], n_steps: int) -> list[dict[str, Any]]:
    hit = m.filter((pl.col("count") >= rule["min_count"])
                   & (pl.col("launch_share") >= rule["launch_share_info"]))
    out = []
    for r in hit.sort("scope").iter_rows(named=True):
        severity = "warn" if (r["api_share"] or 0) >= rule["api_share_warn"] else "info"
        evidence = (
            f"{r['count']} of {plural(r['launches'], 'kernel launch')} "
            f"({percent(r['launch_share'])}) run "
            f"under {duration(rule['max_ns'])}, {duration(r['gpu_ns'])} of GPU time in all; "
            f"their launch calls took {duration(r['api_ns'])} of host time "
            f"({percent(r['api_share'])} of the ranks' wall time); most: {r['family']} "
            f"({plural(r['n'], 'launch')}, mean {duration(r['mean'])}, "
            f"launch calls {duration(r['api'])})"
            + (f"; {plural(r['in_graphs'], 'kernel')} run from graph launches, not counted"
               if r["in_graphs"] else "")
        )
        out.append(_finding("small_kernels", rule, r["scope"], severity, _ranks(r["ranks"]),
                            evidence, None, "medium"))
    return out


def _per_rank(m: pl.DataFrame, share: str, info: float) -> pl.DataFrame:
    """The rows at or above ``info``, worst rank first in each scope, with the scope's ranks."""
    hit = m.filter(pl.col(share) >= info)
    return hit.sort("scope", share, "rank", descending=[False, True, False]).group_by(
        "scope", maintain_order=True
    ).agg(pl.all().first(), pl.col("rank").alias("_ranks"), pl.len().alias("_n"))


def _queued_said(q: pl.DataFrame, rank: int, queued_ns: int, of: str = "it") -> str:
    """What the evidence says of idle with launched work queued (:class:`Pending`): how long,
    and the rank's longest queued work with the stream wait the host issued before it."""
    if not queued_ns:
        return ""
    rows = q.filter(pl.col("rank") == rank)
    said = f"; {duration(queued_ns)} of {of} with launched work queued (not counted"
    if rows.height == 0:
        return said + ")"
    w = rows.row(0, named=True)
    said += (f": {w['work_family']} on stream {w['work_stream']} started "
             f"{duration(w['lag_ns'])} after its launch returned")
    if w["wait_name"]:
        return said + (f", queued behind a stream wait event ({w['wait_name']} "
                       f"{duration(w['wait_before_ns'])} before its launch): the GPU waited "
                       "for another stream, not for the host)")
    return said + ": the GPU waited for something other than the host)"


def _idle_gaps(m: pl.DataFrame, rule: dict[str, Any], n_steps: int, q: pl.DataFrame
               ) -> list[dict[str, Any]]:
    out = []
    m = m.filter(pl.col("idle_ns") >= rule["min_gap_ns"])
    for r in _per_rank(m, "share", rule["share_info"]).iter_rows(named=True):
        where = "the kernel window" if r["scope"] == WHOLE else "the stage's time"
        evidence = (
            f"rank {r['rank']}: no kernel runs for {duration(r['idle_ns'])} in {r['gaps']} gaps "
            f"≥ {duration(rule['min_gap_ns'])} = {percent(r['share'])} of {where} "
            f"({duration(r['window_ns'])}); longest {duration(r['longest_ns'])}; "
            f"no copy either for {duration(r['empty_ns'])}"
            + _queued_said(q, r["rank"], r["empty_ns"] - r["free_ns"], "that")
        )
        severity = _level(r["share"], rule["share_info"], rule["share_warn"]) or "info"
        out.append(_finding("idle_gaps", rule, r["scope"], severity, _ranks(r["_ranks"]),
                            evidence, r["free_ns"] // n_steps, "medium", rank=r["rank"]))
    return out


def _host_bound(m: pl.DataFrame, rule: dict[str, Any], n_steps: int, q: pl.DataFrame
                ) -> list[dict[str, Any]]:
    out = []
    for r in _per_rank(m, "share", rule["share_info"]).iter_rows(named=True):
        evidence = (
            f"rank {r['rank']}: the GPU ran dry waiting for the next launch for "
            f"{duration(r['starved_ns'])} in {r['gaps']} gaps ≥ {duration(rule['min_gap_ns'])} "
            f"= {percent(r['share'])} of {_measured_window(r['scope'])} "
            f"({duration(r['gpu_window_ns'])}) "
            "(a gap whose closing work was launched by a call that ended after the gap began)"
            + _queued_said(q, r["rank"], r["queued_ns"], "those gaps")
        )
        severity = _level(r["share"], rule["share_info"], rule["share_warn"]) or "info"
        out.append(_finding("host_bound", rule, r["scope"], severity, _ranks(r["_ranks"]),
                            evidence, r["starved_ns"] // n_steps, "medium", rank=r["rank"]))
    return out


def _measured_window(scope: str) -> str:
    """What a scope's ``gpu_window_ns`` is: the rank's GPU window, or in a stage the stage's
    ranges on that rank. The stage is named because a finding merged into another can show
    this evidence under that one's "Where" (a stage's 877 ms once read "its GPU window" under
    "all", where the GPU window was 1.22 s)."""
    return "its GPU window" if scope == WHOLE else f"its time in {scope}"


def _sync_blocking(m: pl.DataFrame, rule: dict[str, Any], n_steps: int, q: pl.DataFrame
                   ) -> list[dict[str, Any]]:
    """The saving is the idle during the waits with nothing launched; where launched work was
    queued for at least ``queued_share`` of that idle, the host waited for a GPU that waited
    for something else: an info finding without a saving that says so."""
    out = []
    for r in _per_rank(m, "share", rule["share_info"]).iter_rows(named=True):
        top = f"; most in {r['name']} ({plural(r['calls'], 'call')}, {duration(r['call_ns'])})" \
            if r["name"] else ""
        idle, queued_ns = r["idle_ns"] or 0, r["queued_ns"] or 0
        evidence = (
            f"rank {r['rank']}: the host is blocked in synchronisation for "
            f"{duration(r['blocked_ns'])} = {percent(r['share'])} of its wall time "
            f"({duration(r['wall_ns'])}; union of blocking sync/memcpy calls and host-side "
            f"CUDA sync records){top}; the GPU idles for {duration(idle)} of it"
            + _queued_said(q, r["rank"], queued_ns)
        )
        severity = _level(r["share"], rule["share_info"], rule["share_warn"]) or "info"
        saving = (idle - queued_ns) // n_steps if idle else None
        extra: dict[str, Any] = {}
        if idle and queued_ns >= rule["queued_share"] * idle:
            severity, saving = "info", None
            extra = {"title": rule["title_queued"], "saving_basis": rule["saving_queued"],
                     "recommendation": rule["recommendation_queued"]}
        out.append(_finding("sync_blocking", rule, r["scope"], severity, _ranks(r["_ranks"]),
                            evidence, saving, "high", rank=r["rank"]) | extra)
    return out


def _copies(m: pl.DataFrame, rule: dict[str, Any], n_steps: int, host_device: list[str]
            ) -> list[dict[str, Any]]:
    keep = (pl.col("large") > 0) | (pl.col("share") >= rule["share_info"])
    agg = m.filter(keep).group_by("scope", "direction").agg(
        pl.col("count").sum(), pl.col("bytes").sum(), pl.col("unsized").sum(),
        pl.col("time_ns").sum(), pl.col("large").sum(), pl.col("exposed_ns").sum(),
        pl.col("exposed_ns").max().alias("worst_exposed_ns"),
        pl.col("hideable_ns").max().alias("worst_hideable_ns"),
        pl.col("room_ns").sort_by("hideable_ns").last().alias("worst_room_ns"),
        pl.col("exposed_share").max(), pl.col("share").max(),
        pl.col("longest_bytes").sort_by("longest_ns").last(), pl.col("longest_ns").max(),
        pl.col("rank").alias("_ranks"),
    ).sort("scope", "direction")
    out = []
    for r in agg.iter_rows(named=True):
        severity = "warn" if r["exposed_share"] >= rule["exposed_warn"] else "info"
        hidden = r["direction"] in host_device  # what a non-blocking copy could overlap
        sized = r["longest_bytes"] is not None and r["longest_ns"]
        gbps = r["longest_bytes"] / r["longest_ns"] if sized else None
        moved = (
            f"{size(r['bytes'])} in {duration(r['time_ns'])}" if not r["unsized"]
            else f"{duration(r['time_ns'])}, {size(r['bytes'])} in the "
            f"{r['count'] - r['unsized']} with a size recorded"
        )
        longest = (f"{size(r['longest_bytes'])} in {duration(r['longest_ns'])}"
                   if r["longest_bytes"] is not None
                   else f"{duration(r['longest_ns'])}, its size not recorded")
        large = (f"{r['large']} of ≥ {size(rule['large_bytes'])}" if r["large"]
                 else f"none of ≥ {size(rule['large_bytes'])}")
        evidence = (
            f"{r['count']} {r['direction']} copies, {moved} ({large}; longest {longest}"
            + (f" = {gbps:.1f} GB/s" if gbps else "") + "); "
            f"up to {percent(r['share'])} of a rank's GPU window; "
            f"{duration(r['exposed_ns'])} with no kernel running "
            f"(up to {percent(r['exposed_share'])} of a rank's GPU window)"
            + (f"; kernels run {duration(r['worst_room_ns'])} with no copy beside them on the "
               "rank that could hide most, so overlap hides at most that"
               if hidden and r["worst_hideable_ns"] < r["worst_exposed_ns"] else "")
        )
        saving = r["worst_hideable_ns"] // n_steps if hidden else None
        out.append(_finding("copies", rule, r["scope"], severity, _ranks(r["_ranks"]), evidence,
                            saving, "medium", suffix=r["direction"],
                            title=f"{rule['title']}: {r['direction']}"))
    return out


def _nccl_variability(m: pl.DataFrame, rule: dict[str, Any], n_steps: int
                      ) -> list[dict[str, Any]]:
    hit = m.filter((pl.col("count") >= rule["min_count"]) & (pl.col("share") >= rule["min_share"])
                   & (pl.col("ratio") >= rule["ratio_info"]))
    worst = hit.sort("scope", "coll", "ratio", descending=[False, False, True]).group_by(
        "scope", "coll", maintain_order=True
    ).agg(pl.all().first(), pl.col("rank").alias("_ranks"))
    out = []
    for r in worst.iter_rows(named=True):
        evidence = (
            f"rank {r['rank']}: {r['coll']} kernels last {duration(r['mean_ns'])} on average but "
            f"up to {duration(r['max_ns'])} ({r['ratio']:.1f}× max ÷ mean, {r['count']} "
            f"instances, median {duration(r['median_ns'])}, min {duration(r['min_ns'])}); "
            f"{percent(r['share'])} of its collective time; " + _brought(r)
            + "".join(
                f"; rank {o['rank']}: {o['ratio']:.1f}× ({duration(o['max_ns'])} vs "
                f"{duration(o['mean_ns'])}, {o['count']} instances)"
                for o in hit.filter((pl.col("scope") == r["scope"]) & (pl.col("coll") == r["coll"])
                                    & (pl.col("rank") != r["rank"]))
                .sort("ratio", descending=True).head(rule["listed"] - 1).iter_rows(named=True)
            )
        )
        severity = (_level(r["ratio"], rule["ratio_info"], rule["ratio_warn"]) or "info"
                    if r["sized"] else "info")  # of unknown sizes, a spread is no symptom
        out.append(_finding("nccl_variability", rule, r["scope"], severity, _ranks(r["_ranks"]),
                            evidence, r["freed_ns"] // n_steps if r["sized"] else None, "low",
                            suffix=r["coll"],
                            title=f"{rule['title']}: {r['coll']}", rank=r["rank"]))
    return out


def _brought(r: dict[str, Any]) -> str:
    """What bringing the slow instances to the median of their size saves, or why nothing is
    estimated (no instance has a size)."""
    if not r["sized"]:
        return ("their sizes are not recorded, and instances of different sizes differ by "
                "design: no saving estimated")
    some = "" if r["sized"] == r["count"] else f" ({r['sized']} with a size recorded)"
    return (f"every slower instance at the median of its size{some}: "
            f"{duration(r['balanced_ns'])} less, {duration(r['freed_ns'])} of it exposed")


def _straggler(m: pl.DataFrame, rule: dict[str, Any], n_steps: int) -> list[dict[str, Any]]:
    out = []
    for r in _per_rank(m, "share", rule["share_info"]).iter_rows(named=True):
        evidence = (
            f"rank {r['rank']} arrived last at {r['last']} of the {r['instances']} collective "
            f"instances it took part in; the others waited {duration(r['delay_ns'])} there "
            f"(longest wait per instance) = {percent(r['share'])} of its wall time"
        )
        severity = _level(r["share"], rule["share_info"], rule["share_warn"]) or "info"
        out.append(_finding("straggler", rule, r["scope"], severity, str(r["rank"]), evidence,
                            r["delay_ns"] // n_steps, "medium", rank=r["rank"]))
    return out


def _exposed_comm(m: pl.DataFrame, rule: dict[str, Any], n_steps: int) -> list[dict[str, Any]]:
    out = []
    for r in _per_rank(m, "share", rule["share_info"]).iter_rows(named=True):
        evidence = (
            f"rank {r['rank']}: {duration(r['exposed_ns'])} of {duration(r['comm_ns'])} of "
            f"collective time runs with no other GPU work ({percent(r['overlap'])} overlapped) "
            f"= {percent(r['share'])} of {_measured_window(r['scope'])} "
            f"({duration(r['gpu_window_ns'])})"
        )
        severity = _level(r["share"], rule["share_info"], rule["share_warn"]) or "info"
        out.append(_finding("exposed_comm", rule, r["scope"], severity, _ranks(r["_ranks"]),
                            evidence, r["exposed_ns"] // n_steps, "high", rank=r["rank"]))
    return out


# --- one problem, whole trace and stage ---------------------------------------------------------

SUBJECT = "_subject"
"""What a finding is about within its check (kernel family, copy direction, collective)."""
RANK = "_rank"
"""The rank a per-rank check's finding measures (its worst), or None: all ranks."""
AMOUNTS: dict[str, tuple[str, str | None, str]] = {
    "top_kernel": ("top_kernel", "family", "total_ns"),
    "kernel_variability": ("top_kernel", "family", "total_ns"),
    "small_kernels": ("small_kernels", None, "count"),
    "host_bound": ("host_bound", None, "starved_ns"),
    "sync_blocking": ("sync_blocking", None, "blocked_ns"),
    "copies": ("copies", "direction", "time_ns"),
    "nccl_variability": ("nccl_variability", "coll", "total_ns"),
    "straggler": ("straggler", None, "delay_ns"),
    "exposed_comm": ("exposed_comm", None, "exposed_ns"),
    "idle_gaps": ("idle_gaps", None, "idle_ns"),
}
"""Per check: the measure frame, the subject column and the additive amount (all ranks) whose
share in a stage says where the whole trace's problem lies (on the finding's rank, for a
per-rank check)."""


def _amounts(m: dict[str, pl.DataFrame], check: str, rank: int | None
             ) -> dict[tuple[str, str], float]:
    """(scope, subject) → the check's amount there, over all ranks or on ``rank``."""
    frame, subject, amount = AMOUNTS[check]
    data = m[frame] if rank is None else m[frame].filter(pl.col("rank") == rank)
    key = pl.col(subject).cast(pl.String) if subject else pl.lit("")
    per = data.group_by("scope", key.alias("_s")).agg(pl.col(amount).cast(pl.Float64).sum())
    return {(sc, sub): float(a or 0) for sc, sub, a in per.iter_rows()}


def fold_stages(rows: list[dict[str, Any]], m: dict[str, pl.DataFrame], dominant: float,
                keep: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The whole trace's finding and a stage's finding of the same check and subject are one
    problem when at least ``dominant`` of the check's amount lies in that stage: the stage's
    row is folded into the whole trace's, which takes the stage and its ranks (its numbers
    stay the whole trace's). A check without a saving (top kernel, variability, copies, …)
    folds every stage that names the same subject, the stages and their shares said in the
    evidence. ``keep``:
    checks whose whole-trace row the findings list drops once stages are known (their stage
    rows are the detail then)."""
    dropped: set[int] = set()
    for w in rows:
        check = w["id"].split(".")[1]
        if w["stage"] != WHOLE or check in keep or check not in AMOUNTS:
            continue
        amounts = _amounts(m, check, w[RANK])
        whole = amounts.get((WHOLE, w[SUBJECT]), 0.0)
        same = [i for i, r in enumerate(rows)
                if r["id"] == w["id"] and r[SUBJECT] == w[SUBJECT] and r["stage"] != WHOLE]
        if not whole or not same:
            continue
        share = {i: amounts.get((rows[i]["stage"], w[SUBJECT]), 0.0) / whole for i in same}
        best = max(same, key=share.__getitem__)
        folded = same if w["saving_ns"] is None else [best] if share[best] >= dominant else []
        if not folded:
            continue
        if share[best] >= dominant:
            w["stage"], w["ranks"] = rows[best]["stage"], rows[best]["ranks"]
        listed = ", ".join(f"{rows[i]['stage']} {percent(share[i])}"
                           for i in sorted(folded, key=share.__getitem__, reverse=True))
        w["evidence"] += f"; where it lies: {listed} (that stage's own finding folded in here)"
        dropped.update(folded)
    return [r for i, r in enumerate(rows) if i not in dropped]


def compute(classified: pl.DataFrame, stage_timeline: pl.DataFrame,
            collective_waits: pl.DataFrame, exposed_intervals: pl.DataFrame, steps: pl.DataFrame,
            table: dict[str, Any] | None = None, keep: frozenset[str] = frozenset(),
            work: Workload | None = None) -> pl.DataFrame:
    """The generic GPU findings (:data:`frames.FINDING_CANDIDATES`), whole trace first, then
    each stage (those one with the whole trace's folded into it, :func:`fold_stages`); savings
    are per step (the whole trace is one step when none are known)."""
    table = table or rules()
    m = measure(classified, stage_timeline, collective_waits, exposed_intervals, table)
    n = max(steps.height, 1)
    work = work or Workload()
    rows = [
        *_top_kernel(m["top_kernel"], table["top_kernel"], n, work.graphs == "capture"),
        *_kernel_variability(m["top_kernel"], table["kernel_variability"], n),
        *_small_kernels(m["small_kernels"], table["small_kernels"], n),
        *_host_bound(m["host_bound"], table["host_bound"], n, m["queued"]),
        *_sync_blocking(m["sync_blocking"], table["sync_blocking"], n, m["queued"]),
        *_copies(m["copies"], table["copies"], n, table["names"]["host_device"]),
        *_nccl_variability(m["nccl_variability"], table["nccl_variability"], n),
        *_straggler(m["straggler"], table["straggler"], n),
        *_exposed_comm(m["exposed_comm"], table["exposed_comm"], n),
        *_idle_gaps(m["idle_gaps"], table["idle_gaps"], n, m["queued"]),
    ]
    rows = fold_stages(rows, m, table["merge"]["dominant_share"], keep)
    _advise(rows, table, work)
    out = pl.DataFrame([{k: r[k] for k in frames.FINDING_CANDIDATES} for r in rows],
                       schema=frames.FINDING_CANDIDATES)
    scope_order = pl.col("stage") != WHOLE
    return out.with_columns(scope_order.alias("_o")).sort("_o", "stage", maintain_order=True).drop(
        "_o"
    )


def _advise(rows: list[dict[str, Any]], table: dict[str, Any], work: Workload) -> None:
    """Each row's recommendation for the workload: its check's most specific variant
    (``recommendation_graphs``, ``recommendation_inference``), where it has the default."""
    for r in rows:
        rule = table[r["id"].split(".")[1]]
        if r["recommendation"] == rule["recommendation"]:
            r["recommendation"] = next(rule[k] for k in work.variants() if k in rule)


@provides("gpu_findings", schema=frames.FINDING_CANDIDATES)
def gpu_findings(classified: pl.DataFrame, stage_timeline: pl.DataFrame,
                 collective_waits: pl.DataFrame, exposed_intervals: pl.DataFrame,
                 steps: pl.DataFrame, sources: list[Any], placement: dict[str, Any],
                 profile: dict[str, Any]) -> pl.DataFrame:
    keep = frozenset(i.removeprefix("gpu.") for i in finding_rules().superseded)
    return compute(classified, stage_timeline, collective_waits, exposed_intervals, steps,
                   keep=keep,
                   work=workload(sources, placement, profile))
