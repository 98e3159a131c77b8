"""Findings: every problem the analyses found, one list ranked by what fixing it would save.

Product ``findings`` (:data:`frames.FINDINGS`, docs/analyses.md "Findings"). Candidates
(:data:`frames.FINDING_CANDIDATES`) come from rlperf's own analyses — violated guidelines, idle
causes, the work–depth what-if bounds, weight sync, stragglers, exposed communication — and from
the candidate products named in ``taxonomy/findings.toml``. Candidates that are one problem seen
by several analyses (the rollout-tail guideline, the rollout-tail idle cause and the no-tail
bound) are merged by the file's ``[[problem]]`` tables. Savings are per step, from bounds the
analyses already compute; ``saving_basis`` says which.

Each family of candidates is read and built on its own: one that fails with an internal error
is kept in ``failures`` (docs/errors.md) and the others still make the list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

import polars as pl

from parsers.events import GPU_ACTIVITY_KINDS
from taxonomy import tomlfile
from taxonomy.collectives import world_is_dp
from taxonomy.guidelines import SEVERITIES
from taxonomy.vocab import DIMENSION_WORDS

from ..model import frames, intervals
from ..model.failures import Failure, record, user_errors
from ..model.intervals import union_length
from ..model.products import Lazy, providers, provides
from ..model.run import captured
from ..model.units import duration, percent, plural, spans
from . import queued

RULES_PATH = Path(tomlfile.__file__).with_name("findings.toml")
CONFIDENCES = ("low", "medium", "high")
UPDATE_DIMS = ("dp", "fsdp")
"""Dimensions whose exposed communication is G16's (gradient and parameter traffic)."""
SKIPPED_DIMS = ("weight_sync",)
"""Dimensions whose time is another finding's (weight sync)."""
IDLE_CAUSES = ("rollout_tail", "weight_sync", "sync_wait", "host_bound", "stage_gap")
"""Idle causes that are candidates by their mean per device; pool wait is judged per pool."""
HOST_SIDE = ("host_bound",)
"""Idle causes judged on GPU ranks only (:func:`_gpu_ranks`)."""


class FindingRulesError(ValueError):
    """``taxonomy/findings.toml`` cannot be used (a bug in rlperf's data, not the user's)."""


@dataclass(frozen=True)
class Problem:
    key: str
    members: tuple[str, ...]
    saving_from: tuple[str, ...]


@dataclass(frozen=True)
class Rules:
    products: tuple[str, ...]
    min_saving_fraction: float
    error: float
    warn: float
    problems: tuple[Problem, ...]
    share_saving: frozenset[str]
    superseded: frozenset[str]
    finding: dict[str, dict[str, str]] = field(default_factory=dict)
    same_time: tuple[str, ...] = ()
    same_time_share: float = 0.9
    capture_drops: frozenset[str] = frozenset()
    controllers: frozenset[str] = frozenset()
    queue_lag_ns: int = 100_000

    def text(self, fid: str, key: str) -> str:
        return self.finding.get(fid, {}).get(key, "")

    def advice(self, fid: str, work: Workload) -> str:
        """``fid``'s recommendation for ``work``: its most specific variant present."""
        return next((t for k in work.variants() if (t := self.text(fid, k))), "")

    def title(self, fid: str, work: Workload) -> str:
        """``fid``'s title; ``title_plain`` for a run without a controller, where it has one."""
        plain = "" if work.controller else self.text(fid, "title_plain")
        return plain or self.text(fid, "title")


@dataclass(frozen=True)
class Workload:
    """What the trace records, which decides the advice: training or inference (a rollout-only
    run or an inference engine's trace), whether it replays CUDA graphs or was recorded
    while capturing them (then "use CUDA graphs" is advice the run already follows), and
    whether a controller dispatches its stages (else time between stages is not dispatch)."""

    kind: str = "training"
    graphs: str = ""
    capture: dict[str, int] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    controller: bool = True
    framework: str = ""

    def variants(self) -> tuple[str, ...]:
        """Recommendation keys of a rule table to try, most specific first."""
        keys = ["recommendation_graphs"] if self.graphs else []
        if not self.controller:
            keys.append("recommendation_plain")
        if self.kind == "inference":
            keys.append("recommendation_inference")
        return (*keys, "recommendation")


def workload(sources: Iterable[Any], placement: dict[str, Any] | None,
             profile: dict[str, Any] | None, stage_ranges: pl.DataFrame | None = None,
             controllers: Iterable[str] = ()) -> Workload:
    """The run's :class:`Workload` from its sources' graph facts (``meta["graph_capture"]``,
    ``meta["graph_replay"]``), its placement (``rollout_only``), its profile (an engine's; a
    single-controller framework's, ``controllers``) and its stage ranges (a driver's range: the
    trace records the controller). Without stage ranges the controller is not judged."""
    captures = captured(sources)
    replayed = any((s.meta.get("graph_replay") or {}).get("launches") for s in sources)
    engine = bool(getattr((profile or {}).get("profile"), "engine", False))
    rollout_only = (placement or {}).get("placement") == "rollout_only"
    capture = {k: sum(s.meta["graph_capture"].get(k, 0) for s in captures)
               for k in ("captures", "captured_launches")}
    name = str((profile or {}).get("name") or "")
    driven = stage_ranges is None or name in set(controllers) or bool(
        stage_ranges.filter(pl.col("role").cast(pl.String) == "driver").height
    )
    return Workload(
        kind="inference" if engine or rollout_only else "training",
        graphs="capture" if captures else "replay" if replayed else "",
        capture=capture if captures else {},
        files=tuple(s.path.name for s in captures),
        controller=driven,
        framework=name,
    )


def _error(path: Path, problem: str) -> FindingRulesError:
    return FindingRulesError(f"{path}: {problem}")


@cache
def rules(path: Path = RULES_PATH) -> Rules:
    """The findings rules file, checked: every member of one problem only, known keys."""
    data = tomlfile.read_toml(path, _error)
    ranking = data.get("ranking", {})
    problems = tuple(
        Problem(p["key"], tuple(p["members"]), tuple(p.get("saving_from", p["members"])))
        for p in data.get("problem", [])
    )
    seen = [m for p in problems for m in p.members]
    twice = sorted({m for m in seen if seen.count(m) > 1})
    if twice:
        raise _error(path, f"candidates in more than one problem: {', '.join(twice)}")
    stray = sorted({s for p in problems for s in p.saving_from if s not in p.members})
    if stray:
        raise _error(path, f"saving_from names non-members: {', '.join(stray)}")
    for fid, entry in data.get("finding", {}).items():
        if entry.get("confidence", "medium") not in CONFIDENCES:
            raise _error(path, f"finding {fid}: confidence must be one of {CONFIDENCES}")
    return Rules(
        products=tuple(data.get("products", [])),
        min_saving_fraction=float(ranking.get("min_saving_fraction", 0.01)),
        error=float(ranking.get("error", 0.10)),
        warn=float(ranking.get("warn", 0.03)),
        problems=problems,
        share_saving=frozenset(data.get("share_saving", {}).get("guidelines", [])),
        superseded=frozenset(data.get("staged", {}).get("superseded", [])),
        finding=data.get("finding", {}),
        same_time=tuple(data.get("same_time", {}).get("members", [])),
        same_time_share=float(data.get("same_time", {}).get("merge_share", 0.9)),
        capture_drops=frozenset(data.get("graph_capture", {}).get("drops", [])),
        controllers=frozenset(data.get("controller", {}).get("frameworks", [])),
        queue_lag_ns=int(data.get("host_bound", {}).get("queue_lag_ns", 100_000)),
    )


OWN = (
    "violations",
    "bubbles",
    "pools",
    "workdepth",
    "weight_sync",
    "stragglers",
    "collective_waits",
    "activity",
    "steps",
    "log_steps",
    "step_outliers",
    "sources",
    "placement",
    "profile",
    "events",
    "stage_ranges",
    "device_states",
)
"""What rlperf's own candidates read, each on demand."""
SOURCES = ("trace", "log")
"""What a candidate's saving is measured on (``measured_on``): the trace's steps or the log's."""


@dataclass(frozen=True)
class Steps:
    """The step times savings are measured against: the run's steps (``steps``: the trace's,
    or the log's in a logs-only run, ``on`` says which) and the log's own step times."""

    count: int
    mean_ns: float | None
    median_ns: float | None
    on: str = "trace"
    log_mean_ns: float | None = None
    whole_ns: float | None = None
    """Without steps: the trace's window, what whole-trace savings are a share of."""

    def base(self, on: str) -> float | None:
        """The mean step of the steps a saving measured ``on`` the trace or the log is per:
        a per-step saving of the same steps is at most that, so its share is at most 1."""
        if on == "log" and self.log_mean_ns:
            return self.log_mean_ns
        if on == "trace" and self.count == 0:
            return self.whole_ns
        return self.mean_ns if on == self.on else None

    def bases(self) -> dict[str, float | None]:
        return {on: self.base(on) for on in SOURCES}


@dataclass
class Context:
    lazy: Lazy
    steps: Steps
    rules: Rules
    work: Workload = field(default_factory=Workload)
    rows: list[dict[str, Any]] = field(default_factory=list)
    staged: bool = False
    """Whether idle causes were computed (the trace has stages and steps)."""

    def severity(self, saving_ns: float | None, on: str = "trace") -> str:
        """A non-guideline candidate's severity from its share of the mean step."""
        share = self.share(saving_ns, on)
        if share is None:
            return "info"
        if share >= self.rules.error:
            return "error"
        return "warn" if share >= self.rules.warn else "info"

    def share(self, saving_ns: float | None, on: str = "trace") -> float | None:
        base = self.steps.base(on)
        return None if saving_ns is None or not base else saving_ns / base

    def worth(self, saving_ns: float | None, on: str = "trace") -> bool:
        share = self.share(saving_ns, on)
        return share is not None and share >= self.rules.min_saving_fraction

    def add(self, fid: str, kind: str, evidence: str, saving_ns: float | None, *,
            ranks: str = "", steps: str = "", stage: str = "", title: str = "",
            severity: str = "", recommendation: str = "", confidence: str = "",
            basis: str = "", on: str = "trace") -> None:
        """One candidate; what it does not say comes from its ``[finding]`` table."""
        saving = None if saving_ns is None else round(saving_ns)
        self.rows.append({
            "id": fid,
            "kind": kind,
            "title": title or self.rules.title(fid, self.work) or fid,
            "severity": severity or self.severity(saving, on),
            "ranks": ranks,
            "steps": steps,
            "stage": stage or self.rules.text(fid, "stage"),
            "evidence": evidence,
            "saving_ns": saving,
            "saving_basis": (basis or self.rules.text(fid, "basis")) if saving is not None else "",
            "measured_on": on,
            "recommendation": recommendation or self.rules.advice(fid, self.work),
            "confidence": confidence or self.rules.text(fid, "confidence") or "medium",
        })


# --- rlperf's own candidates --------------------------------------------------------------------


def _step_times(lazy: Lazy) -> Steps:
    """The analysed steps' wall times (the trace's, or the log's windows in a logs-only run)
    and the log's own step times, warm-up and profiler steps left out (not steady steps)."""
    steps: pl.DataFrame = lazy["steps"]
    on = "log" if steps.height and (steps["source"] == "log").all() else "trace"
    times = (steps["end_ns"] - steps["start_ns"]).cast(pl.Float64)
    log_mean = _log_mean(lazy)
    if times.len() == 0:
        return Steps(0, None, None, on, log_mean, _trace_window(lazy["events"]))
    return Steps(times.len(), _scalar(times.mean()), _scalar(times.median()), on, log_mean)


def _trace_window(events: pl.DataFrame) -> float | None:
    """First to last event of the ranks (the controller and logs left out)."""
    ranked = events.filter(pl.col("rank") >= 0)
    if ranked.height == 0:
        return None
    window = ranked.select(pl.col("end_ns").max() - pl.col("start_ns").min()).item()
    return _scalar(window) or None


def _log_mean(lazy: Lazy) -> float | None:
    log: pl.DataFrame = lazy["log_steps"]
    if log.height == 0 or "wall_s" not in log.columns:
        return None
    outliers: pl.DataFrame = lazy["step_outliers"]
    left_out = outliers.filter(
        (pl.col("source") == "log") & pl.col("kind").is_in(["warmup", "profiler"])
    )["step"]
    steady = log.filter(~pl.col("step").is_in(left_out.implode()))["wall_s"].drop_nulls()
    return _scalar(steady.cast(pl.Float64).mean() * 1e9) if steady.len() else None


def _scalar(value: Any) -> float | None:
    """A polars aggregate as a float (their declared type is every scalar polars has)."""
    return None if value is None else float(value)


def _total(series: pl.Series) -> float:
    return _scalar(series.sum()) or 0.0


def _guidelines(ctx: Context) -> None:
    """Violated guidelines; one whose value is a share of the step that its recommendation
    removes (``[share_saving]``) saves that share of the mean step."""
    violated = ctx.lazy["violations"].filter(pl.col("status") == "violated")
    on = ctx.steps.on
    mean = ctx.steps.base(on)
    for row in violated.iter_rows(named=True):
        share = row["id"] in ctx.rules.share_saving and row["unit"] == "fraction"
        saving = row["value"] * mean if share and mean else None
        ctx.add(
            row["id"], "guideline", row["evidence"], saving,
            ranks="" if row["rank"] is None else str(row["rank"]),
            steps="" if row["step"] is None else str(row["step"]),
            title=row["title"], severity=row["severity"] or "warn",
            recommendation=row["recommendation"] or "",
            confidence="medium" if row.get("heuristic") else "high",
            basis=f"{row['metric']} × the mean step time ({percent(row['value'])} of "
                  f"{duration(mean)}): what removing that share saves",
            on=on,
        )


def _where(frame: pl.DataFrame, column: str, everything: int) -> str:
    """Spans of ``column`` among ``frame``'s rows, empty when they are all ``everything``."""
    values = frame[column].drop_nulls().unique().sort().to_list()
    return "" if len(values) >= everything else spans(values)


def _idle(ctx: Context) -> None:
    """Idle causes: the mean per device and step (device time a fix gives back)."""
    bubbles: pl.DataFrame = ctx.lazy["bubbles"]
    if bubbles.height == 0:
        return
    ctx.staged = True
    steps = bubbles["step"].n_unique()
    by_cause = bubbles.with_columns(pl.col("cause").cast(pl.String)).filter(pl.col("idle_ns") > 0)
    gpus = _gpu_ranks(ctx)
    for cause in IDLE_CAUSES:
        scope = bubbles.filter(pl.col("rank").is_in(gpus.implode())) if cause in HOST_SIDE \
            else bubbles
        devices = scope["rank"].n_unique()
        if devices == 0:
            continue
        window = _total(
            scope.group_by("step", "rank").agg(pl.col("window_ns").first())["window_ns"]
        )
        rows = by_cause.filter(
            (pl.col("cause") == cause) & pl.col("rank").is_in(scope["rank"].implode())
        )
        total = _total(rows["idle_ns"])
        saving = total / (devices * steps)
        if not ctx.worth(saving):
            continue
        evidence = (
            f"{cause} idle = {duration(saving)} per device and step ({percent(total / window)} "
            f"of the device windows; {plural(devices, 'device')}, {plural(steps, 'step')})"
        )
        if cause == "stage_gap" and not ctx.work.controller:
            evidence += _between_stages(ctx, total, devices * steps)
        where = {"ranks": _where(rows, "rank", devices), "steps": _where(rows, "step", steps)}
        if cause == "host_bound":
            _host_bound(ctx, evidence, devices * steps, where)
            continue
        ctx.add(f"bubble.{cause}", "bubble", evidence, saving, **where)
    _pool_wait(ctx, by_cause.filter(pl.col("cause") == "pool_wait"), steps)


def _host_bound(ctx: Context, evidence: str, per: int, where: dict[str, str]) -> None:
    """Host-bound idle saves only the part in which the GPU had nothing launched to run
    (:mod:`queued`); the rest is said. When nothing is left to save, idle before a rank's first
    recorded GPU work (the host ran ahead) is one info finding that says why, without a saving;
    idle with launched work pending is another finding's (a sync, the idle gaps)."""
    runs = ctx.lazy["device_states"].filter(pl.col("cause").cast(pl.String) == "host_bound")
    runs = runs.filter(pl.col("rank").is_in(_gpu_ranks(ctx).implode()))
    wait = queued.split(runs, ctx.lazy["events"], ctx.rules.queue_lag_ns)
    if wait.queued_ns == 0:
        ctx.add("bubble.host_bound", "bubble", evidence, wait.waited_ns / per, **where)
        return
    parts = [f"{duration(pending / per)} with launched work not yet started"
             for pending in [wait.queued_ns - wait.behind_ns] if pending]
    if wait.behind_ns:
        parts.append(f"{duration(wait.behind_ns / per)} before rank {wait.rank}'s first recorded "
                     f"GPU work, which started {duration(wait.lag_ns)} after its launch returned "
                     "(the device's earlier work is not in the trace)")
    said = (f"; {duration(wait.queued_ns / per)} of it not waiting for a launch (the host ran "
            f"ahead of the GPU: not launch overhead): {', '.join(parts)}")
    saving = wait.waited_ns / per
    if not ctx.worth(saving) and not wait.behind_ns:
        return
    if ctx.worth(saving):
        ctx.add("bubble.host_bound", "bubble",
                evidence + said + f"; the GPU waited for a launch {duration(saving)}", saving,
                **where)
        return
    ctx.add("bubble.host_bound", "bubble", evidence + said, None, **where, severity="info",
            title=ctx.rules.text("bubble.host_bound", "title_queued"),
            recommendation=ctx.rules.text("bubble.host_bound", "recommendation_queued"))


def _between_stages(ctx: Context, total: float, per: int) -> str:
    """What a run without a controller does in its stage gaps: no controller recorded, and the
    host range (an annotation that overlaps no stage range, so not a step's) holding most of
    the gap idle."""
    said = (f"; no controller recorded (framework {ctx.work.framework or 'unknown'}, no driver "
            "range)")
    gaps = ctx.lazy["device_states"].filter(pl.col("cause").cast(pl.String) == "stage_gap")
    ranges: pl.DataFrame = ctx.lazy["stage_ranges"]
    notes = ctx.lazy["events"].filter(
        (pl.col("kind") == "annotation") & pl.col("rank").is_in(gaps["rank"].unique().implode())
    ).select("rank", pl.col("name").cast(pl.String), "depth", "start_ns", "end_ns")
    if gaps.height == 0 or notes.height == 0:
        return said
    outside = notes.with_columns(
        intervals.overlap_each(notes, ranges.filter(pl.col("rank") >= 0), ["rank"])
        .alias("_staged"),
        intervals.overlap_each(notes, gaps, ["rank"]).alias("_gap"),
    ).filter((pl.col("_staged") == 0) & (pl.col("_gap") > 0))
    if outside.height == 0:
        return said
    top = outside.group_by("name").agg(pl.col("_gap").sum(), pl.col("depth").min()).sort(
        ["_gap", "depth", "name"], descending=[True, False, False]
    ).row(0, named=True)
    return (said + f"; most of it in {top['name']} ({duration(top['_gap'] / per)} per device "
            f"and step, {percent(top['_gap'] / total)} of this idle)")


def _gpu_ranks(ctx: Context) -> pl.Series:
    """Ranks with device activity: only there is a gap inside a stage a gap between kernels
    (a CPU-only rank's gaps between recorded host ops are its own Python time)."""
    activity: pl.DataFrame = ctx.lazy["activity"]
    return activity.filter(pl.col("kind").is_in(GPU_ACTIVITY_KINDS))["rank"].unique()


def _pool_wait(ctx: Context, waits: pl.DataFrame, steps: int) -> None:
    """Pool wait: each pool's mean wait per device and step; overlapping the pools (what
    one-step-off does) saves the smaller of the two — the busier pool keeps working."""
    pools: pl.DataFrame = ctx.lazy["pools"]
    split = pools.filter(pl.col("pool").cast(pl.String).is_in(["rollout", "train"]))
    if waits.height == 0 or split["pool"].n_unique() < 2:
        return
    per_pool = (
        split.group_by(pl.col("pool").cast(pl.String))
        .agg(pl.col("rank").n_unique().alias("devices"))
        .join(
            waits.join(split.select("rank", pl.col("pool").cast(pl.String)), on="rank")
            .group_by("pool").agg(pl.col("idle_ns").sum()),
            on="pool", how="left",
        )
        .with_columns((pl.col("idle_ns").fill_null(0) / (pl.col("devices") * steps)).alias("mean"))
        .sort("mean")
    )
    saving = per_pool["mean"][0]
    if not ctx.worth(saving):
        return
    waiting = per_pool["pool"][-1]
    parts = [f"{p} pool waits {duration(m)} per device and step"
             for p, m in per_pool.select("pool", "mean").iter_rows()]
    ranks = split.filter(pl.col("pool").cast(pl.String) == waiting)["rank"].sort().to_list()
    ctx.add("bubble.pool_wait", "bubble", "; ".join(parts), saving, ranks=spans(ranks))


def _workdepth(ctx: Context) -> None:
    """The what-if bounds of docs/analyses.md §7, as savings per step (mean over steps)."""
    wd: pl.DataFrame = ctx.lazy["workdepth"]
    if wd.height == 0:
        return
    steps = wd.height
    for fid, column, label in (
        ("workdepth.no_rollout_tail", "no_tail_step_ns", "no rollout tail"),
        ("workdepth.balanced_dp", "balanced_dp_step_ns", "balanced DP"),
    ):
        per_step = wd.select("step", (pl.col("step_ns") - pl.col(column)).alias("saving"))
        saving = _scalar(per_step["saving"].mean())
        if not ctx.worth(saving):
            continue
        worst = per_step.sort("saving", descending=True).row(0)
        ctx.add(
            fid, "what-if",
            f"{label}: the step would be {duration(saving)} shorter "
            f"({duration(_scalar(wd['step_ns'].mean()))} mean step, {plural(steps, 'step')}); "
            f"worst step {worst[0]}: {duration(worst[1])}",
            saving,
            steps=_where(per_step.filter(pl.col("saving") > 0), "step", steps),
        )
    _async_overlap(ctx, wd)


def _async_overlap(ctx: Context, wd: pl.DataFrame) -> None:
    """The async-overlap bound: a saving only where pools are split (colocated stages share
    devices, so overlapping them needs a pool split that changes both stages' times)."""
    bound = wd["async_overlap_bound"].drop_nulls()
    mean_bound = _scalar(bound.mean()) or 1.0
    if mean_bound < 1 + ctx.rules.min_saving_fraction:
        return
    pools: pl.DataFrame = ctx.lazy["pools"]
    split = pools.filter(pl.col("pool").cast(pl.String).is_in(["rollout", "train"]))
    per_step = wd.select(
        (pl.col("step_ns") * (1 - 1 / pl.col("async_overlap_bound"))).alias("saving")
    )["saving"]
    saving = _scalar(per_step.mean()) if split["pool"].n_unique() == 2 else None
    evidence = (f"async-overlap bound = {mean_bound:.2f}× (T_gen + T_train over "
                f"max(T_gen, T_train) on the critical path, mean of {plural(bound.len(), 'step')})")
    if saving is None:
        evidence += "; not a saving here: generation and training share the devices"
    ctx.add("workdepth.async_overlap", "what-if", evidence, saving)


def _weight_sync(ctx: Context) -> None:
    ws: pl.DataFrame = ctx.lazy["weight_sync"]
    if ws.height == 0:
        return
    saving = _scalar(ws["time_ns"].mean())
    if not ctx.worth(saving):
        return
    moved = _scalar(ws["bytes"].mean())
    ctx.add(
        "sync.weight_sync", "sync",
        f"weight sync = {duration(saving)} per step (wall time, union over ranks; "
        f"{percent(_scalar(ws['share'].mean()))} of the step, mean of {plural(ws.height, 'step')}"
        + (f", {moved / 1e6:,.0f} MB moved" if moved else "") + ")",
        saving,
        steps=_where(ws.filter(pl.col("time_ns") > 0), "step", ws.height),
    )


def _stragglers(ctx: Context) -> None:
    """The ranks that made the others wait most: at most four, each with at least half the
    worst one's score."""
    st: pl.DataFrame = ctx.lazy["stragglers"]
    if st.height == 0 or not st["caused_wait_ns"].max():
        return
    worst = st.sort("caused_wait_ns", descending=True)
    top = worst.filter(pl.col("caused_wait_ns") >= worst["caused_wait_ns"][0] / 2).head(4)
    parts = [f"rank {r} caused {duration(w)} of waiting ({n} last arrivals)"
             for r, w, n in top.select("rank", "caused_wait_ns", "last_arrivals").iter_rows()]
    ctx.add("sync.stragglers", "sync", "; ".join(parts) + " over the run", None,
            ranks=spans(top["rank"].sort().to_list()), severity="info")


def _exposed(ctx: Context) -> None:
    """Exposed transfer (exposed collective time minus its sync wait, which is the
    stragglers' finding) per participating device and step: DP/FSDP together (G16's), with
    the world group where it is the DP group (:func:`world_is_dp`), every other dimension on
    its own."""
    waits: pl.DataFrame = ctx.lazy["collective_waits"]
    steps = ctx.steps.count
    if waits.height == 0 or steps == 0:
        return
    dims = waits["dim"].cast(pl.String).drop_nulls().unique().to_list()
    dim = pl.col("dim").cast(pl.String)
    if world_is_dp(dims, ctx.lazy["pools"]["pool"].n_unique()):
        dim = dim.replace("world", "dp")
    calls = waits.filter(
        pl.col("step").is_not_null() & ~pl.col("dim").cast(pl.String).is_in(SKIPPED_DIMS)
    ).with_columns(dim.alias("dim")).with_columns(
        pl.when(pl.col("dim").is_in(UPDATE_DIMS)).then(pl.lit("update"))
        .otherwise(pl.col("dim")).alias("family"),
        (pl.col("exposed_ns") - pl.col("wait_ns")).clip(lower_bound=0).alias("transfer"),
    )
    keys = ["family", "rank", "step"]
    per_device = (
        calls.group_by(keys)
        .agg(pl.col("transfer").sum(), pl.col("exposed_ns").sum())
        .join(union_length(calls, keys, "covered"), on=keys, how="left")
        .with_columns(pl.min_horizontal(c, "covered").alias(c) for c in ("transfer", "exposed_ns"))
    )
    dim_names = calls.group_by("family").agg(
        pl.col("dim").cast(pl.String).unique().sort().str.join("/").alias("dims")
    )
    per = (
        per_device.group_by("family")
        .agg(pl.col("transfer").sum(), pl.col("exposed_ns").sum(),
             pl.col("rank").n_unique().alias("n"))
        .join(dim_names, on="family")
        .sort("family")
    )
    for family, transfer, exposed, n, dims in per.iter_rows():
        saving = transfer / (n * steps)
        if not ctx.worth(saving):
            continue
        fid = "comm.exposed.update" if family == "update" else f"comm.exposed.{family}"
        ctx.add(
            fid, "communication",
            f"{_dimension_words(dims)} collectives: {duration(exposed / (n * steps))} exposed "
            "per rank and step (overlapping calls on a rank counted once), "
            f"of which {duration(saving)} transfer and the rest sync wait "
            f"({plural(n, 'rank')}, {plural(steps, 'step')})",
            saving,
            title=ctx.rules.text(fid, "title")
            or f"{_dimension_words(dims)} communication is not hidden behind compute",
            **{key: ctx.rules.text(fid, key) or ctx.rules.text("comm.exposed", key)
               for key in ("recommendation", "confidence", "basis")},
        )


def _dimension_words(dims: str) -> str:
    """``dp/fsdp`` as a sentence names it: ``DP/FSDP``; ``unknown`` as ``Unattributed``."""
    return "/".join(DIMENSION_WORDS.get(d, d) for d in dims.split("/"))


FAMILIES: tuple[tuple[str, Callable[[Context], None]], ...] = (
    ("guidelines", _guidelines),
    ("idle causes", _idle),
    ("what-if bounds", _workdepth),
    ("weight sync", _weight_sync),
    ("stragglers", _stragglers),
    ("exposed communication", _exposed),
)
"""rlperf's own candidate families, each built on its own (one failing leaves the others)."""


# --- merging and ranking ------------------------------------------------------------------------


def _guarded(what: str, failures: dict[str, Failure], fn: Callable[[], Any]) -> Any:
    """``fn()``, or None with the failure kept when it raises an internal error."""
    try:
        return fn()
    except user_errors():
        raise
    except Exception as exc:
        record(failures, f"findings: {what}", exc)
        return None


def _built(family: Callable[[Context], None], ctx: Context) -> bool:
    family(ctx)
    return True


def _product(lazy: Lazy, name: str) -> pl.DataFrame:
    """Candidate product ``name``, held to the contract."""
    frame = frames.check(lazy[name], frames.FINDING_CANDIDATES, name)
    return frame.select(list(frames.FINDING_CANDIDATES))


def candidates(lazy: Lazy, failures: dict[str, Failure], rules_: Rules, steps: Steps,
               work: Workload | None = None) -> pl.DataFrame:
    """Every candidate (:data:`frames.FINDING_CANDIDATES`): rlperf's own, then each product of
    ``rules_.products`` that some module provides; on a graph-capture trace the idle ones are
    replaced by one finding that says why (:func:`_capture`)."""
    ctx = Context(lazy, steps, rules_, work or Workload())
    for what, family in FAMILIES:
        before = len(ctx.rows)
        if _guarded(what, failures, partial(_built, family, ctx)) is None:
            del ctx.rows[before:]
    parts = [pl.DataFrame(ctx.rows, schema=frames.FINDING_CANDIDATES, orient="row")]
    for name in rules_.products:
        if name not in providers():
            continue
        frame = _guarded(name, failures, partial(_product, lazy, name))
        if frame is not None:
            parts.append(frame.filter(_worth(frame, ctx)))
    found = pl.concat(parts, how="vertical")
    if ctx.staged:
        generic = pl.col("id").is_in(list(rules_.superseded)) & (pl.col("stage") == "")
        found = found.filter(~generic)
    return _capture(found, ctx) if ctx.work.graphs == "capture" else found


def _capture(found: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """A graph-capture trace records capture, not serving: the GPU idle between its launches
    (host-bound, idle gaps, tiny kernels) is what capturing costs once, so those candidates
    give way to one finding that says so and names what was left out (first of those
    without a saving: it says how to read the rest)."""
    drop = pl.col("id").is_in(list(ctx.rules.capture_drops))
    left = [f"{t} ({duration(v)})" if v is not None else t
            for t, v in found.filter(drop).select("title", "saving_ns").iter_rows()]
    cap = ctx.work.capture
    evidence = (
        f"{', '.join(ctx.work.files)}: {plural(cap.get('captured_launches', 0), 'launch')} "
        f"captured into a graph in {plural(cap.get('captures', 0), 'stream capture')}; "
        "captured kernels are not "
        "executed, so the GPU idle between launches measures capture, not serving"
        + (f"; left out: {'; '.join(left)}" if left else "")
    )
    note = Context(ctx.lazy, ctx.steps, ctx.rules, ctx.work)
    note.add("trace.graph_capture", "trace", evidence, None, severity="warn")
    return pl.concat([pl.DataFrame(note.rows, schema=frames.FINDING_CANDIDATES, orient="row"),
                      found.filter(~drop)])


def _worth(frame: pl.DataFrame, ctx: Context) -> pl.Series:
    """A product's candidate stays unless its saving is under the ranking's minimum share of
    the steps it is measured on (one without a saving or a base stays)."""
    share = _fraction(ctx.steps.bases())
    keep = share.is_null() | (share >= ctx.rules.min_saving_fraction)
    return frame.select(keep.alias("keep"))["keep"]


def _fraction(bases: dict[str, float | None]) -> pl.Expr:
    """``saving_ns`` over the mean step of the steps it is measured on (null without one)."""
    base = pl.col("measured_on").replace_strict(
        {on: b if b else None for on, b in bases.items()}, default=None, return_dtype=pl.Float64
    )
    return (pl.col("saving_ns") / base).cast(pl.Float64)


def _merged(rows: list[dict[str, Any]], problem: Problem) -> dict[str, Any]:
    """One finding from the members of one problem (``rows`` in member order)."""
    out = dict(rows[0])
    by_id = {_member(r): r for r in rows}
    source = next((by_id[m] for m in problem.saving_from
                   if m in by_id and by_id[m]["saving_ns"] is not None), None)
    if source is not None:
        out["saving_ns"], out["saving_basis"] = source["saving_ns"], source["saving_basis"]
        out["confidence"], out["measured_on"] = source["confidence"], source["measured_on"]
    whole = [r for r in rows if "@" not in _member(r)]
    for key in ("ranks", "steps", "stage", "recommendation"):
        out[key] = out[key] or next((r[key] for r in whole if r[key]), "")
    judged = [r for r in rows if r["kind"] == "guideline"] or [source or out]
    out["severity"] = max((r["severity"] for r in judged), key=_severity_rank)
    out["evidence"] = "; ".join(dict.fromkeys(r["evidence"] for r in rows if r["evidence"]))
    return out


def _member(row: dict[str, Any]) -> str:
    """How a ``[[problem]]`` names the row: its id, ``id@stage`` for a generic GPU finding
    inside a stage."""
    return f"{row['id']}@{row['stage']}" if row["kind"] == "gpu" and row["stage"] else row["id"]


def _severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def deduplicate(cands: pl.DataFrame, problems: Iterable[Problem]) -> pl.DataFrame:
    """One row per problem: an id seen twice in one stage keeps its first row, and the members
    of one ``[[problem]]`` (each id's first row; a generic GPU finding inside one stage is that
    stage's detail, merged only where a member names it as ``id@stage``) become one finding
    (:func:`_merged`) where the first stood."""
    unique = cands.unique(["id", "stage"], keep="first", maintain_order=True)
    rows = list(unique.iter_rows(named=True))
    index: dict[str, int] = {}
    for i, r in enumerate(rows):
        staged_gpu = r["kind"] == "gpu" and r["stage"]
        index.setdefault(f"{r['id']}@{r['stage']}" if staged_gpu else r["id"], i)
    out: dict[int, dict[str, Any]] = dict(enumerate(rows))
    for problem in problems:
        present = [index[m] for m in problem.members if m in index]
        if len(present) < 2:
            continue
        merged = _merged([rows[i] for i in present], problem)
        for i in present:
            out.pop(i)
        out[min(present)] = merged
    return pl.DataFrame([out[i] for i in sorted(out)], schema=frames.FINDING_CANDIDATES,
                        orient="row")


def same_time(cands: pl.DataFrame, rules_: Rules) -> pl.DataFrame:
    """Candidates whose savings are the same GPU idle time (``[same_time]`` members: host
    blocked in a sync, host-bound gaps, idle gaps) and agree to within ``merge_share`` are one
    finding: a sync that covers the gap leads (it is the cause), else the first member in
    ``members`` order; the others' titles and savings join its evidence."""
    members = rules_.same_time
    rows = list(cands.iter_rows(named=True))
    timed = [i for i, r in enumerate(rows)
             if r["id"] in members and r["saving_ns"] is not None]
    if len(timed) < 2:
        return cands
    top = max(rows[i]["saving_ns"] for i in timed)
    group = [i for i in timed if rows[i]["saving_ns"] >= rules_.same_time_share * top]
    if len(group) < 2:
        return cands
    lead = min(group, key=lambda i: (members.index(rows[i]["id"]), i))
    merged = dict(rows[lead])
    seen = "; ".join(f"{rows[i]['title']} ({duration(rows[i]['saving_ns'])})"
                     for i in group if i != lead)
    merged["evidence"] += f"; the same GPU idle time seen as: {seen} (merged here)"
    merged["severity"] = max((rows[i]["severity"] for i in group), key=_severity_rank)
    keep = [merged if i == lead else r for i, r in enumerate(rows) if i == lead or i not in group]
    return pl.DataFrame(keep, schema=frames.FINDING_CANDIDATES, orient="row")


def overlaps(ranked: pl.DataFrame, rules_: Rules) -> pl.DataFrame:
    """Savings are not additive: a ``[same_time]`` finding ranked under another one with a
    saving counts part of the same GPU idle time, and its evidence says which."""
    member = pl.col("id").is_in(list(rules_.same_time)) & pl.col("saving_ns").is_not_null()
    top = _scalar(ranked.filter(member)["position"].min())
    if top is None:
        return ranked
    first = int(top)
    tail = f"; overlaps finding {first} (the same GPU idle time, counted by another bound)"
    return ranked.with_columns(
        pl.when(member & (pl.col("position") != first))
        .then(pl.col("evidence") + pl.lit(tail)).otherwise("evidence").alias("evidence")
    )


def _whole_trace(cands: pl.DataFrame, steps: Steps) -> pl.DataFrame:
    """Without steps a trace saving is over the whole trace: its basis says so."""
    if steps.count or not steps.whole_ns:
        return cands
    label = f"saving (whole trace, {duration(steps.whole_ns)} window): "
    return cands.with_columns(
        pl.when((pl.col("measured_on") == "trace") & pl.col("saving_ns").is_not_null())
        .then(pl.lit(label) + pl.col("saving_basis")).otherwise("saving_basis")
        .alias("saving_basis")
    )


def rank(cands: pl.DataFrame, bases: dict[str, float | None]) -> pl.DataFrame:
    """:data:`frames.FINDINGS`: by saving, largest first; those without one after, by severity;
    ties in candidate order. ``saving_fraction``: the saving over ``bases`` (the mean step of
    the trace's or the log's steps, as ``measured_on`` says)."""
    severity = pl.col("severity").replace_strict(
        {s: i for i, s in enumerate(SEVERITIES)}, default=-1, return_dtype=pl.Int8
    )
    ranked = (
        cands.with_row_index("_i")
        .with_columns(pl.col("saving_ns").is_null().alias("_none"), severity.alias("_sev"))
        .sort(["_none", "saving_ns", "_sev", "_i"], descending=[False, True, True, False],
              nulls_last=True)
        .with_columns(
            pl.int_range(1, pl.len() + 1, dtype=pl.Int32).alias("position"),
            _fraction(bases).alias("saving_fraction"),
        )
    )
    return ranked.select(pl.col(n).cast(t) for n, t in frames.FINDINGS.items())


def judged(activity: pl.DataFrame, steps: pl.DataFrame, log_steps: pl.DataFrame) -> bool:
    """Whether the inputs hold anything the findings judge, a GPU kernel or a step (of a trace
    or a log): without either, no finding means nothing analysed, not nothing found."""
    kernels = activity.filter(pl.col("kind") == "kernel").height > 0
    return kernels or steps.height > 0 or log_steps.height > 0


@provides("findings", schema=frames.FINDINGS, lazy=(*OWN, *rules().products))
def findings(lazy: Lazy, failures: dict[str, Failure]) -> pl.DataFrame:
    steps = _guarded("step times", failures, lambda: _step_times(lazy)) or Steps(0, None, None)
    work = _guarded("workload", failures, lambda: workload(
        lazy["sources"], lazy["placement"], lazy["profile"], lazy["stage_ranges"],
        rules().controllers)) or Workload()
    found = candidates(lazy, failures, rules(), steps, work)
    merged = same_time(deduplicate(found, rules().problems), rules())
    return overlaps(rank(_whole_trace(merged, steps), steps.bases()), rules())
