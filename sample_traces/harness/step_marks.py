"""A worker process's own ``step N`` range, as verl's nsys layout records one per process.

verl's trainer starts and stops each worker's profiler around a step; here the worker pushes an
NVTX ``step N`` range when the step begins and pops it when the step ends (two separate calls
from the controller, so not a ``with`` block), and the truth gets the interval measured just
inside it on the worker's own clock.
"""

from __future__ import annotations

import time
from typing import Any

import nvtx


def begin(step: int) -> int:
    """Open ``step N`` on this thread; returns its start (``time.time_ns``)."""
    nvtx.push_range(f"step {step}")
    return time.time_ns()


def end(rank: int, step: int, start_ns: int) -> dict[str, Any]:
    """Close the open ``step N``; the truth span for it."""
    end_ns = time.time_ns()
    nvtx.pop_range()
    return {"rank": rank, "step": step, "name": f"step {step}", "start_ns": start_ns,
            "end_ns": end_ns, "covers": []}
