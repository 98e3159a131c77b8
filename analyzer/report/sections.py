"""Report sections: what every renderer (terminal, Markdown, HTML, JSON) shows, in order.

An analysis module contributes a :class:`Section` through ``section(run)``; renderers only lay
sections out. Column formats are names (``duration``, ``percent``, ``bytes``, ``number``,
``text``), so every renderer formats a value the same way.

An analysis that fails with an unexpected error does not take the report down: its section is
marked ``failed: …`` and the failure is recorded on the run (:func:`failures`), so the command
can still write every other section and then exit with the internal-error status
(docs/errors.md).
"""

from __future__ import annotations

import importlib
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from parsers.errors import InputError, printable

from ..analyses import REGISTRY

if TYPE_CHECKING:
    from ..run import Run

FORMATS = ("text", "duration", "percent", "bytes", "number", "bandwidth")


@dataclass(frozen=True)
class Column:
    name: str
    title: str
    format: str = "text"


@dataclass
class Section:
    title: str
    frame: pl.DataFrame | None
    columns: list[Column] = field(default_factory=list)
    note: str = ""
    key: str = ""
    details: dict[str, pl.DataFrame] = field(default_factory=dict)
    """More frames behind the table (per step, statistics, …), written to the JSON report under
    their own keys."""

    def shown_columns(self) -> list[Column]:
        """The declared columns, else every column of the frame as text."""
        if self.columns or self.frame is None:
            return self.columns
        return [Column(c, c) for c in self.frame.columns]

    def rows(self) -> list[list[object]]:
        if self.frame is None:
            return []
        return [list(r) for r in self.frame.select([c.name for c in self.shown_columns()]).iter_rows()]


PACKAGES = ("analyzer", "parsers", "taxonomy")
"""rlperf's own packages: an internal error is named after the deepest of their frames."""
FAILURES = "_failures"
"""``run._products`` key of the failures recorded so far (what failed → :class:`Failure`)."""


@dataclass(frozen=True)
class Failure:
    """An unexpected error inside one analysis (a bug, not bad input)."""

    what: str
    """What could not be built, e.g. ``section bubbles``, ``guideline G13``."""
    module: str
    """The rlperf module whose code raised it."""
    error: str
    """``TypeError: …`` on one line."""
    traceback: str

    @property
    def marker(self) -> str:
        """What the report shows in place of the failed part."""
        return f"failed: internal error in {self.module}: {self.error}"


def user_errors() -> tuple[type[Exception], ...]:
    """Errors that mean bad input (exit status 2), never an internal error."""
    from taxonomy.collectives import CollectiveRulesError
    from taxonomy.guidelines import GuidelineError
    from taxonomy.profiles import ProfileError

    return InputError, ProfileError, GuidelineError, CollectiveRulesError


def describe(exc: BaseException, what: str = "") -> Failure:
    """``exc`` as a :class:`Failure`, named after the deepest rlperf frame that raised it."""
    module = next((m for m in reversed(_modules(exc)) if m.split(".")[0] in PACKAGES), "rlperf")
    message = printable(" ".join(str(exc).split()))
    error = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return Failure(what or module, module, error, traceback_text(exc))


def traceback_text(exc: BaseException) -> str:
    """The traceback of ``exc`` with every exception message escaped onto one line
    (:func:`printable`): only the frames' own line breaks remain, so a name in a message
    cannot drive the terminal or pass for another line under ``--debug``."""
    structural = ("Traceback", "  ", "\n")
    chunks = traceback.TracebackException.from_exception(exc).format()
    return "".join(c if c.startswith(structural) else printable(c.rstrip("\n")) + "\n" for c in chunks)


def _modules(exc: BaseException) -> list[str]:
    """The module of every frame ``exc`` passed through, outermost first."""
    out, tb = [], exc.__traceback__
    while tb is not None:
        out.append(str(tb.tb_frame.f_globals.get("__name__", "")))
        tb = tb.tb_next
    return out


def record_failure(run: Run, what: str, exc: Exception) -> Failure:
    """Keep ``exc`` on the run as the failure of ``what`` (once, however often it is rebuilt)."""
    found: dict[str, Failure] = run._products.setdefault(FAILURES, {})
    return found.setdefault(what, describe(exc, what))


def failures(run: Run) -> list[Failure]:
    """The failures recorded on ``run``, in the order they happened."""
    return list(run._products.get(FAILURES, {}).values())


def sections(run: Run) -> list[Section]:
    """Every section the registered modules contribute, in registry order; a section whose
    analysis fails is marked failed (:func:`record_failure`) and the others still come."""
    out: list[Section] = []
    for name in REGISTRY:
        module = importlib.import_module(name)
        build = getattr(module, "section", None)
        if build is None:
            continue
        key = name.rsplit(".", 1)[-1]
        try:
            section = build(run)
        except user_errors():
            raise
        except Exception as exc:
            section = Section(key.replace("_", " ").capitalize(), None, note=record_failure(run, f"section {key}", exc).marker)
        if section is not None:
            section.key = section.key or key
            out.append(section)
    return out


def gated(run: Run, title: str, product: str, empty: str) -> pl.DataFrame | Section:
    """``run.<product>`` when it has rows; else a frameless section whose note, ``empty``, says
    what the sources lack, so a report never shows an empty table."""
    frame = run.product(product)
    return frame if frame.height else Section(title, None, note=empty)
