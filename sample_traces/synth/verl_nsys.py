"""verl's multi-process Nsight Systems layout as one SQLite export, with its truth (SYNTHETIC).

verl profiles its single controller and every worker process with nsys; a report of the job
holds them all. Here, in the nsys export schema of :mod:`.nsys`:

* the controller (``TaskRunner``): per step an NVTX ``step N`` range enclosing the driver's
  ``marked_timer`` ranges (``gen``, ``reward``, ``old_log_prob``, ``ref``, ``values``, ``adv``,
  ``update_critic``, ``update_actor``), no GPU work; ``save_checkpoint`` runs after the step range
  closed (verl ≥ 0.6 saves outside ``timing_s/step``);
* each worker (``WorkerDict``, one per GPU): its own ``step N`` range enclosing the worker methods
  the controller dispatched (``generate_sequences`` with ``update_weights`` nested at its start,
  ``compute_log_prob``, ``compute_ref_log_prob``, ``compute_values``, ``update_critic``,
  ``update_actor``), kernels launched inside them, and ``save_checkpoint`` after the step.

Nothing in the export states a rank (as in verl's reports: the workers' ``RANK`` is set inside
Ray, not in the command nsys launched). The truth: the controller is no rank, workers are
ranks 0… in pid order (verl starts its worker group in rank order); step windows; and per step,
process and stage the time the innermost range gives it (``update_weights`` carved out of
``generate_sequences``), all exact.

``python -m sample_traces.synth.verl_nsys -o DIR [--workers 4] [--steps 3] [--seed 0]``
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .nsys import SCHEMA, VM

FORMAT = "rlperf-truth/verl-nsys/1"
EPOCH_NS = 1_760_000_000_000_000_000
SESSION_LEAD_NS = 200_000_000
CONTROLLER_PID = 4_100
WORKER_PID_BASE = 4_200
MS = 1_000_000
US = 1_000

DRIVER_TIMERS: tuple[tuple[str, str, float], ...] = (
    ("gen", "rollout", 40.0),
    ("reward", "reward", 3.0),
    ("old_log_prob", "old_logprob", 8.0),
    ("ref", "ref_logprob", 7.0),
    ("values", "values", 6.0),
    ("adv", "advantage", 1.0),
    ("update_critic", "critic_update", 15.0),
    ("update_actor", "actor_update", 20.0),
)
"""Controller timer → its stage and median length (ms), in the order verl runs them."""
WORKER_METHOD: dict[str, tuple[str, str]] = {
    "gen": ("generate_sequences", "rollout"),
    "old_log_prob": ("compute_log_prob", "old_logprob"),
    "ref": ("compute_ref_log_prob", "ref_logprob"),
    "values": ("compute_values", "values"),
    "update_critic": ("update_critic", "critic_update"),
    "update_actor": ("update_actor", "actor_update"),
}
"""Controller timer → the worker method it dispatches (and that method's stage)."""
NESTED = ("update_weights", "weight_sync")
"""Weight resharding at the start of every worker's generation (colocated)."""
CHECKPOINT = ("save_checkpoint", "checkpoint")
KERNELS = ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
           "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>")


@dataclass(frozen=True)
class Layout:
    workers: int = 4
    steps: int = 3
    seed: int = 0
    gpu: bool = True
    checkpoint_every: int = 2


@dataclass
class Process:
    pid: int
    rank: int
    name: str
    ranges: list[tuple[str, int, int, int, str | None]]
    """``(name, step, start, end, stage)``; times in ns since the session start."""
    kernels: list[tuple[int, int, int, int, int]]
    """``(launch start, launch end, kernel start, kernel end, name index)``."""


def build(layout: Layout) -> list[Process]:
    """The controller (first) and the workers, on one clock (one host, one session)."""
    if layout.workers < 1 or layout.steps < 1:
        raise ValueError("verl_nsys: at least one worker and one step")
    rng = np.random.default_rng(layout.seed)
    controller = Process(CONTROLLER_PID, -1, "python3", [], [])
    workers = [
        Process(WORKER_PID_BASE + 7 * r, r, "ray::WorkerDict", [], [])
        for r in range(layout.workers)
    ]
    t = SESSION_LEAD_NS
    for step in range(1, layout.steps + 1):
        t = _step(layout, rng, step, t, controller, workers)
    return [controller, *workers]


def _ms(rng: np.random.Generator, median: float) -> int:
    return int(median * MS * rng.uniform(0.8, 1.25))


def _step(layout: Layout, rng: np.random.Generator, step: int, t0: int,
          controller: Process, workers: list[Process]) -> int:
    """One step from ``t0``; returns where the next one starts."""
    t = t0 + 300 * US
    worker_step_start = [t0 + int(rng.integers(20, 120)) * US for _ in workers]
    for timer, stage, median in DRIVER_TIMERS:
        end = t + _ms(rng, median)
        controller.ranges.append((timer, step, t, end, stage))
        if timer in WORKER_METHOD:
            method, method_stage = WORKER_METHOD[timer]
            for w in workers:
                _method(rng, w, step, t, end, method, method_stage, nested=timer == "gen",
                        gpu=layout.gpu)
        t = end + int(rng.integers(100, 500)) * US
    step_end = t
    controller.ranges.append((f"step {step}", step, t0, step_end, None))
    for w, start in zip(workers, worker_step_start, strict=True):
        w.ranges.append((f"step {step}", step, start, step_end - int(rng.integers(20, 150)) * US,
                         None))
    if step % layout.checkpoint_every == 0:
        start = step_end + 200 * US
        end = start + _ms(rng, 12.0)
        controller.ranges.append((CHECKPOINT[0], step, start, end, CHECKPOINT[1]))
        for w in workers:
            _method(rng, w, step, start, end, *CHECKPOINT, nested=False, gpu=False)
        step_end = end
    return step_end + 2 * MS


def _method(rng: np.random.Generator, w: Process, step: int, start: int, end: int, name: str,
            stage: str, *, nested: bool, gpu: bool) -> None:
    """A worker method dispatched by a controller timer ``[start, end)``: it starts after the
    dispatch and returns before the timer closes."""
    s = start + int(rng.integers(30, 400)) * US
    e = end - int(rng.integers(30, 400)) * US
    w.ranges.append((name, step, s, e, stage))
    inner_end = s
    if nested:
        inner_end = s + 10 * US + _ms(rng, 1.5)
        w.ranges.append((NESTED[0], step, s + 10 * US, inner_end, NESTED[1]))
    if gpu:
        n = 6
        for i, launch in enumerate(np.linspace(inner_end + 20 * US, e - 400 * US, n)):
            ls = int(launch)
            k0 = ls + 12 * US
            w.kernels.append((ls, ls + 6 * US, k0, k0 + 150 * US, i % len(KERNELS)))


def truth(layout: Layout, processes: list[Process], session_ns: int) -> dict[str, Any]:
    """Ranks, step windows and stage time per step × rank × stage (innermost range decides;
    ``other``: the time between the process's first and last stage range of the step that no
    stage range covers)."""
    windows: dict[int, list[int]] = {}
    stages: dict[tuple[int, int, str], int] = {}
    for p in processes:
        for _name, step, s, e, _stage in p.ranges:
            w = windows.setdefault(step, [s, e])
            w[0], w[1] = min(w[0], s), max(w[1], e)
        for (step, stage), ns in _own_time(p).items():
            stages[(step, p.rank, stage)] = stages.get((step, p.rank, stage), 0) + ns
        for step in {r[1] for r in p.ranges if r[4] is not None}:
            staged = [r for r in p.ranges if r[4] is not None and r[1] == step]
            span = max(r[3] for r in staged) - min(r[2] for r in staged)
            own = sum(ns for (k, _), ns in _own_time(p).items() if k == step)
            stages[(step, p.rank, "other")] = span - own
    return {
        "format": FORMAT,
        "synthetic": True,
        "generator": "sample_traces/synth/verl_nsys.py",
        "config": {"workers": layout.workers, "steps": layout.steps, "seed": layout.seed,
                   "gpu": layout.gpu, "checkpoint_every": layout.checkpoint_every},
        "processes": [
            {"pid": p.pid, "rank": p.rank, "role": "driver" if p.rank < 0 else "worker",
             "name": p.name}
            for p in processes
        ],
        "steps": [
            {"step": k, "start_ns": session_ns + w[0], "end_ns": session_ns + w[1]}
            for k, w in sorted(windows.items())
        ],
        "stages": [
            {"step": k[0], "rank": k[1], "stage": k[2], "time_ns": ns}
            for k, ns in sorted(stages.items())
        ],
    }


def _own_time(p: Process) -> dict[tuple[int, str], int]:
    """Per step and stage, the time no deeper stage range of the process takes."""
    out: dict[tuple[int, str], int] = {}
    staged = [r for r in p.ranges if r[4] is not None]
    for name, step, s, e, stage in staged:
        inner = sum(
            min(e, e2) - max(s, s2)
            for n2, _, s2, e2, _ in staged
            if n2 != name and s <= s2 and e2 <= e and (s2, e2) != (s, e)
        )
        key = (step, str(stage))
        out[key] = out.get(key, 0) + (e - s - inner)
    return out


def write(layout: Layout, out: Path) -> dict[str, Any]:
    """``out/verl_nsys.sqlite`` and ``out/truth.json``; returns the truth."""
    out.mkdir(parents=True, exist_ok=True)
    processes = build(layout)
    session = EPOCH_NS
    note = f"verl multi-process layout, {layout.workers} workers"
    write_report(out / "verl_nsys.sqlite", processes, note, session)
    doc = truth(layout, processes, session)
    (out / "truth.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return doc


def write_report(path: Path, processes: list[Process], note: str,
                 session: int = EPOCH_NS) -> None:
    """One nsys-schema SQLite export holding ``processes`` (``note`` says what it is)."""
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        _write_db(con, processes, note, session)
        con.commit()
    finally:
        con.close()


def _write_db(con: sqlite3.Connection, processes: list[Process], note: str,
              session: int) -> None:
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings))

    for table, columns in SCHEMA.items():
        con.execute(f"CREATE TABLE {table} ({columns})")
    launch = sid("cudaLaunchKernel_v7000")
    main_thread = sid("python3")
    for p in processes:
        gpid = (VM << 48) | (p.pid << 24)
        gtid = gpid | p.pid
        con.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
            f"VALUES (?, ?, 59, ?, {gtid}, 0)",
            sorted((s, e, name) for name, _, s, e, _ in p.ranges),
        )
        device = max(p.rank, 0)
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, "
            f"correlationId, nameId, returnValue) VALUES (?, ?, 0, {gtid}, ?, {launch}, 0)",
            [(ls, le, i + 1) for i, (ls, le, _, _, _) in enumerate(p.kernels)],
        )
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, "
            "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, "
            "gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, "
            "localMemoryPerThread, localMemoryTotal, gridId) "
            f"VALUES (?, ?, {device}, 1, 7, ?, {gpid}, ?, ?, 128, 132, 1, 1, 256, 1, 1, 0, 0, "
            "0, 0, ?)",
            [(ks, ke, i + 1, sid(KERNELS[k]), sid(KERNELS[k].split("<")[0].split()[-1]), i + 1)
             for i, (_, _, ks, ke, k) in enumerate(p.kernels)],
        )
        con.execute("INSERT INTO ThreadNames VALUES (?, 0, ?)", (main_thread, gtid))
        con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (gpid, p.pid, p.name))
    gpus = sorted({max(p.rank, 0) for p in processes if p.kernels})
    con.executemany(
        "INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, isDiscrete, totalMemory, "
        "smCount, chipName, cuDevice, computeMajor, computeMinor) VALUES (?, ?, "
        "'NVIDIA H100 80GB HBM3', ?, 1, 85029158912, 132, 'GH100', ?, 9, 0)",
        [(VM << 48, d, f"0000:{0x18 + 16 * d:02x}:00.0", d) for d in gpus],
    )
    con.executemany(
        "INSERT INTO StringIds (id, value) VALUES (?, ?)", [(i, s) for s, i in strings.items()]
    )
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (session,))
    con.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, '', ?, 0, ?)",
                    [(VM << 48, "Hostname", "node-0")])
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
        ("EXPORT_PRODUCT_VERSION", "2025.1.1.110"),
        ("EXPORT_SCHEMA_VERSION", "3.17.1"),
        ("RLPERF_SYNTHETIC", f"synthetic rlperf trace (sample_traces/synth/verl_nsys.py), {note}, "
         "never captured by nsys"),
    ])
    con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", [
        ("PROCESS_0:COMMAND", "python3"),
        ("PROCESS_0:ARGUMENT_1", "-m"),
        ("PROCESS_0:ARGUMENT_2", "verl.trainer.main_ppo"),
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sample_traces.synth.verl_nsys",
                                description="Write verl's multi-process nsys layout (SYNTHETIC) "
                                "as one SQLite export with truth.json.")
    p.add_argument("-o", "--out", type=Path, required=True)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-gpu", action="store_true", help="CPU-only workers (no kernels)")
    a = p.parse_args(argv)
    layout = Layout(workers=a.workers, steps=a.steps, seed=a.seed, gpu=not a.no_gpu)
    doc = write(layout, a.out)
    print(f"verl nsys layout: {layout.workers} workers, {len(doc['steps'])} steps → {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
