"""A tiny decoder-only transformer with a KV cache, and the arithmetic task it is trained on.

Small enough that one RL step takes well under a second on one CPU core, real enough that every
stage runs the operations a real actor, reference and critic run: embeddings, causal attention,
an MLP, a language-model head (actor, reference) or a value head (critic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

DIGITS = "0123456789"
VOCAB: tuple[str, ...] = ("<pad>", "<eos>", "+", "=", *DIGITS)
PAD, EOS, PLUS, EQUALS = 0, 1, 2, 3
DIGIT0 = 4


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = len(VOCAB)
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_len: int = 64
    eos_bias: float = -1.0
    """Initial logit bias of <eos>: sets how early an untrained policy stops (the length tail)."""


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
        )

    def forward(
        self,
        x: torch.Tensor,
        cache: tuple[torch.Tensor, torch.Tensor] | None,
        mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, t, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        x = x + self.mlp(self.ln2(x))
        return x, (k, v)


class TinyLM(nn.Module):
    """Actor / reference (``head="lm"``) or critic (``head="value"``) over the same trunk."""

    def __init__(self, cfg: ModelConfig, head: str = "lm") -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab if head == "lm" else 1)
        if head == "lm":
            with torch.no_grad():
                self.head.bias.zero_()
                self.head.bias[EOS] = cfg.eos_bias
                self.head.bias[PAD] = -1e4

    def forward(
        self,
        ids: torch.Tensor,
        start: int = 0,
        caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        key_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Logits (or values) for ``ids`` placed at positions ``start…``; returns the new caches.

        ``key_mask`` (batch × keys, True = attend) hides left padding of prompts.
        """
        t = ids.shape[1]
        pos = torch.arange(start, start + t, device=ids.device)
        x = self.tok(ids) + self.pos(pos)
        total = start + t
        causal = torch.ones(t, total, dtype=torch.bool, device=ids.device).tril(diagonal=start)
        mask = causal.unsqueeze(0).unsqueeze(0)
        if key_mask is not None:
            mask = mask & key_mask[:, None, None, :total]
        new_caches = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if caches is None else caches[i], mask)
            new_caches.append(kv)
        out = self.head(self.ln(x))
        return out, new_caches


def make_prompts(generator: torch.Generator, n: int) -> list[tuple[int, int]]:
    """Addition problems ``a+b=`` with one- and two-digit operands."""
    ab = torch.randint(0, 100, (n, 2), generator=generator)
    return [(int(a), int(b)) for a, b in ab]


def encode_prompt(a: int, b: int) -> list[int]:
    return [DIGIT0 + int(c) for c in str(a)] + [PLUS] + [DIGIT0 + int(c) for c in str(b)] + [EQUALS]


PROMPT_WIDTH = 6
"""Longest prompt, ``99+99=``: every shard pads to it so shards concatenate."""


def left_pad(
    prompts: list[list[int]], width: int = PROMPT_WIDTH
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and their key mask, as inference engines batch prompts."""
    ids = torch.full((len(prompts), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = True
    return ids, mask


def rule_reward(a: int, b: int, response: list[int]) -> float:
    """1 for the right sum, 0.2 for a well-formed number, 0 otherwise (GSM8K-style rule)."""
    body = response[:-1] if response and response[-1] == EOS else response
    if not body or any(t < DIGIT0 for t in body):
        return 0.0
    answer = "".join(DIGITS[t - DIGIT0] for t in body)
    return 1.0 if answer == str(a + b) else 0.2 if len(answer) <= 3 else 0.0


def init_scale(module: nn.Module) -> None:
    """Small normal init so that an untrained policy samples near-uniform tokens."""
    for p in module.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.5 / math.sqrt(p.shape[-1]))
