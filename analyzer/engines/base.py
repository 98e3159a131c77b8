"""What every engine shares: the parse job, its result, and the parse itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from parsers import InputError, ParsedSource, parse_file

Job = tuple[int, Path, str]
"""One source to parse: its number in the run, its path, its format."""
Parsed = tuple[int, ParsedSource | InputError]
"""A job's source number and its parsed source, or the error that names the file."""
Progress = Callable[[Path], None] | None


class Engine(Protocol):
    def parse(self, jobs: list[Job], workers: int | None, progress: Progress) -> Iterator[Parsed]:
        """Every job's result in the order of ``jobs``; ``progress`` is called with each path
        as its result arrives; ``workers`` is ``--jobs`` (None: the engine's own default)."""
        ...


def parse_one(job: Job) -> Parsed:
    """A bad file comes back as its error (not raised) so the other files of a pool still
    finish, and the caller decides whether it stops the run."""
    index, path, fmt = job
    try:
        return index, parse_file(path, fmt, source=index)
    except InputError as exc:
        return index, exc
