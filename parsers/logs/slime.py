"""slime logs: ``perf N: {…}``, ``rollout N: {…}`` and ``step k: {…}`` dict lines.

Each rollout id N is logged in pieces: the rollout manager's ``perf N`` (``perf/rollout_time``,
token throughput), ``rollout N`` (sample statistics), one ``step k`` per optimizer step
(``train/*``), then the trainer's own ``perf N`` (``perf/{train_wait,log_probs,ref_log_probs,
actor_train,train,update_weights,step}_time``). The two ``perf N`` lines are merged by N; values
may print as ``np.float64(…)``. Lines carry ``[YYYY-MM-DD HH:MM:SS]`` stamps, so the trainer's
``perf N`` line (written when the step ends) anchors each step on the wall clock.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from ..source import ParsedSource
from .lines import LineIssues, is_document, note_ending, open_log, timestamps_ns
from .records import record_rows, split_timers
from .timers import finish
from .values import MAX_STEP, header_step, step_number

FORMAT = "slime-log"
EXTENSIONS: tuple[str, ...] = (".log", ".txt", ".out")

RECORD = r"\b(?<kind>perf|rollout|step) (?<id>\d+): (?<payload>\{.*?)\s*$"
TIMER_KEY = r"^perf/\w+_time$"
STEP_TOTALS: tuple[str, ...] = ("perf/step_time",)

_SNIFF = re.compile(rb"\bperf \d+: \{'(?:perf|rollout)/")


def sniff(head: bytes, path: Path) -> int:
    if is_document(head, path):
        return 0
    return 90 if _SNIFF.search(head) else 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    out, lines = open_log(path, FORMAT, "slime")
    found = (
        lines.filter(pl.col("text").str.contains(r"\b(?:perf|rollout|step) \d+: "))
        .with_columns(pl.col("text").str.extract_groups(RECORD).alias("r"))
        .unnest("r")
        .filter(pl.col("payload").is_not_null())
    )
    found = found.with_columns(step_number(pl.col("id")).alias("_id")).with_columns(
        header_step(pl.col("kind") != "step", pl.col("_id")).alias("step")
    )
    issues = LineIssues()
    issues.add_frame(
        found.filter(pl.col("_id").is_null()).with_columns(
            pl.format(
                f"{{}} number {{}} is past {MAX_STEP}", "kind", pl.col("id").str.slice(0, 24)
            ).alias("problem")
        ),
        kind="dropped_out_of_range",
    )
    found = found.filter(pl.col("_id").is_not_null()).with_columns(pl.col("_id").alias("id"))
    rollouts = found.filter(pl.col("kind") != "step")
    rows = record_rows(rollouts.select("line", "step", "payload"), issues)
    train = found.filter((pl.col("kind") == "step") & pl.col("step").is_not_null())
    train_rows = record_rows(train.select("line", "step", "payload"), issues)
    train_rows = train_rows.unique(
        subset=["step", "key"], keep="last", maintain_order=True
    ).with_columns(pl.lit(0, dtype=pl.UInt32).alias("record"))
    issues.report(out)
    timers, scalars = split_timers(
        pl.concat([rows, train_rows]), pl.col("key").str.contains(TIMER_KEY)
    )
    if train.height:
        out.meta["train_steps_per_rollout"] = round(
            train.height / max(train["step"].n_unique(), 1), 2
        )

    anchor_lines = rows.filter(pl.col("key").is_in(list(STEP_TOTALS))).select("step", "line")
    anchors = (
        anchor_lines.join(lines.select("line", "text"), on="line", how="left")
        .with_columns(timestamps_ns(pl.col("text")).alias("end_ns"))
        .filter(pl.col("end_ns").is_not_null())
        .unique(subset=["step"], keep="last")
        .select("step", "end_ns")
    )
    if anchors.height:
        out.meta["time_base"] = (
            "steps end at the stamp of their trainer perf line (read as UTC); rows start at the "
            "step start"
        )
    else:
        out.meta["time_base"] = "synthetic: steps laid end to end from 0"
    finish(
        out,
        timers,
        scalars,
        source=source,
        step_totals=STEP_TOTALS,
        anchors=anchors,
        unit="rollout",
    )
    note_ending(out, lines, found)
    if out.meta["n_steps"] == 0:
        out.warn("no perf record found")
    return out
