"""The single controller: dispatches worker methods step by step, times its own stages, writes
the framework's log, and gathers what every process measured into the ground truth.

Like verl's ``RayPPOTrainer.fit`` or OpenRLHF's ``PPOTrainer.fit``: the controller owns the data
(prompts, rewards, advantages) and calls the ranks through pipes, which stand in for Ray.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from contextlib import AbstractContextManager, nullcontext
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile

from . import algo, logs
from .model import encode_prompt, left_pad, make_prompts, rule_reward
from .recorder import Recorder, warm_profiler
from .scenarios import Scenario
from .styles import STAGE_OF_ACTION, STYLES
from .worker import WorkerSpec, worker_main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def concat(parts: list[algo.Rollout]) -> algo.Rollout:
    width = max(p.response_ids.shape[1] for p in parts)
    pad = torch.nn.functional.pad
    return algo.Rollout(
        torch.cat([p.prompt_ids for p in parts]),
        torch.cat([p.prompt_mask for p in parts]),
        torch.cat([pad(p.response_ids, (0, width - p.response_ids.shape[1])) for p in parts]),
        torch.cat([pad(p.response_mask, (0, width - p.response_mask.shape[1])) for p in parts]),
    )


class Controller:
    def __init__(self, sc: Scenario, out_dir: Path, device: str = "cpu") -> None:
        self.sc, self.out_dir, self.device = sc, out_dir, device
        self.style = STYLES[sc.style]
        self.rec = Recorder(-1)
        self.pending: dict[int, deque[bool]] = {r: deque() for r in range(sc.world_size)}
        self.profiling: set[int] = set()
        self.profiled: set[int] = set()
        self.prof: profile | None = None
        self.windows: dict[int, list[int]] = {}
        self.lengths: list[dict[str, Any]] = []
        self.gen_ends: dict[int, dict[int, int]] = {}
        ctx = mp.get_context("spawn")
        port = free_port()
        self.conns: dict[int, Connection] = {}
        self.procs = []
        for r in range(sc.world_size):
            parent, child = ctx.Pipe()
            spec = WorkerSpec(sc, r, port, device, str(out_dir))
            proc = ctx.Process(target=worker_main, args=(spec, child), daemon=True)
            proc.start()
            self.conns[r], self.procs = parent, [*self.procs, proc]
        self.pids = {r: self.conns[r].recv()[1] for r in range(sc.world_size)}
        self.pid = os.getpid()
        self.log = logs.LogFile(out_dir / "logs" / self.log_name)
        if sc.profiler == "torch":
            warm_profiler()

    @property
    def log_name(self) -> str:
        return "openrlhf.log" if self.sc.log == "openrlhf" else "verl_console.log"

    # calls: FIFO per rank; replies of fire-and-forget commands are dropped on receipt
    def post(self, rank: int, method: str, want: bool = True, **kwargs: Any) -> None:
        self.conns[rank].send((method, kwargs))
        self.pending[rank].append(want)

    def result(self, rank: int) -> Any:
        while True:
            want = self.pending[rank].popleft()
            status, payload = self.conns[rank].recv()
            if status != "ok":
                raise RuntimeError(f"rank {rank}: {payload}")
            if want:
                return payload["result"]

    def call(self, ranks: tuple[int, ...], method: str, step: int,
             per_rank: dict[int, dict[str, Any]] | None = None) -> dict[int, Any]:
        for r in ranks:
            self.ensure_profile(r, step)
            self.post(r, method, step=step, **(per_rank or {}).get(r, {}))
        return {r: self.result(r) for r in ranks}

    # profiling: a rank starts its profiler right before its first command of a profiled step
    def trace_path(self, rank: int) -> Path:
        if self.sc.style.startswith("verl"):
            leaf = "controller/prof_driver.json.gz" if rank < 0 else f"e2e/prof_rank-{rank}.json.gz"
        else:
            leaf = "driver.pt.trace.json.gz" if rank < 0 else f"rank{rank}.pt.trace.json.gz"
        return self.out_dir / "profile" / leaf

    def ensure_profile(self, rank: int, step: int) -> None:
        if self.sc.profiler != "torch" or step not in self.sc.profiled_steps:
            return
        if rank not in self.profiling and rank not in self.profiled:
            self.post(rank, "start_profile", want=False)
            self.profiling.add(rank)

    def start_driver_profile(self, step: int) -> None:
        if self.sc.profiler == "torch" and step == self.sc.profiled_steps[0]:
            activities = [ProfilerActivity.CPU]
            self.prof = profile(activities=activities, record_shapes=False, with_stack=False)
            self.prof.start()

    def stop_profiles(self, step: int) -> None:
        if self.sc.profiler != "torch" or step != self.sc.profiled_steps[-1]:
            return
        for r in sorted(self.profiling):
            self.post(r, "stop_profile", want=False, path=str(self.trace_path(r)))
            self.profiled.add(r)
        self.profiling.clear()
        if self.prof is not None:
            self.prof.stop()
            self.trace_path(-1).parent.mkdir(parents=True, exist_ok=True)
            self.prof.export_chrome_trace(str(self.trace_path(-1)))
            self.prof = None

    def mark_workers(self, method: str, step: int) -> None:
        """verl's nsys layout: each worker opens its ``step N`` as the step begins, closes it
        after the step's checkpoint (which runs outside the controller's ``step`` timer)."""
        if self.sc.worker_steps:
            for r in range(self.sc.world_size):
                self.post(r, method, want=False, step=step)

    # driver ranges
    def drange(self, action: str, step: int) -> AbstractContextManager[None]:
        name = self.style.driver.get(action)
        if name is None:
            return nullcontext()
        stage = STAGE_OF_ACTION.get(action, "weight_sync")
        return self.rec.range(name, step, stage, "driver")

    def composite(self, name: str, step: int) -> AbstractContextManager[None]:
        if name not in self.style.composite:
            return nullcontext()
        return self.rec.range(name, step, covers=self.style.composite[name])

    # stages
    def prompts(self, step: int) -> list[tuple[int, int]]:
        gen = torch.Generator().manual_seed(self.sc.seed * 7919 + step)
        pairs = make_prompts(gen, self.sc.prompts_per_step)
        return [p for p in pairs for _ in range(self.sc.group_size)]

    def launch_rollout(self, step: int, pairs: list[tuple[int, int]]) -> None:
        ids, mask = left_pad([encode_prompt(a, b) for a, b in pairs])
        ranks = self.sc.rollout_ranks
        for r, s in zip(ranks, algo.split(len(pairs), len(ranks)), strict=True):
            self.ensure_profile(r, step)
            self.post(r, "generate", step=step, prompt_ids=ids[s], prompt_mask=mask[s])

    def collect_rollout(self, step: int) -> algo.Rollout:
        outs = {r: self.result(r) for r in self.sc.rollout_ranks}
        for r, out in outs.items():
            self.lengths.append({"step": step, "rank": r, "lengths": out["rollout"].lengths})
        self.gen_ends[step] = {r: out["end_ns"] for r, out in outs.items()}
        return concat([outs[r]["rollout"] for r in self.sc.rollout_ranks])

    def train_call(self, method: str, step: int, **batch: Any) -> list[Any]:
        ranks = self.sc.train_ranks
        n = batch["ro"].response_ids.shape[0]
        per_rank = {r: {k: v.select(s) if isinstance(v, algo.Rollout) else v[s]
                        for k, v in batch.items()}
                    for r, s in zip(ranks, algo.split(n, len(ranks)), strict=True)}
        out = self.call(ranks, method, step, per_rank)
        return [out[r] for r in ranks]

    def experience(
        self, step: int, ro: algo.Rollout, pairs: list[tuple[int, int]]
    ) -> dict[str, Any]:
        sc = self.sc
        with self.composite("make_experience", step):
            with self.drange("reward", step):
                responses = [
                    [int(t) for t in row[m]]
                    for row, m in zip(ro.response_ids, ro.response_mask, strict=True)
                ]
                scores = torch.tensor(
                    [rule_reward(a, b, resp) for (a, b), resp in zip(pairs, responses, strict=True)]
                )
            with self.drange("old_logprob", step):
                old_lp = torch.cat(self.train_call("old_logprob", step, ro=ro))
            with self.drange("ref_logprob", step):
                ref_lp = torch.cat(self.train_call("ref_logprob", step, ro=ro))
            values = None
            if sc.algorithm == "ppo":
                with self.drange("values", step):
                    values = torch.cat(self.train_call("values", step, ro=ro))
            with self.drange("advantage", step):
                mask = ro.response_mask
                if sc.algorithm == "grpo":
                    adv = algo.grpo_advantages(scores, sc.group_size)[:, None] * mask.float()
                    returns = None
                else:
                    adv, returns = algo.gae(scores, values, mask, old_lp, ref_lp, kl_coef=0.05)
        return {"scores": scores, "old_lp": old_lp, "ref_lp": ref_lp, "values": values,
                "adv": adv, "returns": returns}

    def train(self, step: int, ro: algo.Rollout, exp: dict[str, Any]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        with self.composite("ppo_train", step):
            if self.sc.algorithm == "ppo":
                with self.drange("update_critic", step):
                    outs = self.train_call("update_critic", step, ro=ro, old_values=exp["values"],
                                           returns=exp["returns"])
                metrics["vf_loss"] = sum(o["vf_loss"] for o in outs) / len(outs)
            with self.drange("update_actor", step):
                outs = self.train_call("update_actor", step, ro=ro, old_lp=exp["old_lp"],
                                       ref_lp=exp["ref_lp"], adv=exp["adv"])
        metrics["pg_loss"] = sum(o["pg_loss"] for o in outs) / len(outs)
        metrics["grad_norm"] = sum(o["grad_norm"] for o in outs) / len(outs)
        return metrics

    def sync_weights(self, step: int) -> None:
        with self.drange("sync_weights", step):
            self.call(self.sc.sync_ranks, "sync_weights", step)

    def checkpoint(self, step: int) -> None:
        if step % self.sc.checkpoint_every == 0:
            with self.drange("checkpoint", step):
                self.call(self.sc.train_ranks, "checkpoint", step)

    # the loop
    def fit(self) -> None:
        sc = self.sc
        if sc.execution == "one_step_off":
            self.launch_rollout(1, self.prompts(1))
        for step in range(1, sc.steps + 1):
            self.start_driver_profile(step)
            t0 = time.time_ns()
            pairs = self.prompts(step)
            with self.composite("step", step):
                self.mark_workers("begin_step", step)
                if sc.execution == "one_step_off":
                    with self.drange("generate", step):
                        ro = self.collect_rollout(step)
                    self.sync_weights(step)
                    if step < sc.steps:
                        self.launch_rollout(step + 1, self.prompts(step + 1))
                else:
                    with self.drange("generate", step):
                        self.launch_rollout(step, pairs)
                        ro = self.collect_rollout(step)
                t_made0 = time.time_ns()
                exp = self.experience(step, ro, pairs)
                t_made1 = time.time_ns()
                metrics = self.train(step, ro, exp)
                if sc.execution != "one_step_off":
                    self.sync_weights(step)
            self.checkpoint(step)
            self.mark_workers("end_step", step)
            self.stop_profiles(step)
            self.write_log(step, ro, exp, metrics, t0, t_made0, t_made1)

    def close(self) -> list[dict[str, Any]]:
        """Gather every rank's measurements and stop the workers."""
        gathered = []
        for r in range(self.sc.world_size):
            self.post(r, "truth")
            gathered.append({"rank": r, **self.result(r)})
        for r in range(self.sc.world_size):
            self.conns[r].send(("close", {}))
            self.conns[r].recv()
        for proc in self.procs:
            proc.join(timeout=60)
        self.log.close()
        return gathered

    # logs
    def timings(self, step: int) -> dict[str, float]:
        rows = [*self.rec.stages, *self.rec.spans]
        return {row["name"]: (row["end_ns"] - row["start_ns"]) / 1e9
                for row in rows if row["step"] == step}

    def write_log(self, step: int, ro: algo.Rollout, exp: dict[str, Any], metrics: dict[str, float],
                  t0: int, t_made0: int, t_made1: int) -> None:
        lengths = [float(n) for n in ro.response_mask.sum(dim=1)]
        n_resp = sum(lengths)
        total_tokens = n_resp + float(ro.prompt_mask.sum())
        t = self.timings(step)
        scores = exp["scores"]
        if self.sc.log == "openrlhf":
            four = ("generation", "make_experience", "ppo_train", "broadcast")
            status: dict[str, float] = {
                "policy_loss": metrics["pg_loss"], "actor_lr": 3e-3,
                "actor_grad_norm": metrics["grad_norm"],
                "kl": float(((exp["old_lp"] - exp["ref_lp"]) * ro.response_mask).sum() / n_resp),
                "reward": float(scores.mean()), "return": float(scores.mean()),
                "response_length": n_resp / len(lengths),
                "total_length": total_tokens / len(lengths),
            }
            if self.sc.algorithm == "ppo":
                status["critic_loss"] = metrics["vf_loss"]
                status["values"] = float((exp["values"] * ro.response_mask).sum() / n_resp)
            status.update({f"timing/{k}": t[k] for k in four})
            status["timing/step_total"] = sum(t[k] for k in four)
            self.log.write(*logs.openrlhf_step_lines(step, len(lengths), t_made0, t_made1,
                                                     time.time_ns(), status))
            return
        m: dict[str, float | int] = {
            "actor/pg_loss": metrics["pg_loss"], "actor/grad_norm": metrics["grad_norm"],
        }
        if self.sc.algorithm == "ppo":
            m["critic/vf_loss"] = metrics["vf_loss"]
        m.update(
            {
                "critic/score/mean": float(scores.mean()),
                "critic/score/max": float(scores.max()),
                "critic/score/min": float(scores.min()),
                "response_length/mean": n_resp / len(lengths),
                "response_length/max": max(lengths),
                "response_length/min": min(lengths),
                "response_length/clip_ratio": sum(n >= self.sc.max_new_tokens for n in lengths)
                / len(lengths),
            }
        )
        m.update({f"timing_s/{k}": v for k, v in t.items()})
        if "gen" in t:
            m["timing_per_token_ms/gen"] = t["gen"] * 1000 / n_resp
        m.update({
            "perf/total_num_tokens": int(total_tokens), "perf/time_per_step": t["step"],
            "perf/throughput": total_tokens / t["step"] / self.sc.world_size,
            "training/global_step": step, "training/epoch": 0,
        })
        ray_pid = os.getpid() if self.sc.log == "verl_ray" else None
        self.log.write(logs.verl_line(step, m, ray_pid))
