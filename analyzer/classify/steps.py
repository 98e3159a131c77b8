"""Steps: which training step every stage range belongs to, the step windows, and the steps a
trace leaves incomplete. One module owns the ``steps`` product and everything it is made of.

Products (schemas in ``analyzer/model/frames.py``):

* ``stepping`` — the markers found and what they are (``ProfilerStep#N`` ranges, else step-level
  ranges such as verl ``step``, else one step per rollout wave, else the log's step numbers),
  the staged ranges with their step, and the renumbering to a log's steps when logs of the same
  run come along (their stage durations are matched). Stage ranges join the step they belong to
  (:func:`step_of`); a step window is ``[min start, max end)`` of its ranges over all ranks.
* ``step_table`` — the step windows before the ``--steps`` selection.
* ``step_markers_closed`` — the step markers each rank's trace closed.
* ``incomplete_steps`` — steps a trace does not cover (from where a file cut short ends on, or
  one a rank's trace ends inside without closing its marker): left out of ``steps`` and every
  per-step product, with a warning (docs/assembly.md, Steps).
* ``steps`` — the step windows of the ``--steps`` selection, without the incomplete ones.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from taxonomy import profiles as tp
from taxonomy.steps import builtin_rules

from ..model import frames, intervals
from ..model.options import Options
from ..model.products import provides
from ..model.run import SourceInfo
from ..model.scalars import as_int
from .engine import is_engine, launched_until

MATCH_TOLERANCE = 0.10
"""Trace steps take a log's numbering when their stage durations agree within this (mean
relative error; log rounding and the untimed driver work between timers stay well inside)."""
STEP_NUMBER = r"(?i)^step[ _#:]*(\d{1,9})$"
"""A step range that states its number (``step 3``): each process's own, numbered so."""
CLEAR_MARGIN = 1.5
"""…and the next-best numbering errs at least this many times more."""


def is_staged() -> pl.Expr:
    return (
        pl.col("relation").is_in(["stage", "part"])
        & (pl.col("stage") != "other")
        & ~pl.col("composite")
    )


def staged(ranges: pl.DataFrame) -> pl.DataFrame:
    """Ranges that name a stage; generic-profile ranges only where no framework range of the
    same rank encloses them."""
    rows = ranges.filter(is_staged())
    strong = rows.filter(~pl.col("weak"))
    weak = rows.filter(pl.col("weak"))
    if weak.height and strong.height:
        covered = intervals.overlap_each(weak, strong, by=["rank"])
        weak = weak.filter(covered < (pl.col("end_ns") - pl.col("start_ns")))
    return pl.concat([strong, weak]).sort(
        "rank", "start_ns", "end_ns", descending=[False, False, True]
    )


def step_markers(ranges: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """Step-level ranges (``rank, step, start_ns, end_ns``) and what they are: ProfilerStep#N
    (numbered by N), else a framework's step ranges (numbered by order on each rank), else one
    step per rollout wave (rollout ranges that overlap across ranks), else nothing."""
    steps = ranges.filter(pl.col("relation") == "step")
    profiler = steps.filter(pl.col("name").str.starts_with("ProfilerStep#"))
    if profiler.height:
        return profiler.select(
            "rank",
            pl.col("name").str.extract(r"#(\d+)$", 1).cast(pl.Int32).alias("step"),
            "start_ns",
            "end_ns",
        ), "ProfilerStep"
    if steps.height:
        outer = _outermost_ranges(steps)
        names = sorted(outer["name"].cast(pl.String).unique().to_list())
        numbered = outer["name"].cast(pl.String).str.extract(STEP_NUMBER, 1).is_not_null()
        if numbered.any():
            return _numbered(outer), "step ranges: " + ", ".join(_shown(names))
        return outer.sort("rank", "start_ns").select(
            "rank",
            (pl.int_range(pl.len()).over("rank") + 1).cast(pl.Int32).alias("step"),
            "start_ns",
            "end_ns",
        ), "step ranges: " + ", ".join(names)
    rollout = ranges.filter((pl.col("stage") == "rollout") & ~pl.col("inferred").fill_null(False))
    if rollout.height == 0:
        rollout = ranges.filter(pl.col("stage") == "rollout")
    if rollout.height:
        driver = rollout.filter(pl.col("rank") < 0)
        waves = _waves(driver if driver.height else rollout)
        return waves, "rollout waves"
    return pl.DataFrame(
        schema={"rank": pl.Int32, "step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64}
    ), "none"


def _numbered(outer: pl.DataFrame) -> pl.DataFrame:
    """Step ranges that carry their number (each process's ``step N``: verl's nsys layout)
    numbered so; an unnumbered one (the controller's ``step`` beside its workers' ``step N``)
    takes the number of the numbered step its range overlaps most."""
    number = pl.col("name").cast(pl.String).str.extract(STEP_NUMBER, 1).cast(pl.Int32)
    rows = outer.select("rank", number.alias("step"), "start_ns", "end_ns")
    known = rows.filter(pl.col("step").is_not_null())
    loose = rows.filter(pl.col("step").is_null()).with_row_index("_m")
    if loose.height == 0:
        return known
    windows = known.group_by("step").agg(
        pl.col("start_ns").min().alias("_ws"), pl.col("end_ns").max().alias("_we")
    )
    overlap = pl.min_horizontal("end_ns", "_we") - pl.max_horizontal("start_ns", "_ws")
    best = (
        loose.drop("step")
        .join(windows, how="cross")
        .with_columns(overlap.alias("_o"))
        .filter(pl.col("_o") > 0)
        .sort("_m", "_o", "step", descending=[False, True, False])
        .unique("_m", keep="first")
    )
    return pl.concat([known, best.select(list(known.columns))])


def _shown(names: list[str]) -> list[str]:
    """Numbered step range names once, as ``step N`` (not ``step 1, step 2, …``)."""
    found = {n: re.search(STEP_NUMBER, n) for n in names}
    plain = [n for n, m in found.items() if m is None]
    prefixes = sorted({n[: m.start(1)] for n, m in found.items() if m is not None})
    return plain + [f"{p}N" for p in prefixes]


def _outermost_ranges(rows: pl.DataFrame) -> pl.DataFrame:
    ordered = rows.sort(["rank", "start_ns", "end_ns"], descending=[False, False, True])
    reach = pl.col("end_ns").cum_max().shift(1).over("rank")
    return ordered.filter(reach.is_null() | (pl.col("start_ns") >= reach))


def _waves(rollout: pl.DataFrame) -> pl.DataFrame:
    """Each wave of overlapping rollout ranges starts a step that lasts until the next wave."""
    ordered = rollout.sort("start_ns")
    wave = (
        (pl.col("start_ns") > pl.col("end_ns").cum_max().shift(1))
        .fill_null(True)
        .cum_sum()
        .cast(pl.Int32)
    )
    starts = (
        ordered.with_columns(wave.alias("step"))
        .group_by("step")
        .agg(pl.col("start_ns").min())
        .sort("step")
    )
    return starts.with_columns(
        pl.lit(-2, pl.Int32).alias("rank"),
        pl.col("start_ns").shift(-1).fill_null(pl.col("start_ns")).alias("end_ns"),
    ).select("rank", "step", "start_ns", "end_ns")


def step_of(rows: pl.DataFrame, starts: pl.DataFrame) -> pl.Series:
    """The step each row (``start_ns``) belongs to: the last step started at or before it (null
    before the first). ``starts`` holds ``step, start_ns``."""
    if rows.height == 0 or starts.height == 0:
        return pl.Series("step", [None] * rows.height, dtype=pl.Int32)
    keyed = rows.select(pl.col("start_ns").alias("t")).with_row_index("_row").sort("t")
    found = keyed.join_asof(
        starts.sort("start_ns").select(pl.col("start_ns").alias("t"), "step"),
        on="t",
        strategy="backward",
    )
    return found.sort("_row")["step"].cast(pl.Int32)


def log_step_stages(events: pl.DataFrame, classes: pl.DataFrame) -> pl.DataFrame:
    """Per log step and stage, the seconds of the stage timers (composite timers left out)."""
    logs = events.filter(pl.col("kind") == "log_stage").select(
        pl.col("name").cast(pl.String), "step", (pl.col("end_ns") - pl.col("start_ns")).alias("dur")
    )
    if logs.height == 0 or classes.height == 0:
        return pl.DataFrame(schema={"step": pl.Int32, "stage": pl.String, "dur": pl.Int64})
    staged = classes.filter(
        (pl.col("relation") == "stage")
        & (pl.col("covers").list.len().fill_null(0) <= 1)
        & (pl.col("stage") != "other")
    )
    return (
        logs.join(staged.select("name", pl.col("stage").cast(pl.String)), on="name")
        .group_by("step", "stage").agg(pl.col("dur").sum())
    )


def match_log_steps(trace: pl.DataFrame, log: pl.DataFrame) -> tuple[int, float] | None:
    """The shift k (trace step s is log step s + k) whose stage durations agree best, with its
    mean relative error; None unless one shift agrees within :data:`MATCH_TOLERANCE` and
    clearly better than any other. Both frames: step, stage, dur."""
    if trace.height == 0 or log.height == 0:
        return None
    first = as_int(log["step"].min()) - as_int(trace["step"].min())
    last = as_int(log["step"].max()) - as_int(trace["step"].max())
    errors = (
        trace.lazy()
        .join(log.lazy(), on="stage", suffix="_log")
        .with_columns((pl.col("step_log") - pl.col("step")).alias("k"))
        .filter(pl.col("k").is_between(first, last))
        .group_by("k")
        .agg(
            pl.col("step").n_unique().alias("matched"),
            ((pl.col("dur") - pl.col("dur_log")).abs() / pl.col("dur_log").clip(lower_bound=1))
            .mean()
            .alias("err"),
        )
        .filter(pl.col("matched") == trace["step"].n_unique())
        .sort("err", "k")
        .head(2)
        .collect()
    )
    if errors.height == 0:
        return None
    best_err, best_k = float(errors["err"][0]), int(errors["k"][0])
    clear = errors.height == 1 or errors["err"][1] >= CLEAR_MARGIN * best_err + 0.01
    return (best_k, best_err) if best_err <= MATCH_TOLERANCE and clear else None


def name_classes(profile: dict[str, Any], names: pl.Series, source: str) -> pl.DataFrame:
    """The class (stage, role, relation, …) of each of ``names`` under the run's profile."""
    return tp.classify(names, source, profile["detection"], profiles=profile["profiles"])


@provides("stepping")
def stepping(
    ranges: pl.DataFrame, aligned: pl.DataFrame, profile: dict[str, Any]
) -> frames.Stepping:
    """``rows`` (staged ranges with their step), ``steps`` (the windows), ``origin`` (what marks
    the steps), ``shift`` and ``note`` (the renumbering to the log's steps, if any)."""
    markers, origin = step_markers(ranges)
    rows = staged(ranges)
    if markers.height:
        starts = markers.group_by("step").agg(pl.col("start_ns").min()).sort("start_ns")
        rows = rows.with_columns(step_of(rows, starts).alias("step"))
        rows = _rollout_by_driver(rows)
        windows = _windows(rows, markers if origin != "rollout waves" else markers.head(0), starts)
        if is_engine(profile):
            windows = launched_until(windows, aligned)
    else:
        rows = rows.with_columns(pl.lit(None, pl.Int32).alias("step"))
        windows = _log_windows(aligned)
        origin = "log" if windows.height else "none"
    shift = 0
    note = ""
    logs = aligned.filter(pl.col("kind") == "log_stage")
    if markers.height and logs.height:
        log_classes = name_classes(profile, logs["name"].cast(pl.String).unique(), "log")
        trace = _trace_step_stages(rows)
        found = match_log_steps(trace, log_step_stages(logs, log_classes))
        if found is not None:
            shift, err = found
            note = (
                f"trace steps numbered as the log's (shift {shift:+d}; stage durations agree "
                f"within {err:.1%})"
            )
    if shift:
        rows = rows.with_columns(pl.col("step") + shift)
        windows = windows.with_columns(pl.col("step") + shift)
    steps = (
        windows.with_columns(pl.lit(origin).alias("source"))
        .select(list(frames.STEPS))
        .cast(frames.STEPS)
    )
    return frames.Stepping(rows=rows, steps=steps, origin=origin, note=note, shift=shift)


@provides("step_table", schema=frames.STEPS)
def step_table(stepping: frames.Stepping) -> pl.DataFrame:
    """Step windows (docs/analyses.md §1) before the ``--steps`` selection."""
    frame: pl.DataFrame = stepping["steps"]
    return frame


@provides("step_markers_closed")
def step_markers_closed(ranges: pl.DataFrame, stepping: frames.Stepping) -> pl.DataFrame:
    """``rank, step``: the step markers each rank's trace closed, numbered as ``steps`` is
    (empty when steps are not marked per rank: rollout waves, log steps)."""
    markers, origin = step_markers(ranges)
    if origin in ("rollout waves", "none"):
        markers = markers.head(0)
    shift = stepping["shift"]
    return markers.select(
        pl.col("rank").cast(pl.Int32), (pl.col("step") + shift).cast(pl.Int32)
    ).unique()


def _log_windows(aligned: pl.DataFrame) -> pl.DataFrame:
    logs = aligned.filter((pl.col("kind") == "log_stage") & pl.col("step").is_not_null())
    return logs.group_by("step").agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("step")


def _rollout_by_driver(rows: pl.DataFrame) -> pl.DataFrame:
    """A worker's rollout belongs to the step whose driver rollout range (verl ``gen``, the
    controller collecting the results) is the first to end after it: with one-step-off
    asynchrony the engines generate step s+1 while step s trains."""
    driver = rows.filter(
        (pl.col("rank") < 0) & (pl.col("stage") == "rollout") & pl.col("step").is_not_null()
    )
    if driver.height == 0:
        return rows
    marks = driver.group_by("step").agg(pl.col("end_ns").max().alias("t")).sort("t")
    workers = (pl.col("rank") >= 0) & (pl.col("stage") == "rollout")
    probe = (
        rows.with_row_index("_row")
        .filter(workers)
        .select("_row", pl.col("end_ns").alias("t"))
        .sort("t")
    )
    found = probe.join_asof(marks.rename({"step": "_s"}), on="t", strategy="forward")
    return (
        rows.with_row_index("_row")
        .join(found.select("_row", "_s"), on="_row", how="left")
        .with_columns(
            pl.when(pl.col("_row").is_in(found["_row"].implode()))
            .then(pl.col("_s"))
            .otherwise(pl.col("step"))
            .alias("step")
        )
        .drop("_row", "_s")
    )


def _windows(rows: pl.DataFrame, markers: pl.DataFrame, starts: pl.DataFrame) -> pl.DataFrame:
    spans = pl.concat([
        rows.filter(pl.col("step").is_not_null()).select("step", "start_ns", "end_ns"),
        markers.select("step", "start_ns", "end_ns"),
        starts.select("step", "start_ns", pl.col("start_ns").alias("end_ns")),
    ])
    return spans.group_by("step").agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("step")


def _trace_step_stages(rows: pl.DataFrame) -> pl.DataFrame:
    """Per step and stage, the most time one rank spent in that stage's outermost ranges (the
    driver's, when there is one: its timers are what a log reports)."""
    if rows.height == 0:
        return pl.DataFrame(schema={"step": pl.Int32, "stage": pl.String, "dur": pl.Int64})
    if (rows["rank"] < 0).any():
        rows = rows.filter(pl.col("rank") < 0)
    merged = intervals.union(
        rows.filter(pl.col("step").is_not_null()).with_columns(pl.col("stage").cast(pl.String)),
        by=["step", "stage", "rank"],
    )
    return (
        merged.group_by("step", "stage", "rank")
        .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("dur"))
        .group_by("step", "stage")
        .agg(pl.col("dur").max())
    )


def trace_ends(events: pl.DataFrame, cut_sources: list[int]) -> pl.DataFrame:
    """Per trace source and rank: where its data ends (``trace_end_ns``) and whether the file
    was cut short. A writer emits a trace in runs (one thread's operators, then another's, then
    the GPU work), so a cut stops the run of the last event the file holds — that thread or
    stream has nothing after its last end — and loses every later run; for a cut file the end
    is that thread's or stream's last end (rows keep the file's order)."""
    rows = events.filter(
        (pl.col("kind") != "log_stage") & ~pl.col("synthetic_time")
    ).with_row_index("_row")
    keys = ["source", "rank"]
    lane = ["pid", "tid", "stream"]
    ends = rows.group_by(keys).agg(pl.col("end_ns").max().alias("_end"))
    cut = rows.filter(pl.col("source").is_in(cut_sources))
    last = cut.sort("_row").group_by(keys).agg(pl.col(lane).last())
    frontier = (
        cut.join(last, on=[*keys, *lane]).group_by(keys).agg(pl.col("end_ns").max().alias("_cut"))
    )
    return (
        ends.join(frontier, on=keys, how="left")
        .select(
            pl.col("source").cast(pl.UInt32),
            pl.col("rank").cast(pl.Int32),
            pl.col("_cut").is_not_null().alias("cut"),
            pl.coalesce("_cut", "_end").alias("trace_end_ns"),
        )
        .sort("source", "rank")
    )


def stub_step(steps: pl.DataFrame, share: float) -> int | None:
    """The last step when it lasts under ``share`` of the median of the others: the profiler
    stopped as it began (mi250_minitoy's ProfilerStep#2: 49 µs after a step of 9.29 ms)."""
    if steps.height < 2:
        return None
    ordered = steps.sort("start_ns")
    lengths = (ordered["end_ns"] - ordered["start_ns"]).cast(pl.Float64)
    median = lengths.head(steps.height - 1).median()
    if not isinstance(median, float) or not float(lengths[-1]) < share * median:
        return None
    return int(ordered["step"][-1])


def incomplete_steps(
    steps: pl.DataFrame, ends: pl.DataFrame, markers: pl.DataFrame, stub_share: float = 0.0
) -> pl.DataFrame:
    """INCOMPLETE_STEPS from step windows (``step, start_ns, end_ns``), :func:`trace_ends`
    and the step markers each rank closed (``rank, step``; empty when steps are not marked
    per rank). A cut trace leaves every step not over before its data ends (a window that ends
    just there was cut to the last complete event, not closed by the run); any trace
    leaves a step it ends inside when it marks steps and has no marker of that one (its step
    never closed); and the last step, in every trace, when it is a stub (:func:`stub_step`:
    shorter than ``stub_share`` of the median of the others). A rank finishing before the
    others (the window ends at the last rank's, or at the driver's, end) is not a reason."""
    windows = steps.select(pl.col("step").cast(pl.Int32), "start_ns", "end_ns")
    stub = stub_step(windows, stub_share)
    stubs = ends.join(windows.filter(pl.col("step") == stub) if stub is not None
                      else windows.clear(), how="cross")
    cut = (
        ends.filter(pl.col("cut"))
        .join(windows, how="cross")
        .filter(pl.col("end_ns") >= pl.col("trace_end_ns"))
    )
    marking = ends.filter(~pl.col("cut")).join(
        markers.select(pl.col("rank").cast(pl.Int32)).unique(), on="rank"
    )
    closed = markers.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32))
    unclosed = (
        marking.join(windows, how="cross")
        .filter(
            (pl.col("start_ns") < pl.col("trace_end_ns"))
            & (pl.col("trace_end_ns") < pl.col("end_ns"))
        )
        .join(closed, on=["rank", "step"], how="anti")
    )
    return (
        pl.concat(
            [
                cut.with_columns(pl.lit("cut").alias("reason")),
                unclosed.with_columns(pl.lit("unclosed").alias("reason")),
                stubs.with_columns(pl.lit("stub").alias("reason")),
            ],
            how="diagonal_relaxed",
        )
        .select(list(frames.INCOMPLETE_STEPS))
        .cast(frames.INCOMPLETE_STEPS)
        .unique(["step", "source", "rank"], keep="first", maintain_order=True)
        .sort("step", "source", "rank")
    )


@provides("incomplete_steps", schema=frames.INCOMPLETE_STEPS)
def incomplete_steps_product(
    sources: list[SourceInfo],
    aligned: pl.DataFrame,
    step_table: pl.DataFrame,
    step_markers_closed: pl.DataFrame,
    warnings: list[str],
) -> pl.DataFrame:
    """:func:`incomplete_steps` of the run, each source's with one warning."""
    cut = [s.index for s in sources if s.meta.get("salvaged")]
    found = incomplete_steps(step_table, trace_ends(aligned, cut), step_markers_closed,
                             builtin_rules().stub_share)
    for (source, reason), rows in found.group_by("source", "reason", maintain_order=True):
        warnings.append(
            f"{sources[int(source)].path.name}: "
            f"{exclusion(reason, rows['step'].unique().sort().to_list())}"
        )
    return found


def excluded(incomplete_steps: pl.DataFrame) -> list[int]:
    """Steps a trace leaves unobserved (product ``incomplete_steps``): no per-step analysis
    reads them."""
    return sorted(set(incomplete_steps["step"].to_list()))


def select_steps(
    frame: pl.DataFrame, options: Options, incomplete_steps: pl.DataFrame
) -> pl.DataFrame:
    """Rows of the ``--steps`` selection, without the steps a trace leaves incomplete."""
    selected = options.step_selection
    frame = frame if selected is None else frame.filter(selected.expr("step"))
    gone = excluded(incomplete_steps)
    return frame.filter(~pl.col("step").is_in(gone).fill_null(False)) if gone else frame


@provides("steps", schema=frames.STEPS)
def steps(
    step_table: pl.DataFrame, options: Options, incomplete_steps: pl.DataFrame
) -> pl.DataFrame:
    """The step windows over all ranks (docs/analyses.md §1), after the ``--steps`` selection."""
    return select_steps(step_table, options, incomplete_steps)


def exclusion(reason: str, steps: list[int]) -> str:
    """Why ``steps`` are left out, as the warning and the data-quality section say it."""
    listed = f"step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}"
    if reason == "stub":
        return (
            f"the trace's last step {steps[0]} is a stub, under "
            f"{builtin_rules().stub_share:.0%} of the median of its other steps (where the "
            f"profiler stopped, not a step of the run); {listed} excluded from the per-step "
            "analyses"
        )
    if reason == "cut":
        return (
            f"cut short: its complete events end before step {steps[0]} does; {listed} excluded "
            "from the per-step analyses"
        )
    return (
        f"the trace ends inside step {steps[0]}, before its own marker of that step closed; "
        f"{listed} excluded from the per-step analyses"
    )
