"""The true timeline of a synthetic run: every device operation, collective and stage range.

Mechanism only (the schedules in :mod:`.schedule` decide what runs when). Time is integer
nanoseconds on one true clock. Each rank has a cursor (``t``: when its host and compute stream
are next free) and, per communication stream, the time that stream is next free. Work is added
a block at a time, vectorised over every rank of the block:

* :meth:`Timeline.lockstep` — iterations of compute kernels run by teams (TP groups) in
  lockstep, each iteration optionally ending in the team's collective (decode steps, forward
  chunks): per-kernel durations and launch gaps are drawn as arrays, and the recurrence
  "next iteration starts when the collective of this one ends" is a cumulative sum;
* :meth:`Timeline.collective` — one call on every group of a partition: each member arrives
  when its cursor (or a given ready time) and the stream allow, all leave together at
  ``max(arrival) + transfer``, so early members wait (sync wait);
* :meth:`Timeline.p2p` — pipeline send/recv pairs;
* :meth:`Timeline.stage` — a stage range around a block (transition gap before, lead and
  tail around the kernels).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .config import Config, Groups
from .kernels import DTYPE_BYTES, NCCL_KERNELS, Coll, Kernel

COMPUTE = 7
STREAMS: dict[str, int] = {
    "tp": 20, "rollout_tp": 20, "cp": 24, "ep": 28, "dp": 32, "pp": 36, "sp": 40,
    "fsdp": 44, "fsdp_rs": 48, "sync": 52, "world": 56,
}
"""CUDA stream per communication kind (NCCL kernels run on their own streams)."""

KERNEL, MEMCPY, MEMSET = 0, 1, 2
ROLE_NONE, ROLE_SEND, ROLE_RECV = 0, 1, 2

LAUNCH_GAP_NS = (2_000, 9_000)
GRAPH_GAP_NS = (800, 2_000)
HOST_STALL_P = 0.015
HOST_STALL_NS = (60_000, 450_000)
"""Host-bound gaps: launch overhead between kernels, and now and then a Python/host stall."""


@dataclass
class Names:
    """Interned strings (kernel and op names): id → name."""

    items: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def id(self, name: str) -> int:
        if name not in self.index:
            self.index[name] = len(self.items)
            self.items.append(name)
        return self.index[name]


@dataclass
class Table:
    """Columns appended in chunks, concatenated once."""

    chunks: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, **cols: np.ndarray) -> None:
        n = max(np.size(v) for v in cols.values())
        for k, v in cols.items():
            arr = np.asarray(v).ravel()
            if arr.size == 1 and n > 1:
                arr = np.full(n, arr[0], dtype=arr.dtype)
            self.chunks.setdefault(k, []).append(arr)

    def finish(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) for k, v in self.chunks.items()}


class Timeline:
    def __init__(self, cfg: Config, groups: Groups, rng: np.random.Generator) -> None:
        self.cfg = cfg
        self.groups = groups
        self.rng = rng
        self.names = Names()
        world = cfg.ranks
        self.t = np.zeros(world, dtype=np.int64)
        self.free: dict[int, np.ndarray] = {}
        self.speed = 1.0 + rng.normal(0.0, 0.015, world).clip(-0.04, 0.04)
        self.ops = Table()
        self.insts = Table()
        self.n_insts = 0
        self.stages = Table()
        self.host_ops = Table()
        self.seq = np.zeros(len(groups.all), dtype=np.int64)
        self.launches = 0
        self.step = 0
        self.stage_code = -1
        self._pg_of: dict[str, np.ndarray] = {}

    # --- drawing ---------------------------------------------------------------------------

    def gaps(self, shape: tuple[int, ...], lo_hi: tuple[int, int] = LAUNCH_GAP_NS) -> np.ndarray:
        g = self.rng.integers(lo_hi[0], lo_hi[1], size=shape, dtype=np.int64)
        stall = self.rng.random(shape) < HOST_STALL_P
        return g + stall * self.rng.integers(*HOST_STALL_NS, size=shape, dtype=np.int64)

    def uniform(self, lo: int, hi: int, n: int) -> np.ndarray:
        return self.rng.integers(lo, hi, size=n, dtype=np.int64)

    def transfer(self, coll: Coll, group_size: int, shape: tuple[int, ...]) -> np.ndarray:
        nbytes = max(coll.shape(group_size)) * DTYPE_BYTES
        base = coll.latency_ns + nbytes / coll.bw_gbps * (1 + 0.1 * np.log2(max(group_size, 2)))
        return np.rint(base * self.rng.lognormal(0.0, 0.05, shape)).astype(np.int64)

    def free_of(self, stream: int) -> np.ndarray:
        if stream not in self.free:
            self.free[stream] = np.zeros(self.cfg.ranks, dtype=np.int64)
        return self.free[stream]

    def pg_of(self, key: str, ranks: np.ndarray) -> np.ndarray:
        """Process-group index (into ``groups.all``) of the ``key`` group each rank is in."""
        if key not in self._pg_of:
            mat, pgs = self.groups.partitions[key]
            lookup = np.full(self.cfg.ranks, -1, dtype=np.int64)
            lookup[mat] = pgs[:, None]
            self._pg_of[key] = lookup
        return self._pg_of[key][ranks]

    # --- recording -------------------------------------------------------------------------

    def emit(
        self,
        rank: np.ndarray,
        stream: int,
        kind: int,
        names: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        launch: np.ndarray,
        inst: np.ndarray | int = -1,
        role: np.ndarray | int = 0,
        nbytes: np.ndarray | int = 0,
        op: np.ndarray | int = -1,
    ) -> None:
        n = np.size(start)
        self.ops.add(
            rank=np.broadcast_to(rank, np.shape(start)).astype(np.int32),
            stream=np.full(n, stream, dtype=np.int32),
            kind=np.full(n, kind, dtype=np.int8),
            name=np.broadcast_to(names, np.shape(start)).astype(np.int32),
            op=np.broadcast_to(op, np.shape(start)).astype(np.int32),
            start=np.asarray(start, dtype=np.int64),
            end=np.asarray(end, dtype=np.int64),
            launch=np.broadcast_to(launch, np.shape(start)).astype(np.int64),
            inst=np.broadcast_to(inst, np.shape(start)).astype(np.int64),
            role=np.broadcast_to(role, np.shape(start)).astype(np.int8),
            nbytes=np.broadcast_to(nbytes, np.shape(start)).astype(np.int64),
            step=np.full(n, self.step, dtype=np.int32),
            stage=np.full(n, self.stage_code, dtype=np.int16),
        )

    def new_launches(self, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape))
        ids = np.arange(self.launches, self.launches + n, dtype=np.int64).reshape(shape)
        self.launches += n
        return ids

    def new_instances(
        self, pgs: np.ndarray, per_pg: int, coll: Coll, group_size: np.ndarray
    ) -> np.ndarray:
        """Instances [len(pgs), per_pg] with consecutive ``Seq`` per process group."""
        count = len(pgs) * per_pg
        ids = np.arange(self.n_insts, self.n_insts + count, dtype=np.int64).reshape(
            len(pgs), per_pg
        )
        seq = self.seq[pgs][:, None] + np.arange(per_pg)[None, :]
        np.add.at(self.seq, pgs, per_pg)
        shapes = np.array([coll.shape(int(m)) for m in group_size], dtype=np.int64).reshape(-1, 2)
        self.insts.add(
            pg=np.repeat(pgs, per_pg), seq=seq.ravel(),
            coll=np.full(count, self.names.id(coll.name), dtype=np.int32),
            in_nelems=np.repeat(shapes[:, 0], per_pg),
            out_nelems=np.repeat(shapes[:, 1], per_pg),
            group_size=np.repeat(group_size, per_pg),
        )
        self.n_insts += count
        return ids

    # --- blocks of work --------------------------------------------------------------------

    def kernel_ids(self, kernels: Sequence[Kernel]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        names = np.array([self.names.id(k.name) for k in kernels], dtype=np.int32)
        ops = np.array([self.names.id(k.op) for k in kernels], dtype=np.int32)
        mean = np.array([k.mean_ns for k in kernels], dtype=np.float64)
        return names, ops, mean

    def lockstep(self, teams: np.ndarray, kernels: Sequence[Kernel], iters: int,
                 coll: Coll | None = None, key: str = "tp", graph: bool = False,
                 scale: np.ndarray | None = None) -> np.ndarray:
        """``iters`` iterations of ``kernels`` per team member; with ``coll``, each iteration
        ends in the team's collective and the next starts when it completes.

        ``teams`` is [T, m]; ``scale`` [T, iters] stretches durations. Returns the time each
        member finished each iteration, [T, iters, m].
        """
        T, m = teams.shape
        J, K = iters, len(kernels)
        names, ops, mean = self.kernel_ids(kernels)
        d = mean * self.rng.lognormal(0.0, 0.04, (T, J, m, K)) * self.speed[teams][:, None, :, None]
        if scale is not None:
            d = d * scale[:, :, None, None]
        d = np.maximum(np.rint(d).astype(np.int64), 1_000)
        g = self.gaps((T, J, m, K))
        if graph:
            g[..., 1:] = self.rng.integers(*GRAPH_GAP_NS, size=(T, J, m, K - 1), dtype=np.int64)
        cum = np.cumsum(g + d, axis=-1)
        local = cum[..., -1]
        t0 = self.t[teams]
        with_coll = coll is not None and m > 1
        if not with_coll:
            run = np.cumsum(local, axis=1)
            it_end = t0[:, None, :] + run
            it_start = it_end - local
        else:
            assert coll is not None
            arrive_local = local + self.gaps((T, J, m))
            tr = self.transfer(coll, m, (T, J))
            first = (t0 + arrive_local[:, 0, :]).max(axis=1) + tr[:, 0]
            inc = arrive_local[:, 1:, :].max(axis=2) + tr[:, 1:]
            ends = first[:, None] + np.concatenate(
                [np.zeros((T, 1), np.int64), np.cumsum(inc, axis=1)], axis=1
            )
            it_start = np.concatenate(
                [t0[:, None, :], np.broadcast_to(ends[:, :-1, None], (T, J - 1, m))], axis=1
            )
            it_end = np.broadcast_to(ends[:, :, None], (T, J, m)).copy()
        k_start = it_start[..., None] + cum - d
        launch = self.new_launches((T, J, m, 1) if graph else (T, J, m, K))
        self.emit(np.broadcast_to(teams[:, None, :, None], (T, J, m, K)), COMPUTE, KERNEL,
                  np.broadcast_to(names, (T, J, m, K)), k_start, k_start + d,
                  np.broadcast_to(launch, (T, J, m, K)), op=np.broadcast_to(ops, (T, J, m, K)))
        if with_coll:
            assert coll is not None
            arrivals = it_start + arrive_local
            pgs = self.pg_of(key, teams[:, 0])
            inst = self.new_instances(pgs, J, coll, np.full(T, m))
            stream = STREAMS[key]
            self.emit(
                np.broadcast_to(teams[:, None, :], (T, J, m)),
                stream,
                KERNEL,
                np.int32(self.names.id(NCCL_KERNELS[coll.name])),
                arrivals,
                it_end,
                self.new_launches((T, J, m)),
                inst=np.broadcast_to(inst[:, :, None], (T, J, m)),
                op=np.int32(self.names.id("record_param_comms")),
            )
            self.free_of(stream)[teams] = it_end[:, -1, :]
        self.t[teams] = it_end[:, -1, :]
        return it_end

    def collective(
        self,
        key: str,
        coll: Coll,
        rows: np.ndarray | None = None,
        ready: np.ndarray | None = None,
        blocking: bool = True,
        stream_key: str | None = None,
        arrive_jitter: tuple[int, int] | None = None,
    ) -> np.ndarray:
        """One call of ``coll`` in every group of partition ``key`` (or the given rows).

        Members arrive at ``ready`` (default: their cursor) plus a launch gap, no earlier than
        their stream is free; all complete at the last arrival plus the transfer time.
        """
        mat, pgs = self.groups.partitions[key]
        if rows is not None:
            mat, pgs = mat[rows], pgs[rows]
        G, m = mat.shape
        stream = STREAMS[stream_key or key]
        free = self.free_of(stream)
        base = self.t[mat] if ready is None else ready
        arrive = base + self.gaps((G, m))
        if arrive_jitter is not None:
            arrive = arrive + self.rng.integers(*arrive_jitter, size=(G, m), dtype=np.int64)
        arrive = np.maximum(arrive, free[mat])
        end = arrive.max(axis=1) + self.transfer(coll, m, (G,))
        inst = self.new_instances(pgs, 1, coll, np.full(G, m))
        self.emit(
            mat,
            stream,
            KERNEL,
            np.int32(self.names.id(NCCL_KERNELS[coll.name])),
            arrive,
            np.broadcast_to(end[:, None], (G, m)),
            self.new_launches((G, m)),
            inst=np.broadcast_to(inst, (G, m)),
            op=np.int32(self.names.id("record_param_comms")),
        )
        free[mat] = end[:, None]
        if blocking:
            self.t[mat] = np.maximum(self.t[mat], end[:, None])
        return end

    def p2p(
        self, senders: np.ndarray, receivers: np.ndarray, ready: np.ndarray, coll: Coll
    ) -> None:
        """Pipeline send/recv pairs (one instance each in their PP group); the receiver blocks."""
        stream = STREAMS["pp"]
        free = self.free_of(stream)
        a_s = np.maximum(ready + self.gaps(ready.shape), free[senders])
        a_r = np.maximum(self.t[receivers] + self.gaps(ready.shape), free[receivers])
        end = np.maximum(a_s, a_r) + self.transfer(coll, 2, ready.shape)
        pgs = self.pg_of("pp", senders)
        inst = self.new_instances(pgs, 1, coll, np.full(len(pgs), self.cfg.layout.pp))[:, 0]
        kernel = np.int32(self.names.id(NCCL_KERNELS["send"]))
        op = np.int32(self.names.id("record_param_comms"))
        self.emit(senders, stream, KERNEL, kernel, a_s, end, self.new_launches(senders.shape),
                  inst=inst, role=ROLE_SEND, op=op)
        self.emit(receivers, stream, KERNEL, kernel, a_r, end, self.new_launches(receivers.shape),
                  inst=inst, role=ROLE_RECV, op=op)
        free[senders] = end
        free[receivers] = end
        self.t[receivers] = end

    def copy(
        self, ranks: np.ndarray, kind: int, name: str, mean_ns: int, nbytes: int, op: str
    ) -> None:
        """One memcpy or memset per rank on the compute stream."""
        start = self.t[ranks] + self.gaps(ranks.shape)
        dur = np.rint(mean_ns * self.rng.lognormal(0.0, 0.05, ranks.shape)).astype(np.int64)
        self.emit(ranks, COMPUTE, kind, np.int32(self.names.id(name)), start, start + dur,
                  self.new_launches(ranks.shape), nbytes=nbytes, op=np.int32(self.names.id(op)))
        self.t[ranks] = start + dur

    def host(self, ranks: np.ndarray, work: Sequence[tuple[str, int]]) -> None:
        """CPU-only work on the main thread (no kernels)."""
        for name, mean in work:
            start = self.t[ranks] + self.uniform(3_000, 15_000, len(ranks))
            dur = np.rint(mean * self.rng.lognormal(0.0, 0.2, len(ranks))).astype(np.int64)
            self.host_ops.add(
                rank=ranks.astype(np.int32),
                name=np.full(len(ranks), self.names.id(name), np.int32),
                start=start,
                end=start + dur,
            )
            self.t[ranks] = start + dur

    def settle(self, ranks: np.ndarray) -> np.ndarray:
        """When every stream of these ranks is done (the host waits for its streams)."""
        done = self.t[ranks].copy()
        for free in self.free.values():
            done = np.maximum(done, free[ranks])
        return done

    def barrier(self, ranks: np.ndarray) -> None:
        """The controller waits for all of ``ranks`` before dispatching more (no kernels)."""
        self.t[ranks] = self.settle(ranks).max()

    @contextmanager
    def stage(self, ranks: Sequence[int] | np.ndarray, code: int, role: np.ndarray | int,
              gap: tuple[int, int] = (800_000, 3_000_000)) -> Iterator[np.ndarray]:
        """A stage range per rank: a transition gap, then the range, whose first kernel comes a
        lead after its start and whose end comes a tail after its last work on any stream."""
        ranks = np.asarray(ranks, dtype=np.int64)
        n = len(ranks)
        start = self.settle(ranks) + self.uniform(*gap, n)
        self.t[ranks] = start + self.uniform(45_000, 90_000, n)
        previous, self.stage_code = self.stage_code, code
        try:
            yield ranks
        finally:
            self.stage_code = previous
        end = self.settle(ranks) + self.uniform(20_000, 60_000, n)
        self.t[ranks] = end
        self.stages.add(rank=ranks.astype(np.int32), step=np.full(n, self.step, np.int32),
                        stage=np.full(n, code, np.int16), start=start, end=end,
                        role=np.broadcast_to(role, (n,)).astype(np.int8),
                        inner_start=start + self.uniform(8_000, 25_000, n),
                        inner_end=end - self.uniform(4_000, 12_000, n))

    def finish(self) -> dict[str, dict[str, np.ndarray]]:
        return {"ops": self.ops.finish(), "insts": self.insts.finish(),
                "stages": self.stages.finish(),
                "host_ops": self.host_ops.finish() if self.host_ops.chunks else {}}
