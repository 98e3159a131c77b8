"""Two or more runs side by side: the same metrics, the deltas against the first run, and which
run wins where.

The metrics are the run summary's numbers (``overview.<metric>``, the same paths audits use) plus
per-stage time, idle time by cause and exposed communication by dimension, each read from the
product that computes it (a run that lacks the product shows no value; it neither wins nor
loses). Whether lower or higher is better is data (:data:`analyzer.analyses.overview.METRICS`,
and "lower" for time and idle); metrics without a direction get deltas but no winner. How a
comparison is shown (report cells, the footnote) is the report layer's:
``analyzer/report/comparison.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from taxonomy.collectives import world_is_dp
from taxonomy.vocab import DIMENSIONS, IDLE_CAUSES, STAGE_NAMES

from ..analyses.overview import METRIC_BY_NAME, frame_of
from ..model.run import captured
from ..model.scalars import number, number_or_none
from ..report.comparison import MISSING

METRICS_SCHEMA: dict[str, pl.DataType] = {
    "metric": pl.String(),
    "title": pl.String(),
    "unit": pl.String(),
    "better": pl.String(),
    "value": pl.Float64(),
}
"""What one run contributes to a comparison: one row per metric it has a number for."""

TIE_TOLERANCE = 0.005
"""Values within this fraction of the best value (not of the largest: 3.15 ms against 4.67 ms
is no tie beside 346 ms) share the best; a best of 0 is shared only by other zeros. A share
(unit ``fraction``) is a part of a whole, so its tolerance is this fraction of the whole: 0.5
points (a stage gap of 0.002% does not beat one of 0.004%, both 0.0%)."""

WORK_APART = 2.0
"""Runs whose device work per step (work-depth W, mean over steps) differs by more than this
factor did different work: TraceLens' vLLM decode-only step (W 10.7 ms) "won" step time
against a prefill-plus-decode step (W 156 ms, 14.6×) by having less to do. A kernel change
that halves the work is still judged; past that the time metrics win nothing."""

WORK = "work.per_step_ns"
"""The comparison's own metric: device work per step, which no direction makes better."""

TIME_OF_WORK = ("overview.step_time_ns", "overview.step_time_max_ns")
"""Metrics (with every ``stage.*``) that measure how long the work took, so that runs of
different work cannot be ranked by them."""

KERNELS_MISSING = ("kernels may be missing",)
"""Parts of a parser warning that say the trace may lack device work: such a run's exposed
communication is not measured (no collective found may be one the trace lost)."""


@dataclass
class Comparison:
    labels: list[str]
    table: pl.DataFrame
    """metric, title, unit, better, one value column per label, ``delta <label>`` and
    ``change <label>`` (relative) for every label after the first, and ``winner``."""

    def wins(self) -> dict[str, list[str]]:
        """label → the titles of the metrics it wins."""
        out: dict[str, list[str]] = {label: [] for label in self.labels}
        for title, winner in self.table.select("title", "winner").iter_rows():
            if winner in out:
                out[winner].append(title)
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "schema": "rlperf-compare/1",
            "runs": self.labels,
            "baseline": self.labels[0],
            "metrics": [
                {
                    "metric": row["metric"],
                    "title": row["title"],
                    "unit": row["unit"],
                    "better": row["better"] or None,
                    "values": {label: row[label] for label in self.labels},
                    "delta": {label: row[f"delta {label}"] for label in self.labels[1:]},
                    "change": {label: row[f"change {label}"] for label in self.labels[1:]},
                    "winner": row["winner"],
                }
                for row in self.table.iter_rows(named=True)
            ],
            "wins": self.wins(),
            "missing": MISSING,
        }


def metrics(run) -> pl.DataFrame:
    """Every comparable number of one run, in :data:`METRICS_SCHEMA`."""
    overview = frame_of(run, "overview", "metric", "title", "unit", "value")
    overview = (
        overview.filter(pl.col("value").is_not_null())
        if overview is not None
        else pl.DataFrame(schema=METRICS_SCHEMA)
    )
    rows = [
        (f"overview.{m}", scoped(t), u, METRIC_BY_NAME[m].better if m in METRIC_BY_NAME else "", v)
        for m, t, u, v in overview.select("metric", "title", "unit", "value").iter_rows()
    ]
    parts = [
        pl.DataFrame(rows, schema=METRICS_SCHEMA, orient="row"),
        _work(run),
        _stages(run),
        _idle(run),
        _exposed(run),
    ]
    out = pl.concat([p for p in parts if p is not None], how="vertical")
    out = out.filter(~_cannot_idle(out))
    if any(k in w for w in getattr(run, "warnings", []) for k in KERNELS_MISSING):
        out = out.filter(~pl.col("metric").is_in(["overview.exposed_comm_ns"])
                         & ~pl.col("metric").str.starts_with("exposed."))
    return out


def scoped(title: str) -> str:
    """A metric's name with its scope in parentheses ("idle, train pool" → "idle (train pool)",
    "guideline violations: warn" → "guideline violations (warn)"), so that a list of metric names
    joined by commas reads one way."""
    for mark in (", ", ": "):
        head, found, scope = title.partition(mark)
        if found and "(" not in title:
            return f"{head} ({scope})"
    return title


def _work(run) -> pl.DataFrame | None:
    """Device work per step (work-depth W, mean over the steps that have one)."""
    wd = frame_of(run, "workdepth", "work_ns")
    if wd is None or wd["work_ns"].drop_nulls().len() == 0:
        return None
    value = float(wd["work_ns"].drop_nulls().mean())  # type: ignore[arg-type]
    return pl.DataFrame(
        [(WORK, "device work W (mean per step)", "ns", "", value)],
        schema=METRICS_SCHEMA, orient="row",
    )


def _stages(run) -> pl.DataFrame | None:
    """Per stage: its time per step on the ranks that run it (mean over those ranks and all
    steps)."""
    breakdown = frame_of(run, "breakdown", "step", "rank", "stage", "time_ns")
    if breakdown is None or breakdown.height == 0:
        return None
    steps = breakdown["step"].n_unique()
    ran = breakdown.filter(pl.col("time_ns") > 0)
    per_step = ran.group_by("step", "stage").agg(
        pl.col("time_ns").sum() / pl.col("rank").n_unique()
    )
    stage = (
        per_step.group_by("stage")
        .agg((pl.col("time_ns").sum() / steps).alias("value"))
        .with_columns(pl.col("stage").cast(pl.String))
    )
    return stage.select(
        pl.format("stage.{}", "stage").alias("metric"),
        pl.format("stage time ({})", "stage").alias("title"),
        pl.lit("ns").alias("unit"),
        pl.lit("lower").alias("better"),
        pl.col("value").cast(pl.Float64),
    )


def _idle(run) -> pl.DataFrame | None:
    bubbles = frame_of(run, "bubbles", "step", "rank", "window_ns", "cause", "idle_ns")
    if bubbles is None or bubbles.height == 0:
        return None
    window = bubbles.group_by("step", "rank").agg(pl.col("window_ns").first())["window_ns"].sum()
    if not window:
        return None
    causes = (
        bubbles.with_columns(pl.col("cause").cast(pl.String))
        .group_by("cause")
        .agg(pl.col("idle_ns").sum())
    )
    return causes.select(
        pl.format("idle.{}", "cause").alias("metric"),
        pl.format("idle ({})", "cause").alias("title"),
        pl.lit("fraction").alias("unit"),
        pl.lit("lower").alias("better"),
        (pl.col("idle_ns") / window).cast(pl.Float64).alias("value"),
    )


PARALLEL_DIMS = ("dp", "fsdp", "tp", "pp", "sp", "cp", "ep")
DIM_TITLES: dict[str, str] = {
    **{d: f"{d.upper()} group" for d in PARALLEL_DIMS},
    "weight_sync": "weight sync",
    "world": "all ranks",
    "unknown": "group unknown",
}
"""A dimension as a row names it: ``exposed comm (PP group)``, not ``(pp)``, which the note
uses for percentage points."""


IDLE_NEEDS: dict[str, str] = {
    "sync_wait": "ranks",
    "weight_sync": "stage.weight_sync",
    "rollout_tail": "stage.rollout",
}
"""Idle cause → what the run must have for the cause to occur at all (a metric it has; ranks:
two or more, a wait needs a partner in the trace); a run without it reads –, not a 0% that
would win (the footnote says so, ``MISSING``); a cause it measured above 0 all the same shows.
Pool wait needs nothing more than rollout and training, which every run with stages has: a
colocated run's shared pool does both and never waits for another, a measured 0 (colocation's
point), as a disaggregated run's rollout tail."""


def _cannot_idle(rows: pl.DataFrame) -> pl.Expr:
    """The idle causes the run cannot have (:data:`IDLE_NEEDS`), read from its own metrics."""
    have = set(rows["metric"].to_list())
    ranks = rows.filter(pl.col("metric") == "overview.ranks")["value"]
    facts = {"ranks": ranks.len() > 0 and (ranks[0] or 0) >= 2}
    lacking = [
        f"idle.{cause}" for cause, need in IDLE_NEEDS.items()
        if not facts.get(need, need in have)
    ]
    return pl.col("metric").is_in(lacking) & (pl.col("value") == 0)


def _exposed(run) -> pl.DataFrame | None:
    """Exposed time per group the run has collectives in (a group it has none in is –). The
    world group of a run whose collectives name no other parallel dimension and whose ranks are
    one pool is its DP group (trl_grpo's 2 ranks of pure DP; G16 counts it as DP/FSDP)."""
    coll = frame_of(run, "collectives_by_dim", "dim", "exposed_ns")
    if coll is None or coll.height == 0 or coll["exposed_ns"].null_count() == coll.height:
        return None
    coll = coll.with_columns(pl.col("dim").cast(pl.String))
    pools = frame_of(run, "pools", "pool")
    if world_is_dp(coll["dim"].to_list(), pools["pool"].n_unique() if pools is not None else 0):
        coll = coll.with_columns(pl.col("dim").replace("world", "dp"))
    dims = coll.group_by("dim").agg(pl.col("exposed_ns").sum())
    return dims.select(
        pl.format("exposed.{}", "dim").alias("metric"),
        pl.format("exposed comm ({})", pl.col("dim").replace_strict(DIM_TITLES, default=None)
                  .fill_null(pl.col("dim"))).alias("title"),
        pl.lit("ns").alias("unit"),
        pl.lit("lower").alias("better"),
        pl.col("exposed_ns").cast(pl.Float64).alias("value"),
    )


def compare(runs: Sequence, labels: Sequence[str]) -> Comparison:
    """Side by side on the union of the runs' metrics, in the order the first run that has a
    metric lists it; deltas against the first run."""
    labels = list(labels)
    if len(labels) != len(runs) or len(set(labels)) != len(labels):
        raise ValueError("one distinct label per run")
    frames = [metrics(run).with_columns(pl.lit(i).alias("_run")) for i, run in enumerate(runs)]
    long = pl.concat(frames).with_columns(_order().alias("_order"))
    keys = long.group_by("metric").agg(
        pl.col("_order").min(),
        pl.col("title").first(),
        pl.col("unit").first(),
        pl.col("better").first(),
    )
    wide = long.pivot(on="_run", index="metric", values="value", aggregate_function="first")
    for i in range(len(runs)):
        if str(i) not in wide.columns:
            wide = wide.with_columns(pl.lit(None, pl.Float64).alias(str(i)))
    wide = wide.rename({str(i): label for i, label in enumerate(labels)})
    table = keys.join(wide, on="metric").sort("_order").drop("_order")
    base = pl.col(labels[0])
    table = table.with_columns(
        *[(pl.col(label) - base).alias(f"delta {label}") for label in labels[1:]],
        *[
            pl.when(base != 0).then((pl.col(label) - base) / base.abs()).alias(f"change {label}")
            for label in labels[1:]
        ],
    )
    winners = [
        _winner(row, labels)
        for row in table.select("better", "unit", *labels).iter_rows(named=True)
    ]
    table = table.with_columns(pl.Series("winner", winners, dtype=pl.String))
    ranks = table.filter(pl.col("metric") == "overview.ranks").select(labels)
    if ranks.height:
        table = table.with_columns(
            pl.Series("winner", [
                _unless_ranks_differ(row, labels, ranks.row(0, named=True))
                for row in table.select("metric", "winner", *labels).iter_rows(named=True)
            ], dtype=pl.String)
        )
    timed = pl.col("metric").is_in(TIME_OF_WORK) | pl.col("metric").str.starts_with("stage.")
    apart = _work_apart(table, labels)
    why = f"work per step {apart:.1f}× apart" if apart is not None else _unknown_work(
        runs, labels, table)
    table = _not_comparable(table, timed, why)
    captures = [label for label, run in zip(labels, runs, strict=True)
                if captured(getattr(run, "sources", []))]
    idle = pl.col("metric").str.starts_with("idle.") | pl.col("metric").is_in(CAPTURE_IDLE)
    table = _not_comparable(table, timed | idle,
                            f"graph capture: {', '.join(captures)}" if captures else None)
    for metric, severity in GUIDELINE_COUNTS.items():
        table = _not_comparable(table, pl.col("metric") == metric,
                                _judged_apart(runs, labels, severity))
    return Comparison(
        labels=labels,
        table=table.select(
            "metric",
            "title",
            "unit",
            "better",
            *labels,
            *[f"delta {label}" for label in labels[1:]],
            *[f"change {label}" for label in labels[1:]],
            "winner",
        ),
    )


def _not_comparable(table: pl.DataFrame, metrics: pl.Expr, why: str | None) -> pl.DataFrame:
    """``table`` with the winner of each of ``metrics`` that has one replaced by
    :data:`NOT_COMPARABLE` and ``why``; unchanged when ``why`` is None."""
    if why is None:
        return table
    return table.with_columns(
        pl.when(metrics & pl.col("winner").is_not_null())
        .then(pl.lit(f"{NOT_COMPARABLE} ({why})"))
        .otherwise(pl.col("winner"))
        .alias("winner")
    )


def _work_apart(table: pl.DataFrame, labels: list[str]) -> float | None:
    """max ÷ min of the runs' device work per step, when above :data:`WORK_APART`."""
    row = table.filter(pl.col("metric") == WORK)
    if row.height == 0:
        return None
    work = [v for v in row.select(labels).row(0) if v is not None and v > 0]
    if len(work) < 2 or max(work) <= WORK_APART * min(work):
        return None
    return max(work) / min(work)


CAPTURE_IDLE = tuple(f"overview.{m}" for m in (
    "gpu_idle_fraction", "gpu_step_idle_fraction", "idle_fraction", "trainer_idle_fraction",
    "rollout_idle_fraction"))
"""Headline idle shares, which a graph-capture trace measures of capturing, not serving (with
every ``idle.*`` and time metric): TraceLens' SGLang capture "won" idle against vLLM's replay."""


LOG_WORKLOAD = ("world_size", "train_batch_size", "rollout_n", "max_prompt_length",
                "max_response_length", "actor_model", "critic_model")
"""What a framework log states of the work a step does (its parser's meta keys): runs whose
device work is not measured (logs alone) are ranked by time only where their logs state the
same workload. A verl PPO log of Qwen2.5-7B (prompts up to 512 tokens) "lost" step time to a
DeepSpeed-Chat log of OPT-1.3B (up to 256)."""


def _stated(run) -> dict[str, str]:
    """The :data:`LOG_WORKLOAD` facts the run's logs state (the first log stating one wins)."""
    out: dict[str, str] = {}
    for source in getattr(run, "sources", []):
        if source.format.endswith("log"):
            for key in LOG_WORKLOAD:
                if source.meta.get(key) is not None:
                    out.setdefault(key, str(source.meta[key]))
    return out


def _unknown_work(runs: Sequence, labels: list[str], table: pl.DataFrame) -> str | None:
    """Why the runs timed cannot be ranked by time, where the device work per step of some is
    not measured (:data:`WORK` has no value): none known, only stated in a log for some, or
    stated differently (the first :data:`LOG_WORKLOAD` fact that differs); None: comparable."""
    timed_rows = table.filter(pl.col("metric").is_in(TIME_OF_WORK))
    timed = [label for label in labels if timed_rows[label].drop_nulls().len()]
    work = table.filter(pl.col("metric") == WORK)
    measured = [label for label in timed
                if work.height and (number_or_none(work[label][0]) or 0) > 0]
    if len(timed) < 2 or len(measured) == len(timed):
        return None
    stated = {label: _stated(run) for label, run in zip(labels, runs, strict=True)}
    unmeasured = [label for label in timed if label not in measured]
    unknown = [label for label in unmeasured if not stated[label]]
    if unknown:
        return f"work per step not known for {', '.join(unknown)}"
    if measured:
        return (f"work per step measured for {', '.join(measured)}, only stated in a log for "
                f"{', '.join(unmeasured)}")
    common = [key for key in LOG_WORKLOAD if all(key in stated[label] for label in timed)]
    if not common:
        return "the logs state no workload fact in common"
    for key in common:
        values = [stated[label][key] for label in timed]
        if len(set(values)) > 1:
            return f"{key} {' vs '.join(values)}"
    return None


GUIDELINE_COUNTS = {"overview.guideline_errors": "error", "overview.guideline_warnings": "warn"}
"""Counts of the guidelines violated among those judged, with the severity each counts: fewer
make the better run only where every violation counted is of a guideline all runs judged. verl
on TPU, stopped before step 1, judged 4 guidelines from its config and "won" the warnings (1)
against a verl log of 335 steps whose 2 are of guidelines it could not judge (G15, G23)."""


def _judged_apart(runs: Sequence, labels: list[str], severity: str) -> str | None:
    """Why the count of violations at ``severity`` cannot rank the runs: the guidelines some
    run violated that another did not judge, and those runs; None when there is none (a run
    that judged no guideline has no count and takes no part) or a run has no verdicts."""
    judged: dict[str, set[str]] = {}
    violated: dict[str, set[str]] = {}
    for label, run in zip(labels, runs, strict=True):
        verdicts = frame_of(run, "violations", "id", "status", "severity")
        if verdicts is None:
            return None
        done = verdicts.filter(pl.col("status").is_in(["violated", "passed"]))
        if done.height:
            judged[label] = set(done["id"].to_list())
            violated[label] = set(done.filter((pl.col("status") == "violated")
                                              & (pl.col("severity") == severity))["id"].to_list())
    if not judged:
        return None
    common = set.intersection(*judged.values())
    counted: set[str] = set().union(*violated.values())
    outside = sorted(counted - common, key=lambda g: (len(g), g))
    if not outside:
        return None
    lacking = [label for label in judged if not all(g in judged[label] for g in outside)]
    return f"{', '.join(outside)} not judged for {', '.join(lacking)}"


RANK_SUMMED = ("overview.exposed_comm_ns", "overview.gpu_busy_ns")
"""Run-summary numbers summed over ranks, as every ``exposed.<dim>`` is: between runs of
different rank counts the one with fewer ranks would win them by having fewer ranks (HTA's
single rank 0 "beat" the pair it was taken from, 336 ms of exposed comm against 636 ms), and an
audit against a baseline of other ranks cannot judge them (rank 1 alone has 52.9% less exposed
time than the pair it is one of)."""

NOT_COMPARABLE = "not comparable"
"""The winner of a rank-summed metric between runs of different rank counts."""


def _unless_ranks_differ(row: dict[str, object], labels: list[str],
                         ranks: dict[str, object]) -> str | None:
    """A rank-summed metric's winner, or :data:`NOT_COMPARABLE` when the runs that have a value
    for it differ in rank count (a logs-only run, with no rank count and no such value, takes
    no part)."""
    metric, winner = str(row["metric"]), row["winner"]
    summed = metric in RANK_SUMMED or metric.startswith("exposed.")
    if not summed or winner is None:
        return None if winner is None else str(winner)
    counts = [number(ranks[label]) for label in labels
              if row[label] is not None and ranks[label] is not None]
    if len(set(counts)) < 2:
        return str(winner)
    return f"{NOT_COMPARABLE} ({' vs '.join(f'{c:,.0f}' for c in counts)} ranks)"


FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("overview.", tuple(METRIC_BY_NAME)),
    ("work.", ("per_step_ns",)),
    ("stage.", STAGE_NAMES),
    ("idle.", IDLE_CAUSES),
    ("exposed.", DIMENSIONS),
)
"""Metric families in table order, each with its names in vocabulary order."""


def _order() -> pl.Expr:
    """A metric's place in the table: its family, then its name's place in the vocabulary."""
    order = {
        f"{prefix}{name}": i * 1000 + j
        for i, (prefix, names) in enumerate(FAMILIES)
        for j, name in enumerate(names)
    }
    return pl.col("metric").replace_strict(
        order, default=len(FAMILIES) * 1000, return_dtype=pl.Int64
    )


def _winner(row: dict[str, object], labels: list[str]) -> str | None:
    """The label with the best value; the labels that share it (within TIE_TOLERANCE of it), joined
    by ", ", when some but not all runs do; "tie" when every run with a value does; None when
    the metric has no direction or fewer than two runs have it."""
    better = row["better"]
    values = {label: number(row[label]) for label in labels if row[label] is not None}
    if better not in ("lower", "higher") or len(values) < 2:
        return None
    best = float(min(values.values()) if better == "lower" else max(values.values()))
    scale = 1.0 if row.get("unit") == "fraction" else abs(best)
    leaders = [
        label for label, v in values.items()
        if abs(float(v) - best) <= TIE_TOLERANCE * scale
    ]
    return "tie" if len(leaders) == len(values) else ", ".join(leaders)


def default_labels(paths: Sequence) -> list[str]:
    """A label per run from its path: the last component, made unique by its parents if needed;
    the same path given again is numbered (``run``, ``run #2``: a run against itself shows the
    noise between two loads, every metric a tie)."""
    parts = [Path(p).resolve().parts for p in paths]
    distinct = len(set(parts))
    depth = 1
    while depth < max(len(p) for p in parts):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == distinct:
            break
        depth += 1
    else:
        labels = [str(p) for p in paths]
    return _numbered(labels)


def _numbered(labels: list[str]) -> list[str]:
    """Repeated labels made distinct: the second ``x`` is ``x #2``."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out
