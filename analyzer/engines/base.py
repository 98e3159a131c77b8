"""What every engine shares: the parse job, its result, and the parse itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from parsers import InputError, ParsedSource, parse_file

from ..assemble.runs import Statement, statement
from ..dataset import cache, write_source

Job = tuple[int, Path, str]
"""One source to parse: its number in the run, its path, its format."""
Parsed = tuple[int, ParsedSource | InputError]
"""A job's source number and its parsed source, or the error that names the file."""
Progress = Callable[[Path], None] | None


@dataclass
class Written:
    """A source parsed and written into a dataset folder by the worker that parsed it: what the
    driver needs to choose the run and write the manifest, without the source's events."""

    record: dict[str, Any]
    """Its manifest record (:func:`analyzer.dataset.write_source`)."""
    meta: dict[str, Any]
    """The part of its meta that run identity reads (:data:`RUN_META`); the rest is in its
    source record only (a 1,024-rank run's process groups, kept per source, would be
    hundreds of MB on the driver)."""
    warnings: list[str]
    said: Statement

    def source(self, path: Path) -> ParsedSource:
        """The source without its tables, as the driver names it (run choice reads no event)."""
        return ParsedSource(
            path=path, format=self.record["format"], meta=self.meta, warnings=self.warnings
        )


Wrote = tuple[int, Written | InputError]
RUN_META = ("rank", "world_size", "framework", "time_base", "base_time_ns")


class OutputError(InputError):
    """The dataset folder cannot be written where a worker runs: it stops the run whichever
    file it came with (a bad source found in a folder is only skipped)."""


class Engine(Protocol):
    def parse(self, jobs: list[Job], workers: int | None, progress: Progress) -> Iterator[Parsed]:
        """Every job's result in the order of ``jobs``; ``progress`` is called with each path
        as its result arrives; ``workers`` is ``--jobs`` (None: the engine's own default)."""
        ...

    def write(
        self, jobs: list[Job], root: Path, workers: int | None, progress: Progress,
        *, keep: bool = False,
    ) -> Iterator[Wrote]:
        """As :meth:`parse`, but each worker writes its source into the folder ``root`` (as
        source number ``job[0]``) and returns only what the driver needs (:class:`Written`);
        ``keep``: workers on this machine also fill its parse cache."""
        ...

    def each(
        self, work: Callable[..., Any], calls: list[tuple[Any, ...]], workers: int | None = None
    ) -> Iterator[Any]:
        """``work(*call)`` for every call, results in the order of ``calls``: rank-local
        products of a run read from a dataset, one call per rank partition
        (:mod:`analyzer.engines.per_rank`); ``workers`` is ``--jobs``. ``work`` returns an
        InputError it met rather than raising it."""
        ...


def parse_one(job: Job) -> Parsed:
    """A bad file comes back as its error (not raised) so the other files of a pool still
    finish, and the caller decides whether it stops the run."""
    index, path, fmt = job
    try:
        return index, parse_file(path, fmt, source=index)
    except InputError as exc:
        return index, exc


def write_one(job: Job, root: Path, keep: bool) -> Wrote:
    """Parse one job and write it into ``root`` (and into this machine's parse cache when
    ``keep``); the parsed tables are dropped once written."""
    index, parsed = parse_one(job)
    if isinstance(parsed, InputError):
        return index, parsed
    if keep:
        cache.put(parsed)
    try:
        record = write_source(parsed, root, index)
    except OSError as exc:
        return index, OutputError(root, f"cannot be written: {exc.strerror or exc}")
    return index, written(parsed, record)


def written(parsed: ParsedSource, record: dict[str, Any]) -> Written:
    meta = {k: parsed.meta[k] for k in RUN_META if k in parsed.meta}
    return Written(record, meta, parsed.warnings, statement(parsed))
