"""Time by top-level annotation."""

from __future__ import annotations

from ...analyses.annotations import TOP
from ...model.run import Run
from ..section import Column, Section


def section(run: Run) -> Section | None:
    top = run.annotations
    if top.height == 0:
        return None
    return Section(
        "Time by top-level annotation",
        top.group_by("rank", maintain_order=True).head(TOP),
        columns=[
            Column("rank", "rank"),
            Column("name", "annotation"),
            Column("count", "count"),
            Column("time_ns", "time", "duration"),
            Column("share", "share of trace", "percent"),
        ],
        note=("Each rank's whole trace: --steps does not narrow this table."
              if run.options.step_selection is not None else ""),
    )
