"""The data-quality section: what was wrong with the inputs, per file and in total."""

from __future__ import annotations

import polars as pl

from ...analyses.quality import TOTAL
from ...model.run import Run
from ...model.units import plural
from ..section import Column, Section


def file_summary(run: Run, found: pl.DataFrame) -> pl.DataFrame:
    """Per file: its format, events and how many problems were found (0 for a clean file)."""
    events = run.events.group_by("source").len().rename({"len": "events"})
    problems = (
        found.filter(pl.col("file") != TOTAL)
        .group_by("file")
        .agg(pl.col("count").sum().alias("problems"))
    )
    files = pl.DataFrame(
        {"source": [s.index for s in run.sources], "file": [s.path.name for s in run.sources],
         "format": [s.format for s in run.sources]},
        schema={"source": pl.UInt32, "file": pl.String, "format": pl.String},
    )
    return (
        files.join(events, on="source", how="left")
        .join(problems, on="file", how="left")
        .select(
            "file",
            "format",
            pl.col("events").fill_null(0).cast(pl.Int64),
            pl.col("problems").fill_null(0).cast(pl.Int64),
        )
    )


CHECKED = (
    "nothing dropped, clamped or repaired, no overlaps, disorder, zero-length GPU work, clock "
    "corrections or cut files"
)
"""What a run none of whose checks counted anything is free of."""


def clean_note(run: Run) -> str:
    """The note of a run no check counted anything in: "no problems found" only when no warning
    says otherwise (alpa's report2.nsys-rep counts nothing, but its Nsight Systems did not
    support the CUDA driver, so kernels may be missing)."""
    files = plural(len(run.sources), "file")
    if not run.warnings:
        return f"No problems found in {files}: {CHECKED}."
    warned = plural(len(run.warnings), "warning")
    says = "says" if len(run.warnings) == 1 else "say"
    return (
        f"No problem counted in {files} ({CHECKED}), but {warned} {says} what may still be "
        "missing or wrong (listed at the end of the report)."
    )


def section(run: Run) -> Section | None:
    found = run.data_quality
    details = {"data_quality_files": file_summary(run, found)}
    title = "Data quality"
    if found.height == 0:
        return Section(title, None, note=clean_note(run), key="data_quality", details=details)
    excluded = run.incomplete_steps["step"].n_unique()
    note = (
        "Counts per file, then in total; parser rows "
        "are what a parser dropped, clamped or repaired."
    )
    if excluded:
        note += (f" {plural(excluded, 'incomplete step')} {'is' if excluded == 1 else 'are'} left "
                 "out of every per-step analysis.")
    return Section(
        title,
        found,
        columns=[
            Column("file", "file"),
            Column("title", "problem"),
            Column("count", "count", "number"),
            Column("detail", "detail"),
        ],
        note=note,
        key="data_quality",
        details=details,
    )
