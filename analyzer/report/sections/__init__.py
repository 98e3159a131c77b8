"""Report sections: what every renderer (terminal, Markdown, HTML, JSON) shows, in one order.

Each module of this package builds one section from the run's products (``section(run)``);
analyses return frames only, and renderers only lay sections out. :data:`LAYOUT` is the one
order of sections and figures for every format.

A section whose building fails with an unexpected error does not take the report down: it is
marked ``failed: …`` and the failure is kept on the run (:func:`failures`), so the command can
still write every other section and then exit with the internal-error status (docs/errors.md).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from ...model.failures import Failure, describe, record, user_errors
from ..section import Column, Section, gated
from . import (
    breakdown,
    bubbles,
    efficiency,
    engine,
    findings,
    gpu_time,
    guidelines,
    logs,
    outliers,
    overview,
    pipeline,
    placement,
    quality,
    sync,
    top_annotations,
    workdepth,
)

if TYPE_CHECKING:
    from ...model.run import Run

__all__ = [
    "FIGURES",
    "LAYOUT",
    "SOURCES",
    "Column",
    "Failure",
    "Section",
    "around_figures",
    "arranged",
    "describe",
    "failures",
    "gated",
    "record_failure",
    "sections",
    "user_errors",
]

FIGURES = "figures"
"""The place of the figures (HTML, Markdown and PNG reports) in :data:`LAYOUT`."""
SOURCES = "sources"
"""The place of the source list with the run's notes, skipped files and warnings (every format)."""

LAYOUT: tuple[tuple[str, ModuleType | None], ...] = (
    ("findings", findings),
    ("placement", placement),
    ("engine", engine),
    ("overview", overview),
    ("quality", quality),
    ("guidelines", guidelines),
    (FIGURES, None),
    ("logs", logs),
    ("efficiency", efficiency),
    ("gpu_time", gpu_time),
    ("annotations", top_annotations),
    ("pipeline_phases", pipeline),
    ("breakdown", breakdown),
    ("step_outliers", outliers),
    ("bubbles", bubbles),
    ("sync", sync),
    ("workdepth", workdepth),
    (SOURCES, None),
)
"""Every section by name (its key in the JSON report unless the section names another, as the
data-quality and log sections do) with the module whose ``section(run)`` builds it, and the
places of the figures and the sources (renderers fill those), in report order: the one order of
every format."""


def record_failure(run: Run, what: str, exc: Exception) -> Failure:
    """Keep ``exc`` on the run as the failure of ``what`` (once, however often it is rebuilt)."""
    return record(run.failures, what, exc)


def failures(run: Run) -> list[Failure]:
    """The failures recorded on ``run``, in the order they happened."""
    return list(run.failures.values())


def around_figures(found: list[Section]) -> tuple[list[Section], list[Section]]:
    """``found`` (built by :func:`sections`, in layout order) split where the figures go."""
    before = {name for name, _ in LAYOUT[: [n for n, _ in LAYOUT].index(FIGURES)]}
    return [s for s in found if s.name in before], [s for s in found if s.name not in before]


def arranged(found: list[Section]) -> list[Section | str]:
    """``found`` (built by :func:`sections`) with :data:`FIGURES` and :data:`SOURCES` in their
    places: what a renderer walks, so no format orders its parts on its own."""
    by_name = {s.name: s for s in found}
    out: list[Section | str] = []
    for name, module in LAYOUT:
        if module is None:
            out.append(name)
        elif name in by_name:
            out.append(by_name[name])
    return out


def sections(run: Run) -> list[Section]:
    """Every section of :data:`LAYOUT` that has something to show, in its order; a section
    whose building fails is marked failed (:func:`record_failure`) and the others still come.
    Built once per run and kept (``Run.kept``): the command builds them behind its progress
    display, then each format it writes lays the same sections out; a warning or note added
    since (the sections say them) builds them anew."""
    kept = run.kept.get(KEPT)
    if kept is None or kept[0] != _said(run):
        built = _built(run)
        run.kept[KEPT] = kept = (_said(run), built)  # what building them said, too
    return kept[1]


KEPT = "report.sections"


def _said(run: Run) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(run.warnings), tuple(run.notes)


def _built(run: Run) -> list[Section]:
    out: list[Section] = []
    for name, module in LAYOUT:
        if module is None:
            continue
        try:
            section = module.section(run)
        except user_errors():
            raise
        except Exception as exc:
            section = Section(
                name.replace("_", " ").capitalize(),
                None,
                note=record_failure(run, f"section {name}", exc).marker,
            )
        if section is not None:
            section.key = section.key or name
            section.name = name
            out.append(section)
    return out
