"""The long causal convolution by its definition: ``z_t = sum_{j < min(t + 1, L)} h_j s_{t - j}`` per channel.

One product of a causal Toeplitz matrix with the inputs (the rows of the new positions only, so a continuation of
one token reads exactly its causal taps, which docs/flops.md counts). Every other kernel (:mod:`mixers.baseconv.kernel`)
is checked against it by the conformance gate, and it against a plain loop (tests/test_baseconv.py).
"""

from __future__ import annotations

import torch


def causal_long_conv(s: torch.Tensor, h: torch.Tensor, start: int = 0) -> torch.Tensor:
    """``s: [B, N, D]`` (the first ``start`` positions a history), ``h: [D, L]`` (tap j at lag j, zero from lag L
    on); the outputs at positions ``start .. N - 1``, ``[B, N - start, D]``."""
    N, L = s.shape[1], h.shape[1]
    rows = torch.arange(start, N, device=s.device)
    lag = rows[:, None] - torch.arange(N, device=s.device)[None, :]  # [T, N]
    inside = (lag >= 0) & (lag < L)
    toeplitz = h[:, lag.clamp(0, L - 1)] * inside.to(h.dtype)  # [D, T, N]
    return torch.einsum("dtn,bnd->btd", toeplitz, s)
