"""What must hold of whatever rlperf makes of an input, damaged or not.

Parse level (every case): the event table keeps its contract (:func:`parsers.validate`: dtypes,
no nulls where forbidden, no event ending before it starts, GPU work on a device). Report level
(a sample of cases, and every clean sample): busy + idle = window wherever GPU time is reported,
busy within the window; no negative duration in any report frame; the JSON report holds no NaN
or infinity, and no analysis failed. Each check returns the problems it found as lines.
"""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl

from parsers import ParsedSource, validate
from parsers.events import SchemaError

DURATION = re.compile(
    r"(?:^|_)(?:dur|time|busy|idle|window|wait|exposed|length|work|depth|transfer|productive|"
    r"overlap|comm|compute|memory|seconds|total|wall|step|gap|caused_wait)(?:_ns|_s)?$|^seconds$"
)
"""Report columns that hold a length of time (never negative); times of day, offsets and
residuals are signed and left out."""
SIGNED = re.compile(
    r"offset|start|end|arrival|residual|delta|diff|change|skew|drift|slack|saving|gain"
)


def parsed(source: ParsedSource) -> list[str]:
    """The event contract (:func:`parsers.validate`) of one parsed file."""
    try:
        validate(source.events, where=source.path.name)
    except SchemaError as exc:
        return [f"event contract: {exc}"]
    return []


def report(run: Any, text: str, sections: list[Any]) -> list[str]:
    """Problems in a run's JSON report ``text`` and the section frames behind it."""
    problems = _finite(text)
    problems += _gpu_time(run.gpu_time) if "gpu_time" in _products(run) else []
    for section in sections:
        for name, frame in _frames(section):
            problems += _durations(frame, name)
    return problems


def _products(run: Any) -> set[str]:
    return set(run.computed())


def _frames(section: Any) -> list[tuple[str, pl.DataFrame]]:
    found = [(section.key, section.frame)] if section.frame is not None else []
    return found + list(section.details.items())


def _finite(text: str) -> list[str]:
    """The report must parse as strict JSON (``NaN`` and ``Infinity`` are not JSON)."""
    bad: list[str] = []

    def refuse(token: str) -> float:
        bad.append(token)
        return 0.0

    try:
        json.loads(text, parse_constant=refuse)
    except ValueError as exc:
        return [f"JSON report does not parse: {exc}"]
    return [f"JSON report holds {sorted(set(bad))}"] if bad else []


def _gpu_time(frame: pl.DataFrame) -> list[str]:
    rows = frame.filter(pl.col("gpu_window_ns").is_not_null())
    broken = rows.filter(
        (pl.col("busy_ns") + pl.col("idle_ns") != pl.col("gpu_window_ns"))
        | (pl.col("busy_ns") > pl.col("gpu_window_ns"))
        | (pl.col("busy_ns") < 0)
        | (pl.col("idle_ns") < 0)
    )
    if broken.height:
        return [
            "gpu_time: busy + idle ≠ window or out of [0, window] on ranks "
            f"{broken['rank'].to_list()}"
        ]
    return []


def bubbles(frame: pl.DataFrame) -> list[str]:
    """Per device and step, productive time and the idle causes tile the window."""
    if frame.height == 0:
        return []
    per = frame.group_by("step", "rank").agg(
        pl.col("window_ns").first(), pl.col("productive_ns").first(), pl.col("busy_ns").first(),
        pl.col("idle_ns").sum(),
    )
    broken = per.filter(
        (pl.col("productive_ns") + pl.col("idle_ns") != pl.col("window_ns"))
        | (pl.col("busy_ns") > pl.col("window_ns"))
    )
    return (
        [f"bubbles: productive + idle ≠ window for {broken.height} (step, rank)"]
        if broken.height
        else []
    )


def _durations(frame: pl.DataFrame, name: str) -> list[str]:
    problems = []
    numeric = [c for c, t in frame.schema.items() if t.is_numeric()]
    for col in numeric:
        if DURATION.search(col) and not SIGNED.search(col):
            negative = frame.filter(pl.col(col) < 0).height
            if negative:
                problems.append(f"{name}.{col}: {negative} negative value(s)")
    if {"start_ns", "end_ns"} <= set(frame.columns):
        backwards = frame.filter(pl.col("end_ns") < pl.col("start_ns")).height
        if backwards:
            problems.append(f"{name}: {backwards} rows end before they start")
    return problems

