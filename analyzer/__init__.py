"""rlperf's analyzer: run assembly, classification, the analyses, reports, CLI and Python API.

    >>> import analyzer
    >>> run = analyzer.load(["traces/"])
    >>> run.gpu_time          # a polars frame per rank

Importing the package imports none of the pipeline (nor polars): ``rlperf --help`` and a report
kept in a dataset do without them. The modules that declare the products are imported the first
time providers are read (:mod:`analyzer.model.pipeline`), ``Run`` and ``Options`` on first use.
"""

from __future__ import annotations

from .model.pipeline import declare_with

TYPE_CHECKING = False
"""``typing.TYPE_CHECKING`` without importing typing, pathlib and collections.abc, a third of
the start-up of a command answered by a kept report (analyzer/dataset/recall.py)."""
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path
    from typing import Any

    from .model.options import Options
    from .model.run import Run

__all__ = ["Options", "Run", "load"]


def _declare_providers() -> None:
    from . import analyses, assemble, classify  # noqa: F401  # deferred: they import polars


declare_with(_declare_providers)


def __getattr__(name: str) -> Any:
    if name == "Options":
        from .model.options import Options  # deferred: polars

        return Options
    if name == "Run":
        from .model.run import Run  # deferred: polars

        return Run
    raise AttributeError(f"module 'analyzer' has no attribute {name!r}")


def load(
    paths: Iterable[str | Path] | str | Path,
    *,
    jobs: int | None = None,
    use_cache: bool | None = None,
    progress: Callable[[Path], None] | None = None,
    run: str | int | None = None,
    options: Options | None = None,
) -> Run:
    """Discover, parse and assemble the sources of one run; ``progress`` is called with each
    file as it is parsed. Sources of several runs raise :class:`analyzer.runs.RunsError` listing
    them, unless ``run`` chooses one (its number as listed, or a prefix of its files' paths).
    ``options`` are the user's choices (``Options.checked`` checks them), seen by every step."""
    from pathlib import Path

    from .assemble import build  # deferred: the pipeline imports polars
    from .assemble.ingest import ingest  # deferred: polars
    from .assemble.runs import choose  # deferred: polars
    from .engines.per_rank import sharded  # deferred: polars

    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    found = ingest(paths, jobs=jobs, use_cache=use_cache, progress=progress)
    sources, chosen = choose(found.sources, run, paths)
    built = build(sources, options, unknown=found.unknown, notes=[*found.notes, *chosen])
    return sharded(built, [Path(p) for p in paths], jobs=jobs)
