"""Gated linear attention in PyTorch, its definition and its chunked form: one home for the GLA, RetNet and ProtoT
mixers (docs/fla_mixers.md, docs/protot_kernels.md).

The recurrence (fla's ``naive_recurrent_gla``; RetNet's is the same with one decay per head)::

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T        o_t = (scale q_t)^T S_t

with log-gates ``g_t <= 0`` per key channel. :func:`gla_recurrent` is this definition token by token at scale 1 in
the inputs' dtype (ProtoT's CPU fallback for its GLA mapping, which must not import fla). :func:`chunk_gla` is
mixbench's CPU kernel for GLA and RetNet: over a chunk of ``C`` positions, with ``G_t`` the gates' cumulative
sum inside the chunk and ``S_0`` the state entering it,

    o_t = (scale q_t * exp(G_t))^T S_0 + sum_{s<=t} scale (q_t . (k_s * exp(G_t - G_s))) v_s
    S_C = diag(exp(G_C)) S_0 + sum_s (k_s * exp(G_C - G_s)) v_s^T

Every exponent is a sum of log-gates over a span that moves forward in time, so it is <= 0 and nothing overflows
(fla's Triton kernel gets the same guarantee by sub-chunking; :func:`chunk_gla` forms the pairwise differences
``G_t - G_s`` per key channel directly, [C, C, K] per chunk, which at C = 16 costs less than the products). The
intra-chunk terms of all chunks are one batched product; the states are a scan over the T / C chunks.
Autograd differentiates both; tests/test_gla.py checks the chunked form's outputs and gradients, and
tests/test_protot_kernels.py the definition, against fla's naive recurrences.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: positions per chunk. Forward + backward at GLA's quick-preset shapes (B 4, T 256, 4 heads of K 16, V 32;
#: benchmarks/fla_mixers.py --chunks): 8 and 16 tie (24.0 ms at 16, 22.4 at 8, the ratio's interval includes 1),
#: 32 and 64 take 1.8x and 4.3x as long (the [C, C, K] gate differences grow with C); 16 halves the scan's steps
CHUNK = 16


def chunk_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    chunk: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q, k, g [B, T, H, K] (g: log-gates <= 0; [B, T, H] or [H] for one gate per head, broadcast over K),
    v [B, T, H, V], initial_state [B, H, K, V] -> (o [B, T, H, V] in v's dtype, final state [B, H, K, V] fp32)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    dtype = v.dtype
    scale = K**-0.5 if scale is None else scale
    if g.dim() == 1:
        g = g.view(1, 1, H, 1).expand(B, T, H, 1)
    elif g.dim() == 3:
        g = g.unsqueeze(-1)
    g = g.expand(B, T, H, K)
    pad = (-T) % chunk
    q, k, v, g = (F.pad(t.float(), (0, 0, 0, 0, 0, pad)) for t in (q, k, v, g))  # zero keys: no writes
    N = (T + pad) // chunk

    def chunks(t: torch.Tensor) -> torch.Tensor:  # [B, T, H, X] -> [B, H, N, C, X]
        return t.view(B, N, chunk, H, t.shape[-1]).permute(0, 3, 1, 2, 4)

    q, k, v, g = chunks(q) * scale, chunks(k), chunks(v), chunks(g)
    G = g.cumsum(-2)  # [B, H, N, C, K]
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    diff = (G.unsqueeze(-2) - G.unsqueeze(-3)).masked_fill(~causal[:, :, None], float("-inf"))  # [.., C, C, K]
    scores = torch.einsum("bhnck,bhnsk,bhncsk->bhncs", q, k, diff.exp())
    o = scores @ v  # [B, H, N, C, V]

    G_end = G[..., -1:, :]  # [B, H, N, 1, K]
    written = (k * (G_end - G).exp()).transpose(-1, -2) @ v  # what each chunk adds to the state: [B, H, N, K, V]
    decay = G_end.squeeze(-2).exp().unsqueeze(-1)  # [B, H, N, K, 1]
    state = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.float()
    entering = []
    for n in range(N):
        entering.append(state)
        state = decay[:, :, n] * state + written[:, :, n]
    o = o + (q * G.exp()) @ torch.stack(entering, dim=2)
    o = o.permute(0, 2, 3, 1, 4).reshape(B, N * chunk, H, V)[:, :T]
    return o.to(dtype), (state if output_final_state else None)


def gla_recurrent(q, k, v, g, h0):
    """GLA by its definition, one position at a time (fla's ``naive_recurrent_gla`` at scale 1, any dtype):
    ``h_t = exp(g_t) h_{t-1} + k_t v_t^T``, ``o_t = q_t h_t``. q, k, g: [B, T, H, K]; v: [B, T, H, V];
    h0: [B, H, K, V] -> (o [B, T, H, V], h_T)."""
    h, outs = h0, []
    for q_t, k_t, v_t, g_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), g.unbind(1)):
        h = g_t.exp()[..., None] * h + k_t[..., None] * v_t[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q_t, h))
    return torch.stack(outs, dim=1), h
