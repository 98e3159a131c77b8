"""A slow step with a known cause: one rank stalls inside one stage of one step.

Real runs have steps that take far longer than the rest (a GC pause, a preempted host, memory
pressure in one rank); the step-outlier analysis must find the step, the stage that grew and the
rank. :class:`SlowTimeline` is the generator's :class:`~.timeline.Timeline` with, at the end of
``stage`` on ``rank`` in ``step``, the host held for ``extra_ns`` more (no kernels: the stage
range simply lasts longer there). Nothing else changes — the random draws are the same — so the
run is the plain one with that step stretched, and the truth is exact: the stall itself, and the
step windows the generator records.

``generate_slow(cfg, slow, out)`` writes the run with ``truth.json`` carrying ``slow_step``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from . import generate, simulate
from .config import Config, Groups
from .schedule import CODE
from .timeline import Timeline


@dataclass(frozen=True)
class SlowStep:
    step: int
    stage: str
    rank: int
    extra_ns: int


class SlowTimeline(Timeline):
    def __init__(self, cfg: Config, groups: Groups, rng: np.random.Generator, *,
                 slow: SlowStep) -> None:
        super().__init__(cfg, groups, rng)
        self.slow = slow

    @contextmanager
    def stage(self, ranks: Sequence[int] | np.ndarray, code: int, role: np.ndarray | int,
              gap: tuple[int, int] = (800_000, 3_000_000)) -> Iterator[np.ndarray]:
        with super().stage(ranks, code, role, gap) as inside:
            yield inside
            if self.step == self.slow.step and code == CODE[self.slow.stage]:
                self.t[inside[inside == self.slow.rank]] += self.slow.extra_ns


def truth_of(slow: SlowStep, truth: dict[str, Any]) -> dict[str, Any]:
    """What the step-outlier analysis must find: the stall, and the slow step's excess over the
    median of the other steps' windows (true clock)."""
    walls = {w["step"]: w["end_ns"] - w["start_ns"] for w in truth["step_windows"]}
    median = float(np.median([v for s, v in walls.items() if s != slow.step]))
    return asdict(slow) | {
        "wall_ns": walls[slow.step],
        "median_other_ns": median,
        "excess_ns": walls[slow.step] - median,
    }


def simulate_slow(cfg: Config, slow: SlowStep) -> tuple[Any, dict[str, Any]]:
    run, truth, _ = simulate(cfg, partial(SlowTimeline, slow=slow))
    return run, truth | {"slow_step": truth_of(slow, truth)}


def generate_slow(cfg: Config, slow: SlowStep, out_dir: str | Path, **kw: Any) -> dict[str, Any]:
    """:func:`~sample_traces.synth.generate` with the stall; ``truth.json`` gains
    ``slow_step``."""
    doc = generate(cfg, out_dir, timeline=partial(SlowTimeline, slow=slow), **kw)
    doc["slow_step"] = truth_of(slow, doc)
    (Path(out_dir) / "truth.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc
