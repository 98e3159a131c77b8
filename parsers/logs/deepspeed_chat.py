"""DeepSpeed-Chat step-3 (PPO) training logs, in both printed grammars.

2023 (``training_log_output/*.log``): ``epoch: e|step: s|ppo_ep: p|act_loss: …|cri_loss: …|
unsuper_loss: …``, ``average reward score: …`` and
``|E2E latency=…s |Gather latency=…s (x%) |Generate time=…s (x%) |Training time=…s (x%) |Others=…
(x%)|CurSamplesPerSec=… |AvgSamplesPerSec=…``.

Current (``dschat/utils/perf.py::print_throughput_step3``): ``Epoch: e | Step: s | PPO Epoch: p |
Actor Loss: … | Critic Loss: … | Unsupervised Loss: …``, then ``End-to-End => Latency: …s,
TFLOPs: …, Samples/sec: …, Time/seq …s, Batch Size: …, Total Seq. Length: …``,
``Generation => Latency: …s, Per-token Latency … ms, TFLOPs: …, BW: … GB/sec, Answer Seq.
Length: …``, ``Training   => Latency: …s, TFLOPs: …``.

Timing lines follow the loss line of their step. Steps restart at 0 every epoch; they are
numbered on across epochs. The ``cmd = deepspeed main.py …`` line gives the run's flags.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import polars as pl

from ..source import ParsedSource
from .lines import LineIssues, is_document, note_ending, open_log, timestamps_ns
from .records import split_timers
from .timers import finish
from .values import MAX_STEP, header_step, numbers, step_number

FORMAT = "deepspeed-chat-log"
EXTENSIONS: tuple[str, ...] = (".log", ".txt", ".out")

HEADER_2023 = r"^epoch: (?<epoch>\d+)\|step: (?<s>\d+)\|ppo_ep: (?<ppo>\d+)\|(?<losses>.*)$"
HEADER_NOW = r"^Epoch: (?<epoch>\d+) \| Step: (?<s>\d+) \| PPO Epoch: (?<ppo>\d+) \|(?<losses>.*)$"
LATENCY_2023 = r"\|\s*(?<key>[A-Za-z0-9 ]+?)=(?<raw>-?[\d.]+)(?<unit>s?)"
LATENCY_NOW = r"^(?<phase>End-to-End|Generation|Training)\s+=>\s+(?<rest>.*)$"
NOW_ITEM = r"(?<key>[A-Za-z/. -]+?)(?::\s*|\s+)(?<raw>-?[\d.]+)\s*(?<unit>s|ms|GB/sec)?(?:,|$)"
STEP_TOTALS: tuple[str, ...] = ("E2E latency", "End-to-End => Latency")
TIMERS_2023 = ("E2E latency", "Gather latency", "Generate time", "Training time", "Others")

_SNIFF = re.compile(
    rb"(?m)^(?:epoch: \d+\|step: \d+\|ppo_ep: \d|\|E2E latency=\d|End-to-End => Latency: \d|Epoch: "
    rb"\d+ \| Step: \d+ \| PPO Epoch: \d)"
)


def sniff(head: bytes, path: Path) -> int:
    if is_document(head, path):
        return 0
    return 90 if _SNIFF.search(head) else 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    out, lines = open_log(path, FORMAT, "deepspeed_chat")
    old, now = (
        pl.col("text").str.extract_groups(HEADER_2023),
        pl.col("text").str.extract_groups(HEADER_NOW),
    )
    lines = lines.with_columns(
        pl.coalesce(old.struct.field(f), now.struct.field(f)).alias(f)
        for f in ("epoch", "s", "ppo", "losses")
    ).with_columns(
        pl.col("s").is_not_null().alias("_header"),
        *(step_number(pl.col(c)).cast(pl.Int64).alias(c) for c in ("epoch", "s", "ppo")),
    )
    heads = lines.filter(pl.col("s").is_not_null() & pl.col("epoch").is_not_null())
    per_epoch = heads.group_by("epoch").agg((pl.col("s").max() + 1).alias("n")).sort("epoch")
    per_epoch = per_epoch.with_columns(pl.col("n").cum_sum().shift(1, fill_value=0).alias("offset"))
    lines = lines.join(per_epoch.select("epoch", "offset"), on="epoch", how="left").sort("line")
    lines = lines.with_columns(
        header_step(pl.col("_header"), step_number(pl.col("s") + pl.col("offset"))).alias("step"),
        pl.when(pl.col("_header")).then(pl.col("line")).forward_fill().alias("record"),
    )
    issues = LineIssues()
    issues.add_frame(
        lines.filter(pl.col("_header") & pl.col("step").is_null()).with_columns(
            pl.lit(
                f"epoch or step past {MAX_STEP} (numbered on across epochs); its step is left out"
            ).alias("problem")
        ),
        kind="dropped_out_of_range",
    )
    in_step = lines.filter(pl.col("step").is_not_null())

    items = [_losses(in_step), _latency_2023(in_step), _latency_now(in_step), _rewards(in_step)]
    rows = (
        pl.concat([i for i in items if i.height], how="vertical")
        if any(i.height for i in items)
        else None
    )
    if rows is None:
        rows = pl.DataFrame(
            schema={
                "step": pl.Int32,
                "line": pl.UInt32,
                "record": pl.UInt32,
                "key": pl.String,
                "raw": pl.String,
                "unit": pl.String,
            }
        )
    rows = rows.with_columns(numbers(rows["raw"]).alias("value"))
    issues.add_frame(rows.filter(pl.col("value").is_null()).with_columns(
        pl.format("'{}' is not a number", "raw").alias("problem")))
    rows = rows.filter(pl.col("value").is_not_null()).with_columns(
        pl.when(pl.col("unit") == "ms")
        .then(pl.col("value") / 1000)
        .otherwise(pl.col("value"))
        .alias("value")
    )
    issues.report(out)
    is_timer = pl.col("key").is_in(list(TIMERS_2023)) | pl.col("key").str.ends_with("=> Latency")
    timers, scalars = split_timers(rows, is_timer)
    _meta(out, lines)
    stamps = (
        lines.filter(pl.col("text").str.starts_with("[20"))
        .select(timestamps_ns(pl.col("text")).alias("ns"))
        .drop_nulls()
    )
    base = int(stamps["ns"][0]) if stamps.height else 0
    out.meta["time_base"] = (
        "synthetic: steps laid end to end from the first DeepSpeed stamp (read as UTC)"
        if stamps.height
        else "synthetic: steps laid end to end from 0"
    )
    finish(out, timers, scalars, source=source, step_totals=STEP_TOTALS, base_ns=base)
    last = in_step.filter(pl.col("text").str.contains(r"latency=|=> Latency"))
    note_ending(out, lines, last)
    if out.meta["n_steps"] == 0:
        out.warn("no step line found")
    logged = lines.filter(pl.col("s").is_not_null())["step"].n_unique()
    missing = logged - timers["step"].n_unique()
    if timers.height and missing > 0:
        steps = f"{missing} step has" if missing == 1 else f"{missing} steps have"
        out.warn(f"{steps} a loss line but no latency line (the log ends before it)")
    return out


def _losses(frame: pl.DataFrame) -> pl.DataFrame:
    return _named_values(frame.filter(pl.col("losses").is_not_null()), pl.col("losses"))


def _named_values(found: pl.DataFrame, text: pl.Expr, lower: bool = False) -> pl.DataFrame:
    """``key: value`` items of a ``|``-separated line."""
    key = pl.col("key").str.strip_chars()
    return (
        found.select("step", "line", "record", text.str.split("|").alias("item"))
        .explode("item")
        .with_columns(pl.col("item").str.splitn(":", 2).struct.rename_fields(["key", "raw"]))
        .unnest("item")
        .filter(pl.col("raw").is_not_null())
        .select("step", "line", "record", key.str.to_lowercase() if lower else key,
                pl.col("raw").str.strip_chars(), pl.lit("").alias("unit"))
    )


def _latency_2023(frame: pl.DataFrame) -> pl.DataFrame:
    found = frame.filter(pl.col("text").str.starts_with("|E2E latency="))
    return (
        found.select(
            "step", "line", "record", pl.col("text").str.extract_all(LATENCY_2023).alias("item")
        )
        .explode("item")
        .with_columns(pl.col("item").str.extract_groups(LATENCY_2023).alias("g"))
        .unnest("g")
        .select("step", "line", "record", "key", "raw", "unit")
    )


def _latency_now(frame: pl.DataFrame) -> pl.DataFrame:
    found = frame.filter(pl.col("text").str.contains(r"^(?:End-to-End|Generation|Training)\s+=>"))
    found = found.with_columns(pl.col("text").str.extract_groups(LATENCY_NOW).alias("g")).unnest(
        "g"
    )
    items = (
        found.select(
            "step",
            "line",
            "record",
            "phase",
            pl.col("rest").str.extract_all(NOW_ITEM).alias("item"),
        )
        .explode("item")
        .with_columns(pl.col("item").str.extract_groups(NOW_ITEM).alias("g"))
        .unnest("g")
        .with_columns(pl.col("key").str.strip_chars())
    )
    return items.select(
        "step", "line", "record",
        pl.when(pl.col("key") == "Latency")
        .then(pl.format("{} => Latency", "phase"))
        .otherwise(pl.format("{} {}", "phase", "key"))
        .alias("key"),
        "raw",
        pl.col("unit").fill_null(""),
    )


def _rewards(frame: pl.DataFrame) -> pl.DataFrame:
    found = frame.filter(pl.col("text").str.contains(r"(?i)^(?:average|ema) reward score"))
    return _named_values(found, pl.col("text"), lower=True)


def _meta(out: ParsedSource, lines: pl.DataFrame) -> None:
    cmd = lines.filter(pl.col("text").str.starts_with("cmd = "))
    if cmd.height:
        try:
            words = shlex.split(cmd["text"][0][len("cmd = "):])
        except ValueError:
            words = cmd["text"][0].split()
        flags: dict[str, object] = {}
        for i, word in enumerate(words):
            if not word.startswith("--"):
                continue
            nxt = words[i + 1] if i + 1 < len(words) else None
            flags[word[2:]] = True if nxt is None or nxt.startswith("--") else nxt
        out.meta["config"] = flags
        out.meta["hybrid_engine"] = bool(flags.get("enable_hybrid_engine"))
        if out.meta["hybrid_engine"]:
            out.meta["placement"] = "colocated"
        for flag, fact in (
            ("max_answer_seq_len", "max_response_length"),
            ("max_prompt_seq_len", "max_prompt_length"),
            ("actor_model_name_or_path", "actor_model"),
            ("critic_model_name_or_path", "critic_model"),
        ):
            if flag in flags:
                out.meta[fact] = flags[flag]
        out.meta["algorithm"] = "ppo"
    exits = lines.filter(
        pl.col("text").str.contains(r"launch\.py:\d+:main\] Process \d+ exits successfully")
    )
    if exits.height:
        out.meta["world_size"] = exits.height
