"""ProtoT as gated linear attention: on CUDA, flash-linear-attention's Triton GLA kernel (kernel "gla").

ProtoT's prefix mean (:func:`mixers.protot.reference.prefix_mean_recurrent`) is GLA with a data-independent
decay per key channel (docs/protot_kernels.md). GLA computes ``h_t = exp(g_t) * h_{t-1} + k_t v_t^T`` and
``o_t = q_t h_t`` (the current position included). ProtoT reads strictly before each write and divides by the
channel's mass, so:

1. the masses come first: ``M_t = beta M_{t-1} + w_t``, a per-channel decayed cumulative sum of the write
   weights (:func:`decayed_cumsum`, chunked matmuls, every power of beta with a non-negative exponent);
2. queries ``q_t = rho_t / max(M_{t-1}, floor)``; keys and values are the write weights and the values shifted
   one position later (``k_t = w_{t-1}``, ``v'_t = v_{t-1}``, zero at t = 0); the gate is ``log beta`` per
   channel, except ``g_0 = 0``, so that the GLA state at t is exactly ProtoT's ``S_{t-1}`` and the initial
   state is ProtoT's S0 as it is (no division by beta);
3. one GLA call (scale 1); the GLA's last state is ``S_{T-2}``, one more write gives ``S_{T-1}``.

On CUDA the call is ``fla.ops.gla.chunk_gla`` (Triton, its own backward). Elsewhere, or when fla's Triton
kernels cannot be imported, it is :func:`mixers.common.ops.gla.gla_recurrent`, GLA by its definition (the tests
check it against fla's pure-torch ``naive_recurrent_gla``): slow, but the same mapping, so the conformance gate
checks the mapping on any machine without importing fla.
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F

from mixers.common.ops.gla import gla_recurrent

#: positions per block of the masses' decayed cumulative sum
MASS_CHUNK = 64


def decayed_cumsum(x: torch.Tensor, log_beta: torch.Tensor, chunk: int = MASS_CHUNK) -> torch.Tensor:
    """``y_t = sum_{s<=t} beta^(t-s) x_s`` per channel: x [B, T, R], log_beta [R] -> [B, T, R].

    Blocks of ``chunk`` positions use the [chunk, chunk] decay matrix beta^(t-s) (s <= t) of each channel; the
    blocks' totals are the same problem one level up, with decay beta^chunk; recursion depth log_chunk(T).
    """
    B, T, R = x.shape
    if T <= chunk:
        idx = torch.arange(T, device=x.device, dtype=log_beta.dtype)
        lag = idx[:, None] - idx[None, :]
        L = torch.exp(lag.clamp(min=0)[..., None] * log_beta) * (lag >= 0)[..., None]  # [T, T, R]
        return torch.einsum("tsr,bsr->btr", L, x)
    n = -(-T // chunk)
    pad = n * chunk - T
    x4 = F.pad(x, (0, 0, 0, pad)).view(B, n, chunk, R)
    local = decayed_cumsum(x4.reshape(B * n, chunk, R), log_beta, chunk).view(B, n, chunk, R)
    carried = decayed_cumsum(local[:, :, -1], chunk * log_beta, chunk)  # inclusive: after each block
    before = F.pad(carried[:, :-1], (0, 0, 1, 0))  # after the previous block
    idx = torch.arange(1, chunk + 1, device=x.device, dtype=log_beta.dtype)
    y = local + torch.exp(idx[:, None] * log_beta) * before[:, :, None, :]
    return y.reshape(B, n * chunk, R)[:, :T]


def gla_inputs(w, v, rho, log_beta, S0, M0, floor):
    """ProtoT's inputs as one GLA problem: (q, k, v', g, h0, final mass), GLA tensors [B, T, 1, dim]."""
    B, T, R = w.shape
    idx = torch.arange(T, device=w.device, dtype=log_beta.dtype)
    mass_after = decayed_cumsum(w, log_beta) + torch.exp((idx[:, None] + 1) * log_beta) * M0[:, None, :]
    mass_before = torch.cat([M0[:, None, :], mass_after[:, :-1]], dim=1)  # M_{t-1}
    q = rho / mass_before.clamp(min=floor)
    k = F.pad(w[:, :-1], (0, 0, 1, 0))
    shifted_v = F.pad(v[:, :-1], (0, 0, 1, 0))
    g = torch.cat([log_beta.new_zeros(B, 1, R), log_beta.expand(B, T - 1, R)], dim=1)
    return (q[:, :, None], k[:, :, None], shifted_v[:, :, None], g[:, :, None], S0[:, None], mass_after[:, -1])


@functools.cache
def triton_gla():
    """fla's Triton ``chunk_gla``, or None where it cannot be imported (no Triton, no GPU driver)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from fla.ops.gla import chunk_gla
    except Exception:  # noqa: BLE001 - any import failure means: no Triton path here
        return None
    return chunk_gla


def prefix_mean_gla(w, v, rho, log_beta, S0, M0, floor, chunk: int = MASS_CHUNK):
    """Same signature and numbers as :func:`mixers.protot.reference.prefix_mean_recurrent`, through one GLA call."""
    T = w.shape[1]
    if T == 0:
        return v.new_zeros(v.shape), S0, M0
    q, k, sv, g, h0, final_mass = gla_inputs(w, v, rho, log_beta, S0, M0, floor)
    kernel = triton_gla() if w.is_cuda else None
    if kernel is not None:
        dtype = v.dtype if v.dtype in (torch.float16, torch.bfloat16) else torch.float32
        o, h = kernel(q.to(dtype), k.to(dtype), sv.to(dtype), g.float(), scale=1.0,
                      initial_state=h0.float(), output_final_state=True)
    else:
        o, h = gla_recurrent(q, k, sv, g, h0)
    beta = log_beta.exp()
    final = beta[:, None] * h[:, 0].to(S0.dtype) + w[:, -1, :, None] * v[:, -1, None, :]
    return o[:, :, 0].to(v.dtype), final, final_mass
