"""The local engine: a process pool on this machine, or this process for a small run."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from .base import Job, Parsed, Progress, parse_one

PARALLEL_MIN_BYTES = 32 * 1024 * 1024
"""Below this much input, a process pool costs more than it saves."""


class LocalEngine:
    def parse(self, jobs: list[Job], workers: int | None, progress: Progress) -> Iterator[Parsed]:
        total = sum(p.stat().st_size for _, p, _ in jobs)
        count = min(len(jobs), workers or os.cpu_count() or 1)
        if count <= 1 or total < PARALLEL_MIN_BYTES:
            for job in jobs:
                result = parse_one(job)
                if progress:
                    progress(job[1])
                yield result
            return
        paths = {i: p for i, p, _ in jobs}
        with ProcessPoolExecutor(
            max_workers=count, mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            for index, parsed in pool.map(parse_one, jobs):
                if progress:
                    progress(paths[index])
                yield index, parsed
