"""DualPipe-style pipeline chunk annotations with exact ground truth (synthetic, labelled so).

One Kineto trace per pipeline rank of a 1F1B schedule whose backward is split into input and
weight gradients, each chunk recorded as DeepSeek's profile-data records it: a ``1F1B`` range
around the schedule, and per chunk the part ranges ``attn(F)``, ``dispatch(F)``, ``mlp(F)``,
``combine(F)`` / ``combine(B)``, ``mlp(B)``, ``dispatch(B)``, ``attn(B)`` / ``mlp(W)``,
``attn(W)``, each launching one kernel. ``truth.json`` holds, per rank and step, the time in
each phase, the step's pipeline window and the bubble (docs/analyses.md, "Pipeline phases"),
computed from the generator's own intervals (chunks on one thread never overlap, so the phase
time is a sum). Same arguments ⇒ byte-identical files.

    python -m sample_traces.synth.dualpipe -o out/dualpipe --pp 4 --micro-batches 6 --steps 2
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .schedule import one_f_one_b

FORMAT = "rlperf-truth/1"
BASE_NS = 1_767_225_600_000_000_000
"""2026-01-01 00:00 UTC: ``baseTimeNanoseconds``; ``ts`` are µs after it."""
PARTS: dict[str, tuple[tuple[str, int], ...]] = {
    "F": (("attn(F)", 300_000), ("dispatch(F)", 80_000), ("mlp(F)", 250_000),
          ("combine(F)", 80_000)),
    "B": (("combine(B)", 80_000), ("mlp(B)", 280_000), ("dispatch(B)", 80_000),
          ("attn(B)", 450_000)),
    "W": (("mlp(W)", 150_000), ("attn(W)", 60_000)),
}
"""Chunk kind → its part ranges and their mean durations (ns), in execution order."""
PHASE = {"F": "forward", "B": "backward_input", "W": "backward_weight"}
P2P_NS = 40_000
"""Send/receive latency between neighbouring stages."""
OPTIMIZER_NS = 200_000
STEP_GAP_NS = 50_000
STREAM = 7


@dataclass(frozen=True)
class Chunk:
    rank: int
    step: int
    kind: str
    micro_batch: int
    parts: tuple[tuple[str, int, int], ...]
    """(name, start_ns, end_ns) of each part range."""


def stage_order(stage: int, pp: int, micro: int) -> list[tuple[str, int]]:
    """1F1B on ``stage`` with each backward's weight chunk right after it (B split into B, W)."""
    return [
        op for kind, k in one_f_one_b(stage, pp, micro)
        for op in ([(kind, k)] if kind == "F" else [("B", k), ("W", k)])
    ]


def _parts(kind: str, start: int, rng: np.random.Generator) -> tuple[tuple[str, int, int], ...]:
    out, t = [], start
    for name, mean in PARTS[kind]:
        dur = int(mean * rng.uniform(0.8, 1.2))
        out.append((name, t, t + dur))
        t += dur + int(rng.integers(3_000, 8_000))
    return tuple(out)


def simulate_step(pp: int, micro: int, step: int, start: int,
                  rng: np.random.Generator) -> list[Chunk]:
    """Every chunk of one step: each starts when its stage is free and its input has arrived
    (a forward from the previous stage, a backward from the next)."""
    orders = [stage_order(s, pp, micro) for s in range(pp)]
    done: dict[tuple[str, int, int], int] = {}
    free = [start + int(rng.integers(20_000, 60_000)) for _ in range(pp)]
    position = [0] * pp
    chunks: list[Chunk] = []
    while any(position[s] < len(orders[s]) for s in range(pp)):
        progressed = False
        for s in range(pp):
            if position[s] == len(orders[s]):
                continue
            kind, i = orders[s][position[s]]
            need = {"F": ("F", s - 1, i), "B": ("B", s + 1, i) if s < pp - 1 else ("F", s, i),
                    "W": ("B", s, i)}[kind]
            if need[1] >= 0 and need not in done:
                continue
            ready = done.get(need, free[s]) + (P2P_NS if need[1] != s and need[1] >= 0 else 0)
            parts = _parts(kind, max(free[s], ready), rng)
            chunks.append(Chunk(s, step, kind, i, parts))
            done[(kind, s, i)] = free[s] = parts[-1][2]
            position[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError("the schedule deadlocked")
    return chunks


def simulate(pp: int, micro: int, steps: int, seed: int) -> dict[str, Any]:
    """The chunks, the ``1F1B`` ranges, the step windows and the truth."""
    rng = np.random.default_rng(seed)
    chunks: list[Chunk] = []
    schedules: list[tuple[int, int, int, int]] = []
    windows: list[tuple[int, int, int]] = []
    t = 0
    for step in range(1, steps + 1):
        mine = simulate_step(pp, micro, step, t, rng)
        for rank in range(pp):
            own = [c for c in mine if c.rank == rank]
            lo = min(c.parts[0][1] for c in own) - int(rng.integers(5_000, 15_000))
            hi = max(c.parts[-1][2] for c in own) + int(rng.integers(5_000, 15_000))
            schedules.append((rank, step, lo, hi))
        end = max(hi for _, s, _, hi in schedules if s == step) + OPTIMIZER_NS
        windows.append((step, t, end))
        chunks += mine
        t = end + STEP_GAP_NS
    return {"chunks": chunks, "schedules": schedules, "windows": windows,
            "truth": truth(pp, chunks, schedules)}


def truth(pp: int, chunks: list[Chunk], schedules: list[tuple[int, int, int, int]]
          ) -> list[dict[str, Any]]:
    """Per rank and step: phase times (sums: a rank's parts never overlap), the step's pipeline
    window (its ``1F1B`` ranges' span over all ranks) and the bubble (window − busy)."""
    rows = []
    for step in sorted({c.step for c in chunks}):
        spans = [(lo, hi) for _, s, lo, hi in schedules if s == step]
        window = max(hi for _, hi in spans) - min(lo for lo, _ in spans)
        for rank in range(pp):
            own = [c for c in chunks if c.rank == rank and c.step == step]
            phase = {p: 0 for p in PHASE.values()}
            for c in own:
                phase[PHASE[c.kind]] += sum(e - s for _, s, e in c.parts)
            busy = sum(phase.values())
            rows.append({"rank": rank, "step": step, "window_ns": window,
                         **{f"{p}_ns": v for p, v in phase.items()}, "busy_ns": busy,
                         "bubble_ns": window - busy, "chunks": sum(len(c.parts) for c in own)})
    return rows


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def rank_trace(rank: int, pp: int, sim: dict[str, Any]) -> dict[str, Any]:
    """One rank's Kineto document: host ranges on the main thread, one launch and one kernel
    per part range."""
    pid = 1000 + rank
    events: list[dict[str, Any]] = []

    def span(cat: str, name: str, start: int, end: int, tid: int, **args: Any) -> None:
        events.append({"ph": "X", "cat": cat, "name": name, "pid": pid if cat != "kernel" else 0,
                       "tid": tid, "ts": _us(start), "dur": _us(end - start),
                       **({"args": args} if args else {})})

    for step, lo, hi in sim["windows"]:
        span("user_annotation", f"ProfilerStep#{step}", lo, hi, pid)
    for r, _, lo, hi in sim["schedules"]:
        if r == rank:
            span("user_annotation", "1F1B", lo, hi, pid)
    corr = 0
    for chunk in (c for c in sim["chunks"] if c.rank == rank):
        for name, start, end in chunk.parts:
            corr += 1
            span("user_annotation", name, start, end, pid)
            span("cuda_runtime", "cudaLaunchKernel", start + 1_000, start + 5_000, pid,
                 correlation=corr)
            span("kernel", f"synthetic_{name[:-3]}_kernel", start + 7_000,
                 start + 7_000 + (end - start) * 7 // 10, STREAM, correlation=corr, stream=STREAM,
                 device=0)
    group = {"pg_name": "1", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP",
             "backend_config": "cuda:nccl", "pg_size": pp, "ranks": list(range(pp))}
    world = dict(group, pg_name="0", pg_desc="default_pg")
    return {
        "schemaVersion": 1,
        "rlperf_synthetic": True,
        "traceName": "synthetic DualPipe-style trace written by sample_traces.synth.dualpipe",
        "deviceProperties": [{"id": 0, "name": "synthetic H100"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": pp,
                            "pg_count": 2, "pg_config": [world, group]},
        "host_name": "synthetic-node-0",
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": sorted(events, key=lambda e: (e["ts"], -e["dur"])),
    }


def generate(out_dir: str | Path, *, pp: int = 4, micro_batches: int = 6, steps: int = 2,
             seed: int = 7) -> dict[str, Any]:
    """Write one trace per rank and ``truth.json`` into ``out_dir``; return the truth."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sim = simulate(pp, micro_batches, steps, seed)
    for rank in range(pp):
        body = json.dumps(rank_trace(rank, pp, sim)).encode()
        (out / f"rank-{rank}.synthetic.pt.trace.json.gz").write_bytes(
            gzip.compress(body, mtime=0)
        )
    doc = {
        "format": FORMAT,
        "synthetic": True,
        "generator": "sample_traces.synth.dualpipe",
        "scenario": "dualpipe",
        "seed": seed,
        "config": {"pp": pp, "micro_batches": micro_batches, "steps": steps},
        "step_windows": [{"step": s, "start_ns": lo, "end_ns": hi} for s, lo, hi in sim["windows"]],
        "pipeline_phases": sim["truth"],
    }
    (out / "truth.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("-o", "--out", required=True)
    cli.add_argument("--pp", type=int, default=4)
    cli.add_argument("--micro-batches", type=int, default=6)
    cli.add_argument("--steps", type=int, default=2)
    cli.add_argument("--seed", type=int, default=7)
    a = cli.parse_args()
    generate(a.out, pp=a.pp, micro_batches=a.micro_batches, steps=a.steps, seed=a.seed)


if __name__ == "__main__":
    main()
