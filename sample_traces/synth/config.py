"""What a synthetic run looks like: scenario presets, the rank layout and its process groups.

A scenario fixes the placement (colocated or disaggregated), the execution mode (sync,
one-step-off, stage-fused), the algorithm (GRPO or PPO) and how the training pool is
parallelised; ``--ranks`` scales it. Training groups are laid out as Megatron-Core does
(``order="tp-cp-ep-dp-pp"``: tensor-parallel neighbours are adjacent ranks) or, for the FSDP
scenario, as verl's DeviceMesh does (``mesh_fsdp`` over the pool, ``mesh_sp`` Ulysses pairs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

SCENARIOS: tuple[str, ...] = ("colocated", "disaggregated", "one_step_off", "stage_fused")

MEGATRON_DESC: dict[str, str] = {
    "tp": "TENSOR_MODEL_PARALLEL_GROUP",
    "cp": "CONTEXT_PARALLEL_GROUP",
    "ep": "EXPERT_MODEL_PARALLEL_GROUP",
    "dp": "DATA_PARALLEL_GROUP",
    "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
}
"""Megatron-Core ``parallel_state`` group descriptions (``group_desc``) per dimension."""

MESH_DESC: dict[str, str] = {"fsdp": "mesh_fsdp", "sp": "mesh_sp", "tp": "mesh_infer_tp"}
"""DeviceMesh-style descriptions (``mesh_<dim name>``), as verl's FSDP workers create them."""


@dataclass(frozen=True)
class Layout:
    """How the training pool is split. ``style`` is ``megatron`` or ``fsdp``.

    Megatron: pool size = tp·cp·ep·dp·pp; the dense data-parallel group spans the ep and dp
    coordinates (expert parallelism is carved out of data parallelism, as in Megatron-Core).
    FSDP: one ``mesh_fsdp`` group over the pool, Ulysses ``mesh_sp`` groups of ``sp`` ranks.
    """

    style: str = "megatron"
    tp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    pp: int = 1
    sp: int = 1

    @property
    def size(self) -> int:
        if self.style == "fsdp":
            return self.dp
        return self.tp * self.cp * self.ep * self.dp * self.pp

    def as_truth(self) -> dict[str, object]:
        out: dict[str, object] = {
            "tp": self.tp, "cp": self.cp, "ep": self.ep, "dp": self.dp, "pp": self.pp,
            "order": "tp-cp-ep-dp-pp", "style": self.style,
        }
        if self.style == "fsdp":
            out.update(fsdp=self.dp, sp=self.sp)
        return out


@dataclass(frozen=True)
class Config:
    scenario: str
    ranks: int
    steps: int = 2
    seed: int = 0
    algorithm: str = "grpo"
    placement: str = "colocated"
    execution: str = "sync"
    rollout_ranks: tuple[int, ...] = ()
    train_ranks: tuple[int, ...] = ()
    layout: Layout = field(default_factory=Layout)
    rollout_tp: int = 1
    gpus_per_node: int = 8
    responses_per_rank: int = 8
    max_response: int = 64
    """Cap on response length (decode steps)."""
    response_median: float = 24.0
    response_sigma: float = 0.7
    decode_kernels_per_step: int = 4
    micro_batches: int = 2
    layer_chunks: int = 2
    """Forward/backward of one micro-batch is this many chunks, each ending in a TP all-reduce."""
    grad_buckets: int = 3
    sync_buckets: int = 3
    sync_desc: str = "undefined"
    sync_name: str = "weight_sync"
    skew_max_ns: int = 3_000_000
    start_epoch_ns: int = 1_769_162_400_000_000_000
    """2026-01-23 10:00 UTC: the (fake) wall-clock start of the run."""

    @property
    def pools(self) -> dict[str, list[int]]:
        return {"rollout": list(self.rollout_ranks), "train": list(self.train_ranks)}

    def pool_of(self, rank: int) -> str:
        if self.placement == "colocated":
            return "shared"
        return "rollout" if rank in self.rollout_ranks else "train"

    @property
    def sync_ranks(self) -> tuple[int, ...]:
        """The weight-sync group: the whole pool (colocated) or train rank 0 plus every
        rollout rank (one group spanning both pools, OpenRLHF / verl one-step-off style)."""
        if self.placement == "colocated":
            return tuple(self.train_ranks)
        return tuple(sorted({self.train_ranks[0], *self.rollout_ranks}))

    def as_truth(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("layout")
        d.pop("rollout_ranks")
        d.pop("train_ranks")
        return {
            "placement": self.placement,
            "execution": self.execution,
            "world_size": self.ranks,
            "pools": self.pools,
            "layout": self.layout.as_truth(),
            "steps": self.steps,
            **{k: v for k, v in d.items() if k not in ("placement", "execution", "ranks", "steps")},
            "weight_sync_ranks": list(self.sync_ranks),
        }


def _even(n: int, k: int) -> int:
    """``k`` when it divides ``n``, else 1."""
    return k if n % k == 0 and n >= k else 1


def preset(scenario: str, ranks: int, **overrides: object) -> Config:
    """The scenario's shape at ``ranks`` ranks; keyword overrides replace preset fields
    (``tp``, ``cp``, ``ep``, ``pp`` reshape the training layout)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r} (one of {', '.join(SCENARIOS)})")
    if ranks < 2:
        raise ValueError("a synthetic run needs at least 2 ranks")
    dims = {k: v for k in ("tp", "cp", "ep", "pp") if (v := overrides.pop(k, None)) is not None}
    everyone = tuple(range(ranks))
    if scenario in ("colocated", "stage_fused"):
        rollout, train = everyone, everyone
    else:
        half = ranks // 2
        rollout, train = tuple(range(half)), tuple(range(half, ranks))
    n = len(train)
    if scenario == "colocated":
        layout = Layout(style="fsdp", dp=n, sp=_even(n, 2))
        base = dict(
            algorithm="grpo", placement="colocated", execution="sync", sync_desc="mesh_fsdp"
        )
    elif scenario == "disaggregated":
        tp = dims.get("tp", _even(n, 2))
        layout = _megatron(
            n, tp=tp, cp=dims.get("cp", 1), ep=dims.get("ep", 1), pp=dims.get("pp", 1)
        )
        base = dict(algorithm="ppo", placement="disaggregated", execution="sync",
                    sync_desc="undefined", sync_name="weight_sync")
    elif scenario == "one_step_off":
        pp = dims.get("pp", _even(n, 2))
        layout = _megatron(
            n, tp=dims.get("tp", 1), cp=dims.get("cp", 1), ep=dims.get("ep", 1), pp=pp
        )
        base = dict(algorithm="grpo", placement="disaggregated", execution="one_step_off",
                    sync_desc="actor_rollout", sync_name="actor_rollout", micro_batches=4)
    else:
        tp = dims.get("tp", _even(n, 2))
        cp = dims.get("cp", _even(n // tp, 2))
        ep = dims.get("ep", _even(n // (tp * cp), 2))
        layout = _megatron(n, tp=tp, cp=cp, ep=ep, pp=dims.get("pp", 1))
        base = dict(algorithm="grpo", placement="colocated", execution="stage_fused")
    rollout_tp = int(overrides.pop("rollout_tp", None) or 0)
    if not rollout_tp:
        rollout_tp = layout.tp if scenario == "stage_fused" else _even(len(rollout), 2)
    if len(rollout) % rollout_tp:
        raise ValueError(
            f"rollout tensor parallel {rollout_tp} does not divide the {len(rollout)} rollout ranks"
        )
    if scenario == "stage_fused" and rollout_tp != layout.tp:
        raise ValueError(
            "stage_fused runs its engines on the training TP groups: rollout_tp must equal tp"
        )
    cfg = Config(scenario=scenario, ranks=ranks, rollout_ranks=rollout, train_ranks=train,
                 layout=layout, rollout_tp=rollout_tp, **base)  # type: ignore[arg-type]
    return replace(cfg, **overrides)  # type: ignore[arg-type]


def _megatron(n: int, tp: int, cp: int, ep: int, pp: int) -> Layout:
    model = tp * cp * ep * pp
    if n % model:
        raise ValueError(f"tp·cp·ep·pp = {model} does not divide the {n} training ranks")
    return Layout(style="megatron", tp=tp, cp=cp, ep=ep, pp=pp, dp=n // model)


# --- process groups ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """One process group as ``pg_config`` lists it, plus the dimension the truth assigns."""

    name: str
    desc: str
    ranks: tuple[int, ...]
    dim: str


@dataclass
class Groups:
    """Every process group of the run, and per dimension the partition of its ranks."""

    all: list[Group] = field(default_factory=list)
    partitions: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """key → (rank matrix [G, m], group index per row into ``all``)."""

    def add(self, key: str, matrix: np.ndarray, desc: str, dim: str) -> None:
        first = len(self.all)
        for row in matrix:
            self.all.append(Group(str(len(self.all)), desc, tuple(int(r) for r in row), dim))
        self.partitions[key] = (matrix, np.arange(first, first + len(matrix)))

    def add_named(self, key: str, name: str, ranks: tuple[int, ...], desc: str, dim: str) -> None:
        self.partitions[key] = (np.array([ranks]), np.array([len(self.all)]))
        self.all.append(Group(name, desc, ranks, dim))


def megatron_matrix(pool: tuple[int, ...], lay: Layout) -> dict[str, np.ndarray]:
    """Rank matrices per dimension for the order tp-cp-ep-dp-pp (tp fastest)."""
    grid = np.array(pool).reshape(lay.pp, lay.dp, lay.ep, lay.cp, lay.tp)
    axes = {"pp": 0, "dp": 1, "ep": 2, "cp": 3, "tp": 4}

    def along(*names: str) -> np.ndarray:
        moved = np.moveaxis(grid, [axes[n] for n in names], list(range(5 - len(names), 5)))
        return moved.reshape(-1, int(np.prod([grid.shape[axes[n]] for n in names])))

    return {"tp": along("tp"), "cp": along("cp"), "ep": along("ep"), "dp": along("dp", "ep"),
            "pp": along("pp")}


def build_groups(cfg: Config) -> Groups:
    """Process groups in creation order: world, training dimensions, rollout TP, weight sync."""
    g = Groups()
    g.add_named("world", "0", tuple(range(cfg.ranks)), "default_pg", "world")
    lay = cfg.layout
    if lay.style == "fsdp":
        pool = np.array(cfg.train_ranks)
        g.add("fsdp", pool.reshape(1, -1), MESH_DESC["fsdp"], "fsdp")
        if lay.sp > 1:
            g.add("sp", pool.reshape(-1, lay.sp), MESH_DESC["sp"], "sp")
    else:
        mats = megatron_matrix(cfg.train_ranks, lay)
        for dim in ("tp", "cp", "ep", "dp", "pp"):
            if mats[dim].shape[1] > 1:
                g.add(dim, mats[dim], MEGATRON_DESC[dim], dim)
    if cfg.rollout_tp > 1:
        if cfg.scenario == "stage_fused":
            g.partitions["rollout_tp"] = g.partitions["tp"]
        else:
            desc = MESH_DESC["tp"] if lay.style == "fsdp" else MEGATRON_DESC["tp"]
            g.add("rollout_tp", np.array(cfg.rollout_ranks).reshape(-1, cfg.rollout_tp), desc, "tp")
    if cfg.placement == "disaggregated":
        g.add_named("sync", cfg.sync_name, cfg.sync_ranks, cfg.sync_desc, "weight_sync")
    return g


def engines(cfg: Config) -> np.ndarray:
    """Rollout engines as a rank matrix [E, rollout_tp] (an engine is one TP group)."""
    return np.array(cfg.rollout_ranks).reshape(-1, cfg.rollout_tp)


def train_teams(cfg: Config) -> np.ndarray:
    """Ranks that compute in lockstep during training (one TP group each)."""
    tp = cfg.layout.tp if cfg.layout.style == "megatron" else 1
    return np.array(cfg.train_ranks).reshape(-1, tp)
