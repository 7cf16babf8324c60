"""Mamba-1's selective scan by its definition, written by mixbench where the package's ``selective_scan_ref``
cannot serve: ``allow_neg_eigval``'s transition (Grazzi et al.) and a scan from a carried state.

mamba-ssm's own definitions (``selective_scan_ref``, ``ssd_minimal_discrete``) stay the reference kernels
everywhere else (:mod:`mixers.mamba.routing`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def transition(log_decay: torch.Tensor, neg: bool) -> torch.Tensor:
    """The state's diagonal transition from ``delta A``: ``exp(delta A)`` in (0, 1), or with ``neg`` Grazzi et al.'s
    ``2 exp(delta A) - 1`` in (-1, 1) (the mamba mixer's ``allow_neg_eigval``; docs/state_tracking.md)."""
    a = torch.exp(log_decay)
    return 2.0 * a - 1.0 if neg else a


def selective_scan_loop(u, delta, A, B, C, D, z, delta_bias, h0=None, neg: bool = False):
    """The scan written as its definition, one step per iteration with autograd throughout (``selective_scan_ref``'s
    maths with an initial state and :func:`transition`): the mamba mixer's ``reference`` kernel where the package's
    reference cannot serve (``allow_neg_eigval``). u, delta, z (batch, D, T); A (D, N); B, C (batch, N, T); D and
    delta_bias (D,); h0 (batch, D, N) or None. Returns ``out`` (batch, D, T) and the last state."""
    u, delta = u.float(), F.softplus(delta.float() + delta_bias.float()[:, None])
    h = u.new_zeros(u.shape[0], A.shape[0], A.shape[1]) if h0 is None else h0.float()
    ys = []
    for t in range(u.shape[-1]):
        a = transition(delta[:, :, t, None] * A.float(), neg)
        h = a * h + (delta[:, :, t] * u[:, :, t])[..., None] * B[:, None, :, t].float()
        ys.append((h * C[:, None, :, t].float()).sum(-1))
    out = (torch.stack(ys, -1) + u * D.float()[:, None]) * F.silu(z.float())
    return out, h
