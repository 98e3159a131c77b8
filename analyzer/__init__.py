"""rlperf's analyzer: run assembly, classification, the analyses, reports, CLI and Python API.

    >>> import analyzer
    >>> run = analyzer.load(["traces/"])
    >>> run.gpu_time          # a polars frame per rank
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from . import analyses as _pipeline  # noqa: F401 (its modules declare every product on import)
from .assemble import build
from .assemble.ingest import ingest
from .assemble.runs import choose
from .model.options import Options
from .model.run import Run

__all__ = ["Options", "Run", "load"]


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
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    found = ingest(paths, jobs=jobs, use_cache=use_cache, progress=progress)
    sources, chosen = choose(found.sources, run, paths)
    return build(sources, options, unknown=found.unknown, notes=[*found.notes, *chosen])
