"""What a process measures about itself, on its own clock (``time.time_ns``).

Every range the process opens goes three ways at once: a ``torch.profiler.record_function``
(Kineto), an NVTX push/pop (Nsight Systems; a no-op when no tool listens) and an entry here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import nvtx
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function


@dataclass
class Recorder:
    rank: int
    stages: list[dict[str, Any]] = field(default_factory=list)
    spans: list[dict[str, Any]] = field(default_factory=list)
    waits: list[dict[str, Any]] = field(default_factory=list)
    collectives: list[dict[str, Any]] = field(default_factory=list)

    @contextmanager
    def range(self, name: str, step: int, stage: str | None = None, role: str | None = None,
              covers: tuple[str, ...] = ()) -> Iterator[None]:
        """A named range; recorded as a stage interval when ``stage`` is given, else as a span."""
        with record_function(name), nvtx.annotate(name):
            start = time.time_ns()
            yield
            end = time.time_ns()
        row = {"rank": self.rank, "step": step, "name": name, "start_ns": start, "end_ns": end}
        if stage is not None:
            self.stages.append({**row, "stage": stage, "role": role})
        else:
            self.spans.append({**row, "covers": list(covers)})

    def wait(self, step: int, cause: str, start: int, end: int) -> None:
        if end > start:
            self.waits.append({"rank": self.rank, "step": step, "cause": cause,
                               "start_ns": start, "end_ns": end})

    def collective(self, step: int, coll: str, dim: str, ranks: tuple[int, ...],
                   tensor: torch.Tensor, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one collective call and record its kind, group, size and interval."""
        start = time.time_ns()
        out = fn(*args, **kwargs)
        end = time.time_ns()
        self.collectives.append({
            "rank": self.rank, "step": step, "coll": coll, "dim": dim,
            "pg_ranks": ",".join(str(r) for r in ranks),
            "bytes": int(tensor.numel() * tensor.element_size()),
            "start_ns": start, "end_ns": end,
        })
        return out

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        return {"stages": self.stages, "spans": self.spans, "waits": self.waits,
                "collectives": self.collectives}


def warm_profiler() -> None:
    """Pay Kineto's one-time initialisation (about a second) before the run, not inside a step."""
    with profile(activities=[ProfilerActivity.CPU]):
        torch.zeros(1).add_(1)


def group_barrier(rec: Recorder, step: int, dim: str, ranks: tuple[int, ...],
                  group: dist.ProcessGroup, cause: str) -> None:
    """A barrier whose whole duration is knowingly spent waiting for the peers of ``group``."""
    start = time.time_ns()
    rec.collective(step, "barrier", dim, ranks, torch.zeros(0), dist.barrier, group=group)
    rec.wait(step, cause, start, time.time_ns())
