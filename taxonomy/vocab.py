"""The vocabulary of RL post-training: stages and their groups, roles, parallelism dimensions,
placements, modes and idle causes.

Everything here is data that the classifier, the analyses and the reports read: a stage's
groups and colour, an idle cause's rule precedence and colour are declared once, beside the
name, and every other module derives its lists from these tables. Adding a value means adding
it here (and, for an idle cause, its rule in ``analyzer/analyses/bubbles.py``): docs/taxonomy.md
"Adding a stage or an idle cause".
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

STAGE_GROUPS: dict[str, str] = {
    "preparation": "the forward-only 'experience making' stages between rollout and the updates "
    "(S2–S6)",
    "forward": "the preparation stages that run a model or scorer per sample (S2–S5): what can "
    "hide the rollout tail and what the guidelines' preparation time counts (S6 is arithmetic on "
    "their output)",
    "train": "the updates of the trained models: forward, backward and optimizer (S7–S8)",
    "trainer": "the stages run by the workers holding the trained and reference models (S3–S5, "
    "S7–S8): a rank with any of them belongs to the train pool",
}
"""Stage groups the analyses ask about, with what each means."""


@dataclass(frozen=True)
class Stage:
    id: str
    name: str
    title: str
    description: str
    color: str
    """Its colour in every chart."""
    groups: frozenset[str] = frozenset()
    """Which of :data:`STAGE_GROUPS` it belongs to."""


STAGES: tuple[Stage, ...] = (
    Stage("S0", "data_load", "Data load", "load, tokenise and dispatch prompts",
          "#9c755f"),
    Stage("S1", "rollout", "Rollout", "generation: prefill and autoregressive decode",
          "#4e79a7"),
    Stage("S2", "reward", "Reward", "reward model forward or rule/verifier/sandbox",
          "#f28e2b", frozenset({"preparation", "forward"})),
    Stage("S3", "old_logprob", "Old log-probs", "actor forward to recompute behaviour log-probs",
          "#76b7b2", frozenset({"preparation", "forward", "trainer"})),
    Stage("S4", "ref_logprob", "Reference log-probs", "reference-policy forward",
          "#59a14f", frozenset({"preparation", "forward", "trainer"})),
    Stage("S5", "values", "Values", "critic forward",
          "#edc948", frozenset({"preparation", "forward", "trainer"})),
    Stage("S6", "advantage", "Advantages", "GAE or group normalisation",
          "#b07aa1", frozenset({"preparation"})),
    Stage("S7", "critic_update", "Critic update", "critic forward, backward and optimizer",
          "#ff9da7", frozenset({"train", "trainer"})),
    Stage("S8", "actor_update", "Actor update", "actor forward, backward and optimizer",
          "#e15759", frozenset({"train", "trainer"})),
    Stage("S9", "weight_sync", "Weight sync",
          "trainer → inference engine weights, reshard, wake/sleep", "#17becf"),
    Stage("S10", "data_transfer", "Data transfer", "inter-model dispatch of batches",
          "#86bcb6"),
    Stage("S11", "checkpoint", "Checkpoint", "model and optimizer save",
          "#8cd17d"),
    Stage("S12", "evaluation", "Evaluation", "validation rollouts and scoring",
          "#499894"),
    Stage("-", "other", "Other", "time inside a step that no rule claims",
          "#bab0ac"),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
STAGE_BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
STAGE_COLORS: dict[str, str] = {s.name: s.color for s in STAGES}
"""Stage → chart colour, in vocabulary order (charts stack and list legends in this order)."""


def stages_in(group: str) -> tuple[str, ...]:
    """The names of the stages in ``group`` (one of :data:`STAGE_GROUPS`), in vocabulary order."""
    if group not in STAGE_GROUPS:
        raise KeyError(f"no stage group {group!r}; the groups are {', '.join(STAGE_GROUPS)}")
    return tuple(s.name for s in STAGES if group in s.groups)


PREPARATION_STAGES: tuple[str, ...] = stages_in("preparation")
FORWARD_STAGES: tuple[str, ...] = stages_in("forward")
TRAIN_STAGES: tuple[str, ...] = stages_in("train")
TRAINER_STAGES: tuple[str, ...] = stages_in("trainer")

ROLES: tuple[str, ...] = ("actor", "rollout", "ref", "critic", "reward", "driver")

DIMENSIONS: tuple[str, ...] = (
    "dp", "fsdp", "tp", "pp", "sp", "cp", "ep", "weight_sync", "world", "unknown",
)
"""Parallelism dimension of a collective (``weight_sync`` is inter-model, not a parallelism)."""

DIMENSION_WORDS: dict[str, str] = {
    "dp": "DP", "fsdp": "FSDP", "tp": "TP", "pp": "PP", "sp": "SP", "cp": "CP", "ep": "EP",
    "weight_sync": "Weight-sync", "world": "World-group", "unknown": "Unattributed",
}
"""How a report names a dimension in a sentence (``unknown``: rlperf could not tell which)."""

POOLS: tuple[str, ...] = ("rollout", "train", "shared")
PLACEMENTS: tuple[str, ...] = ("colocated", "disaggregated", "split", "rollout_only")
EXECUTION_MODES: tuple[str, ...] = ("sync", "one_step_off", "async", "stage_fused")


@dataclass(frozen=True)
class IdleCause:
    name: str
    rule: int
    """Its place in the bubble rules' precedence (1 first): a time point gets the cause of the
    first rule that matches (docs/analyses.md §4)."""
    color: str
    """Its colour in every chart."""
    description: str
    """The time point t on rank r that the rule claims."""


IDLE_CAUSE_TABLE: tuple[IdleCause, ...] = (
    IdleCause("rollout_tail", 2, "#3d2c6e", "after r's own rollout of the step ended, while "
              "another rank's rollout of the step still runs (r in the rollout or shared pool)"),
    IdleCause("pool_wait", 3, "#8c510a", "no stage range of r covers t while the other pool "
              "works (r in the rollout or train pool)"),
    IdleCause("stage_gap", 6, "#7f7f7f", "between two stage ranges of r within the step"),
    IdleCause("sync_wait", 4, "#a50026", "in the part of a collective spent waiting for its "
              "last member"),
    IdleCause("host_bound", 5, "#7a7a1e", "inside a stage range of r between its activities "
              "(launch or host overhead)"),
    IdleCause("weight_sync", 1, "#0b4f59", "inside a weight_sync stage range of r"),
    IdleCause("other", 7, "#3b3b3b", "anything else: before r's first or after r's last stage "
              "range of the step"),
)
"""The causes of device idle time, in the order reports list them."""
IDLE_CAUSES: tuple[str, ...] = tuple(c.name for c in IDLE_CAUSE_TABLE)
IDLE_RULE_ORDER: tuple[str, ...] = tuple(
    c.name for c in sorted(IDLE_CAUSE_TABLE, key=lambda c: c.rule)
)
"""The idle causes in rule precedence order (first matching rule wins)."""
CAUSE_COLORS: dict[str, str] = {c.name: c.color for c in IDLE_CAUSE_TABLE}
"""Idle cause → chart colour, in :data:`IDLE_CAUSES` order: dark tones that no stage uses, so a
chart never reads idle time as work."""
IDLE_COLOR = "#eeeeee"
"""The idle part of a step where stages are drawn (stage share per step): pale, apart from both
the stages and the causes."""

STAGE = pl.Enum(list(STAGE_NAMES))
ROLE = pl.Enum(list(ROLES))
DIM = pl.Enum(list(DIMENSIONS))
POOL = pl.Enum(list(POOLS))
IDLE_CAUSE = pl.Enum(list(IDLE_CAUSES))
