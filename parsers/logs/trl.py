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
from .records import ROWS_SCHEMA, record_rows, split_timers
from .timers import finish
from .values import MAX_STEP, flat_scalars, py_step, python_literal

FORMAT = "trl-log"
EXTENSIONS: tuple[str, ...] = (".json", ".log", ".txt", ".out")

TIMER_KEY = r"^profiling/Time taken: |(?:^|/)\w+_time_s$|^step_time$"
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
    rb"(?m)^\{'(?:loss|train_loss|reward|completions/mean_length)'[^\n]*'epoch': '?[\d.e-]+'?\}\s*$"
)
CONSOLE_RECORD = r"^\{'[^']+': .*'epoch': '?[-\d.e]+'?\}\s*$"


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
    """Console dicts carry no step: they are numbered 1, 2, … in order (``logging_steps`` apart
    in the real run, which the console does not say)."""
    lines = lines_frame(text, out)
    dicts = lines.filter(pl.col("text").str.contains(CONSOLE_RECORD))
    final = dicts.filter(pl.col("text").str.contains("'train_runtime'", literal=True))
    records = (
        dicts.filter(~pl.col("line").is_in(final["line"].implode()))
        .with_row_index("step", offset=1)
        .select("line", pl.col("step").cast(pl.Int32), pl.col("text").alias("payload"))
    )
    issues = LineIssues()
    cut = lines.filter(
        pl.col("text").str.starts_with("{'")
        & pl.col("text").str.contains("'epoch'|'loss'|'reward'")
        & ~pl.col("line").is_in(dicts["line"].implode())
    )
    issues.add_frame(cut.with_columns(pl.lit("log dict cut short").alias("problem")))
    rows = record_rows(records, issues, decode=_numbers_in_strings)
    run_level = record_rows(
        final.select(
            "line", pl.lit(0, dtype=pl.Int32).alias("step"), pl.col("text").alias("payload")
        ),
        issues,
        decode=_numbers_in_strings,
    )
    issues.report(out)
    out.meta["step_numbering"] = "ordinal (the console prints no step; multiply by logging_steps)"
    out.warn("console dicts carry no step number: logging steps are numbered 1, 2, … in order")
    return pl.concat([rows, run_level.filter(pl.col("key").is_in(list(RUN_KEYS)))]).with_columns(
        pl.lit(0, dtype=pl.UInt32).alias("record")
    )


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
