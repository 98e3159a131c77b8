"""TRL (``GRPOTrainer`` and the other HF-``Trainer`` based trainers) logs.

``trainer_state.json`` (saved with every checkpoint) keeps every logged dict in
``log_history`` with its ``step``; the console prints the same dicts without the step. Stage
timings are the ``profiling/Time taken: <Class>.<method>`` keys of ``trl/extras/profiling.py``
(seconds per call; they reach ``log_history`` when a callback or export puts them there) and the
experimental async trainer's ``*_time_s`` keys. Everything else is a per-step metric.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ..errors import InputError
from ..jsonbound import decode_bounded
from ..source import ParsedSource
from .lines import LineIssues, is_document, lines_frame, read_text
from .progress import bars, bars_of_loop
from .records import ROWS_SCHEMA, record_rows, split_timers
from .timers import finish
from .values import MAX_STEP, flat_scalars, py_step, python_literal

FORMAT = "trl-log"
EXTENSIONS: tuple[str, ...] = (".json", ".log", ".txt", ".out")

BAR_RATE = "progress/s_per_it"
"""The training bar's seconds per optimizer step (tqdm's smoothed rate) at a logged step."""
TIMER_KEY = r"^profiling/Time taken: |(?:^|/)\w+_time_s$|^step_time$|^progress/s_per_it$"
RUN_KEYS = (
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "total_flos",
    "train_loss",
)
STATE_KEYS = ("global_step", "max_steps", "logging_steps", "eval_steps", "save_steps",
              "num_train_epochs", "train_batch_size", "epoch")

_STATE = re.compile(rb'"log_history"\s*:\s*\[')
_CONSOLE = re.compile(
    rb"(?m)(?:^|\r|\]\s*)\{'(?:loss|train_loss|reward|completions/mean_length)'[^\n\r]*"
    rb"'epoch': '?[\d.e-]+'?\}\s*$"
)
CONSOLE_RECORD = r"^\{'[^']+': .*'epoch': '?[-\d.e]+'?\}\s*$"
BAR_THEN_DICT = r"^\s*\d{1,3}%\|.*\]\s*(\{'.*)$"
"""A dict printed straight after a bar redraw, on the same line."""


def sniff(head: bytes, path: Path) -> int:
    if is_document(head, path):
        return 0
    if head.lstrip().startswith(b"{") and _STATE.search(head):
        return 90
    if _CONSOLE.search(head) and (
        b"completions/" in head or b"profiling/Time taken" in head or b"'reward'" in head
    ):
        return 70
    return 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    path = Path(path)
    out = ParsedSource(path=path, format=FORMAT, meta={"framework": "trl"})
    text, _ = read_text(path)
    if text.lstrip().startswith("{") and '"log_history"' in text[:1_000_000]:
        rows = _state_rows(out, path, text)
    else:
        rows = _console_rows(out, text)
    run_level = rows.filter(pl.col("key").is_in(list(RUN_KEYS)))
    for key, value in run_level.select("key", "value").iter_rows():
        out.meta[key] = value
    rows = rows.filter(~pl.col("key").is_in(list(RUN_KEYS)))
    timers, scalars = split_timers(rows, pl.col("key").str.contains(TIMER_KEY))
    out.meta["time_base"] = (
        "synthetic: logging steps laid end to end from 0 (the log records no time)"
    )
    finish(out, timers, scalars, source=source, unit="logging step")
    if out.meta["n_steps"] == 0:
        out.warn("no logged step found")
    return out


_ANY = msgspec.json.Decoder()


def _state_rows(out: ParsedSource, path: Path, text: str) -> pl.DataFrame:
    try:
        state = decode_bounded(_ANY, text.encode(), path)
    except msgspec.DecodeError as exc:
        raise InputError(path, f"trainer_state.json is not valid JSON ({exc})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise InputError(path, "trainer_state.json has no log_history list")
    for key in STATE_KEYS:
        if isinstance(state.get(key), (int, float)):
            out.meta[f"state_{key}" if key == "epoch" else key] = state[key]
    issues = LineIssues("log_history entry")
    rows: list[tuple[int, str, float, int, int]] = []
    for index, entry in enumerate(history):
        step = entry.get("step") if isinstance(entry, dict) else None
        if not isinstance(step, int) or py_step(step) is None:
            issues.add(index, f"entry without an integer step in 0…{MAX_STEP}")
            continue
        data: dict[str, Any] = {k: v for k, v in entry.items() if k != "step"}
        rows.extend((step, key, value, 0, index) for key, value in flat_scalars(data).items())
    issues.report(out, rename=("line ", "entry "))
    out.meta["step_numbering"] = "trainer global_step"
    # A step can have several entries (training, evaluation): one value per key, the last.
    return pl.DataFrame(rows, schema=ROWS_SCHEMA, orient="row").unique(
        subset=["step", "key"], keep="last", maintain_order=True
    )


def _console_rows(out: ParsedSource, text: str) -> pl.DataFrame:
    """Console dicts carry no step: each takes the optimizer step the training bar shows beside
    it (the bar tqdm redraws right after writing the dict, else the one before), or, without a
    usable bar, its place in order (1, 2, …; ``logging_steps`` apart in the real run)."""
    lines = lines_frame(text, out).with_row_index("pos")
    lines = lines.with_columns(
        pl.when(pl.col("text").str.contains(BAR_THEN_DICT))
        .then(pl.col("text").str.extract(BAR_THEN_DICT, 1))
        .otherwise(pl.col("text"))
        .alias("text")
    )
    dicts = lines.filter(pl.col("text").str.contains(CONSOLE_RECORD))
    final = dicts.filter(pl.col("text").str.contains("'train_runtime'", literal=True))
    logged = dicts.filter(~pl.col("line").is_in(final["line"].implode()))
    numbered = _bar_steps(logged, lines)
    issues = LineIssues()
    cut = lines.filter(
        pl.col("text").str.starts_with("{'")
        & pl.col("text").str.contains("'epoch'|'loss'|'reward'")
        & ~pl.col("line").is_in(dicts["line"].implode())
    )
    issues.add_frame(cut.with_columns(pl.lit("log dict cut short").alias("problem")))
    records = numbered.select("line", "step", pl.col("text").alias("payload"))
    rows = record_rows(records, issues, decode=_numbers_in_strings)
    if "bar" in numbered.columns and _bar_numbering_holds(rows):
        out.meta["step_numbering"] = "trainer global_step (the training progress bar's count)"
        rows = pl.concat([rows, _bar_rows(numbered, rows)])
    else:
        if "bar" in numbered.columns:
            out.warn(
                "the progress bar's counts do not number the console dicts one to one: logging "
                "steps are numbered 1, 2, … in order"
            )
        rows = record_rows(
            logged.with_row_index("step", offset=1).select(
                "line", pl.col("step").cast(pl.Int32), pl.col("text").alias("payload")
            ),
            LineIssues(),
            decode=_numbers_in_strings,
        )
        out.meta["step_numbering"] = (
            "ordinal (the console prints no step; multiply by logging_steps)"
        )
        out.warn("console dicts carry no step number: logging steps are numbered 1, 2, … in order")
    run_level = record_rows(
        final.select(
            "line", pl.lit(0, dtype=pl.Int32).alias("step"), pl.col("text").alias("payload")
        ),
        issues,
        decode=_numbers_in_strings,
    )
    issues.report(out)
    return pl.concat([rows, run_level.filter(pl.col("key").is_in(list(RUN_KEYS)))]).with_columns(
        pl.lit(0, dtype=pl.UInt32).alias("record")
    )


def _bar_steps(logged: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """``logged`` with the training bar's count ``n`` as ``step`` and its ``s_per_it`` and
    ``elapsed_s`` beside each dict (column ``bar`` says a bar was used), else numbered 1, 2, …
    The Trainer's bar is the one without a label (``Loading weights:``, ``Map:`` … are others)."""
    ordinal = logged.with_row_index("step", offset=1).with_columns(pl.col("step").cast(pl.Int32))
    drawn = bars(lines)
    loop = bars_of_loop(drawn.filter(pl.col("label").is_null() | (pl.col("label") == "")))
    if loop.height == 0 or logged.height == 0:
        return ordinal
    cols = ["pos", "n", "s_per_it", "elapsed_s"]
    redraws = loop.select(cols).sort("pos")
    dicts = logged.sort("pos").with_columns(pl.col("pos").shift(-1).alias("_next_dict"))
    after = dicts.join_asof(
        redraws.with_columns(pl.col("pos").alias("_at")), on="pos", strategy="forward"
    )
    before = dicts.select("pos").join_asof(redraws, on="pos", strategy="backward")
    use_after = pl.col("_at").is_not_null() & (
        pl.col("_next_dict").is_null() | (pl.col("_at") < pl.col("_next_dict"))
    )
    both = after.with_columns(use_after.alias("_after")).join(
        before, on="pos", how="left", suffix="_b"
    )
    pick = pl.col("_after")
    return both.select(
        "line", "pos", "text",
        pl.when(pick).then("n").otherwise("n_b").cast(pl.Int32).alias("step"),
        pl.when(pick).then("s_per_it").otherwise("s_per_it_b").alias("s_per_it"),
        pl.when(pick).then("elapsed_s").otherwise("elapsed_s_b").alias("elapsed_s"),
        pl.lit(True).alias("bar"),
    )


def _bar_numbering_holds(rows: pl.DataFrame) -> bool:
    """The bar numbers the dicts when every dict got a count and no key is stated twice for one
    step (a lagging bar would give two training dicts the same step)."""
    return (
        rows.height > 0
        and rows["step"].null_count() == 0
        and not rows.select(pl.struct("step", "key").is_duplicated().any()).item()
    )


def _bar_rows(numbered: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """The bar's seconds per step (a timer when the dicts have no ``step_time`` of their own,
    else a metric under another name) and its elapsed time, as rows like the dicts'."""
    own_total = rows.filter(pl.col("key") == "step_time").height > 0
    rate_key = "progress/bar_s_per_it" if own_total else BAR_RATE
    long = numbered.filter(pl.col("step").is_not_null()).unpivot(
        index=["line", "step"], on=["s_per_it", "elapsed_s"], variable_name="key"
    ).filter(pl.col("value").is_not_null())
    return long.select(
        "step",
        pl.col("key").replace_strict({"s_per_it": rate_key, "elapsed_s": "progress/elapsed_s"}),
        "value",
        pl.col("line").alias("record"),
        "line",
    ).cast(pl.Schema(ROWS_SCHEMA))


def _numbers_in_strings(text: str) -> dict[str, Any]:
    """Recent ``transformers`` print every logged value as a short string (``'loss': '0.1925'``)."""
    data = python_literal(text)
    if not isinstance(data, dict):
        raise TypeError("not a dict")
    return {key: _float_or_same(value) for key, value in data.items()}


def _float_or_same(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        return value
