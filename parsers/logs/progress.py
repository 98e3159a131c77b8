"""tqdm progress bars, and where a log that recorded no step stopped.

Training loops draw a tqdm bar (verl ``Training Progress``, the Hugging Face ``Trainer`` bar of
TRL) and redraw it with ``\\r``; :func:`lines.lines_frame` turns each redraw into a row. A bar
says how far the loop got (``n/total``), how long it had run (``elapsed``) and its rate
(``s/it`` or ``it/s``, tqdm's smoothed estimate). A run that dies or hangs before its first
step record leaves no step: :func:`stop_point` says where it stopped instead, skipping the
compiler and runtime chatter (XLA, TPU, CUDA C++ logging) that such logs end with.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ..events import as_int

BAR = (
    r"^\s*(?:(?<label>[^|%\r]*?):\s*)?(?<pct>\d{1,3})%\|[^|]*\|\s*(?<n>\d+)/(?<total>\d+)\s*"
    r"\[(?<elapsed>[\d:]+)<(?<remaining>[^,\]]*)(?:,\s*(?<rate>[\d.]+|\?)\s*(?<unit>s/it|it/s))?"
)
"""One tqdm redraw: ``Training Progress:   0%|          | 0/58 [07:16<?, ?it/s]``."""
BAR_SCHEMA = pl.Schema({
    "line": pl.UInt32(), "label": pl.String(), "n": pl.Int64(), "total": pl.Int64(),
    "elapsed_s": pl.Float64(), "s_per_it": pl.Float64(),
})

NOISE = (
    r"^\s*$"
    r"|\S\.(?:cc|cpp|cxx|c|h|hpp):\d+\]"  # C++ runtime logging (glog, absl: XLA, TPU, CUDA)
    r"|^\s*\d{1,3}%\|"  # a bare tqdm redraw
    r"|^\s*\^+\s*$"  # a traceback's caret markers
    r"|^Set the environment variable HYDRA_FULL_ERROR|^Error executing job with overrides"
)
"""Lines that say nothing about where a run is: blank, C++ runtime logging, bare bar redraws."""

LOOP_START = r"Training from scratch|Load from checkpoint|Resuming from|Training Progress"
"""verl's driver prints these as its training loop starts."""
PHASES: tuple[tuple[str, str], ...] = (
    ("checkpoint", r"(?i)sav(e|ing)[ _]checkpoint"),
    ("validation", r"(?i)validation|val_before_train|test_gen"),
    ("actor update", r"(?i)update_actor|update_policy"),
    ("reward", r"(?i)reward_manager|reward_score|compute_score|reward_fn"),
    ("log-prob forward", r"(?i)compute_(ref_)?log_prob"),
    (
        "rollout",
        r"(?i)generate_sequences|sampling_?params|kwargs: \{'n':|'max_tokens'|processed prompts"
        r"|agent_loop|rollout",
    ),
)
"""What the run was doing, by the last line that names it (first matching phase wins per line)."""
SHOWN_CHARS = 100


def bars(lines: pl.DataFrame) -> pl.DataFrame:
    """Every tqdm redraw in ``lines``: its line (and ``pos``, the row, when ``lines`` has one: a
    ``\\r``-joined line holds many redraws), label, ``n/total``, elapsed seconds and seconds per
    iteration (null while tqdm shows ``?``)."""
    keep = [c for c in ("pos",) if c in lines.columns]
    found = lines.filter(pl.col("text").str.contains(BAR)).select(
        "line", *keep, pl.col("text").str.extract_groups(BAR).alias("bar")
    ).unnest("bar")
    if found.height == 0:
        return pl.DataFrame(schema=BAR_SCHEMA).with_columns(
            [pl.lit(None, dtype=lines.schema[c]).alias(c) for c in keep]
        )
    rate = pl.col("rate").cast(pl.Float64, strict=False)
    return found.select(
        "line",
        *keep,
        pl.col("label").str.strip_chars(),
        pl.col("n").cast(pl.Int64, strict=False),
        pl.col("total").cast(pl.Int64, strict=False),
        clock_seconds(pl.col("elapsed")).alias("elapsed_s"),
        pl.when(pl.col("unit") == "s/it")
        .then(rate)
        .when((pl.col("unit") == "it/s") & (rate > 0))
        .then(1.0 / rate)
        .alias("s_per_it"),
    ).cast(pl.Schema({**dict(BAR_SCHEMA), **{c: lines.schema[c] for c in keep}}))


def clock_seconds(text: pl.Expr) -> pl.Expr:
    """``MM:SS`` or ``H:MM:SS`` (tqdm's elapsed) in seconds; null for anything else."""
    parts = text.str.extract_groups(r"^(?:(?<h>\d+):)?(?<m>\d+):(?<s>\d{2})$")
    h = parts.struct.field("h").cast(pl.Float64, strict=False).fill_null(0.0)
    m = parts.struct.field("m").cast(pl.Float64, strict=False)
    s = parts.struct.field("s").cast(pl.Float64, strict=False)
    return h * 3600 + m * 60 + s


def stop_point(lines: pl.DataFrame) -> dict[str, Any]:
    """Where a log with no step record stopped: its last meaningful line, the training-loop bar
    (if one was drawn), the phase, and one sentence saying all of it (``description``)."""
    meaningful = lines.filter(
        ~pl.col("text").str.contains(NOISE) & ~pl.col("text").str.contains(BAR)
    )
    drawn = bars(lines)
    where: dict[str, Any] = {}
    if meaningful.height:
        line, text, actor = meaningful.select("line", "text", "actor").row(-1)
        where.update(line=int(line), text=_shown(text.strip()), actor=actor)
    loop = bars_of_loop(drawn)
    if loop.height:
        last = loop.row(-1, named=True)
        where["progress"] = {k: last[k] for k in ("line", "label", "n", "total", "elapsed_s")}
    started = lines.filter(pl.col("text").str.contains(LOOP_START))
    start_line = as_int(started["line"].min()) if started.height else None
    where["phase"] = _phase(meaningful, start_line)
    where["description"] = describe(where)
    return where


def bars_of_loop(drawn: pl.DataFrame) -> pl.DataFrame:
    """The redraws of the training loop's bar: those with the label (and total) redrawn most
    often, so an engine's per-batch bars (``Processed prompts``) are not taken for it."""
    if drawn.height == 0:
        return drawn
    main = (
        drawn.group_by("label", "total")
        .agg(pl.len().alias("_n"), pl.col("line").min().alias("_first"))
        .sort(["_n", "_first"], descending=[True, False])
        .row(0, named=True)
    )
    return drawn.filter(
        pl.col("label").eq_missing(main["label"]) & (pl.col("total") == main["total"])
    )


def _phase(meaningful: pl.DataFrame, start_line: int | None) -> str:
    if start_line is None:
        return "setup, before the training loop started"
    tail = meaningful.filter(pl.col("line") >= start_line).tail(50)
    named = tail.select(
        pl.coalesce(
            [pl.when(pl.col("text").str.contains(p)).then(pl.lit(name)) for name, p in PHASES]
        ).alias("phase")
    ).drop_nulls()
    return f"the first step's {named['phase'][-1]}" if named.height else "the first step"


def describe(where: dict[str, Any]) -> str:
    """``stopped at Training Progress 0/58 after 07:16 …``: the one sentence the reports show."""
    bar = where.get("progress")
    if bar:
        label = f"{bar['label']} " if bar.get("label") else "the progress bar at "
        elapsed = bar.get("elapsed_s")
        ran = f" after {_clock(elapsed)} in the training loop" if elapsed is not None else ""
        text = f"stopped at {label}{bar['n']}/{bar['total']}{ran}, during {where['phase']}"
    else:
        text = f"stopped during {where['phase']}"
    if where.get("traceback_line") is not None:
        text += f" (traceback at line {where['traceback_line']})"
    else:
        text += " (no traceback: the log just ends)"
    if "line" in where:
        who = f" ({where['actor']})" if where.get("actor") else ""
        text += f"; last meaningful line {where['line']}{who}: {where['text']}"
    elif not bar:
        return "the log holds no meaningful line (empty, or only runtime logging)"
    return text


def _clock(seconds: float) -> str:
    whole = int(seconds)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _shown(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
