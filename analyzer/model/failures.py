"""Internal errors inside one part of an analysis: kept on the run, shown in place of that part.

An analysis that fails with an unexpected error (a bug, not bad input) does not take the report
down: the part is marked ``failed: …``, the failure is kept in ``Run.failures``, every other
part is still computed and written, and the command then exits with the internal-error status
(docs/errors.md).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from parsers.errors import InputError, printable
from taxonomy.collectives import CollectiveRulesError
from taxonomy.guidelines import GuidelineError
from taxonomy.profiles import ProfileError

PACKAGES = ("analyzer", "parsers", "taxonomy")
"""rlperf's own packages: an internal error is named after the deepest of their frames."""
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
    return "".join(
        c if c.startswith(structural) else printable(c.rstrip("\n")) + "\n" for c in chunks
    )


def _modules(exc: BaseException) -> list[str]:
    """The module of every frame ``exc`` passed through, outermost first."""
    out, tb = [], exc.__traceback__
    while tb is not None:
        out.append(str(tb.tb_frame.f_globals.get("__name__", "")))
        tb = tb.tb_next
    return out


def record(failures: dict[str, Failure], what: str, exc: Exception) -> Failure:
    """Keep ``exc`` in ``failures`` as the failure of ``what`` (once, however often it recurs)."""
    return failures.setdefault(what, describe(exc, what))
