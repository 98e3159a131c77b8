"""Where a run's parse jobs run: this machine's process pool (``local``, the default) or tasks on
a Ray cluster (``--engine ray``, the ``ray`` extra, docs/ray.md).

Every engine returns each source exactly as :func:`parsers.parse_file` makes it, in the order the
jobs were given, so the run built from them (and every number of its report) does not depend on
the engine. The choice is made once per command (the CLI options' callbacks call :func:`choose`)
or around a block of Python (:func:`using`); Ray is imported only when it is chosen.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

from parsers import InputError

from .base import Engine, Job, OutputError, Parsed, Progress, Written, parse_one
from .local import LocalEngine

__all__ = [
    "ENGINES", "Engine", "Job", "LocalEngine", "OutputError", "Parsed", "Progress", "Written",
    "choose", "parse_one", "selected", "using",
]

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class Choice:
    engine: str = "local"
    address: str | None = None
    """``--ray-address``: None is ``RAY_ADDRESS`` if set, else a Ray started for the run."""
    quiet: bool = False
    """``--quiet``: no line of the engine's own (starting a local Ray) on stderr."""


_CHOICE: ContextVar[Choice | None] = ContextVar("rlperf_engine", default=None)


def choose(
    *, engine: str | None = None, address: str | None = None, given: bool = False,
    quiet: bool | None = None,
) -> None:
    """Set one part of the choice (each CLI option sets its own part, defaults included, so a
    command never inherits the previous command's choice); ``given`` sets ``address`` even to
    None."""
    choice = _CHOICE.get() or Choice()
    if engine is not None:
        choice = replace(choice, engine=engine)
    if address is not None or given:
        choice = replace(choice, address=address)
    if quiet is not None:
        choice = replace(choice, quiet=quiet)
    _CHOICE.set(choice)


@contextmanager
def using(engine: str = "local", address: str | None = None) -> Iterator[None]:
    """Parse with ``engine`` inside the block (the Python API's ``--engine``)."""
    token = _CHOICE.set(Choice(engine, address))
    try:
        yield
    finally:
        _CHOICE.reset(token)


def selected() -> Engine:
    """The engine chosen, checked: an unknown name or an address without Ray is bad input."""
    choice = _CHOICE.get() or Choice()
    if choice.engine not in ENGINES:
        raise InputError("--engine", f"unknown engine {choice.engine!r} (one of: local, ray)")
    if choice.engine == "ray":
        from .on_ray import RayEngine  # imported only when chosen (every command imports this)

        return RayEngine(choice.address, quiet=choice.quiet)
    if choice.address is not None:
        raise InputError("--ray-address", "is for --engine ray (add --engine ray)")
    return LocalEngine()


def __getattr__(name: str) -> object:
    """``RayEngine`` imported on first use, not with every command (``--engine ray`` is rare)."""
    if name == "RayEngine":
        from .on_ray import RayEngine  # deferred: see the docstring

        return RayEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
