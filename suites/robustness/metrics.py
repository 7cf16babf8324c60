"""Divergences and rank statistics between two next-token distributions (intervals: :mod:`harness.stats`).

The Jensen-Shannon divergence takes probability rows (next-token distributions or routing gates) and is computed as
``(KL(p || m) + KL(q || m)) / 2`` with ``m = (p + q) / 2`` in base 2, so it lies in [0, 1] and two identical rows give
exactly 0 (``p / m`` is exactly 1). The rank statistics take log-probability rows.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import rankdata
import torch


def jsd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in bits between the probability rows ``p`` and ``q``, ``[..., V] -> [...]``.

    ``m`` is clamped to the smallest normal number only so that ``0 / 0`` cannot occur; for identical rows every
    ratio is still exactly 1 (or the entry is subnormal and contributes a negative amount that the final clamp
    removes), so the result is exactly 0."""
    m = (p + q).mul_(0.5).clamp_min_(torch.finfo(p.dtype).tiny)
    kl_p = torch.xlogy(p, p / m).sum(-1)
    kl_q = torch.xlogy(q, q / m).sum(-1)
    return ((kl_p + kl_q) * (0.5 / math.log(2))).clamp_(0.0, 1.0)


def topk_overlap(logp: torch.Tensor, logq: torch.Tensor, k: int) -> torch.Tensor:
    """|top-k(p) ∩ top-k(q)| / k per row."""
    a = logp.topk(k, dim=-1).indices
    b = logq.topk(k, dim=-1).indices
    return (a.unsqueeze(-1) == b.unsqueeze(-2)).any(-1).sum(-1).double() / k


def top1_agreement(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    return (logp.argmax(-1) == logq.argmax(-1)).double()


def spearman_union(logp: np.ndarray, logq: np.ndarray, k: int) -> float:
    """Spearman correlation of the two distributions over the union of their top-k tokens (NaN if a side is
    constant there)."""
    union = np.union1d(np.argpartition(-logp, k - 1)[:k], np.argpartition(-logq, k - 1)[:k])
    a, b = rankdata(logp[union]), rankdata(logq[union])  # ties share their average rank
    a, b = a - a.mean(), b - b.mean()
    denom = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denom) if denom > 0 else math.nan
