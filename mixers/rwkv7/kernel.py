"""RWKV-7's state update, the diagonal-plus-low-rank (DPLR) delta rule, in chunks, for CPU, in PyTorch.

The recurrence, per head, with the state ``S`` [K, V], the per-channel log-decay ``w_t`` [K] (< 0) and the
vectors ``a_t``, ``b_t`` [K] (the layer passes ``a = -kk``, ``b = kk * a_gate``):

    S_t = diag(exp(w_t)) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T,        o_t = S_t^T (scale q_t)

is flash-linear-attention's ``dplr_recurrence`` (``fla/ops/generalized_delta_rule/dplr/naive.py``, the mixer's
reference kernel; fla's Triton ``chunk_rwkv7`` / ``fused_mul_recurrent_rwkv7`` compute it on CUDA). Note that the
low-rank term reads the state before this step's decay. Token by token it is a dozen tiny operations per step;
:func:`chunk_dplr` computes the same numbers chunk by chunk, as fla's ``dplr_chunkwise`` organises them:

* the low-rank term's read ``u_t = a_t^T S_{t-1}`` (a row of V numbers) makes the recurrence an ordinary gated
  linear recurrence with two writes per step, ``k_t v_t^T`` and ``b_t u_t``. Within a chunk of ``C`` tokens, with
  ``G_t`` the cumulative log-decay since the chunk's start (a vector over the K channels, ``G_0 = 0``) and the
  chunk's starting state ``S_0``,

      u_t = (a_t e^{G_{t-1}})^T S_0 + sum_{s<t} A_ak[t,s] v_s + A_ab[t,s] u_s,
      A_xy[t,s] = sum_c x_tc y_sc exp(G_{t-1,c} - G_{s,c}),

  so ``U = T (A_ak V + (a e^{G_-}) S_0)`` with ``T = (I - A_ab)^-1`` (unit lower-triangular: one triangular solve
  per chunk, for both right-hand sides at once): ``U = u0 + W S_0``;
* outputs ``o_t = (q_t e^{G_t})^T S_0 + sum_{s<=t} A_qk[t,s] v_s + A_qb[t,s] u_s`` (decays ``exp(G_t - G_s)``)
  and the next chunk's state ``S_C = e^{G_C} S_0 + sum_s (k_s e^{G_C - G_s}) v_s^T + (b_s e^{G_C - G_s}) u_s``.

Only ``U = u0 + W S_0`` and the state need the chunks in order (two products per chunk); the [C, C] matrices, the
solve and the outputs are batched over every chunk of every sequence and head. The first token of each call runs
the recurrence itself (:func:`dplr_step`, in the reference's order of operations) and the chunks, all of one
length C, start after it: so every output is computed by the same operations whatever the call's length (a
prefix equals the longer call to the bit), and a one-token call equals the reference's (see :func:`chunk_dplr`).

The pairwise decays are factored, ``exp(G_t - G_s) = exp(G_t) exp(-G_s)``, so each [C, C] matrix is one product;
``exp(-G_s)`` grows along the chunk, so the chunk is shortened where the decays are steep enough to overflow fp32
(:func:`chunk_for`): never for the layer, whose ``w`` is at least ``-exp(-0.5)`` (fla's ``lower_bound``), so that
C * |w| <= 19.4 at C = 32. Padding the length with zero keys, values, ``a``, ``b`` and log-decays leaves the state
unchanged, so the final state is exact. The backward is autograd's (every op is differentiable; the loop is N
short steps, its inputs unbound once).

Computes in fp32; outputs in v's dtype, the final state in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: tokens per chunk: the op alone, forward + backward at preset quick's shape (B = 4, T = 256, 2 heads of 64) on the
#: shared 2-core machine, medians of 5-9 interleaved runs: C = 16 was slowest every time (28.6 ms against 22.3 at 32
#: and 20.8 at 64 in the last run); 32 and 64 each won half of the runs, within noise, and 32 pads a short call less
CHUNK = 32
#: the most a chunk's cumulative log-decay may reach on any channel: exp(40) ~ 2e17 keeps every factored
#: product far inside fp32's range (3e38)
MAX_CHUNK_LOG_DECAY = 40.0


def chunk_for(gk: torch.Tensor, lower_bound: float | None, chunk_size: int) -> int:
    """The chunk length: ``chunk_size``, halved until ``C * max|w| <= MAX_CHUNK_LOG_DECAY``, where ``max|w|`` is
    ``-lower_bound`` when the caller guarantees one (fla's ``lower_bound`` argument), else read off ``gk``."""
    bound = lower_bound if lower_bound is not None else float(gk.detach().min()) if gk.numel() else 0.0
    C = max(1, chunk_size)
    while C > 1 and C * max(-bound, 0.0) > MAX_CHUNK_LOG_DECAY:
        C //= 2
    return C


def chunk_dplr(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    gk: torch.Tensor,
    *,
    scale: float,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    lower_bound: float | None = None,
    chunk_size: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fla's layout: ``q``, ``k``, ``a``, ``b`` and the log-decay ``gk`` [B, T, H, K]; ``v`` [B, T, H, V];
    ``initial_state`` [B, H, K, V]. Returns ``o`` [B, T, H, V] (v's dtype) and, when ``output_final_state``,
    the final state [B, H, K, V] (fp32).

    The first token of every call runs the recurrence itself (:func:`dplr_step`, the reference's arithmetic, as a
    decode step does), the others in chunks of one fixed length ``C`` from there (a short rest is padded to one
    chunk). So each output is computed by the same operations whatever the length of the call: a prefix's outputs
    equal the longer call's to the bit, and a one-token call equals the reference's. Both matter for RWKV-7,
    whose first output from an empty state is rank one in v (``(r . k) v``) and is then group-normed per head:
    that makes its gradient through r and k a near-cancellation, in which two orders of rounding differ by 1e-4
    relative (the conformance gate compares kernels at length 1)."""
    B, T, H, K = k.shape
    dtype = v.dtype
    o0, S = dplr_step(*(x[:, :1] for x in (q, k, v, a, b, gk)), scale=scale, initial_state=initial_state)
    if T > 1:
        o, S = _chunks(*(x[:, 1:] for x in (q, k, v, a, b, gk)), scale=scale, initial_state=S,
                       lower_bound=lower_bound, chunk_size=chunk_size)
        o0 = torch.cat([o0, o.to(dtype)], dim=1)
    return o0, (S if output_final_state else None)


def _chunks(q, k, v, a, b, gk, *, scale, initial_state, lower_bound, chunk_size):
    """:func:`chunk_dplr` in chunks from ``initial_state`` [B, H, K, V] (fp32): ``o`` [B, T, H, V] and the final
    state, both fp32."""
    B, T, H, K = k.shape
    V = v.shape[-1]
    C = chunk_for(gk, lower_bound, chunk_size)
    pad = (-T) % C
    N = (T + pad) // C
    M = B * H

    def chunk_major(t: torch.Tensor) -> torch.Tensor:
        """[B, T, H, X] -> [B * H, N, C, X], the length padded with zeros to N * C."""
        t = t.float()
        if pad:
            t = F.pad(t, (0, 0, 0, 0, 0, pad))
        return t.reshape(B, N, C, H, t.shape[-1]).permute(0, 3, 1, 2, 4).reshape(M, N, C, t.shape[-1])

    q, k, v, a, b, g = (chunk_major(t) for t in (q * scale, k, v, a, b, gk))
    G = g.cumsum(-2)  # inclusive: the decay through position t
    q_d = q * G.exp()  # a read at t sees the chunk's start decayed through t
    a_d = a * (G - g).exp()  # the low-rank read at t sees S_{t-1}: decayed through t - 1
    inv = (-G).exp()
    k_i, b_i = k * inv, b * inv  # a write at s, undone to the chunk's start
    G_end = G[..., -1:, :]  # [M, N, 1, K]
    to_end = (G_end - G).exp()
    k_e, b_e = k * to_end, b * to_end  # writes decayed to the chunk's end

    def t(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(-1, -2)

    A_qk = torch.tril(q_d @ t(k_i))
    A_qb = torch.tril(q_d @ t(b_i))
    A_ak = torch.tril(a_d @ t(k_i), -1)
    A_ab = torch.tril(a_d @ t(b_i), -1)
    # (I - A_ab) [u0 | W] = [A_ak v | a_d]; unitriangular=True reads only the strictly lower part, -A_ab's
    solved = torch.linalg.solve_triangular(-A_ab, torch.cat([A_ak @ v, a_d], -1), upper=False, unitriangular=True)
    u0, W = solved.split([V, K], dim=-1)
    kv = t(k_e) @ v  # [M, N, K, V]: the key writes of each chunk, ordered or not
    decay = t(G_end.exp())  # [M, N, K, 1]
    b_e_t = t(b_e)

    S = initial_state.float().reshape(M, K, V)
    starts, us = [], []
    # unbound once: indexing chunk n of each tensor in the loop would make autograd add a zero-filled gradient of
    # the whole tensor per chunk (N^2 work); unbind's backward stacks the N gradients once
    for u0_n, W_n, decay_n, kv_n, b_e_n in zip(*(x.unbind(1) for x in (u0, W, decay, kv, b_e_t))):
        starts.append(S)
        U = torch.baddbmm(u0_n, W_n, S)
        us.append(U)
        S = torch.baddbmm(torch.addcmul(kv_n, decay_n, S), b_e_n, U)
    S_starts, U = torch.stack(starts, 1), torch.stack(us, 1)
    o = q_d @ S_starts + A_qk @ v + A_qb @ U  # [M, N, C, V]
    o = o.reshape(B, H, N * C, V)[:, :, :T].transpose(1, 2)
    return o, S.reshape(B, H, K, V)


def dplr_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor, gk: torch.Tensor,
              *, scale: float, initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence itself, token by token, in the order of operations of fla's ``dplr_recurrence`` (decode
    calls have one token; every call's first token). Shapes as :func:`chunk_dplr`; the final state (fp32) is always
    returned: its one caller continues from it."""
    B, T, H, K = k.shape
    V, dtype = v.shape[-1], v.dtype
    S = initial_state.float() if initial_state is not None else k.new_zeros(B, H, K, V, dtype=torch.float32)
    outs = []
    for i in range(T):
        q_t, k_t, v_t, a_t, b_t, g_t = (x[:, i].float() for x in (q, k, v, a, b, gk))  # [B, H, K] / [B, H, V]
        read = (S * a_t.unsqueeze(-1)).sum(-2, keepdim=True)  # [B, H, 1, V]: a^T S_{t-1}, before the decay
        write = k_t.unsqueeze(-1) * v_t.unsqueeze(-2) + read * b_t.unsqueeze(-1)
        S = S * g_t.exp().unsqueeze(-1) + write
        outs.append(((q_t * scale).unsqueeze(-2) @ S).squeeze(-2))
    o = torch.stack(outs, 1)
    return o.to(dtype), S


def chunked_flops(batch: int, length: int, heads: int, k_dim: int, v_dim: int, chunk: int = CHUNK) -> float:
    """Floating-point operations of one :func:`chunk_dplr` forward pass (its products and triangular solve;
    elementwise work is not counted), for a throughput report."""
    C = min(chunk, length)
    chunks = -(-length // C)
    per_chunk = (2 * C * C * k_dim * 4  # A_qk, A_qb, A_ak, A_ab
                 + 2 * C * C * v_dim * 3  # A_ak v, A_qk v, A_qb U
                 + C * C * (v_dim + k_dim)  # the unit-triangular solve for [u0 | W]
                 + 2 * C * k_dim * v_dim * 4)  # k_e^T v, W S, b_e^T U, q_d S
    return float(batch * heads * chunks * per_chunk)
