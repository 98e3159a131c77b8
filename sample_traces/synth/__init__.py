"""GPU-shaped synthetic RL post-training traces with exact ground truth (all labelled synthetic).

``generate(config, out_dir)`` simulates the run (:mod:`.schedule` on :mod:`.timeline`), computes
the truth from the true timeline (:mod:`.truth`, by docs/analyses.md), skews each rank's clock
by a known offset and writes one Kineto trace per rank (:mod:`.kineto`; optionally an
nsys-schema SQLite per rank, :mod:`.nsys`) plus ``truth.json``. Same config and seed ⇒
byte-identical files. CLI: ``python -m sample_traces.synth --help``; docs/synth.md.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .config import SCENARIOS, Config, build_groups, preset
from .kineto import RunData, device_of, host_of, rank_trace
from .schedule import Schedule
from .timeline import Timeline
from .truth import compute

__all__ = ["SCENARIOS", "Config", "generate", "preset", "trace_name"]

TRUTH_FORMAT = "rlperf-truth/1"
GENERATOR = "sample_traces/synth"


def trace_name(rank: int, gz: bool = True) -> str:
    return f"rank-{rank}.synthetic.pt.trace.json" + (".gz" if gz else "")


def nsys_name(rank: int) -> str:
    return f"rank-{rank}.synthetic.nsys.sqlite"


def draw_offsets(cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """Per-rank clock offsets: rank 0 keeps the true clock, every other rank is off by tens of
    µs to ``skew_max_ns``, either way."""
    mag = rng.integers(20_000, max(cfg.skew_max_ns, 20_001), cfg.ranks)
    sign = np.where(rng.random(cfg.ranks) < 0.5, -1, 1)
    off = mag * sign
    off[0] = 0
    return off.astype(np.int64)


def simulate(
    cfg: Config, timeline: Callable[..., Timeline] = Timeline
) -> tuple[RunData, dict[str, Any], list[dict[str, object]]]:
    """The timeline, its truth and the drawn response lengths (nothing written); ``timeline``
    makes the :class:`Timeline` (a subclass injects a shape, e.g. :mod:`.slowstep`)."""
    timeline_seed, offset_seed = np.random.SeedSequence(cfg.seed).spawn(2)
    groups = build_groups(cfg)
    tl = timeline(cfg, groups, np.random.default_rng(timeline_seed))
    schedule = Schedule(cfg, tl)
    schedule.run()
    data = tl.finish()
    truth = compute(cfg, groups, data, schedule.windows)
    offsets = draw_offsets(cfg, np.random.default_rng(offset_seed))
    run = RunData(
        cfg=cfg,
        groups=groups,
        names=tl.names.items,
        ops=data["ops"],
        insts=data["insts"],
        stages=data["stages"],
        host_ops=data["host_ops"],
        windows=schedule.windows,
        offsets=offsets,
        rows_of=_rows_by_rank(data["ops"]["rank"]),
        stage_rows_of=_rows_by_rank(data["stages"]["rank"]),
        host_rows_of=_rows_by_rank(data["host_ops"]["rank"]) if data["host_ops"] else {},
    )
    return run, truth, schedule.responses


def _rows_by_rank(rank: np.ndarray) -> dict[int, np.ndarray]:
    order = np.argsort(rank, kind="stable")
    cut = np.flatnonzero(np.diff(rank[order])) + 1
    return {int(rank[part[0]]): part for part in np.split(order, cut) if part.size}


def generate(cfg: Config, out_dir: str | Path, *, jobs: int | None = None, gz: bool = True,
             level: int = 2, nsys: bool = False,
             timeline: Callable[..., Timeline] = Timeline) -> dict[str, Any]:
    """Write the run's traces and ``truth.json`` into ``out_dir``; return the truth.

    ``jobs`` > 1 writes ranks in that many fresh (spawned) processes, each sent only its own
    rank's rows; the bytes do not depend on it.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run, truth, responses = simulate(cfg, timeline)
    jobs = max(1, min(jobs or 1, cfg.ranks))
    tasks = ((r, run.only(r), out, gz, level, nsys) for r in range(cfg.ranks))
    if jobs == 1:
        for task in tasks:
            _write_rank(task)
    else:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for _ in pool.imap_unordered(_write_rank, tasks, chunksize=1):
                pass
    doc = {
        "format": TRUTH_FORMAT,
        "synthetic": True,
        "generator": GENERATOR,
        "scenario": cfg.scenario,
        "seed": cfg.seed,
        "config": cfg.as_truth()
        | {
            "process_groups": [
                {"pg_name": g.name, "pg_desc": g.desc, "ranks": list(g.ranks), "dim": g.dim}
                for g in run.groups.all
            ]
        },
        "ranks": [
            {
                "rank": r,
                "pool": cfg.pool_of(r),
                "device": device_of(cfg, r),
                "host": host_of(cfg, r),
                "trace": trace_name(r, gz),
                **({"nsys": nsys_name(r)} if nsys else {}),
            }
            for r in range(cfg.ranks)
        ],
        "clock_offsets_ns": {str(r): int(o) for r, o in enumerate(run.offsets)},
        **truth,
        "responses": responses,
    }
    (out / "truth.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def _write_rank(task: tuple[int, RunData, Path, bool, int, bool]) -> None:
    rank, run, out, gz, level, nsys = task
    data = rank_trace(run, rank)
    if gz:
        from isal import igzip

        data = igzip.compress(data, compresslevel=level, mtime=0)
    (out / trace_name(rank, gz)).write_bytes(data)
    if nsys:
        from .nsys import write_nsys

        write_nsys(run, rank, out / nsys_name(rank))
