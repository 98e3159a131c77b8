"""The sample runs, as data: algorithm, framework style, placement, execution mode, sizes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .model import ModelConfig


@dataclass(frozen=True)
class Scenario:
    name: str
    algorithm: str
    style: str
    placement: str
    execution: str
    rollout_ranks: tuple[int, ...]
    train_ranks: tuple[int, ...]
    group_size: int
    prompts_per_step: int
    max_new_tokens: int
    steps: int
    profiled_steps: tuple[int, ...]
    checkpoint_every: int
    profiler: str = "torch"
    """``torch`` (one Kineto JSON per process) or ``nsys`` (one report of the whole job)."""
    log: str = "verl"
    """``verl``, ``verl_ray`` (with the Ray ``(TaskRunner pid=N)`` prefix) or ``openrlhf``."""
    worker_steps: bool = False
    """Every worker process marks its own NVTX ``step N`` (verl's multi-process nsys layout)."""
    seed: int = 7
    ppo_mini_batches: int = 2
    model: ModelConfig = field(default_factory=ModelConfig)

    @property
    def world_size(self) -> int:
        return len(set(self.rollout_ranks) | set(self.train_ranks))

    @property
    def sync_ranks(self) -> tuple[int, ...]:
        """Ranks of the weight-sync group: all (colocated) or train rank 0 plus the rollout pool."""
        if self.placement == "colocated":
            return tuple(range(self.world_size))
        return tuple(sorted({self.train_ranks[0], *self.rollout_ranks}))

    def pool_of(self, rank: int) -> str:
        if self.placement == "colocated":
            return "shared"
        return "rollout" if rank in self.rollout_ranks else "train"

    def as_config(self) -> dict[str, object]:
        d = asdict(self)
        return {
            "algorithm": self.algorithm,
            "style": "verl" if self.style.startswith("verl") else self.style,
            "placement": self.placement,
            "execution": self.execution,
            "world_size": self.world_size,
            "pools": {"rollout": list(self.rollout_ranks), "train": list(self.train_ranks)},
            "group_size": self.group_size,
            "prompts_per_step": self.prompts_per_step,
            "max_new_tokens": self.max_new_tokens,
            "steps": self.steps,
            "profiled_steps": list(self.profiled_steps),
            "checkpoint_every": self.checkpoint_every,
            "checkpoint_steps": [
                k for k in range(1, self.steps + 1) if k % self.checkpoint_every == 0
            ],
            "model": d["model"],
            "seed": self.seed,
            "profiler": self.profiler,
            "ppo_mini_batches": self.ppo_mini_batches,
            "weight_sync_ranks": list(self.sync_ranks),
            **({"worker_steps": True} if self.worker_steps else {}),
        }


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="verl_grpo_colocated", algorithm="grpo", style="verl", placement="colocated",
            execution="sync", rollout_ranks=(0, 1), train_ranks=(0, 1), group_size=4,
            prompts_per_step=4, max_new_tokens=48, steps=4, profiled_steps=(2, 3),
            checkpoint_every=2, log="verl_ray",
        ),
        Scenario(
            name="verl_ppo_disaggregated", algorithm="ppo", style="verl", placement="disaggregated",
            execution="sync", rollout_ranks=(0,), train_ranks=(1, 2), group_size=2,
            prompts_per_step=6, max_new_tokens=48, steps=4, profiled_steps=(2, 3),
            checkpoint_every=2, log="verl",
        ),
        Scenario(
            name="verl_grpo_one_step_off", algorithm="grpo", style="verl_one_step_off",
            placement="disaggregated", execution="one_step_off", rollout_ranks=(0,),
            train_ranks=(1, 2), group_size=4, prompts_per_step=3, max_new_tokens=48, steps=5,
            profiled_steps=(3, 4), checkpoint_every=2, log="verl",
        ),
        Scenario(
            name="openrlhf_ppo_disaggregated", algorithm="ppo", style="openrlhf",
            placement="disaggregated", execution="sync", rollout_ranks=(0,), train_ranks=(1, 2),
            group_size=2, prompts_per_step=6, max_new_tokens=48, steps=4, profiled_steps=(2, 3),
            checkpoint_every=2, log="openrlhf",
        ),
        Scenario(
            name="verl_ppo_colocated_nsys", algorithm="ppo", style="verl", placement="colocated",
            execution="sync", rollout_ranks=(0, 1), train_ranks=(0, 1), group_size=2,
            prompts_per_step=4, max_new_tokens=48, steps=3, profiled_steps=(1, 2, 3),
            checkpoint_every=2, profiler="nsys", log="verl",
        ),
        Scenario(
            name="verl_ppo_multiprocess_nsys", algorithm="ppo", style="verl",
            placement="colocated", execution="sync", rollout_ranks=(0, 1, 2),
            train_ranks=(0, 1, 2), group_size=2, prompts_per_step=3, max_new_tokens=32, steps=4,
            profiled_steps=(1, 2, 3, 4), checkpoint_every=2, profiler="nsys", log="verl",
            worker_steps=True,
        ),
    )
}
