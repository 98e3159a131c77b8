"""Slow steps: which steps took far longer than the median, by how much, and which stage and
rank grew ("why was step 40 slow?"); warm-up steps are named and said to be left out."""

from __future__ import annotations

import polars as pl

from ...analyses.log_steps import STEP_RULES
from ...model.run import Run
from ..section import Column, Section

TITLE = "Slow steps"


def section(run: Run) -> Section | None:
    found = run.step_outliers
    counts = _step_counts(run)
    if not counts:
        return None
    notes = [*warmup_notes(found), *profiler_notes(found), f"slow: {STEP_RULES.describe()}"]
    slow = found.filter(pl.col("kind") == "slow")
    if slow.height == 0:
        said = ", ".join(f"{n} from the {source}" for source, n in counts.items())
        return Section(TITLE, None, note=f"No slow step among the steps ({said}); "
                       + "; ".join(notes), key="step_outliers", details={"step_outliers": found})
    frame = slow.sort(["source", "excess_ns"], descending=[True, True]).with_columns(
        pl.when(pl.col("rank").is_null()).then(pl.lit("–"))
        .otherwise(pl.col("rank").cast(pl.String)).alias("rank_text")
    )
    return Section(
        TITLE,
        frame,
        columns=[
            Column("step", "step"),
            Column("source", "from"),
            Column("wall_ns", "step time", "duration"),
            Column("ratio", "× median", "number"),
            Column("excess_ns", "over median", "duration"),
            Column("stage", "stage that grew"),
            Column("stage_excess_ns", "stage grew by", "duration"),
            Column("rank_text", "rank"),
        ],
        note="; ".join(notes + _reading(slow)),
        key="step_outliers",
        details={"step_outliers": found},
    )


def _reading(slow: pl.DataFrame) -> list[str]:
    said = ["the stage and rank are those whose time grew most against their own median"]
    if (slow["source"] == "trace").any():
        said.append("a stage's time in a step is its slowest rank's")
    if (slow["source"] == "log").any():
        said.append("the log's timers have no ranks")
    return said


def _step_counts(run: Run) -> dict[str, int]:
    counts = {"trace": run.steps["step"].n_unique(), "log": run.log_steps.height}
    return {source: n for source, n in counts.items() if n}


def warmup_notes(found: pl.DataFrame) -> list[str]:
    """"step 1 excluded as warm-up: 3.2× the median (…)" for every warm-up step."""
    warm = found.filter(pl.col("kind") == "warmup")
    return [
        f"step {r['step']} excluded as warm-up: {r['ratio']:.1f}× the median (from the "
        f"{r['source']}; left out of the medians, shares and findings, kept in per-step tables)"
        for r in warm.iter_rows(named=True)
    ]


def profiler_notes(found: pl.DataFrame) -> list[str]:
    """"log step 4 follows the traced steps: 3.9× the median, the profiler writing its trace"."""
    return [
        f"log step {r['step']} follows the traced steps: {r['ratio']:.1f}× the median, the "
        "profiler writing its trace (not counted as slow)"
        for r in found.filter(pl.col("kind") == "profiler").iter_rows(named=True)
    ]
