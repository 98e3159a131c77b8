"""The vocabulary of RL post-training: stages, roles, parallelism dimensions, placements, modes.

Ids and meanings are those of docs/taxonomy.md; everything here is data that the classifier,
the analyses and the reports share. Adding a value means adding it here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Stage:
    id: str
    name: str
    title: str
    description: str


STAGES: tuple[Stage, ...] = (
    Stage("S0", "data_load", "Data load", "load, tokenise and dispatch prompts"),
    Stage("S1", "rollout", "Rollout", "generation: prefill and autoregressive decode"),
    Stage("S2", "reward", "Reward", "reward model forward or rule/verifier/sandbox"),
    Stage("S3", "old_logprob", "Old log-probs", "actor forward to recompute behaviour log-probs"),
    Stage("S4", "ref_logprob", "Reference log-probs", "reference-policy forward"),
    Stage("S5", "values", "Values", "critic forward"),
    Stage("S6", "advantage", "Advantages", "GAE or group normalisation"),
    Stage("S7", "critic_update", "Critic update", "critic forward, backward and optimizer"),
    Stage("S8", "actor_update", "Actor update", "actor forward, backward and optimizer"),
    Stage("S9", "weight_sync", "Weight sync", "trainer → inference engine weights, reshard, wake/sleep"),
    Stage("S10", "data_transfer", "Data transfer", "inter-model dispatch of batches"),
    Stage("S11", "checkpoint", "Checkpoint", "model and optimizer save"),
    Stage("S12", "evaluation", "Evaluation", "validation rollouts and scoring"),
    Stage("-", "other", "Other", "time inside a step that no rule claims"),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
STAGE_BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}

PREPARATION_STAGES: tuple[str, ...] = ("reward", "old_logprob", "ref_logprob", "values", "advantage")
"""The forward-only 'experience making' stages between rollout and the updates (S2–S6)."""
TRAIN_STAGES: tuple[str, ...] = ("critic_update", "actor_update")

ROLES: tuple[str, ...] = ("actor", "rollout", "ref", "critic", "reward", "driver")

DIMENSIONS: tuple[str, ...] = (
    "dp", "fsdp", "tp", "pp", "sp", "cp", "ep", "weight_sync", "world", "unknown",
)
"""Parallelism dimension of a collective (``weight_sync`` is inter-model, not a parallelism)."""

POOLS: tuple[str, ...] = ("rollout", "train", "shared")
PLACEMENTS: tuple[str, ...] = ("colocated", "disaggregated", "split")
EXECUTION_MODES: tuple[str, ...] = ("sync", "one_step_off", "async", "stage_fused")

IDLE_CAUSES: tuple[str, ...] = (
    "rollout_tail", "pool_wait", "stage_gap", "sync_wait", "host_bound", "weight_sync", "other",
)
"""Causes of device idle time (docs/analyses.md §4)."""

STAGE = pl.Enum(list(STAGE_NAMES))
ROLE = pl.Enum(list(ROLES))
DIM = pl.Enum(list(DIMENSIONS))
POOL = pl.Enum(list(POOLS))
IDLE_CAUSE = pl.Enum(list(IDLE_CAUSES))
