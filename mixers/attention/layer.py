"""Softmax attention, LLaMA-3.1 style: multi-head causal attention with RoPE and an optional GQA split.

Kernels: ``naive`` (the definition: explicit softmax(QK^T / sqrt(d) + causal mask) V, also used when a
Recorder wants the attention probabilities) and ``sdpa`` (``torch.nn.functional.scaled_dot_product_attention``,
the fast path on every device). The decode state is a KV cache that grows with the sequence, so
``state_size(T) = 2 * T * n_kv_heads * head_dim`` per layer. The cache is rebuilt with ``torch.cat`` on each
append: O(T) per token, autograd-safe and simple; decode cost growing with T is attention's real property.

Units are heads; ``intervene(heads, "mask")`` zeroes the chosen heads' outputs before the output projection.
RoPE uses LLaMA-3's theta 500000 without the 3.1 long-context frequency rescaling (contexts here are short).
Attention has a positional limit: the backbone refuses sequences longer than the training context.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import ConfigError
from harness.mixer import FlopCount, Mixer, Unit
from harness.recording import record, wanted
from harness.registry import register_mixer
from harness.values import option


@dataclass(frozen=True)
class AttentionConfig:
    n_heads: int = option(4, "query heads (must divide d_model)", min=1)
    n_kv_heads: int = option(0, min=0)  # 0 = n_heads (plain multi-head); fewer = grouped-query attention
    rope_theta: float = option(500_000.0, "RoPE base (LLaMA-3: 500000)", gt=0)

    def __post_init__(self) -> None:  # field limits are option()'s, checked by the parser (docs/values.md)
        if self.n_kv_heads and self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"attention: n_kv_heads must divide n_heads ({self.n_heads}), got {self.n_kv_heads}."
            )


@dataclass
class KVCache:
    """Keys and values of every position seen so far: [B, n_kv_heads, T, head_dim] each."""

    keys: torch.Tensor
    values: torch.Tensor

    @property
    def length(self) -> int:
        return self.keys.shape[2]


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, head_dim/2]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., :h/2], x[..., h/2:]) as LLaMA's HF layout does. x: [B, H, T, hd]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return rotated.type_as(x)


@register_mixer("attention", config=AttentionConfig)
class Attention(Mixer):
    quickstart = True  # one of the paper's four mixers: trained and scored by `mixbench quickstart`
    kernels = ("naive", "sdpa")
    length_extrapolation = False
    intervention_modes = ("mask",)

    def __init__(self, cfg: AttentionConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        if d_model % cfg.n_heads:
            raise ConfigError(f"attention: d_model ({d_model}) must be divisible by n_heads ({cfg.n_heads}).")
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads or cfg.n_heads
        self.head_dim = d_model // cfg.n_heads
        if self.head_dim % 2:
            raise ConfigError(f"attention: the head dimension ({self.head_dim}) must be even for RoPE.")
        kv_dim = self.n_kv_heads * self.head_dim
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, kv_dim, bias=False)
        self.v_proj = nn.Linear(d_model, kv_dim, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        for lin in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.normal_(lin.weight, 0.0, 0.02)
        self._head_mask: torch.Tensor | None = None  # o_proj: initialised by the backbone (output_projection)

    def output_projection(self) -> nn.Linear:
        return self.o_proj

    def default_kernel(self, device: torch.device) -> str:
        return "sdpa"

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> KVCache:
        empty = torch.zeros(batch_size, self.n_kv_heads, 0, self.head_dim, device=device, dtype=dtype)
        return KVCache(empty, empty.clone())

    def state_size(self, seq_len: int) -> int:
        return 2 * seq_len * self.n_kv_heads * self.head_dim

    def flops_per_token(self, context: int) -> FlopCount:
        """The q, k, v and o projections, ``2 d (2 d + 2 kv_dim)``, and per head and causal key (a query at
        position t reads t + 1 keys: ``(context + 1) / 2`` on average) its score and weighted value,
        ``4 head_dim``, plus the score's scaling and softmax, 2 (docs/flops.md). The naive kernel also computes
        the masked half of the scores; the causal kernels (sdpa, flash) that train do not, so it is not counted."""
        d, kv = self.d_model, self.n_kv_heads * self.head_dim
        keys = (context + 1) / 2
        return FlopCount.training(2 * d * (2 * d + 2 * kv) + self.n_heads * keys * (4 * self.head_dim + 2))

    def forward(self, x: torch.Tensor, state: KVCache | None = None):
        B, T, D = x.shape
        start = state.length if state is not None else 0
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope_tables(torch.arange(start, start + T, device=x.device), self.head_dim, self.cfg.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if state is not None:
            k = torch.cat([state.keys, k], dim=2)
            v = torch.cat([state.values, v], dim=2)
        groups = self.n_heads // self.n_kv_heads
        k_full = k.repeat_interleave(groups, dim=1) if groups > 1 else k
        v_full = v.repeat_interleave(groups, dim=1) if groups > 1 else v

        if self.kernel == "naive" or wanted("attention_probs"):
            out = self._naive(q, k_full, v_full, start)
        else:
            # is_causal aligns the mask to the top-left, which is only right without a cached prefix
            mask = None if start == 0 else self._causal_mask(T, start, x.device)
            out = F.scaled_dot_product_attention(q, k_full, v_full, attn_mask=mask, is_causal=start == 0)
        if self._head_mask is not None:
            out = out * (~self._head_mask).to(out.dtype)[None, :, None, None]
        y = self.o_proj(out.transpose(1, 2).reshape(B, T, D))
        return y, (KVCache(k, v) if state is not None else None)

    def _naive(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~self._causal_mask(q.shape[2], start, q.device), float("-inf"))
        probs = scores.softmax(-1)
        record(self.layer_idx, "attention_probs", probs)
        return probs @ v

    @staticmethod
    def _causal_mask(T: int, start: int, device: torch.device) -> torch.Tensor:
        """[T, start + T] boolean: query i (absolute start + i) may see keys 0 .. start + i."""
        keys = torch.arange(start + T, device=device)
        return keys[None, :] <= (start + torch.arange(T, device=device))[:, None]

    def step(self, x_t: torch.Tensor, state: KVCache):
        y, state = self.forward(x_t.unsqueeze(1), state)
        return y.squeeze(1), state

    # ------------------------------------------------------------------ interpretability
    def units(self) -> list[Unit]:
        return [Unit(self.layer_idx, h, "head", {"head_dim": float(self.head_dim)}) for h in range(self.n_heads)]

    @contextlib.contextmanager
    def intervene(self, unit_ids: Sequence[int], mode: str) -> Iterator[None]:
        ids = self._check_intervention(unit_ids, mode, self.n_heads)
        mask = torch.zeros(self.n_heads, dtype=torch.bool, device=self.q_proj.weight.device)
        mask[ids] = True
        previous = self._head_mask
        self._head_mask = mask if previous is None else previous | mask
        try:
            yield
        finally:
            self._head_mask = previous
