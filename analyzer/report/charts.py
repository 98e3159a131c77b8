"""The report's figures, built from the run's products (altair / Vega-Lite specs).

Each figure reads named products whose schemas are in ``analyzer/model/frames.py``; when a product
is not provided (or is empty) the figure carries no chart but says what it needs, so every report
shows the analysis the moment its product lands. A figure also keeps the numbers it draws
(``table``), which the Markdown and PNG reports use.

A figure's chart is drawn only when it is asked for (:attr:`Figure.chart`, :meth:`Figure.spec`):
altair, seconds of import, is loaded then and not by the Markdown report, which shows the tables.

Large runs stay responsive: a timeline with more than :data:`MAX_TIMELINE_MARKS` segments is
aggregated to a fixed number of time slices per rank, each drawn as the stage that filled most of
it (the figure's note says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import polars as pl

from taxonomy.vocab import CAUSE_COLORS, IDLE_CAUSES, IDLE_COLOR, STAGE_COLORS, STAGE_NAMES

from ..analyses.overview import frame_of as product
from ..model.scalars import as_float, as_int

if TYPE_CHECKING:
    import altair as alt

OVERLAP_COLORS: dict[str, str] = {
    "exposed": "#e15759",
    "hidden": "#bab0ac",
    "overlap unknown": "#4e79a7",
}
BUBBLE_MARK = "#c00000"

WIDTH = 860
ROW_PX = 16
MAX_TIMELINE_MARKS = 4000
"""Above this many stage segments the timeline is aggregated into time slices."""
TIMELINE_SLICES = 400
"""Slices per rank in an aggregated timeline (fewer when many ranks: at most MAX_TIMELINE_MARKS in
all)."""
MARKED_BUBBLES = 20
"""How many of the largest bubbles the timeline marks."""


@dataclass
class Figure:
    key: str
    title: str
    draw: Callable[[], alt.TopLevelMixin] | None = None
    """Builds the chart (altair); ``None`` when there is nothing to draw."""
    table: pl.DataFrame | None = None
    formats: dict[str, str] = field(default_factory=dict)
    """Column → section format (``duration``, ``percent``, …) for rendering ``table``."""
    note: str = ""
    needs: str = ""
    """When there is nothing to draw: what is missing."""

    @property
    def drawable(self) -> bool:
        return self.draw is not None

    @property
    def chart(self) -> alt.TopLevelMixin | None:
        return self.draw() if self.draw is not None else None

    def spec(self) -> dict[str, Any] | None:
        chart = self.chart
        return chart.to_dict() if chart is not None else None


def figures(run) -> list[Figure]:
    """Every figure of a one-run report, in report order."""
    return [build(run) for build in FIGURES]


def remarks(run) -> list[str]:
    """The run's notes, skipped files and warnings, one line each, as every report lists them."""
    return [
        *(f"note: {n}" for n in run.notes),
        *(f"skipped (not a format rlperf reads): {p}" for p in run.unknown),
        *(f"warning: {w}" for w in run.warnings),
    ]


NOT_DRAWN = "Not drawn, for what these sources lack:"
"""Leads the one list of the figures with nothing to draw (HTML and Markdown)."""
STAGE_RANGES = "step and stage ranges in a trace (the framework's timers or NVTX ranges)"


def missing(key: str, title: str, provide: str, frame: pl.DataFrame | None) -> Figure:
    """A figure with nothing to draw, saying what the user would have to provide for it."""
    held = "none of the sources holds them" if frame is None else "found none in these sources"
    return Figure(key, title, needs=f"needs {provide}; {held}")


def _who() -> pl.Expr:
    """Rank as a label: the driver (rank -1, the single controller) by name."""
    return (
        pl.when(pl.col("rank") < 0)
        .then(pl.lit("driver"))
        .otherwise(pl.col("rank").cast(pl.String))
        .alias("rank")
    )


def _who_order(frame: pl.DataFrame) -> list[str]:
    ranks = sorted(frame["rank"].unique().to_list())
    return ["driver" if r < 0 else str(r) for r in ranks]


def _ms(column: str, t0: int) -> pl.Expr:
    return ((pl.col(column) - t0) / 1e6).alias(column.replace("_ns", "_ms"))


def _scale(colors: dict[str, str], present: pl.Series) -> alt.Scale:
    """Fixed colours per category (the same in every chart), the legend limited to those present."""
    import altair as alt
    seen = set(present.cast(pl.String).to_list())
    domain = [k for k in colors if k in seen]
    return alt.Scale(domain=domain, range=[colors[k] for k in domain])


def _rank_of(column: str, order: tuple[str, ...]) -> pl.Expr:
    """A category's place in the vocabulary, to stack bars in vocabulary order."""
    return (
        pl.col(column)
        .replace_strict({v: i for i, v in enumerate(order)}, default=len(order))
        .alias("order")
    )


def _values(frame: pl.DataFrame) -> alt.Data:
    import altair as alt

    return alt.Data(values=frame.to_dicts())


# --- per-rank timeline ------------------------------------------------------------------------


def timeline(run) -> Figure:
    key, title = "timeline", "Per-rank timeline by stage"
    segments = product(run, "stage_timeline", "rank", "step", "stage", "name", "start_ns", "end_ns")
    if segments is None or segments.height == 0:
        return missing(key, title, STAGE_RANGES, segments)
    segments = segments.with_columns(
        pl.col("stage").cast(pl.String), pl.col("name").cast(pl.String)
    )
    t0 = as_int(segments["start_ns"].min())
    note = "Drag to pan, scroll to zoom (time axis)."
    if segments.height > MAX_TIMELINE_MARKS:
        slices = max(
            20, min(TIMELINE_SLICES, MAX_TIMELINE_MARKS // max(1, segments["rank"].n_unique()))
        )
        segments = aggregate_timeline(segments, slices)
        note = (
            f"{note} Aggregated: too many segments to draw, "
            f"so each rank's time is cut into {slices} "
            "slices and each slice shows the stage that filled most of it."
        )
    data = segments.select(
        _who(), "step", "stage", "name", _ms("start_ns", t0), _ms("end_ns", t0),
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("duration_ms"),
    )
    ranks = _who_order(segments)
    marks = _marked_bubbles(run, t0)
    if marks is not None:
        note += f" Red outlines: the {marks.height} largest bubbles (idle runs of one cause)."
    return Figure(key, title, draw=lambda: _timeline_chart(data, ranks, marks, title), note=note)


def _marked_bubbles(run, t0: int) -> pl.DataFrame | None:
    """The :data:`MARKED_BUBBLES` longest bubbles, in the timeline's coordinates."""
    bubbles = product(run, "largest_bubbles", "rank", "step", "cause", "start_ns", "end_ns")
    if bubbles is None or bubbles.height == 0:
        return None
    top = (
        bubbles.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("_d"))
        .sort("_d", descending=True)
        .head(MARKED_BUBBLES)
    )
    return top.select(
        _who(), "step", pl.col("cause").cast(pl.String), _ms("start_ns", t0), _ms("end_ns", t0),
        (pl.col("_d") / 1e6).alias("duration_ms"),
    )


def _timeline_chart(
    data: pl.DataFrame, ranks: list[str], marks: pl.DataFrame | None, title: str
) -> alt.TopLevelMixin:
    import altair as alt

    y = alt.Y("rank:N", sort=ranks, title="rank")
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    bars = (
        alt.Chart(_values(data))
        .mark_bar(height=ROW_PX - 3)
        .encode(
            x=alt.X(
                "start_ms:Q",
                title="time since first stage (ms)",
                scale=alt.Scale(domain=[0, as_float(data["end_ms"].max())], nice=False, zero=False),
            ),
            x2="end_ms:Q",
            y=y,
            color=alt.Color(
                "stage:N",
                scale=_scale(STAGE_COLORS, data["stage"]),
                legend=alt.Legend(title="stage"),
            ),
            tooltip=[
                "rank:N",
                "step:O",
                "stage:N",
                "name:N",
                alt.Tooltip("duration_ms:Q", format=".3f"),
            ],
        )
        .add_params(zoom)
    )
    layers: list[alt.Chart] = [bars]
    if marks is not None:
        layers.append(
            alt.Chart(_values(marks))
            .mark_bar(
                height=ROW_PX - 3,
                fillOpacity=0.15,
                fill=BUBBLE_MARK,
                stroke=BUBBLE_MARK,
                strokeWidth=1.5,
            )
            .encode(
                x="start_ms:Q",
                x2="end_ms:Q",
                y=y,
                tooltip=[
                    alt.Tooltip("cause:N", title="bubble"),
                    "rank:N",
                    "step:O",
                    alt.Tooltip("duration_ms:Q", format=".3f"),
                ],
            )
        )
    return alt.layer(*layers).properties(width=WIDTH, height=ROW_PX * len(ranks), title=title)


def aggregate_timeline(segments: pl.DataFrame, slices: int) -> pl.DataFrame:
    """Per rank, ``slices`` equal slices of the run; each becomes the stage that covers most of it
    (adjacent slices of one stage merged). Keeps the timeline's columns; ``name`` says it is a
    slice."""
    t0, t1 = as_int(segments["start_ns"].min()), as_int(segments["end_ns"].max())
    width = max(1, -(-(t1 - t0) // slices))
    first = (pl.col("start_ns") - t0) // width
    last = (pl.col("end_ns") - 1 - t0) // width
    pieces = segments.filter(pl.col("end_ns") > pl.col("start_ns")).with_columns(
        pl.int_ranges(first, last + 1).alias("slice")
    ).explode("slice").with_columns(
        (pl.min_horizontal("end_ns", t0 + (pl.col("slice") + 1) * width)
         - pl.max_horizontal("start_ns", t0 + pl.col("slice") * width)).alias("_cover")
    )
    filled = (
        pieces.group_by("rank", "slice", "stage")
        .agg(pl.col("_cover").sum(), pl.col("step").min())
        .sort("rank", "slice", "_cover", "stage", descending=[False, False, True, False])
        .group_by("rank", "slice", maintain_order=True)
        .first()
    )
    run = (pl.col("stage") != pl.col("stage").shift(1)) | (
        pl.col("slice") != pl.col("slice").shift(1) + 1
    )
    return (
        filled.with_columns(run.fill_null(True).cum_sum().over("rank").alias("_run"))
        .group_by("rank", "_run", maintain_order=True)
        .agg(
            pl.col("stage").first(),
            pl.col("step").min(),
            pl.col("slice").min().alias("_a"),
            pl.col("slice").max().alias("_b"),
        )
        .select(
            "rank",
            "step",
            "stage",
            pl.lit("(aggregated)").alias("name"),
            (t0 + pl.col("_a") * width).alias("start_ns"),
            pl.min_horizontal(t0 + (pl.col("_b") + 1) * width, pl.lit(t1)).alias("end_ns"),
        )
    )


# --- stage share per step ---------------------------------------------------------------------


def stage_share(run) -> Figure:
    key, title = "stage_share", "Stage share per step"
    breakdown = product(run, "breakdown", "step", "rank", "stage", "time_ns", "share")
    if breakdown is None or breakdown.height == 0:
        return missing(key, title, STAGE_RANGES, breakdown)
    ranks = breakdown.group_by("step").agg(pl.col("rank").n_unique().alias("_ranks"))
    table = (
        breakdown.with_columns(pl.col("stage").cast(pl.String))
        .sort("step", "stage", "rank")
        .group_by("step", "stage", maintain_order=True)
        .agg(pl.col("share").sum(), pl.col("time_ns").sum())
        .join(ranks, on="step")
        .with_columns(
            (pl.col("share") / pl.col("_ranks")).alias("share"), _rank_of("stage", STAGE_NAMES)
        )
        .drop("_ranks")
    )
    table = with_idle(table).sort("step", "order")
    wide = table.pivot(on="stage", index="step", values="share", sort_columns=False).sort("step")
    return Figure(
        key,
        title,
        draw=lambda: _stage_share_chart(table, title),
        table=wide,
        formats={c: "percent" for c in wide.columns if c != "step"},
        note="Each bar: the step's wall time by stage, averaged over ranks; idle is the time "
        "no stage of the rank covers, so each bar reaches 100%.",
    )


def _stage_share_chart(table: pl.DataFrame, title: str) -> alt.TopLevelMixin:
    import altair as alt

    return (
        alt.Chart(_values(table))
        .mark_bar(stroke="#ffffff", strokeWidth=0.5)
        .encode(
            x=alt.X("step:O", title="step"),
            y=alt.Y(
                "share:Q", title="share of the step (mean over ranks)", axis=alt.Axis(format="%")
            ),
            color=alt.Color(
                "stage:N",
                scale=_scale(STAGE_SHARE_COLORS, table["stage"]),
                legend=alt.Legend(title="stage"),
            ),
            order=alt.Order("order:Q"),
            tooltip=["step:O", "stage:N", alt.Tooltip("share:Q", format=".1%")],
        )
        .properties(width=min(WIDTH, 60 * table["step"].n_unique() + 120), height=260, title=title)
    )


IDLE = "idle"
STAGE_SHARE_COLORS: dict[str, str] = {**STAGE_COLORS, IDLE: IDLE_COLOR}


def with_idle(shares: pl.DataFrame) -> pl.DataFrame:
    """``shares`` (step, stage, share, time_ns, order) with each step's idle part, what no stage
    covers (1 − the shares, none where stages overlap past 100%), drawn last. The shares are
    summed in stage order: in another order the last digit of a float moves between runs."""
    idle = (
        shares.sort("step", "order", "stage")
        .group_by("step", maintain_order=True)
        .agg((1 - pl.col("share").sum()).clip(lower_bound=0).alias("share"))
        .with_columns(
            pl.lit(IDLE).alias("stage"),
            pl.lit(None, dtype=shares.schema["time_ns"]).alias("time_ns"),
            pl.lit(len(STAGE_NAMES), dtype=shares.schema["order"]).alias("order"),
        )
        .select(shares.columns)
    )
    return pl.concat([shares, idle.cast(shares.schema)])


# --- bubbles by cause --------------------------------------------------------------------------


def bubble_causes(run) -> Figure:
    key, title = "bubbles", "Idle share per rank by cause"
    bubbles = product(run, "bubbles", "step", "rank", "window_ns", "cause", "idle_ns")
    if bubbles is None or bubbles.height == 0:
        return missing(key, title, STAGE_RANGES, bubbles)
    windows = (
        bubbles.group_by("step", "rank")
        .agg(pl.col("window_ns").first())
        .group_by("rank")
        .agg(pl.col("window_ns").sum())
    )
    per = (
        bubbles.with_columns(pl.col("cause").cast(pl.String))
        .group_by("rank", "cause").agg(pl.col("idle_ns").sum())
        .join(windows, on="rank")
        .with_columns((pl.col("idle_ns") / pl.col("window_ns")).alias("fraction"))
        .filter(pl.col("idle_ns") > 0)
        .with_columns(_rank_of("cause", IDLE_CAUSES))
        .sort("rank", "cause")
    )
    totals = (
        per.group_by("cause").agg(pl.col("idle_ns").sum())
        .with_columns((pl.col("idle_ns") / windows["window_ns"].sum()).alias("fraction"))
        .sort("idle_ns", descending=True)
    )
    return Figure(
        key,
        title,
        draw=lambda: _bubble_chart(per, title),
        table=totals,
        formats={"idle_ns": "duration", "fraction": "percent"},
        note="Idle (non-productive) time per rank, split by cause (docs/analyses.md §4).",
    )


def _bubble_chart(per: pl.DataFrame, title: str) -> alt.TopLevelMixin:
    import altair as alt

    ranks = sorted(per["rank"].unique().to_list())
    return (
        alt.Chart(
            _values(
                per.select(
                    "rank", "cause", "fraction", "order", (pl.col("idle_ns") / 1e6).alias("idle_ms")
                )
            )
        )
        .mark_bar()
        .encode(
            y=alt.Y("rank:O", sort=ranks),
            x=alt.X("fraction:Q", title="share of the step windows", axis=alt.Axis(format="%")),
            color=alt.Color(
                "cause:N",
                scale=_scale(CAUSE_COLORS, per["cause"]),
                legend=alt.Legend(title="cause"),
            ),
            order=alt.Order("order:Q"),
            tooltip=[
                "rank:O",
                "cause:N",
                alt.Tooltip("fraction:Q", format=".1%"),
                alt.Tooltip("idle_ms:Q", format=".3f"),
            ],
        )
        .properties(width=WIDTH - 200, height=max(60, ROW_PX * len(ranks)), title=title)
    )


# --- collectives by dimension -----------------------------------------------------------------


def collectives(run) -> Figure:
    key, title = "collectives", "Exposed and hidden collective time"
    coll = product(
        run,
        "collectives_by_dim",
        "dim",
        "coll",
        "count",
        "bytes",
        "time_ns",
        "exposed_ns",
        "wait_ns",
        "busbw_gbps",
    )
    if coll is None or coll.height == 0:
        return missing(key, title, "collectives (NCCL, gloo, …) in a trace", coll)
    table = coll.with_columns(pl.col("dim").cast(pl.String)).select(
        "dim", "coll", "count", "bytes", "time_ns", "exposed_ns", "wait_ns", "busbw_gbps"
    ).sort("time_ns", descending=True)
    parts = (
        table.select(
            "dim",
            "coll",
            (pl.col("exposed_ns") / 1e6).alias("exposed"),
            ((pl.col("time_ns") - pl.col("exposed_ns")).clip(lower_bound=0) / 1e6).alias("hidden"),
            pl.when(pl.col("exposed_ns").is_null())
            .then(pl.col("time_ns") / 1e6)
            .alias("overlap unknown"),
        )
        .unpivot(index=["dim", "coll"], variable_name="part", value_name="ms")
        .drop_nulls("ms")
        .with_columns(pl.format("{} {}", "dim", "coll").alias("group"))
    )
    formats = {"count": "number", "bytes": "bytes", "time_ns": "duration", "exposed_ns": "duration",
               "wait_ns": "duration", "busbw_gbps": "bandwidth"}
    return Figure(
        key,
        title,
        draw=lambda: _collectives_chart(parts, table.height, title),
        table=table,
        formats=formats,
        note="Exposed: collective time no computation on "
             "the same device hides (docs/analyses.md §5).",
    )


def _collectives_chart(parts: pl.DataFrame, groups: int, title: str) -> alt.TopLevelMixin:
    import altair as alt

    return (
        alt.Chart(_values(parts))
        .mark_bar()
        .encode(
            y=alt.Y("group:N", title=None),
            x=alt.X("ms:Q", title="time summed over ranks (ms)"),
            color=alt.Color(
                "part:N",
                scale=_scale(OVERLAP_COLORS, parts["part"]),
                legend=alt.Legend(title="overlap"),
            ),
            tooltip=["group:N", "part:N", alt.Tooltip("ms:Q", format=".3f")],
        )
        .properties(width=WIDTH - 260, height=max(60, 22 * groups), title=title)
    )


# --- work and depth ----------------------------------------------------------------------------


WHAT_IF: tuple[tuple[str, str], ...] = (
    ("step_ns", "measured step"),
    ("depth_ns", "depth D (critical path)"),
    ("no_tail_step_ns", "no rollout tail"),
    ("balanced_dp_step_ns", "balanced DP"),
    ("async_step_ns", "async overlap bound"),
)


def workdepth(run) -> Figure:
    key, title = "workdepth", "Work, depth and what-if step times"
    wd = product(run, "workdepth", "step", "work_ns", "depth_ns", "parallelism", "step_ns",
                 "async_overlap_bound", "no_tail_step_ns", "balanced_dp_step_ns")
    if wd is None or wd.height == 0:
        return missing(key, title, "step ranges and device activity in a trace", wd)
    wd = wd.with_columns(
        pl.when(pl.col("async_overlap_bound") > 0)
        .then(pl.col("step_ns") / pl.col("async_overlap_bound"))
        .otherwise(None)
        .cast(pl.Int64)
        .alias("async_step_ns")
    ).sort("step")
    names = dict(WHAT_IF)
    long = (
        wd.select("step", *names)
        .unpivot(index="step", variable_name="what", value_name="ns")
        .drop_nulls("ns")
        .with_columns(pl.col("what").replace_strict(names), (pl.col("ns") / 1e6).alias("ms"))
    )
    table = wd.select(
        "step",
        "work_ns",
        "depth_ns",
        "parallelism",
        "step_ns",
        "no_tail_step_ns",
        "balanced_dp_step_ns",
        "async_overlap_bound",
    )
    formats = {c: "duration" for c in table.columns if c.endswith("_ns")} | {
        "parallelism": "number",
        "async_overlap_bound": "number",
    }
    bars = long.select("step", "what", "ms")
    return Figure(
        key,
        title,
        draw=lambda: _workdepth_chart(bars, list(names.values()), wd.height),
        table=table,
        formats=formats,
        note="W = device-busy time, D = critical path, W/D the parallelism the step exposed "
             "(docs/analyses.md §7).",
    )


def _workdepth_chart(bars: pl.DataFrame, order: list[str], steps: int) -> alt.TopLevelMixin:
    import altair as alt

    return (
        alt.Chart(_values(bars))
        .mark_bar()
        .encode(
            x=alt.X("what:N", title=None, sort=order, axis=alt.Axis(labels=False, ticks=False)),
            y=alt.Y("ms:Q", title="time (ms)"),
            color=alt.Color("what:N", sort=order, legend=alt.Legend(title=None)),
            column=alt.Column("step:O", title="step"),
            tooltip=["step:O", "what:N", alt.Tooltip("ms:Q", format=".3f")],
        )
        .properties(width=max(60, min(140, WIDTH // max(1, steps) - 20)), height=220, title="")
    )


FIGURES: tuple[Callable[[Any], Figure], ...] = (
    timeline,
    stage_share,
    bubble_causes,
    collectives,
    workdepth,
)


# --- comparisons -------------------------------------------------------------------------------


def comparison_figures(comparison) -> list[Figure]:
    """Stage time per step and idle time by cause, one bar per run (from a Comparison's table)."""
    labels = comparison.labels
    long = comparison.table.unpivot(
        index=["metric"], on=labels, variable_name="run", value_name="value"
    ).drop_nulls("value")
    out = []
    for prefix, title, colors, axis, fmt in (
        (
            "stage.",
            "Stage time per step by run",
            STAGE_COLORS,
            "time per step, mean over ranks (ms)",
            ".3f",
        ),
        ("idle.", "Idle time by cause by run", CAUSE_COLORS, "share of device time", ".1%"),
    ):
        part = long.filter(pl.col("metric").str.starts_with(prefix)).with_columns(
            pl.col("metric").str.strip_prefix(prefix).alias("part")
        )
        key = prefix.rstrip(".")
        if part.height == 0:
            out.append(
                Figure(
                    f"compare-{key}", title, needs=f"needs the {key} analysis in at least one run"
                )
            )
            continue
        if prefix == "stage.":
            part = part.with_columns(pl.col("value") / 1e6)
        part = part.with_columns(_rank_of("part", tuple(colors)))
        out.append(Figure(
            f"compare-{key}", title,
            draw=partial(_comparison_chart, part, labels, title, colors, axis, fmt, key),
        ))
    return out


def _comparison_chart(
    part: pl.DataFrame, labels: list[str], title: str, colors: dict[str, str], axis: str,
    fmt: str, key: str,
) -> alt.TopLevelMixin:
    import altair as alt

    return (
        alt.Chart(_values(part.select("run", "part", "value", "order")))
        .mark_bar()
        .encode(
            y=alt.Y("run:N", sort=labels, title=None),
            x=alt.X(
                "value:Q",
                title=axis,
                axis=alt.Axis(format="%") if fmt.endswith("%") else alt.Axis(),
            ),
            color=alt.Color(
                "part:N", scale=_scale(colors, part["part"]), legend=alt.Legend(title=key)
            ),
            order=alt.Order("order:Q"),
            tooltip=["run:N", "part:N", alt.Tooltip("value:Q", format=fmt)],
        )
        .properties(width=WIDTH - 220, height=max(60, 28 * len(labels)), title=title)
    )
