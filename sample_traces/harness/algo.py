"""The RL maths of one step: sampling with a KV cache, log-probs, values, advantages, losses.

Batched over sequences; loops only over decode positions (the serial chain of generation) and,
for GAE, over token positions in reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import torch
from torch.nn import functional as F

from .model import EOS, PAD, TinyLM


@dataclass
class Rollout:
    """Sequences of one shard: left-padded prompts, right-padded responses and their masks."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor

    @property
    def lengths(self) -> list[int]:
        return [int(n) for n in self.response_mask.sum(dim=1)]

    def select(self, rows: slice) -> Rollout:
        return Rollout(self.prompt_ids[rows], self.prompt_mask[rows], self.response_ids[rows],
                       self.response_mask[rows])

    def to(self, device: torch.device | str) -> Rollout:
        return Rollout(self.prompt_ids.to(device), self.prompt_mask.to(device),
                       self.response_ids.to(device), self.response_mask.to(device))

    def full(self) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            torch.cat([self.prompt_ids, self.response_ids], dim=1),
            torch.cat([self.prompt_mask, self.response_mask], dim=1),
        )


def split(n: int, parts: int) -> list[slice]:
    """``parts`` contiguous, near-equal, non-empty slices of ``n`` rows (fewer when n < parts)."""
    parts = max(1, min(parts, n))
    edges = [round(i * n / parts) for i in range(parts + 1)]
    return [slice(a, b) for a, b in pairwise(edges)]


@torch.no_grad()
def generate(
    engine: TinyLM, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new: int,
    generator: torch.Generator, temperature: float = 1.0,
) -> Rollout:
    """Prefill, then decode one token per step for every live sequence until all stop or the cap."""
    n, width = prompt_ids.shape
    logits, caches = engine(prompt_ids, 0, None, prompt_mask)
    tokens = torch.full((n, max_new), PAD, dtype=torch.long, device=prompt_ids.device)
    done = torch.zeros(n, dtype=torch.bool, device=prompt_ids.device)
    key_mask = prompt_mask
    for t in range(max_new):
        probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
        nxt = (
            torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(prompt_ids.device)
        )
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        tokens[:, t] = nxt
        done = done | (nxt == EOS)
        if bool(done.all()) or t == max_new - 1:
            break
        key_mask = torch.cat(
            [key_mask, torch.ones(n, 1, dtype=torch.bool, device=key_mask.device)], dim=1
        )
        logits, caches = engine(nxt[:, None], width + t, caches, key_mask)
    used = int((tokens != PAD).any(dim=0).sum())
    tokens = tokens[:, : max(used, 1)]
    return Rollout(prompt_ids, prompt_mask, tokens, tokens != PAD)


def token_logprobs(model: TinyLM, ro: Rollout) -> torch.Tensor:
    """Log-probability of each response token under ``model`` (batch × response length)."""
    ids, mask = ro.full()
    logits, _ = model(ids, 0, None, mask)
    p = ro.prompt_ids.shape[1]
    pred = logits[:, p - 1 : -1, :]
    return torch.gather(F.log_softmax(pred, dim=-1), 2, ro.response_ids.unsqueeze(2)).squeeze(2)


def token_values(critic: TinyLM, ro: Rollout) -> torch.Tensor:
    """Critic value of the state before each response token."""
    ids, mask = ro.full()
    out, _ = critic(ids, 0, None, mask)
    p = ro.prompt_ids.shape[1]
    return out[:, p - 1 : -1, 0]


def grpo_advantages(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """Group-normalised scores: z-score of each reward inside its group of ``group`` responses."""
    r = rewards.view(-1, group)
    adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-6)
    return adv.reshape(-1)


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, old_lp: torch.Tensor,
    ref_lp: torch.Tensor, kl_coef: float, gamma: float = 1.0, lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over tokens with the score at the last token and a per-token KL penalty."""
    m = mask.float()
    token_r = -kl_coef * (old_lp - ref_lp) * m
    last = (mask.long().cumsum(dim=1) == mask.long().sum(dim=1, keepdim=True)) & mask
    token_r = token_r + last.float() * rewards[:, None]
    adv = torch.zeros_like(token_r)
    running = torch.zeros(token_r.shape[0])
    v = values * m
    for t in reversed(range(token_r.shape[1])):
        nxt = v[:, t + 1] if t + 1 < token_r.shape[1] else torch.zeros_like(running)
        delta = token_r[:, t] + gamma * nxt - v[:, t]
        running = (delta + gamma * lam * running) * m[:, t]
        adv[:, t] = running
    returns = adv + v
    mean = (adv * m).sum() / m.sum()
    std = (((adv - mean) ** 2) * m).sum() / m.sum()
    return (adv - mean) / (std.sqrt() + 1e-6) * m, returns


def policy_loss(
    new_lp: torch.Tensor, old_lp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
    clip: float = 0.2, ref_lp: torch.Tensor | None = None, kl_coef: float = 0.0,
) -> torch.Tensor:
    """PPO clipped surrogate (token-mean), plus GRPO's k3 KL to the reference when given."""
    ratio = torch.exp(new_lp - old_lp)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    per_token = -surrogate
    if ref_lp is not None and kl_coef:
        d = ref_lp - new_lp
        per_token = per_token + kl_coef * (torch.exp(d) - d - 1)
    m = mask.float()
    return (per_token * m).sum() / m.sum()


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               mask: torch.Tensor, clip: float = 0.2) -> torch.Tensor:
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    per_token = torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    m = mask.float()
    return 0.5 * (per_token * m).sum() / m.sum()
