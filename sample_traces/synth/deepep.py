"""SYNTHETIC expert-parallel MoE steps whose only communication is DeepEP, with exact truth.

Every rank runs, per step and layer, a DualPipe-like overlap of two micro-batches: the compute
stream runs attention of micro-batch A while DeepEP's own stream runs the ``notify_dispatch``
and ``dispatch`` of micro-batch B, and the MLP of one while the other's ``combine`` runs. DeepEP
kernels record no process group, no size and no ``record_param_comms`` (as in real traces);
each dispatch/combine instance ends at the same true time on every rank (the kernel returns
when every peer's tokens have arrived). No clock skew: the truth is per rank, in true time.

The truth (``truth.json``, key ``deepep``) is what docs/analyses.md defines, from the true
intervals: per rank the DeepEP time (union of its kernels), its overlap with compute kernels
(|union(comm) ∩ union(compute)|), the exposed time (Σ per call of the part no compute covers)
and the dimension (``ep``: the EP group is the whole world). ``python -m
sample_traces.synth.deepep -o DIR``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import intervals as iv
from .kineto import DEVICE_NAME, PYTHON, base_time_ns

COMPUTE_STREAM = 7
DEEPEP_STREAM = 24
LAUNCH_NS = 3_000
LAUNCH_GAP_NS = 1_000

ATTN = ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t> >(Flash_fwd_params)", 180_000)
MLP = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
       "execute_segment_k_off_kernel__5x_cublas", 260_000)
NOTIFY = ("void deep_ep::internode::notify_dispatch<false, 8>(int const*, int*, int, int const*, "
          "int*, int, bool const*, int, int, int, int, int*, int*, int*, int*, void*, int, int, "
          "void**, int, int**, int, int, int)", 15_000)
DISPATCH = ("void deep_ep::internode::dispatch<false, 8, true, 8>(int4*, float*, int*, long*, "
            "float*, int*, int*, int*, int*, int*, int4 const*, float const*, long const*, "
            "float const*, int const*, int const*, int const*, int const*, int const*, int, int, "
            "int, int, int, void*, int, int, void**, int, int, int)", 150_000)
COMBINE = ("void deep_ep::internode::combine<__nv_bfloat16, 8, 4096>(int4*, float*, int const*, "
           "int4 const*, float const*, int const*, int const*, int const*, int const*, int const*, "
           "int, int, int, int, void*, int, int, void**, int, int, int)", 210_000)
KERNELS = (ATTN, MLP, NOTIFY, DISPATCH, COMBINE)
COMM = {NOTIFY[0], DISPATCH[0], COMBINE[0]}


@dataclass(frozen=True)
class DeepEPConfig:
    ranks: int = 4
    steps: int = 2
    layers: int = 4
    seed: int = 0
    start_epoch_ns: int = 1_769_162_400_000_000_000


@dataclass
class Rows:
    """Device kernels of all ranks: rank, stream, kernel index into KERNELS, start, end."""

    rank: list[np.ndarray]
    stream: list[int]
    kernel: list[int]
    start: list[np.ndarray]
    end: list[np.ndarray]

    def add(self, stream: int, kernel: int, start: np.ndarray, end: np.ndarray) -> None:
        self.stream.append(stream)
        self.kernel.append(kernel)
        self.start.append(start.copy())
        self.end.append(end.copy())


class DualPipe:
    """The schedule, vectorised over ranks (arrays of shape [ranks])."""

    def __init__(self, cfg: DeepEPConfig) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.rows = Rows([], [], [], [], [])
        self.steps: list[tuple[int, int, int]] = []

    def draw(self, kernel: int, shared: bool = False) -> np.ndarray:
        """Durations (per rank, or one transfer time for all ranks) around the kernel's mean."""
        mean = KERNELS[kernel][1]
        n = 1 if shared else self.cfg.ranks
        return np.rint(mean * self.rng.lognormal(0.0, 0.08, n)).astype(np.int64)

    def gap(self) -> np.ndarray:
        return self.rng.integers(2_000, 8_000, self.cfg.ranks, dtype=np.int64)

    def compute(self, kernel: int, cursor: np.ndarray, after: np.ndarray) -> np.ndarray:
        start = np.maximum(cursor, after) + self.gap()
        end = start + self.draw(kernel)
        self.rows.add(COMPUTE_STREAM, kernel, start, end)
        return end

    def exchange(self, kernel: int, cursor: np.ndarray, after: np.ndarray) -> np.ndarray:
        """A DeepEP kernel: members arrive when their stream and inputs allow; all leave at
        the last arrival plus the transfer."""
        start = np.maximum(cursor, after) + self.gap()
        end = np.full(self.cfg.ranks, start.max() + int(self.draw(kernel, shared=True)[0]))
        self.rows.add(DEEPEP_STREAM, kernel, start, end)
        return end

    def run(self) -> None:
        cfg = self.cfg
        t = np.full(cfg.ranks, cfg.start_epoch_ns + 5_000_000, dtype=np.int64)
        for step in range(1, cfg.steps + 1):
            begin = int(t.max())
            comp = np.full(cfg.ranks, begin, dtype=np.int64)
            comm = comp.copy()
            ready = [comp.copy(), comp.copy()]
            for _ in range(cfg.layers):
                arrived = []
                for mb in (0, 1):
                    comp = self.compute(0, comp, ready[mb])
                    comm = self.exchange(2, comm, comp)
                    comm = self.exchange(3, comm, comm)
                    arrived.append(comm)
                for mb in (0, 1):
                    comp = self.compute(1, comp, arrived[mb])
                    comm = self.exchange(4, comm, comp)
                    ready[mb] = comm
            end = int(np.maximum(comp, comm).max()) + 200_000
            self.steps.append((step, begin, end))
            t[:] = end + 1_000_000

    def frame(self) -> dict[str, np.ndarray]:
        n = len(self.rows.kernel)
        r = self.cfg.ranks
        return {
            "rank": np.tile(np.arange(r), n),
            "stream": np.repeat(self.rows.stream, r),
            "kernel": np.repeat(self.rows.kernel, r),
            "start": np.concatenate(self.rows.start),
            "end": np.concatenate(self.rows.end),
            "call": np.repeat(np.arange(n), r),
        }


def truth(cfg: DeepEPConfig, rows: dict[str, np.ndarray]) -> dict[str, object]:
    """Per rank: DeepEP time, its overlap with compute, exposed time; all along ``ep``."""
    per_rank = []
    comm_kernels = np.isin(rows["kernel"], [2, 3, 4])
    for r in range(cfg.ranks):
        mine = rows["rank"] == r
        c, k = mine & comm_kernels, mine & ~comm_kernels
        comm = iv.span(rows["start"][c], rows["end"][c])
        comp = iv.span(rows["start"][k], rows["end"][k])
        hidden = iv.overlap_each(rows["start"][c], rows["end"][c], comp)
        per_rank.append({
            "rank": r,
            "comm_ns": iv.measure(comm),
            "compute_ns": iv.measure(comp),
            "overlap_ns": iv.measure(iv.intersect(comm, comp)),
            "time_ns": int((rows["end"][c] - rows["start"][c]).sum()),
            "exposed_ns": int(((rows["end"][c] - rows["start"][c]) - hidden).sum()),
            "calls": int(c.sum()),
        })
    names = {KERNELS[i][0]: int((rows["kernel"] == i).sum() // cfg.ranks) for i in (2, 3, 4)}
    return {
        "family": "deepep",
        "dim": "ep",
        "coll": "all_to_all",
        "group": list(range(cfg.ranks)),
        "calls_per_rank_by_kernel": names,
        "ranks": per_rank,
    }


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def rank_trace(cfg: DeepEPConfig, rank: int, rows: dict[str, np.ndarray],
               steps: list[tuple[int, int, int]]) -> str:
    """One rank's Kineto JSON: kernels with their launches, ProfilerStep ranges."""
    base = base_time_ns(cfg.start_epoch_ns)
    pid, device = 4000 + rank, rank
    mine = np.flatnonzero(rows["rank"] == rank)
    mine = mine[np.argsort(rows["start"][mine], kind="stable")]
    events = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
         "args": {"name": PYTHON}},
        {"name": "process_labels", "ph": "M", "ts": 0, "pid": device, "tid": 0,
         "args": {"labels": f"GPU {device}"}},
    ]
    for s in (COMPUTE_STREAM, DEEPEP_STREAM):
        events.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": device, "tid": s,
                       "args": {"name": f"stream {s} "}})
    lines = [json.dumps(e) for e in events]
    for step, begin, end in steps:
        lines.append(
            f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", '
            f'"pid": {pid}, "tid": {pid}, "ts": {_us(begin - 100_000 - base)}, '
            f'"dur": {_us(end - begin + 100_000)}, "args": {{"External id": {step}}}}}'
        )
    host = {s: b - 90_000 for s, b, _ in steps}
    step_of = np.searchsorted([b for _, b, _ in steps], rows["start"][mine], side="right")
    for corr, (i, st) in enumerate(zip(mine, step_of, strict=True), start=1):
        name = KERNELS[int(rows["kernel"][i])][0]
        start, end = int(rows["start"][i]), int(rows["end"][i])
        launch = host[int(st)]
        host[int(st)] = launch + LAUNCH_NS + LAUNCH_GAP_NS
        if launch + LAUNCH_NS >= start:
            raise RuntimeError("the host fell behind its kernels; lengthen the kernels")
        lines.append(
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, '
            f'"tid": {pid}, "ts": {_us(launch - base)}, "dur": {_us(LAUNCH_NS)}, '
            f'"args": {{"correlation": {corr}}}}}'
        )
        lines.append(
            f'{{"ph": "X", "cat": "kernel", "name": {json.dumps(name)}, "pid": {device}, '
            f'"tid": {int(rows["stream"][i])}, "ts": {_us(start - base)}, '
            f'"dur": {_us(end - start)}, "args": {{"device": {device}, '
            f'"stream": {int(rows["stream"][i])}, "correlation": {corr}}}}}'
        )
    header = {
        "schemaVersion": 1,
        "rlperf_synthetic": True,
        "deviceProperties": [{"id": d, "name": DEVICE_NAME} for d in range(cfg.ranks)],
        "distributedInfo": {
            "backend": "nccl", "rank": rank, "world_size": cfg.ranks, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": cfg.ranks, "ranks": list(range(cfg.ranks))}],
        },
    }
    head = json.dumps(header)[:-1]
    tail = (f'"traceName": "synthetic DeepEP DualPipe trace, rank {rank} (sample_traces/synth)", '
            f'"displayTimeUnit": "ms", "baseTimeNanoseconds": {base}}}')
    return head + ', "traceEvents": [\n' + ",\n".join(lines) + "\n], " + tail + "\n"


def trace_name(rank: int) -> str:
    return f"rank-{rank}.deepep.synthetic.pt.trace.json"


def generate(cfg: DeepEPConfig, out_dir: str | Path) -> dict[str, object]:
    """Write one Kineto trace per rank and ``truth.json``; return the truth document."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sched = DualPipe(cfg)
    sched.run()
    rows = sched.frame()
    for r in range(cfg.ranks):
        (out / trace_name(r)).write_text(rank_trace(cfg, r, rows, sched.steps))
    doc = {
        "format": "rlperf-truth/1",
        "synthetic": True,
        "generator": "sample_traces/synth/deepep.py",
        "scenario": "deepep_dualpipe",
        "seed": cfg.seed,
        "config": asdict(cfg),
        "steps": [{"step": s, "start_ns": b, "end_ns": e} for s, b, e in sched.steps],
        "deepep": truth(cfg, rows),
    }
    (out / "truth.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sample_traces.synth.deepep",
        description="Write SYNTHETIC DeepEP DualPipe traces (one Kineto JSON per rank) and "
        "truth.json.",
    )
    p.add_argument("-o", "--out", type=Path, required=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if not 2 <= a.ranks <= 64 or a.steps < 1 or a.layers < 1:
        p.error("--ranks 2 to 64, --steps and --layers at least 1")
    generate(DeepEPConfig(a.ranks, a.steps, a.layers, a.seed), a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
