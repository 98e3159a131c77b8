"""NeMo-RL console logs (``nemo_rl/algorithms/grpo.py``, sync and async GRPO; PPO alike).

Per step: a ``===== Step k/K =====`` header, a ``📊 Training Results:`` block of
``• <label>: <value>`` bullets, then ``⏱️  Timing:`` with ``• Total step time: X.XXs`` and every
timer as ``• <label>: X.XXs (P.P%)`` (sorted by duration), then throughput bullets. Timer labels
are the ``timing/train/<label>`` keys of the trackers (``generation``, ``policy_training``,
``prepare_for_generation/transfer_and_update_weights``; async: ``exposed_generation``,
``weight_sync``, ``idle/buffer_starvation`` …). Bullets outside a timing block are metrics.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from ..source import ParsedSource
from .lines import LineIssues, is_document, note_ending, open_log
from .timers import finish
from .values import MAX_STEP, header_step, numbers, step_number

FORMAT = "nemo-rl-log"
EXTENSIONS: tuple[str, ...] = (".log", ".txt", ".out")

HEADER = r"^=+ Step (?<step>\d+)/(?<steps>\d+) =+\s*$"
BLOCK = r"^\s*(?:\S+\s+)?(?<block>[A-Z][\w /()-]*?):\s*$"
BULLET = r"^\s*•\s*(?<label>.+?):\s+(?<raw>.+?)\s*$"
TIMED = r"^(?<secs>-?[\d.]+(?:e[-+]?\d+)?)s(?:\s+\((?<pct>[\d.]+)%\))?$"
STEP_TOTALS: tuple[str, ...] = ("Total step time",)
ASYNC_LABELS = ("exposed_generation", "weight_sync", "Buffer Size", "Avg Trajectory Age")

_SNIFF = re.compile(rb"(?m)^=+ Step \d+/\d+ =+\s*$")
_TIMING = re.compile(rb"Timing:|Training Results:|Total step time:")


def sniff(head: bytes, path: Path) -> int:
    if is_document(head, path):
        return 0
    if _SNIFF.search(head) and _TIMING.search(head):
        return 90
    return 50 if _SNIFF.search(head) else 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    out, lines = open_log(path, FORMAT, "nemo_rl")
    header = pl.col("text").str.extract_groups(HEADER)
    block = pl.col("text").str.extract(BLOCK, 1)
    lines = lines.with_columns(
        header.struct.field("step").is_not_null().alias("_header"),
        step_number(header.struct.field("step")).alias("header_step"),
        step_number(header.struct.field("steps")).alias("header_steps"),
        pl.when(pl.col("text").str.contains("•", literal=True))
        .then(None)
        .otherwise(block)
        .alias("block"),
    ).with_columns(
        header_step(pl.col("_header"), pl.col("header_step")).alias("step"),
        pl.col("_header").cum_sum().alias("_record"),
        pl.when(pl.col("header_step").is_not_null())
        .then(pl.lit(""))
        .otherwise(pl.col("block"))
        .forward_fill()
        .alias("block"),
    )
    bullets = lines.filter(
        pl.col("text").str.contains("•", literal=True) & pl.col("step").is_not_null()
    )
    bullets = bullets.with_columns(pl.col("text").str.extract_groups(BULLET).alias("b")).unnest("b")
    issues = LineIssues()
    issues.add_frame(
        lines.filter(pl.col("_header") & pl.col("header_step").is_null()).with_columns(
            pl.lit(f"step number past {MAX_STEP}; its block is left out").alias("problem")
        ),
        kind="dropped_out_of_range",
    )
    issues.add_frame(
        bullets.filter(pl.col("label").is_null()).with_columns(
            pl.lit("unreadable bullet").alias("problem")
        )
    )
    bullets = bullets.filter(pl.col("label").is_not_null()).with_columns(
        pl.col("raw").str.extract_groups(TIMED).alias("t")
    ).unnest("t")
    in_timing = pl.col("block").fill_null("").str.contains("Timing") & pl.col("secs").is_not_null()
    timers = bullets.filter(in_timing).select(
        "step", pl.col("label").alias("name"), pl.col("secs").cast(pl.Float64).alias("seconds"),
        pl.col("_record").cast(pl.UInt32).alias("record"),
    )
    others = bullets.filter(~in_timing)
    values = numbers(others["raw"].str.replace(r"\s*(?:s|%|tokens?|GB|TFLOPS?)\s*$", ""))
    scalars = others.with_columns(values.alias("value")).select(
        "step",
        pl.col("label").alias("key"),
        "value",
        pl.col("_record").cast(pl.UInt32).alias("record"),
    )
    issues.add_frame(
        others.filter(values.is_null()).with_columns(
            pl.lit("bullet value is not a number").alias("problem")
        )
    )
    scalars = scalars.filter(pl.col("value").is_not_null())
    issues.report(out)
    totals = lines["header_steps"].drop_nulls()
    if totals.len():
        out.meta["total_steps"] = int(totals[-1])
    labels = set(timers["name"].to_list()) | set(scalars["key"].to_list())
    if labels & set(ASYNC_LABELS):
        out.meta["execution"] = "async"
    out.meta["time_base"] = "synthetic: steps laid end to end from 0 (the console records no time)"
    finish(out, timers, scalars, source=source, step_totals=STEP_TOTALS)
    note_ending(out, lines, bullets)
    if out.meta["n_steps"] == 0:
        out.warn("no step block found")
    return out
