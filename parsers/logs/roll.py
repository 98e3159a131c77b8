"""ROLL (alibaba) logs: the stdout tracker's ``metrics_tag: {"step": N, "metrics": {…}}`` lines.

Lines carry ROLL's logger prefix ``[YYYY-MM-DD HH:MM:SS,mmm] [file (line)] [LEVEL] [WORKER r /
w][PID p]``. Timer keys are ``time/*`` (pipeline), ``<domain>/time/*`` (per reward domain) and
``time/<cluster>/<fn>/total`` (workers). ``time/step_total`` holds the **previous** step's total
(``pre_step_total_time``), so it is moved back one step here; the last step has none.
``pipeline step N finished`` lines (or else the ``metrics_tag`` line) anchor steps on the clock.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl

from ..source import ParsedSource
from .lines import LineIssues, is_document, note_ending, open_log, timestamps_ns
from .records import decode_json, record_rows, split_timers
from .timers import finish
from .values import py_step, step_number

FORMAT = "roll-log"
EXTENSIONS: tuple[str, ...] = (".log", ".txt", ".out")

TAG = r"metrics_tag: (?<payload>\{.*?)\s*$"
FINISHED = r"pipeline step (?<step>\d+) finished"
TIMER_KEY = r"(?:^|/)time/"
NOT_TIMERS = r"^system/"
LAGGED_TOTAL = "time/step_total"
PREFIX = r"\[(?<worker>[A-Za-z_][\w-]*) (?<rank>\d+) / (?<world>\d+)\]\[PID (?<pid>\d+)\]"

_SNIFF = re.compile(rb'metrics_tag: \{"step"')


def sniff(head: bytes, path: Path) -> int:
    if is_document(head, path):
        return 0
    return 90 if _SNIFF.search(head) else 0


def _unwrap(data: Any) -> tuple[int | None, dict[str, Any]]:
    if not isinstance(data, dict):
        raise TypeError("not an object")
    step = data.get("step")
    metrics = data.get("metrics", {})
    if step is not None and py_step(step) is None:
        raise ValueError(f"step {str(step)[:24]} is no number in 0…2³¹-1")
    return py_step(step), metrics


def parse(path: Path, source: int = 0) -> ParsedSource:
    out, lines = open_log(path, FORMAT, "roll")
    tags = lines.filter(pl.col("text").str.contains("metrics_tag: ", literal=True)).with_columns(
        pl.col("text").str.extract(TAG, 1).alias("payload"),
        pl.lit(None, dtype=pl.Int32).alias("step"),
    )
    issues = LineIssues()
    issues.add_frame(
        tags.filter(pl.col("payload").is_null()).with_columns(
            pl.lit("no JSON after metrics_tag").alias("problem")
        )
    )
    tags = tags.filter(pl.col("payload").is_not_null())
    rows = record_rows(
        tags.select("line", "step", "payload"), issues, decode=decode_json, unwrap=_unwrap
    )
    issues.report(out)
    is_timer = pl.col("key").str.contains(TIMER_KEY) & ~pl.col("key").str.contains(NOT_TIMERS)
    timers, scalars = split_timers(rows, is_timer)
    lagged = timers.filter(pl.col("name") == LAGGED_TOTAL)
    if lagged.height:
        logged = set(timers["step"].to_list())
        moved = lagged.with_columns((pl.col("step") - 1).alias("step")).filter(
            pl.col("step").is_in(list(logged))
        )
        timers = pl.concat([timers.filter(pl.col("name") != LAGGED_TOTAL), moved])
        out.meta["step_total_shifted"] = (
            f"{LAGGED_TOTAL} is logged one step late; moved back one step"
        )

    workers = (
        lines.select(pl.col("text").str.extract_groups(PREFIX).alias("w")).unnest("w").drop_nulls()
    )
    if workers.height:
        out.meta["workers"] = sorted(set(workers["worker"].to_list()))
        world = workers.group_by("worker").agg(step_number(pl.col("world")).max())
        out.meta["worker_world_sizes"] = dict(world.iter_rows())

    finished = (
        lines.filter(pl.col("text").str.contains("pipeline step ", literal=True))
        .with_columns(
            step_number(pl.col("text").str.extract(FINISHED, 1)).alias("step"),
            timestamps_ns(pl.col("text")).alias("end_ns"),
        )
        .filter(pl.col("step").is_not_null() & pl.col("end_ns").is_not_null())
    )
    tagged = tags.with_columns(timestamps_ns(pl.col("text")).alias("end_ns")).join(
        rows.select("line", "step").unique(), on="line", how="inner", suffix="_r"
    ).select(pl.col("step_r").alias("step"), "end_ns").drop_nulls()
    anchors = pl.concat(
        [finished.select("step", "end_ns"), tagged.select("step", "end_ns")]
    ).unique(subset=["step"], keep="first", maintain_order=True)
    out.meta["time_base"] = (
        "steps end at their 'pipeline step N finished' or metrics_tag stamp (read as UTC); rows "
        "start at the step start"
        if anchors.height
        else "synthetic: steps laid end to end from 0"
    )
    finish(out, timers, scalars, source=source, step_totals=(LAGGED_TOTAL,), anchors=anchors)
    note_ending(out, lines, tags)
    if out.meta["n_steps"] == 0:
        out.warn("no metrics_tag record found")
    return out
