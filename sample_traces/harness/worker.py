"""One rank of the job: the models it holds and the worker methods the controller calls.

Method names are harness actions (see styles.py); each runs inside the range its framework
would show. Colocated ranks hold every model (the hybrid engine); in disaggregated placements a
rank holds the inference engine or the training models, never both.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from . import algo, step_marks
from .model import TinyLM, init_scale
from .recorder import Recorder, group_barrier, warm_profiler
from .scenarios import Scenario
from .styles import ROLE_OF_ACTION, STAGE_OF_ACTION, STYLES

TRAIN_GROUP_DESC = "mesh_dp"
"""Description of the gradient all-reduce group, as ``init_device_mesh(mesh_dim_names=("dp",))``
names its sub-group."""
SYNC_GROUP_DESC: dict[str, str] = {"verl": "weight_sync", "verl_one_step_off": "weight_sync",
                                   "openrlhf": "openrlhf"}
"""Weight-sync group descriptions (OpenRLHF calls its group ``openrlhf``)."""


@dataclass(frozen=True)
class WorkerSpec:
    scenario: Scenario
    rank: int
    port: int
    device: str
    out_dir: str


def build_actor(sc: Scenario, head: str = "lm") -> TinyLM:
    torch.manual_seed(sc.seed if head == "lm" else sc.seed + 1)
    model = TinyLM(sc.model, head)
    init_scale(model)
    return model


def flat(params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def unflat_into(vec: torch.Tensor, params: list[torch.Tensor]) -> None:
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vec[offset : offset + n].view_as(p))
            offset += n


class Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        sc = spec.scenario
        self.sc, self.rank, self.device = sc, spec.rank, torch.device(spec.device)
        self.style = STYLES[sc.style]
        self.rec = Recorder(spec.rank)
        self.out_dir = Path(spec.out_dir)
        self.prof: profile | None = None
        self.train_ranks, self.sync_ranks = sc.train_ranks, sc.sync_ranks
        self.train_group = dist.new_group(list(self.train_ranks), group_desc=TRAIN_GROUP_DESC)
        self.sync_group = dist.new_group(
            list(self.sync_ranks), group_desc=SYNC_GROUP_DESC[sc.style]
        )
        self.is_rollout = spec.rank in sc.rollout_ranks
        self.is_train = spec.rank in sc.train_ranks
        if self.is_train:
            self.actor = build_actor(sc).to(self.device)
            self.ref = copy.deepcopy(self.actor).requires_grad_(False)
            self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=3e-3)
            if sc.algorithm == "ppo":
                self.critic = build_actor(sc, head="value").to(self.device)
                self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=3e-3)
        if self.is_rollout:
            self.engine = build_actor(sc).to(self.device).requires_grad_(False)
        self.ckpt_root = Path(tempfile.mkdtemp(prefix="rlperf-ckpt-"))
        if sc.profiler == "torch":
            warm_profiler()

    def _span(self, action: str, step: int):
        return self.rec.range(self.style.worker[action], step, STAGE_OF_ACTION[action],
                              ROLE_OF_ACTION[action])

    # profiler control, as verl's DistProfiler start_profile / stop_profile
    def start_profile(self) -> None:
        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self.prof = profile(activities=activities, record_shapes=False, with_stack=False)
        self.prof.start()

    def stop_profile(self, path: str) -> None:
        assert self.prof is not None
        self.prof.stop()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.prof.export_chrome_trace(path)
        self.prof = None

    # verl's nsys layout: every worker process marks its own step N (DistProfiler start/stop)
    def begin_step(self, step: int) -> None:
        self.step_mark = step_marks.begin(step)

    def end_step(self, step: int) -> None:
        self.rec.spans.append(step_marks.end(self.rank, step, self.step_mark))

    def generate(
        self, step: int, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
    ) -> dict[str, Any]:
        gen = torch.Generator().manual_seed(self.sc.seed * 1000 + step * 10 + self.rank)
        with self._span("generate", step):
            ro = algo.generate(self.engine, prompt_ids.to(self.device), prompt_mask.to(self.device),
                               self.sc.max_new_tokens, gen)
        return {"rollout": ro.to("cpu"), "end_ns": self.rec.stages[-1]["end_ns"]}

    def old_logprob(self, step: int, ro: algo.Rollout) -> torch.Tensor:
        with self._span("old_logprob", step), torch.no_grad():
            return algo.token_logprobs(self.actor, ro.to(self.device)).cpu()

    def ref_logprob(self, step: int, ro: algo.Rollout) -> torch.Tensor:
        with self._span("ref_logprob", step), torch.no_grad():
            return algo.token_logprobs(self.ref, ro.to(self.device)).cpu()

    def values(self, step: int, ro: algo.Rollout) -> torch.Tensor:
        with self._span("values", step), torch.no_grad():
            return algo.token_values(self.critic, ro.to(self.device)).cpu()

    def _allreduce_grads(self, step: int, model: torch.nn.Module) -> None:
        """Average gradients over the training ranks in one flat bucket, as DDP does."""
        params = [p for p in model.parameters() if p.grad is not None]
        bucket = torch.cat([p.grad.reshape(-1) for p in params])
        self.rec.collective(step, "all_reduce", "dp", self.train_ranks, bucket,
                            dist.all_reduce, bucket, group=self.train_group)
        bucket /= len(self.train_ranks)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(bucket[offset : offset + n].view_as(p.grad))
            offset += n

    def update_actor(self, step: int, ro: algo.Rollout, old_lp: torch.Tensor, ref_lp: torch.Tensor,
                     adv: torch.Tensor) -> dict[str, float]:
        kl_coef = 0.04 if self.sc.algorithm == "grpo" else 0.0
        losses, norms = [], []
        with self._span("update_actor", step):
            for mb in algo.split(old_lp.shape[0], self.sc.ppo_mini_batches):
                part = ro.select(mb).to(self.device)
                new_lp = algo.token_logprobs(self.actor, part)
                loss = algo.policy_loss(new_lp, old_lp[mb].to(self.device), adv[mb].to(self.device),
                                        part.response_mask, ref_lp=ref_lp[mb].to(self.device),
                                        kl_coef=kl_coef)
                self.actor_opt.zero_grad()
                loss.backward()
                self._allreduce_grads(step, self.actor)
                norms.append(float(torch.nn.utils.clip_grad_norm_(self.actor.parameters(), 1.0)))
                self.actor_opt.step()
                losses.append(loss.item())
        return {"pg_loss": sum(losses) / len(losses), "grad_norm": sum(norms) / len(norms)}

    def update_critic(self, step: int, ro: algo.Rollout, old_values: torch.Tensor,
                      returns: torch.Tensor) -> dict[str, float]:
        losses = []
        with self._span("update_critic", step):
            for mb in algo.split(old_values.shape[0], self.sc.ppo_mini_batches):
                part = ro.select(mb).to(self.device)
                v = algo.token_values(self.critic, part)
                loss = algo.value_loss(
                    v,
                    old_values[mb].to(self.device),
                    returns[mb].to(self.device),
                    part.response_mask,
                )
                self.critic_opt.zero_grad()
                loss.backward()
                self._allreduce_grads(step, self.critic)
                self.critic_opt.step()
                losses.append(loss.item())
        return {"vf_loss": sum(losses) / len(losses)}

    def sync_weights(self, step: int) -> None:
        """Trainer weights → inference engine, as a collective over the weight-sync group."""
        if self.rank not in self.sync_ranks:
            return
        action = "sync_weights_send" if self.is_train else "sync_weights_recv"
        with self._span(action, step):
            if self.sc.placement == "colocated":
                self._sync_colocated(step)
            else:
                self._sync_broadcast(step)

    def _sync_colocated(self, step: int) -> None:
        """Each rank contributes its shard of the flat weights; all-gather rebuilds them in the
        engine (the FSDP → inference-engine reshard of a hybrid engine)."""
        full = flat(list(self.actor.parameters()))
        world = len(self.sync_ranks)
        size = -(-full.numel() // world)
        padded = torch.nn.functional.pad(full, (0, size * world - full.numel()))
        shard = padded[self.rank * size : (self.rank + 1) * size].contiguous()
        parts = [torch.empty_like(shard) for _ in range(world)]
        group_barrier(
            self.rec, step, "weight_sync", self.sync_ranks, self.sync_group, "weight_sync"
        )
        self.rec.collective(step, "all_gather", "weight_sync", self.sync_ranks, padded,
                            dist.all_gather, parts, shard, group=self.sync_group)
        unflat_into(torch.cat(parts)[: full.numel()], list(self.engine.parameters()))

    def _sync_broadcast(self, step: int) -> None:
        """Train rank 0 broadcasts the flat weights to every rollout rank (OpenRLHF, verl
        one-step-off: one group spanning both pools)."""
        src = self.train_ranks[0]
        model = self.actor if self.is_train else self.engine
        buf = flat(list(model.parameters()))
        group_barrier(
            self.rec, step, "weight_sync", self.sync_ranks, self.sync_group, "weight_sync"
        )
        self.rec.collective(step, "broadcast", "weight_sync", self.sync_ranks, buf,
                            dist.broadcast, buf, src=src, group=self.sync_group)
        if not self.is_train:
            unflat_into(buf, list(self.engine.parameters()))

    def checkpoint(self, step: int) -> None:
        world = len(self.train_ranks)
        idx = self.train_ranks.index(self.rank)
        with self._span("checkpoint", step):
            d = self.ckpt_root / f"global_step_{step}" / "actor"
            d.mkdir(parents=True, exist_ok=True)
            state = {"model": self.actor.state_dict(), "optimizer": self.actor_opt.state_dict()}
            if self.sc.algorithm == "ppo":
                state["critic"] = self.critic.state_dict()
                state["critic_optimizer"] = self.critic_opt.state_dict()
            torch.save(state, d / f"model_world_size_{world}_rank_{idx}.pt")

    def truth(self) -> dict[str, Any]:
        return {**self.rec.dump(), "pid": os.getpid(), "host": os.uname().nodename}

    def close(self) -> None:
        shutil.rmtree(self.ckpt_root, ignore_errors=True)


def worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """Process entry: join the gloo world, then serve the controller's calls until ``close``."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(spec.port))
    dist.init_process_group("gloo", rank=spec.rank, world_size=spec.scenario.world_size)
    worker = Worker(spec)
    conn.send(("ready", os.getpid()))
    while True:
        method, kwargs = conn.recv()
        if method == "close":
            worker.close()
            conn.send(("ok", None))
            break
        t0 = time.time_ns()
        result = getattr(worker, method)(**kwargs)
        conn.send(("ok", {"result": result, "start_ns": t0, "end_ns": time.time_ns()}))
    dist.destroy_process_group()
