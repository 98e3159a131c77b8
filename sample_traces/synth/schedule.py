"""The schedules: what every rank does in each step, for the four execution modes.

* ``colocated`` — every rank rolls out (engines = rollout TP groups, long-tailed lengths), the
  controller waits for the slowest engine, then every rank runs reward, old log-probs,
  reference log-probs, advantages, the actor update and the weight sync in turn;
* ``disaggregated`` — the rollout pool generates while the train pool waits; the train pool
  then prepares and updates (PPO: values and critic update too) while the rollout pool waits;
  train rank 0 broadcasts the weights to the engines in a group spanning both pools;
* ``one_step_off`` — as disaggregated, but the rollout of the next batch runs while the train
  pool trains on the current one; both meet at the weight sync;
* ``stage_fused`` — colocated, but each engine starts its old/reference log-prob forwards as
  soon as its own rollout is done while other engines still decode (RLHFuse-style fusion).
"""

from __future__ import annotations

import numpy as np

from .config import Config, engines, megatron_matrix, train_teams
from .kernels import (
    ADVANTAGE,
    BACKWARD,
    DECODE,
    FORWARD,
    LOGPROB,
    MEMCPY_DTOD,
    MEMCPY_HTOD,
    MEMSET,
    OPTIMIZER,
    PREFILL,
    REWARD_HOST_OPS,
    SYNC_PACK,
    Coll,
)
from .timeline import MEMCPY, Timeline
from .timeline import MEMSET as MEMSET_KIND

STAGES: tuple[str, ...] = (
    "data_load", "rollout", "reward", "old_logprob", "ref_logprob", "values", "advantage",
    "critic_update", "actor_update", "weight_sync", "data_transfer", "checkpoint", "evaluation",
    "other",
)
"""Stage names (taxonomy/vocab.py); a stage's code is its index here."""
CODE = {s: i for i, s in enumerate(STAGES)}

RANGE_NAMES: dict[str, tuple[str, str | None]] = {
    "rollout": ("gen", "generate_sequences"),
    "reward": ("reward", None),
    "old_logprob": ("old_log_prob", "compute_log_prob"),
    "ref_logprob": ("ref", "compute_ref_log_prob"),
    "values": ("values", "compute_values"),
    "advantage": ("adv", None),
    "critic_update": ("update_critic", "update_critic"),
    "actor_update": ("update_actor", "update_actor"),
    "weight_sync": ("update_weights", None),
}
"""Stage → (verl driver timer name, verl worker method name). Each rank records the driver
name as the outer range and the worker name inside it, for the part of the stage it runs."""

ROLES: tuple[str, ...] = ("actor", "rollout", "ref", "critic", "reward", "driver")
ROLE = {r: i for i, r in enumerate(ROLES)}
STAGE_ROLE = {
    "rollout": "rollout",
    "reward": "reward",
    "old_logprob": "actor",
    "ref_logprob": "ref",
    "values": "critic",
    "advantage": "driver",
    "critic_update": "critic",
    "actor_update": "actor",
    "weight_sync": "actor",
}

# Message sizes (bf16 elements) of the collectives of a 7B-class model.
TP_DECODE = Coll("allreduce", "", 64 * 4096, bw_gbps=120.0, latency_ns=9_000)
TP_PREFILL = Coll("allreduce", "", 2048 * 4096, bw_gbps=150.0)
TP_TRAIN = Coll("allreduce", "", 4096 * 4096, bw_gbps=160.0)
CP_GATHER = Coll("_allgather_base", "", 2048 * 1024, bw_gbps=140.0)
A2A = Coll("all_to_all", "", 2048 * 4096, bw_gbps=100.0)
DP_BUCKET = Coll("allreduce", "", 25_000_000, bw_gbps=90.0)
FSDP_GATHER = Coll("_allgather_base", "", 6_000_000, bw_gbps=180.0)
FSDP_SCATTER = Coll("_reduce_scatter_base", "", 48_000_000, bw_gbps=180.0)
PP_ACT = Coll("send", "", 2048 * 4096, bw_gbps=140.0)
SYNC_BCAST = Coll("broadcast", "", 50_000_000, bw_gbps=40.0, latency_ns=30_000)
SYNC_GATHER = Coll("_allgather_base", "", 20_000_000, bw_gbps=180.0)


class Schedule:
    """Drives a :class:`Timeline` through the steps of one scenario."""

    def __init__(self, cfg: Config, tl: Timeline) -> None:
        self.cfg = cfg
        self.tl = tl
        self.rng = tl.rng
        self.everyone = np.arange(cfg.ranks)
        self.engines = engines(cfg)
        self.teams = train_teams(cfg)
        self.train = np.array(cfg.train_ranks)
        self.rollout = np.array(cfg.rollout_ranks)
        self.responses: list[dict[str, object]] = []
        self.windows: list[tuple[int, int, int]] = []

    def run(self) -> None:
        cfg, tl = self.cfg, self.tl
        t = cfg.start_epoch_ns + int(self.rng.integers(0, 3_600_000_000_000))
        tl.t[:] = t
        for step in range(1, cfg.steps + 1):
            tl.step = step
            start = int(tl.t.max())
            tl.t[:] = start
            getattr(self, f"step_{cfg.execution}")()
            end = int(tl.settle(self.everyone).max()) + int(self.rng.integers(300_000, 1_000_000))
            self.windows.append((step, start, end))
            tl.t[:] = end

    # --- the four step shapes ----------------------------------------------------------------

    def step_sync(self) -> None:
        if self.cfg.placement == "colocated":
            self.rollout_stage(self.everyone)
            self.tl.barrier(self.everyone)
            self.prep(self.everyone, local=False)
            self.updates(self.everyone)
            self.weight_sync_colocated()
        else:
            self.rollout_stage(self.rollout)
            self.tl.barrier(self.rollout)
            self.tl.t[self.train] = self.tl.t[self.rollout].max()
            self.prep(self.train, local=False)
            self.updates(self.train)
            self.weight_sync_pools()

    def step_one_step_off(self) -> None:
        self.rollout_stage(self.rollout)
        self.prep(self.train, local=False)
        self.updates(self.train)
        self.weight_sync_pools()

    def step_stage_fused(self) -> None:
        self.rollout_stage(self.everyone, fused_prep=True)
        self.tl.barrier(self.everyone)
        self.reward_and_adv(self.everyone)
        self.updates(self.everyone)
        self.weight_sync_colocated()

    # --- stages ------------------------------------------------------------------------------

    def rollout_stage(self, ranks: np.ndarray, fused_prep: bool = False) -> None:
        """Every engine prefills, then decodes until its longest response ends."""
        cfg, tl = self.cfg, self.tl
        k = cfg.decode_kernels_per_step
        decode = tuple(DECODE[i % len(DECODE)] for i in range(k))
        with tl.stage(ranks, CODE["rollout"], ROLE["rollout"]):
            tl.copy(ranks, MEMCPY, MEMCPY_HTOD, 40_000, 2 * 1024 * 1024, "aten::copy_")
            for team in self.engines:
                team = team[None, :]
                lengths = np.clip(
                    np.rint(
                        self.rng.lognormal(
                            np.log(cfg.response_median), cfg.response_sigma, cfg.responses_per_rank
                        )
                    ),
                    1,
                    cfg.max_response,
                ).astype(int)
                for r in team[0]:
                    self.responses.append(
                        {"step": tl.step, "rank": int(r), "lengths": lengths.tolist()}
                    )
                steps = int(lengths.max())
                active = (lengths[None, :] > np.arange(steps)[:, None]).mean(axis=1)
                tl.lockstep(team, PREFILL, 1, TP_PREFILL, key="rollout_tp")
                tl.lockstep(team, decode, steps, TP_DECODE, key="rollout_tp", graph=True,
                            scale=(0.55 + 0.45 * active)[None, :])
        if fused_prep:
            for team in self.engines:
                self.prep(team, local=True, include_reward=False)

    def prep(self, ranks: np.ndarray, local: bool, include_reward: bool = True) -> None:
        """Reward (rule, CPU only), old/ref log-probs, values (PPO), advantages."""
        if include_reward:
            with self.tl.stage(ranks, CODE["reward"], ROLE["reward"]):
                self.tl.host(ranks, REWARD_HOST_OPS)
        stages = ["old_logprob", "ref_logprob"] + (
            ["values"] if self.cfg.algorithm == "ppo" else []
        )
        for stage in stages:
            with self.tl.stage(ranks, CODE[stage], ROLE[STAGE_ROLE[stage]]):
                if self.cfg.layout.pp > 1 and not local:
                    self.pipeline(ranks, backward=False)
                else:
                    for _ in range(self.cfg.micro_batches):
                        self.forward(ranks, local=local)
                        self.tl.lockstep(self.teams_of(ranks), LOGPROB, 1)
        if include_reward:
            self.advantage(ranks)

    def reward_and_adv(self, ranks: np.ndarray) -> None:
        with self.tl.stage(ranks, CODE["reward"], ROLE["reward"]):
            self.tl.host(ranks, REWARD_HOST_OPS)
        self.advantage(ranks)

    def advantage(self, ranks: np.ndarray) -> None:
        with self.tl.stage(ranks, CODE["advantage"], ROLE["driver"]):
            self.tl.lockstep(self.teams_of(ranks), ADVANTAGE, 1)

    def updates(self, ranks: np.ndarray) -> None:
        stages = (["critic_update"] if self.cfg.algorithm == "ppo" else []) + ["actor_update"]
        for stage in stages:
            with self.tl.stage(ranks, CODE[stage], ROLE[STAGE_ROLE[stage]]):
                self.tl.copy(ranks, MEMSET_KIND, MEMSET, 30_000, 64 * 1024 * 1024, "aten::zero_")
                if self.cfg.layout.pp > 1:
                    self.pipeline(ranks, backward=True)
                else:
                    for mb in range(self.cfg.micro_batches):
                        self.forward(ranks, local=False)
                        self.backward(ranks, last=mb == self.cfg.micro_batches - 1)
                self.tl.t[ranks] = self.tl.settle(ranks)
                self.tl.lockstep(self.teams_of(ranks), OPTIMIZER, 1)

    def weight_sync_colocated(self) -> None:
        """Gather the training shards and load them into the engines (CUDA IPC copies)."""
        tl = self.tl
        key = "fsdp" if self.cfg.layout.style == "fsdp" else "tp"
        with tl.stage(self.everyone, CODE["weight_sync"], ROLE["actor"]):
            for _ in range(self.cfg.sync_buckets):
                if key in tl.groups.partitions:
                    tl.collective(key, SYNC_GATHER, stream_key="sync")
                tl.copy(self.everyone, MEMCPY, MEMCPY_DTOD, 700_000, 240_000_000, "aten::copy_")

    def weight_sync_pools(self) -> None:
        """Train rank 0 broadcasts bucket by bucket to every rollout rank."""
        tl = self.tl
        members = np.array(self.cfg.sync_ranks)
        src = self.cfg.train_ranks[0]
        tl.barrier(members)
        roles = np.where(members == src, ROLE["actor"], ROLE["rollout"])
        receivers = members[members != src]
        with tl.stage(members, CODE["weight_sync"], roles):
            for _ in range(self.cfg.sync_buckets):
                tl.lockstep(np.array([[src]]), SYNC_PACK, 1)
                tl.collective("sync", SYNC_BCAST, arrive_jitter=(0, 400_000))
                tl.copy(receivers, MEMCPY, MEMCPY_DTOD, 500_000, 240_000_000, "aten::copy_")

    # --- model passes ------------------------------------------------------------------------

    def teams_of(self, ranks: np.ndarray) -> np.ndarray:
        """The lockstep teams made of ``ranks`` (whole TP groups, or single ranks)."""
        width = self.teams.shape[1]
        if len(ranks) % width or len(ranks) == 0:
            return ranks.reshape(-1, 1)
        teams = ranks.reshape(-1, width)
        return teams if np.isin(teams[:, 0], self.teams[:, 0]).all() else ranks.reshape(-1, 1)

    def rows(self, key: str, ranks: np.ndarray) -> np.ndarray | None:
        """Rows of partition ``key`` whose ranks all lie in ``ranks``; None if it has none."""
        if key not in self.tl.groups.partitions:
            return None
        mat = self.tl.groups.partitions[key][0]
        inside = np.isin(mat, ranks).all(axis=1)
        return np.flatnonzero(inside) if inside.any() else None

    def forward(self, ranks: np.ndarray, local: bool, chunks: int | None = None) -> np.ndarray:
        """One micro-batch forward: per chunk the FSDP gather, the compute with its TP
        all-reduce, then (not ``local``) the context-parallel gather and expert all-to-all."""
        tl, lay = self.tl, self.cfg.layout
        teams = self.teams_of(ranks)
        ends = []
        for _ in range(chunks or self.cfg.layer_chunks):
            if lay.style == "fsdp" and not local:
                tl.collective("fsdp", FSDP_GATHER, rows=self.rows("fsdp", ranks))
            ends.append(tl.lockstep(teams, FORWARD, 1, TP_TRAIN, key="tp")[:, 0, :])
            if not local:
                for key, coll in (("cp", CP_GATHER), ("ep", A2A), ("sp", A2A)):
                    rows = self.rows(key, ranks)
                    if rows is not None:
                        tl.collective(key, coll, rows=rows)
        return np.stack(ends, axis=1)

    def backward(self, ranks: np.ndarray, last: bool) -> None:
        """Backward chunks; gradients are reduced per chunk (bucket) on their own stream
        while the next chunk computes: Megatron DP all-reduce on the last micro-batch, FSDP
        reduce-scatter on every micro-batch."""
        tl, lay = self.tl, self.cfg.layout
        teams = self.teams_of(ranks)
        for _ in range(self.cfg.layer_chunks):
            if lay.style == "fsdp":
                tl.collective("fsdp", FSDP_GATHER, rows=self.rows("fsdp", ranks))
            end = tl.lockstep(teams, BACKWARD, 1, TP_TRAIN, key="tp")[:, 0, :]
            for key in ("ep", "sp"):
                rows = self.rows(key, ranks)
                if rows is not None:
                    tl.collective(key, A2A, rows=rows)
            ready = np.zeros(self.cfg.ranks, dtype=np.int64)
            ready[teams] = end
            if lay.style == "fsdp":
                rows = self.rows("fsdp", ranks)
                mat = tl.groups.partitions["fsdp"][0][rows]
                tl.collective("fsdp", FSDP_SCATTER, rows=rows, ready=ready[mat], blocking=False,
                              stream_key="fsdp_rs")
            elif last:
                rows = self.rows("dp", ranks)
                if rows is not None:
                    mat = tl.groups.partitions["dp"][0][rows]
                    tl.collective("dp", DP_BUCKET, rows=rows, ready=ready[mat], blocking=False)

    def pipeline(self, ranks: np.ndarray, backward: bool) -> None:
        """1F1B over ``pp`` stages and the micro-batches (forward-only passes just stream the
        micro-batches through): warm-up forwards, steady one forward / one backward,
        cool-down backwards; activations and gradients move by send/recv, so stages wait
        for each other (pipeline bubbles). The last stage computes the log-probs."""
        lay, m = self.cfg.layout, self.cfg.micro_batches
        grid = megatron_matrix(self.cfg.train_ranks, lay)["pp"]  # [pipelines·tp…, pp]
        stage_ranks = [np.sort(grid[:, i]) for i in range(lay.pp)]
        order = []
        for i in range(lay.pp):
            if not backward:
                order.append([("F", k) for k in range(m)])
                continue
            order.append(one_f_one_b(i, lay.pp, m))
        done: dict[tuple[str, int, int], np.ndarray] = {}
        ptr = [0] * lay.pp
        pairs = {i: grid[:, i] for i in range(lay.pp)}
        while any(ptr[i] < len(order[i]) for i in range(lay.pp)):
            progressed = False
            for i in range(lay.pp):
                if ptr[i] == len(order[i]):
                    continue
                kind, k = order[i][ptr[i]]
                src = i - 1 if kind == "F" else i + 1
                if 0 <= src < lay.pp and (kind, src, k) not in done:
                    continue
                if 0 <= src < lay.pp:
                    self.tl.p2p(pairs[src], pairs[i], done[(kind, src, k)], PP_ACT)
                if kind == "F":
                    self.forward(stage_ranks[i], local=False)
                    if i == lay.pp - 1:
                        self.tl.lockstep(self.teams_of(stage_ranks[i]), LOGPROB, 1)
                else:
                    self.backward(stage_ranks[i], last=k == m - 1)
                finished = np.zeros(self.cfg.ranks, dtype=np.int64)
                finished[stage_ranks[i]] = self.tl.t[stage_ranks[i]]
                done[(kind, i, k)] = finished[pairs[i]]
                ptr[i] += 1
                progressed = True
            if not progressed:
                raise RuntimeError("1F1B schedule deadlocked")


def one_f_one_b(stage: int, pp: int, micro: int) -> list[tuple[str, int]]:
    """1F1B on ``stage`` of ``pp``: warm-up forwards, then one forward / one backward, then the
    remaining backwards, as (``"F"`` or ``"B"``, micro-batch)."""
    warm = min(pp - stage - 1, micro)
    ops = [("F", k) for k in range(warm)]
    forwards = warm
    for backward in range(micro):
        if forwards < micro:
            ops.append(("F", forwards))
            forwards += 1
        ops.append(("B", backward))
    return ops
