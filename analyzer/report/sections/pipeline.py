"""Pipeline phases and the pipeline bubble per rank and step (from chunk annotations)."""

from __future__ import annotations

import polars as pl

from taxonomy.pipeline_phases import PHASES

from ...model.run import Run
from ...model.units import duration, plural
from ..section import Column, Section

TITLES = {"forward": "F", "backward_input": "B (input)", "backward_weight": "W (weight)"}
"""Short column titles: the DualPipe letters, so the table fits a terminal."""


def _note(found: pl.DataFrame) -> str:
    window = int(found["window_ns"].sum())
    bubble = int(found["bubble_ns"].sum())
    share = f"{bubble / window:.1%}" if window else "–"
    note = (
        f"Bubble {duration(bubble)} of {duration(window)} ({share}) over "
        f"{plural(found['rank'].n_unique(), 'pipeline rank')}. A step's window runs from the "
        "first to the "
        "last chunk or schedule range (1F1B) of any rank; a rank's bubble is that window minus "
        "the time it ran a chunk (taxonomy/pipeline_phases.toml maps the chunk names); host "
        "wall time on the aligned clock."
    )
    overlap = int(found["overlap_ns"].sum())
    if overlap:
        note += f" Phases ran at once for {duration(overlap)} (counted in each)."
    return note


def section(run: Run) -> Section | None:
    found = run.pipeline_phases
    if found.height == 0:
        return None
    return Section(
        "Pipeline phases",
        found,
        columns=[
            Column("rank", "rank"),
            Column("step", "step"),
            Column("window_ns", "window", "duration"),
            *(Column(f"{p}_ns", TITLES[p], "duration") for p in PHASES),
            Column("bubble_ns", "bubble", "duration"),
            Column("bubble_share", "bubble share", "percent"),
            Column("chunks", "chunks", "number"),
        ],
        note=_note(found),
        key="pipeline_phases",
    )
