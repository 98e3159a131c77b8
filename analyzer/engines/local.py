"""The local engine: a process pool on this machine, or this process for a small run."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from .base import Job, Parsed, Progress, Wrote, parse_one, write_one

PARALLEL_MIN_BYTES = 32 * 1024 * 1024
"""Below this much input, a process pool costs more than it saves."""

R = TypeVar("R", bound=tuple[int, Any])


class LocalEngine:
    def parse(self, jobs: list[Job], workers: int | None, progress: Progress) -> Iterator[Parsed]:
        return mapped(parse_one, jobs, workers, progress)

    def write(
        self, jobs: list[Job], root: Path, workers: int | None, progress: Progress,
        *, keep: bool = False,
    ) -> Iterator[Wrote]:
        return mapped(partial(write_one, root=root, keep=keep), jobs, workers, progress)

    def each(
        self, work: Callable[..., Any], calls: list[tuple[Any, ...]], workers: int | None = None
    ) -> Iterator[Any]:
        """In this process, one call after the other (a rank's partition at a time), whatever
        ``workers``."""
        return (work(*call) for call in calls)


def mapped(
    work: Callable[[Job], R], jobs: list[Job], workers: int | None, progress: Progress
) -> Iterator[R]:
    """``work`` on every job, in order: in this process for a small run, else in a pool of
    ``workers`` processes."""
    total = sum(p.stat().st_size for _, p, _ in jobs)
    count = min(len(jobs), workers or os.cpu_count() or 1)
    paths = {i: p for i, p, _ in jobs}
    if count <= 1 or total < PARALLEL_MIN_BYTES:
        results: Iterator[R] = map(work, jobs)
        for result in results:
            if progress:
                progress(paths[result[0]])
            yield result
        return
    with ProcessPoolExecutor(
        max_workers=count, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        for result in pool.map(work, jobs):
            if progress:
                progress(paths[result[0]])
            yield result
