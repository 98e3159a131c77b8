"""What the framework log alone says, step by step."""

from __future__ import annotations

import polars as pl

from ...analyses.logs import log_runs
from ...model.run import Run
from ...model.units import plural
from ..section import Column, Section

TITLE = "From the framework log"


def section(run: Run) -> Section | None:
    summary = run.log_stage_summary
    runs = log_runs(run.sources)
    if summary.height == 0:
        return _no_steps(runs)
    stats = run.log_stats.row(0, named=True) if run.log_stats.height else {}
    dominant = run.log_dominant.row(0, named=True) if run.log_dominant.height else {}
    sync = run.log_weight_sync.row(0, named=True) if run.log_weight_sync.height else {}
    parts = []
    if stats:
        parts.append(
            f"{stats.get('n_steps', '?')} steps{_warmup(stats)}; step time "
            f"median {stats.get('median_s', 0):.3g} s, "
            f"p95 {stats.get('p95_s', 0):.3g} s, {plural(stats.get('n_outliers', 0), 'slow step')}"
        )
    if dominant:
        parts.append(dominant_note(dominant))
    if sync:
        parts.append(
            f"log weight-sync timer share of the log's step time ({sync.get('where')}): "
            f"{100 * sync['share']:.1f}%"
            if sync.get("share") is not None
            else f"log weight-sync timer: {sync.get('note') or sync.get('status')}"
        )
    tail = run.log_long_tail_summary
    if tail.height:
        t = tail.row(0, named=True)
        if t.get("median_max_over_mean") is not None:
            parts.append(
                f"longest response ÷ mean: median {t['median_max_over_mean']:.2f}, max "
                f"{t['max_max_over_mean']:.2f}"
            )
        if t.get("mean_clip_ratio") is not None:
            parts.append(f"clip ratio mean {100 * t['mean_clip_ratio']:.1f}%")
    needs = ", ".join(run.log_needs_trace["analysis"].to_list())
    if needs:
        parts.append(f"needs a trace: {needs}")
    parts += _devices(runs)
    unmapped = unmapped_note(run.log_unclassified, run.profile["detection"].profile.name)
    return Section(
        TITLE,
        summary.sort("share", descending=True),
        columns=_summary_columns(Column),
        note="; ".join(parts + run.log_notes) + (f". {unmapped}" if unmapped else ""),
        key="log_stage_summary",
        details={
            name: run.product(name)
            for name in (
                "log_steps",
                "log_stages",
                "log_stats",
                "log_dominant",
                "log_weight_sync",
                "log_long_tail",
                "log_long_tail_summary",
                "log_unclassified",
                "log_needs_trace",
            )
        }
        | {"log_runs": runs},
    )


def _warmup(stats: dict) -> str:
    """" after warm-up (step 1 excluded: 3.2× the median)" when the log had warm-up steps."""
    if not stats.get("n_warmup"):
        return ""
    ratio = stats.get("warmup_ratio")
    times = f": {ratio:.1f}× the median" if ratio is not None else ""
    return f" after warm-up (step {stats['warmup_steps']} excluded as warm-up{times})"


def dominant_note(dominant: dict) -> str:
    """The dominant stage over the counted steps and, when slow steps name another, the
    dominant stage of a typical step."""
    label = dominant.get("label") or dominant.get("stage")
    said = f"dominant stage: {label} ({100 * (dominant.get('share') or 0):.1f}% of step time)"
    typical = dominant.get("typical_label")
    if typical and typical != label and dominant.get("slow_steps"):
        said += (
            f"; of a typical step: {typical} ({100 * (dominant.get('typical_share') or 0):.1f}%"
            f", slow step {dominant['slow_steps']} left out: see Slow steps)"
        )
    return said


def _no_steps(runs: pl.DataFrame) -> Section | None:
    """A log that recorded no step still gets its section: that it has none, and where the run
    stopped, in every format (the JSON report's ``log_runs`` holds the same)."""
    empty = runs.filter(pl.col("steps").fill_null(0) == 0)
    if empty.height == 0:
        return None
    said = [
        f"{file}: the run recorded no step — {stopped or 'the log has no step record'}"
        for file, stopped in empty.select("file", "stopped_at").iter_rows()
    ]
    return Section(TITLE, None, note="; ".join(said + _devices(runs)), key="log_stage_summary",
                   details={"log_runs": runs})


def _devices(runs: pl.DataFrame) -> list[str]:
    shown = runs.filter(pl.col("device").is_not_null()).select("file", "device").unique()
    return [f"device: {device} ({file})" for file, device in shown.sort("file").iter_rows()]


def unmapped_note(unclassified: pl.DataFrame, profile: str) -> str:
    """Every log timer no rule maps, with its time, and the exact rules that would map it."""
    if unclassified.height == 0:
        return ""
    named = ", ".join(
        f"{name} {seconds:.3f} s over {plural(n, 'step')} (median {median:.3f} s)"
        for name, seconds, n, median in unclassified.select(
            "name", "seconds", "n_steps", "median_s"
        ).iter_rows()
    )
    rules = ", ".join(unclassified["rule"].to_list())
    return (
        f"Unmapped log timers (no rule of the {profile} profile maps them, so they are in no "
        f"stage): {named}. To map them, put these two lines in a TOML file, check the guessed "
        f"stages (a timer nested in another takes relation = \"part\" and parent = \"<that "
        f"timer>\"), and pass it with rlperf analyze --rules FILE: "
        f"profile = {{name = \"{profile}\"}} then rules = [{rules}]"
    )


def _summary_columns(Column) -> list:
    return [
        Column("label", "stage"),
        Column("seconds", "time (s)", "number"),
        Column("share", "share of step time", "percent"),
        Column("median_s", "median per step (s)", "number"),
        Column("p95_s", "p95 per step (s)", "number"),
        Column("n_steps", "steps", "number"),
    ]
