"""AReaL logs: ``StatsLogger`` step headers and their ``fancy_grid`` stats tables.

``areal/utils/stats_logger.py::StatsLogger.commit`` logs (rank 0)
``<YYYYMMDD-HH:MM:SS.mmm> StatsLogger INFO: Epoch e/E Step s/S Train step g/G done.``, then
``Stats (i/n):`` and a box-drawn table (``tabulate(..., tablefmt="fancy_grid", floatfmt=".4e")``)
holding four key/value pairs per row. ``timeperf/<name>`` keys are the stage timers (no step
total exists: the step is the sum of its parts); ``<key>__count`` companions are dropped; all
other keys are per-step metrics. The header stamp (written right after the step) anchors the
step on the wall clock.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from ..source import ParsedSource
from .lines import LineIssues, is_document, note_ending, open_log, timestamps_ns
from .records import split_timers
from .timers import finish
from .values import MAX_STEP, header_step, numbers, step_number

FORMAT = "areal-log"
EXTENSIONS: tuple[str, ...] = (".log", ".txt", ".out")

HEADER = (
    r"Epoch (?<epoch>\d+)/(?<epochs>\d+) Step (?<s>\d+)/(?<S>\d+) Train step "
    r"(?<step>\d+)/(?<steps>\d+) done\."
)
TIMER_KEY = r"^timeperf/"

_SNIFF = re.compile(br"Train step \d+/\d+ done\.")


def sniff(head: bytes, path: Path) -> int:
    if is_document(head, path):
        return 0
    if _SNIFF.search(head):
        return 90 if "│".encode() in head or b"Stats (" in head else 70
    return 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    out, lines = open_log(path, FORMAT, "areal")
    header = pl.col("text").str.extract_groups(HEADER)
    lines = lines.with_columns(
        header.struct.field("step").is_not_null().alias("_header"),
        step_number(header.struct.field("step")).alias("header_step"),
        step_number(header.struct.field("steps")).alias("header_steps"),
    ).with_columns(
        header_step(pl.col("_header"), pl.col("header_step")).alias("step"),
        pl.col("_header").cum_sum().cast(pl.UInt32).alias("record"),
    )
    rows = lines.filter(pl.col("text").str.starts_with("│") & pl.col("step").is_not_null())
    cells = (
        rows.select(
            "line",
            "step",
            "record",
            pl.col("text").str.strip_chars("│ ").str.split("│").alias("cell"),
        )
        .with_columns(pl.col("cell").list.eval(pl.element().str.strip_chars()))
        .with_columns(
            pl.col("cell").list.gather_every(2).alias("key"),
            pl.col("cell").list.gather_every(2, offset=1).alias("raw"),
        )
    )
    uneven = cells.filter(pl.col("key").list.len() != pl.col("raw").list.len())
    pairs = cells.filter(pl.col("key").list.len() == pl.col("raw").list.len()).explode("key", "raw")
    pairs = pairs.filter(pl.col("key").str.len_bytes() > 0)
    pairs = pairs.with_columns(numbers(pairs["raw"]).alias("value"))
    issues = LineIssues()
    issues.add_frame(
        lines.filter(pl.col("_header") & pl.col("header_step").is_null()).with_columns(
            pl.lit(f"step number past {MAX_STEP}; its table is left out").alias("problem")
        ),
        kind="dropped_out_of_range",
    )
    issues.add_frame(
        lines.filter(pl.col("header_step").is_not_null() & pl.col("header_steps").is_null())
        .with_columns(pl.lit(f"total step count past {MAX_STEP}; not used").alias("problem")),
        kind="dropped_out_of_range",
    )
    issues.add_frame(
        uneven.with_columns(pl.lit("table row without key/value pairs").alias("problem"))
    )
    issues.add_frame(
        pairs.filter(pl.col("value").is_null()).with_columns(
            pl.format("value of '{}' is not a number", "key").alias("problem")
        )
    )
    issues.report(out)
    pairs = pairs.filter(pl.col("value").is_not_null() & ~pl.col("key").str.ends_with("__count"))
    timers, scalars = split_timers(pairs, pl.col("key").str.contains(TIMER_KEY))
    headers = lines.filter(pl.col("header_step").is_not_null())
    anchors = headers.select(
        pl.col("header_step").alias("step"), timestamps_ns(pl.col("text")).alias("end_ns")
    ).filter(pl.col("end_ns").is_not_null())
    totals = headers["header_steps"].drop_nulls()
    if totals.len():
        out.meta["total_steps"] = int(totals[-1])
    out.meta["time_base"] = (
        "steps end at the stamp of their 'Train step … done' line (read as UTC); rows start at the "
        "step start"
        if anchors.height
        else "synthetic: steps laid end to end from 0"
    )
    finish(out, timers, scalars, source=source, anchors=anchors)
    note_ending(out, lines, rows)
    if out.meta["n_steps"] == 0:
        out.warn("no stats table found")
    return out
