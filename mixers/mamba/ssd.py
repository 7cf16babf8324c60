"""Mamba-2's SSD (state-space duality) scan in chunks, for CPU: kernel ``chunk`` of the mamba2 mixer.

The same maths as mamba-ssm's ``ssd_minimal_discrete`` (the SSD paper's Listing 1, the mixer's reference), per
head with the scalar log-decay ``a_t = dt_t A`` and inputs already discretised (``X = x dt``):

    h_t = exp(a_t) h_{t-1} + B_t X_t^T,        y_t = C_t^T h_t

computed chunk by chunk of ``L`` steps (cumulative log-decay ``G`` inside the chunk, pairwise decays
``exp(G_t - G_s)`` for s <= t only, so no exponential of a positive number):

* intra-chunk outputs, one batched product for all chunks: ``((C B^T) * decay) X``;
* each chunk's own state ``(B * exp(G_L - G))^T X`` [N, P], and the state before every chunk from a loop over
  chunks (``S <- exp(G_L) S + own``), so the cost is linear in the length (``ssd_minimal_discrete`` mixes the
  chunk states with a [chunks x chunks] decay matrix, quadratic in the length);
* inter-chunk outputs, again one product: ``(C * exp(G)) S_before``.

Everything is laid out chunk-major ([chunks, batch, heads, L, ...], contiguous) so each product is one BLAS call
over contiguous matrices; B and C are shared by the heads of a group and broadcast, never copied per head.
Gradients come from autograd. The state layout in and out is the package's, [batch, heads, P, N].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: steps per chunk: any length gives the same result up to rounding; 64 balances the [L, L] products against the
#: loop over chunks at Mamba-2's default head size 64 and state 128 (docs/cpu_kernels.md)
CHUNK = 64


def ssd_chunked(X: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                initial_state: torch.Tensor | None = None, chunk_size: int = CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """``X`` [b, T, h, p] (x * dt), ``A`` [b, T, h] (A * dt, the log-decay), ``B``, ``C`` [b, T, g, n] (g groups
    dividing h), ``initial_state`` [b, h, p, n] or None. Returns ``Y`` [b, T, h, p] and the final state
    [b, h, p, n], in fp32."""
    b, T, h, p = X.shape
    g, n = B.shape[2], B.shape[3]
    hg = h // g
    L = min(chunk_size, T)
    pad = (-T) % L
    c = (T + pad) // L

    def chunk_major(t: torch.Tensor) -> torch.Tensor:
        """[b, T, k, ...] -> [c, b, k, L, ...] contiguous, zero-padded (zero input and log-decay: the state holds)."""
        t = t.float()
        if pad:
            t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
        t = t.reshape(b, c, L, *t.shape[2:])
        return t.permute(1, 0, 3, 2, *range(4, t.dim())).contiguous()

    Xc = chunk_major(X)  # [c, b, h, L, p]
    Bc, Cc = chunk_major(B), chunk_major(C)  # [c, b, g, L, n]
    G = chunk_major(A).cumsum(-1)  # [c, b, h, L]
    lower = torch.ones(L, L, dtype=torch.bool, device=X.device).tril()
    decay = (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill(~lower, float("-inf")).exp()  # [c, b, h, L, L]

    def per_group(t: torch.Tensor) -> torch.Tensor:
        """[c, b, h, ...] -> [c, b, g, h/g, ...] (a view)."""
        return t.reshape(c, b, g, hg, *t.shape[3:])

    cb = (Cc @ Bc.transpose(-1, -2)).unsqueeze(3)  # [c, b, g, 1, L, L], shared by the group's heads
    y = (per_group(decay) * cb) @ per_group(Xc)  # intra-chunk: [c, b, g, hg, L, p]
    to_end = (G[..., -1:] - G).exp()  # [c, b, h, L]
    own = (Bc.unsqueeze(3) * per_group(to_end).unsqueeze(-1)).transpose(-1, -2) @ per_group(Xc)  # [c, b, g, hg, n, p]
    S = initial_state.float().transpose(-1, -2).reshape(b, g, hg, n, p) if initial_state is not None else \
        X.new_zeros(b, g, hg, n, p, dtype=torch.float32)
    chunk_decay = per_group(G[..., -1].exp())[..., None, None]  # [c, b, g, hg, 1, 1]
    starts = []
    for own_c, decay_c in zip(own.unbind(0), chunk_decay.unbind(0)):  # the only sequential part
        starts.append(S)
        S = S * decay_c + own_c
    reads = Cc.unsqueeze(3) * per_group(G.exp()).unsqueeze(-1)  # [c, b, g, hg, L, n]
    y = y + reads @ torch.stack(starts)  # inter-chunk
    y = y.reshape(c, b, h, L, p).permute(1, 0, 3, 2, 4).reshape(b, c * L, h, p)[:, :T]
    return y, S.reshape(b, h, n, p).transpose(-1, -2)
