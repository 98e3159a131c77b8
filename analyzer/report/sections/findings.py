"""The findings list every report leads with: what to fix first, by what it would save per step."""

from __future__ import annotations

from typing import Any

import polars as pl

from ...analyses.findings import judged
from ...model.run import Run
from ...model.units import duration, plural
from ..section import Column, Section

TITLE = "Findings"
WHOLE = "saving (whole trace"
"""How a whole-trace saving's basis begins (analyses/findings.py, no steps)."""
COPY_KINDS = {"memcpy": "memory copies", "memset": "memsets"}
"""Device work that is not a kernel, as the empty list names it."""
WHY = ("no step record", "kernels may be missing", "no GPU", "no kernel", "no events")
"""Parts of warnings that say why the inputs hold nothing to analyse (quoted in the note)."""
SAVING = {"step": "Saving/step", "whole": "Saving (whole trace)", "none": "Saving"}
"""The saving column's name: per step; where the run has no step at all, over the trace's whole
window (a trace), or plain (a log without steps: it estimates no saving)."""


def columns(saving: str = "step") -> list[Column]:
    return [
        Column("position", "#", "number"),
        Column("title", "Finding"),
        Column("where", "Where"),
        Column("saving_ns", SAVING[saving], "duration"),
        Column("saving_fraction", "Saving %", "percent"),
        Column("severity", "Severity"),
        Column("confidence", "Confidence"),
        Column("recommendation", "Recommendation"),
        Column("evidence", "Evidence"),
    ]



def section(run: Run) -> Section:
    found: pl.DataFrame = run.findings
    failed = [f.marker for what, f in run.failures.items() if what.startswith("findings: ")]
    if found.height == 0:
        return Section(TITLE, None, note="; ".join([_nothing(run), *failed]))
    shown = found.with_columns(
        pl.Series("where", [_where(r) for r in found.iter_rows(named=True)], dtype=pl.String)
    )
    whole = run.steps.height == 0 and _whole(found)
    saving = "step" if run.steps.height or run.log_steps.height else "whole" if whole else "none"
    return Section(TITLE, shown, columns(saving),
                   note=_note(found, failed, whole, saving == "step"))


def _nothing(run: Run) -> str:
    """Why the list is empty: the inputs hold nothing to judge (no step and no kernel; the
    warnings that say why), or they were judged and nothing crossed a threshold."""
    if judged(run.activity, run.steps, run.log_steps):
        return "nothing found to fix: no guideline violated and no idle cause, bound or " \
               "generic check above its threshold"
    traced = any(not s.format.endswith("log") for s in run.sources)
    lacks = ["no step recorded", _no_kernel(run) if traced else "no trace (logs only)"]
    why = [w for w in run.warnings if any(k in w for k in WHY)]
    return f"nothing to analyse: {' and '.join(lacks)}" + (f" — {'; '.join(why)}" if why else "")


def _no_kernel(run: Run) -> str:
    """Says no kernel ran, and names the device work there is instead (copies, memsets) with
    its busy time: the headline's GPU busy is not 0, and the list must not seem to deny it."""
    kinds = set(run.activity["kind"].unique().to_list())
    copies = [name for kind, name in COPY_KINDS.items() if kind in kinds]
    if not copies:
        return "no GPU kernel in the trace"
    busy = run.overview.filter(pl.col("metric") == "gpu_busy_ns")["value"]
    took = f" ({duration(busy[0])})" if busy.len() and busy[0] is not None else ""
    return f"no GPU kernel in the trace, only {' and '.join(copies)}{took}"


def _where(row: dict[str, Any]) -> str:
    """``rollout · ranks 0-3 · step 2``; ``all`` when the finding is not confined."""
    parts = [
        row["stage"] or "",
        _label("rank", row["ranks"]),
        _label("step", row["steps"]),
    ]
    return " · ".join(p for p in parts if p) or "all"


def _label(noun: str, spans: str) -> str:
    if not spans:
        return ""
    many = "," in spans or "-" in spans
    return f"{noun}{'s' if many else ''} {spans}"


def _whole(found: pl.DataFrame) -> bool:
    """Whether some saving is over a trace's whole window (a trace without steps)."""
    return found.filter(pl.col("saving_basis").str.starts_with(WHOLE)).height > 0


def _note(found: pl.DataFrame, failed: list[str], whole: bool, per_step: bool = True) -> str:
    """How the list is ranked and what a saving is of. ``whole``: the trace has no step and some
    saving is over its whole window; ``per_step`` False: the run has no step at all (no trace
    step, no log step), and the note speaks of no step."""
    estimated = found.filter(pl.col("saving_ns").is_not_null()).height
    ranked = f"{plural(found.height, 'finding')}, ranked by the estimated saving"
    bound = ("basis says which bound it comes from (docs/analyses.md, Findings). "
             "Savings overlap and do not add up.")
    over_window = "No steps were found: each saving is a saving (whole trace), over the " \
                  "trace's whole window, and Saving % is a share of that window"
    if not per_step:
        said = f"{over_window}; each" if whole else "Each"
        text = f"{ranked} ({estimated} with an estimate; the rest by severity). {said} finding's " \
               f"{bound}"
        return "; ".join([text, *failed])
    text = (
        f"{ranked} per step ({estimated} with an estimate; the rest by severity). Saving % is of "
        f"the mean step of the trace or log it is measured on; each finding's {bound}"
    )
    if whole:
        text += f" {over_window}."
    return "; ".join([text, *failed])
