"""How each framework names its ranges: the only place the harness spells framework names.

Keys are harness actions; values are the range names the framework (or its users) would put in
the trace. ``driver`` ranges are the controller's timers (verl ``marked_timer`` names, OpenRLHF
``timing/*`` keys), ``worker`` ranges are what runs on the ranks. A driver name mapped to None
has no range of its own in that framework (the work is inside a composite range).
"""

from __future__ import annotations

from dataclasses import dataclass

STAGE_OF_ACTION: dict[str, str] = {
    "generate": "rollout",
    "reward": "reward",
    "old_logprob": "old_logprob",
    "ref_logprob": "ref_logprob",
    "values": "values",
    "advantage": "advantage",
    "update_critic": "critic_update",
    "update_actor": "actor_update",
    "sync_weights_send": "weight_sync",
    "sync_weights_recv": "weight_sync",
    "checkpoint": "checkpoint",
}
"""Harness action → taxonomy stage (taxonomy/vocab.py names)."""

ROLE_OF_ACTION: dict[str, str] = {
    "generate": "rollout",
    "reward": "reward",
    "old_logprob": "actor",
    "ref_logprob": "ref",
    "values": "critic",
    "advantage": "driver",
    "update_critic": "critic",
    "update_actor": "actor",
    "sync_weights_send": "actor",
    "sync_weights_recv": "rollout",
    "checkpoint": "actor",
}


@dataclass(frozen=True)
class Style:
    name: str
    worker: dict[str, str]
    driver: dict[str, str | None]
    composite: dict[str, tuple[str, ...]]
    """Driver ranges that span several stages: name → the stages inside (never in ``stages``)."""


VERL = Style(
    name="verl",
    worker={
        "generate": "generate_sequences",
        "old_logprob": "compute_log_prob",
        "ref_logprob": "compute_ref_log_prob",
        "values": "compute_values",
        "update_critic": "update_critic",
        "update_actor": "update_actor",
        "sync_weights_send": "update_weights",
        "sync_weights_recv": "update_weights",
        "checkpoint": "save_checkpoint",
    },
    driver={
        "generate": "gen",
        "reward": "reward",
        "old_logprob": "old_log_prob",
        "ref_logprob": "ref",
        "values": "values",
        "advantage": "adv",
        "update_critic": "update_critic",
        "update_actor": "update_actor",
        "sync_weights": "update_weights",
        "checkpoint": "save_checkpoint",
    },
    composite={"step": ("rollout", "reward", "old_logprob", "ref_logprob", "values", "advantage",
                        "critic_update", "actor_update", "weight_sync")},
)

VERL_ONE_STEP_OFF = Style(
    name="verl",
    worker=VERL.worker,
    driver={**VERL.driver, "sync_weights": "sync_rollout_weights"},
    composite=VERL.composite,
)
"""verl's one-step-off-policy recipe names its weight sync ``sync_rollout_weights``."""

OPENRLHF = Style(
    name="openrlhf",
    worker={
        "generate": "RolloutRayActor.generate",
        "old_logprob": "PolicyModelActor.forward",
        "ref_logprob": "ReferenceModelActor.forward",
        "values": "CriticModelActor.forward",
        "update_critic": "CriticModelActor.fit",
        "update_actor": "PolicyModelActor.fit",
        "sync_weights_send": "PolicyModelActor.broadcast_to_vllm",
        "sync_weights_recv": "RolloutRayActor.update_weight",
        "checkpoint": "PolicyModelActor.save_checkpoint",
    },
    driver={
        "generate": "generation",
        "reward": "reward_fn",
        "old_logprob": None,
        "ref_logprob": None,
        "values": None,
        "advantage": "compute_advantages_and_returns",
        "update_critic": None,
        "update_actor": None,
        "sync_weights": "broadcast",
        "checkpoint": "save_checkpoint",
    },
    composite={
        "make_experience": ("reward", "old_logprob", "ref_logprob", "values", "advantage"),
        "ppo_train": ("critic_update", "actor_update"),
    },
)

STYLES: dict[str, Style] = {
    "verl": VERL,
    "verl_one_step_off": VERL_ONE_STEP_OFF,
    "openrlhf": OPENRLHF,
}
