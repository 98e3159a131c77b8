"""OpenRLHF training logs.

Three generations of per-step output:

- ≥ v0.8: ``✨ Global step N: {python dict}`` from ``PPOTrainer.fit`` (the async trainer prints
  the same without ✨); from v0.10 the dict carries ``timing/{generation,make_experience,
  ppo_train,broadcast,step_total}``; before v0.10 it has no timing keys;
- ``✨ Experience making completed in H:MM:SS`` and ``✨ Evaluation completed in H:MM:SS,
  global_step N, …`` lines, the only durations older versions print;
- ≤ v0.8: only the tqdm ``Episode [e/E]`` bar, whose postfix holds the step's metrics.

Stamps are ``MM-DD HH:MM:SS`` without a year, so rows are laid end to end (synthetic time).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from ..events import as_int
from ..source import ParsedSource
from .lines import LineIssues, is_document, open_log
from .records import record_rows, split_timers
from .timers import finish
from .values import MAX_STEP, hms_seconds, numbers, step_number

FORMAT = "openrlhf-log"
EXTENSIONS: tuple[str, ...] = (".log", ".txt", ".out")

GLOBAL_STEP = r"(?<sparkle>✨\s*)?Global step (?<step>\d+): (?<payload>\{.*?)\s*$"
EXPERIENCE = r"Experience making completed in (?<hms>[\d:., days]+?)\s*$"
EVALUATION = r"Evaluation completed in (?<hms>[\d:., days]+?), global_step (?<step>\d+)"
EPISODE = (
    r"Episode \[(?<episode>\d+)/(?<episodes>\d+)\]:\s*\d+%\|[^|]*\|\s*(?<n>\d+)/(?<total>\d+)\s*"
    r"\[(?<postfix>[^\]]*)\]"
)
TIMER_KEY = r"^timing/"
STEP_TOTALS: tuple[str, ...] = ("timing/step_total",)
EXPERIENCE_NAME = "Experience making"
EVALUATION_NAME = "Evaluation"

_SNIFF = re.compile(
    rb"Global step \d+: \{|Experience making completed in|Episode "
    rb"\[\d+/\d+\]:.*(?:policy_loss|act_loss)="
)


def sniff(head: bytes, path: Path) -> int:
    if is_document(head, path):
        return 0
    return 90 if _SNIFF.search(head) else 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    out, lines = open_log(path, FORMAT, "openrlhf")
    issues = LineIssues()

    dict_lines = (
        lines.filter(pl.col("text").str.contains("Global step ", literal=True))
        .with_columns(pl.col("text").str.extract_groups(GLOBAL_STEP).alias("g"))
        .unnest("g")
        .filter(pl.col("payload").is_not_null())
    )
    dict_lines = _numbered(
        out, issues, dict_lines.with_columns(step_number(pl.col("step")).alias("_step"))
    )
    records = dict_lines.select("line", "step", "payload")
    rows = record_rows(records, issues)
    timers, scalars = split_timers(rows, pl.col("key").str.contains(TIMER_KEY))
    if dict_lines.height:
        sparkled = dict_lines["sparkle"].is_not_null()
        out.meta["trainer"] = "async" if not sparkled.any() else "sync"
        if not sparkled.any():
            out.meta["execution"] = "async"
        out.meta["has_timing_keys"] = timers.height > 0

    line_timers = _duration_lines(lines, dict_lines)
    timers = pl.concat([timers, line_timers], how="vertical")
    if dict_lines.height == 0:
        scalars = pl.concat([scalars, _episode_bars(lines)], how="vertical")
    _meta(out, lines)
    issues.report(out)
    out.meta["time_base"] = "synthetic: steps laid end to end from 0 (stamps carry no year)"
    finish(out, timers, scalars, source=source, step_totals=STEP_TOTALS)
    if out.meta["n_steps"] == 0:
        out.warn("no step record found")
    return out


def _duration_lines(lines: pl.DataFrame, dict_lines: pl.DataFrame) -> pl.DataFrame:
    """``Experience making`` (attached to the step it feeds: the next ``Global step`` line, or
    the count of such lines when the log has no step dicts) and ``Evaluation`` durations."""
    schema = pl.Schema(
        {"step": pl.Int32, "name": pl.String, "seconds": pl.Float64, "record": pl.UInt32}
    )
    exp = lines.filter(pl.col("text").str.contains("Experience making completed in", literal=True))
    exp = exp.with_columns(pl.col("text").str.extract(EXPERIENCE, 1).alias("hms"))
    if exp.height:
        exp = exp.sort("line")
        steps = dict_lines.select("line", pl.col("step").cast(pl.Int32).alias("next")).sort("line")
        if steps.height:
            after_last = as_int(steps["next"].max())
            exp = exp.join_asof(steps, on="line", strategy="forward")
            beyond = exp["next"].is_null().cast(pl.Int32).cum_sum() + after_last
            exp = exp.with_columns(pl.coalesce(pl.col("next"), beyond).alias("step"))
        else:
            exp = exp.with_row_index("step", offset=1)
    ev = (
        lines.filter(pl.col("text").str.contains("Evaluation completed in", literal=True))
        .with_columns(pl.col("text").str.extract_groups(EVALUATION).alias("g"))
        .unnest("g")
        .with_columns(step_number(pl.col("step")))
    )
    parts = []
    for frame, name in ((exp, EXPERIENCE_NAME), (ev, EVALUATION_NAME)):
        if frame.height == 0:
            continue
        seconds = [hms_seconds(t) if t else None for t in frame["hms"].to_list()]
        parts.append(
            frame.select(
                pl.col("step").cast(pl.Int32),
                pl.lit(name).alias("name"),
                pl.Series("seconds", seconds, dtype=pl.Float64),
                pl.col("line").alias("record"),
            ).filter(pl.col("step").is_not_null())
        )
    return pl.concat(parts, how="vertical").cast(schema) if parts else pl.DataFrame(schema=schema)


def _episode_bars(lines: pl.DataFrame) -> pl.DataFrame:
    """Metrics from the last redraw of the ``Episode`` bar at each step: the postfix
    ``key=value`` pairs and tqdm's seconds per step."""
    schema = pl.Schema(
        {"step": pl.Int32, "key": pl.String, "value": pl.Float64, "record": pl.UInt32}
    )
    bars = lines.filter(pl.col("text").str.contains("Episode [", literal=True)).with_columns(
        pl.col("text").str.extract_groups(EPISODE).alias("g")
    ).unnest("g").filter(pl.col("n").is_not_null())
    if bars.height == 0:
        return pl.DataFrame(schema=schema)
    episode, total, n = (step_number(pl.col(c)).cast(pl.Int64) for c in ("episode", "total", "n"))
    bars = bars.with_columns(
        step_number((episode - 1) * total + n).alias("step")
    ).filter(pl.col("step") > 0).unique(subset=["step"], keep="last", maintain_order=True)
    pairs = (
        bars.select("step", "line", pl.col("postfix").str.split(",").alias("item"))
        .explode("item")
        .with_columns(pl.col("item").str.strip_chars())
    )
    rate = pairs.filter(pl.col("item").str.contains(r"^[\d.]+(?:s/it|it/s)$")).select(
        "step",
        pl.lit("tqdm/seconds_per_step").alias("key"),
        pl.when(pl.col("item").str.ends_with("s/it"))
        .then(pl.col("item").str.extract(r"^([\d.]+)", 1).cast(pl.Float64, strict=False))
        .otherwise(1.0 / pl.col("item").str.extract(r"^([\d.]+)", 1).cast(pl.Float64, strict=False))
        .alias("value"),
        pl.col("line").alias("record"),
    )
    kv = pairs.filter(pl.col("item").str.contains("=", literal=True)).with_columns(
        pl.col("item").str.splitn("=", 2).struct.rename_fields(["key", "raw"])
    ).unnest("item")
    kv = kv.select("step", "key", numbers(kv["raw"]).alias("value"), pl.col("line").alias("record"))
    return pl.concat([rate, kv], how="vertical").cast(schema)


def _numbered(out: ParsedSource, issues: LineIssues, lines: pl.DataFrame) -> pl.DataFrame:
    """``lines`` whose ``_step`` (the checked ``step``) is usable, as ``step``; the rest counted."""
    bad = lines.filter(pl.col("_step").is_null())
    problem = pl.format(f"step {{}} is past {MAX_STEP}", pl.col("step").str.slice(0, 24))
    issues.add_frame(bad.with_columns(problem.alias("problem")), kind="dropped_out_of_range")
    return (
        lines.filter(pl.col("_step").is_not_null())
        .with_columns(pl.col("_step").alias("step"))
        .drop("_step")
    )


def _meta(out: ParsedSource, lines: pl.DataFrame) -> None:
    actors = sorted(set(lines["actor"].drop_nulls().to_list()))
    if actors:
        out.meta["ray_actors"] = actors
    group = lines.filter(pl.col("text").str.contains("group_name=openrlhf", literal=True))
    if group.height:
        out.meta["weight_sync"] = "nccl broadcast (process group 'openrlhf')"
    ipc = lines.filter(pl.col("text").str.contains("cuda_ipc|update_weight_cuda_ipc"))
    if ipc.height:
        out.meta["weight_sync"] = "cuda ipc (colocated)"
        out.meta["placement"] = "colocated"
