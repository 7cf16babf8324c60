"""The delta rule (DeltaNet) and the gated delta rule (Gated DeltaNet) in chunks, for CPU, in plain PyTorch.

The recurrence, per head, with the state ``S`` [K, V], the log-decay ``g_t`` (0 without a gate) and ``beta_t``:

    S_t = exp(g_t) S_{t-1} + k_t u_t^T,    u_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t),    o_t = S_t^T (scale q_t)

is flash-linear-attention's ``delta_rule_recurrence`` / ``naive_recurrent_gated_delta_rule`` (the reference
kernels of the two mixers). Token by token it is thousands of tiny operations; this module computes the same
numbers chunk by chunk in the WY/UT form of Yang et al. (2024, "Parallelizing Linear Transformers with the Delta
Rule over Sequence Length"), so almost all the work is batched matrix products over every chunk at once:

* within a chunk of ``C`` tokens (cumulative log-decay ``G``, pairwise decays ``D_ts = exp(G_t - G_s)`` for
  s <= t, never an exponential of a positive number), the UT transform ``T = (I + tril(diag(beta) K K^T * D,
  -1))^-1`` is one batched unit-triangular solve for all chunks (its backward is another), and gives the
  chunk's pseudo-values ``U = T diag(beta) V`` and ``W = T diag(beta) K exp(G)``;
* across chunks only a short loop remains, two products per chunk on the [K, V] state:
  ``U_n - W_n S`` (the chunk's true pseudo-values) and ``S <- exp(G_C) S + (K exp(G_C - G))^T U``. The loop is
  one autograd function (:class:`_ChunkStates`) with a written-out backward: the reverse loop keeps only the
  two products that carry the state's gradient, and the gradients of ``W``, of the written keys and of the
  chunk decays are three batched products over all chunks after it, instead of autograd's six small products
  and their bookkeeping per chunk;
* the outputs are then one batched product for all chunks: ``(Q exp(G)) S_n + tril(Q K^T * D) U``.

Every tensor is laid out chunk-major, [chunks, B, H, C, ...] and contiguous, so each batched product is one BLAS
call over contiguous matrices and each chunk of the loop is a contiguous slice (strided batches make torch fall
back to a matrix-by-matrix loop). The other gradients come from autograd through these few large operations. Any chunk
length gives the same result up to rounding; padding the length to a multiple of the chunk with zero keys,
values, betas and log-decays leaves the state unchanged, so the final state is exact. See docs/cpu_kernels.md.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: tokens per chunk: fewer chunks mean a shorter sequential loop, longer ones larger [C, C] products; 32 was the
#: fastest forward + backward at the quick preset's head size (32), B*T = 4096 (docs/cpu_kernels.md)
CHUNK = 32


def chunk_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fla's layout: ``q``, ``k`` [B, T, H, K]; ``v`` [B, T, H, V]; ``beta`` and the log-decay ``g`` (None: no
    gate) [B, T, H]; ``initial_state`` [B, H, K, V]. Returns ``o`` [B, T, H, V] (v's dtype) and, when
    ``output_final_state``, the final state [B, H, K, V] in fp32. Computes in fp32."""
    dtype = v.dtype
    B, T, H, K = k.shape
    Vd = v.shape[-1]
    if T == 1:
        return _one_step(q, k, v, beta, g, scale, initial_state, output_final_state)
    C = min(chunk_size, T)
    pad = (-T) % C
    N = (T + pad) // C

    def chunk_major(t: torch.Tensor) -> torch.Tensor:
        """[B, T, H, ...] -> [N, B, H, C, ...] (contiguous), the length padded with zeros to N * C."""
        t = t.float()
        if t.dim() == 3:
            t = t.unsqueeze(-1)
        if pad:
            t = F.pad(t, (0, 0, 0, 0, 0, pad))
        return t.reshape(B, N, C, H, t.shape[-1]).permute(1, 0, 3, 2, 4).contiguous()

    q, k, v, beta = chunk_major(q * scale), chunk_major(k), chunk_major(v), chunk_major(beta)
    k_beta = k * beta
    lower = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    kk = k_beta @ k.transpose(-1, -2)
    qk = q @ k.transpose(-1, -2)
    if g is not None:
        G = chunk_major(g).squeeze(-1).cumsum(-1)  # [N, B, H, C]
        decay = (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill(~lower, float("-inf")).exp()  # exp(G_t - G_s), s <= t
        kk = kk * decay
        qk = qk * decay  # zero above the diagonal already
        q_in = q * G.unsqueeze(-1).exp()  # reads the state as it was at the chunk's start, decayed to t
        k_in = k_beta * G.unsqueeze(-1).exp()
        k_out = k * (G[..., -1:] - G).unsqueeze(-1).exp()  # writes decayed to the chunk's end
        chunk_decay = G[..., -1].exp().reshape(N, B * H, 1, 1)
    else:
        qk = qk.masked_fill(~lower, 0.0)
        q_in, k_in, k_out, chunk_decay = q, k_beta, k, None
    # T = (I + strictly-lower part of kk)^-1; solve_triangular with unitriangular=True never reads the diagonal
    eye = torch.eye(C, device=k.device).expand_as(kk)
    ut = torch.linalg.solve_triangular(kk.tril(-1), eye, upper=False, unitriangular=True)
    u0 = ut @ (v * beta)
    w = ut @ k_in

    S0 = initial_state.float() if initial_state is not None else k.new_zeros(B, H, K, Vd)
    M = B * H  # the loop works on [N, B * H, ...]: every product one bmm over contiguous matrices
    starts, us, S = _ChunkStates.apply(u0.float().reshape(N, M, C, Vd), w.float().reshape(N, M, C, K),
                                       k_out.float().transpose(-1, -2).reshape(N, M, K, C), chunk_decay,
                                       S0.reshape(M, K, Vd).contiguous())  # fp32 also under autocast
    o = q_in @ starts.view(N, B, H, K, Vd) + qk @ us.view(N, B, H, C, Vd)  # [N, B, H, C, V]
    o = o.permute(1, 0, 3, 2, 4).reshape(B, N * C, H, Vd)[:, :T]
    return o.to(dtype), (S.view(B, H, K, Vd) if output_final_state else None)


class _ChunkStates(torch.autograd.Function):
    """The sequential part, chunk by chunk: ``u_n = u0_n - w_n S_n`` and ``S_{n+1} = d_n S_n + k_n^T u_n``.

    Chunk-major, B and H flattened into M: ``u0`` [N, M, C, V], ``w`` [N, M, C, K], ``k_t`` (the written keys,
    transposed) [N, M, K, C], ``decay`` (``d_n``; None: 1) [N, M, 1, 1], ``S0`` [M, K, V]. Returns every chunk's
    starting state [N, M, K, V], the pseudo-values ``u`` [N, M, C, V] and the final state. Backward, with ``dS``
    the gradient of ``S_{n+1}``: ``du_n = du_n^out + k_n dS`` and ``dS_n = dS_n^out + d_n dS - w_n^T du_n`` in a
    reverse loop; then, batched over all chunks, ``dw = -du S^T``, ``dk_t = dS_next u^T``, ``dd = <dS_next, S>``.
    """

    @staticmethod
    def forward(ctx, u0, w, k_t, decay, S0):
        with torch.autocast(u0.device.type, enabled=False):  # the state is carried in fp32
            return _ChunkStates._forward(ctx, u0, w, k_t, decay, S0)

    @staticmethod
    def _forward(ctx, u0, w, k_t, decay, S0):
        N = u0.shape[0]
        starts = u0.new_empty(N, *S0.shape)
        us = torch.empty_like(u0)
        S = S0
        for n in range(N):
            starts[n] = S
            torch.baddbmm(u0[n], w[n], S, alpha=-1, out=us[n])
            S = torch.baddbmm(S if decay is None else S * decay[n], k_t[n], us[n])
        ctx.save_for_backward(w, k_t, decay, starts, us)
        return starts, us, S

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_starts, d_us, d_final):
        with torch.autocast(ctx.saved_tensors[0].device.type, enabled=False):
            return _ChunkStates._backward(ctx, d_starts, d_us, d_final)

    @staticmethod
    def _backward(ctx, d_starts, d_us, d_final):
        w, k_t, decay, starts, us = ctx.saved_tensors
        dS = torch.zeros_like(starts[0]) if d_final is None else d_final.contiguous()
        d_us = torch.zeros_like(us) if d_us is None else d_us.contiguous()
        d_starts = torch.zeros_like(starts) if d_starts is None else d_starts.contiguous()
        du = torch.empty_like(us)
        dS_next = torch.empty_like(starts)  # the gradient of the state each chunk wrote
        for n in range(us.shape[0] - 1, -1, -1):
            dS_next[n] = dS
            torch.baddbmm(d_us[n], k_t[n].transpose(-1, -2), dS, out=du[n])
            carried = dS if decay is None else dS * decay[n]
            dS = torch.baddbmm(d_starts[n] + carried, w[n].transpose(-1, -2), du[n], alpha=-1)
        d_w = (du @ starts.transpose(-1, -2)).neg_()
        d_k_t = dS_next @ us.transpose(-1, -2)
        d_decay = None if decay is None else (dS_next * starts).sum((-1, -2), keepdim=True)
        return du, d_w, d_k_t, d_decay, dS


def _one_step(q, k, v, beta, g, scale, initial_state, output_final_state):
    """One token (decode): the recurrence itself. Shapes as :func:`chunk_delta_rule` with T = 1."""
    B, _, H, K = k.shape
    dtype = v.dtype
    q, k, v, beta = (t[:, 0].float() for t in (q, k, v, beta))  # [B, H, .], beta [B, H]
    S = initial_state.float() if initial_state is not None else k.new_zeros(B, H, K, v.shape[-1])
    if g is not None:
        S = S * g[:, 0].float().exp()[..., None, None]
    u = beta.unsqueeze(-1) * (v - (k.unsqueeze(-2) @ S).squeeze(-2))
    S = S + k.unsqueeze(-1) * u.unsqueeze(-2)
    o = ((q * scale).unsqueeze(-2) @ S).squeeze(-2)
    return o.unsqueeze(1).to(dtype), (S if output_final_state else None)


def chunked_flops(batch: int, length: int, heads: int, k_dim: int, v_dim: int, chunk: int = CHUNK) -> float:
    """Floating-point operations of one :func:`chunk_delta_rule` forward pass (the products and the triangular
    solve; elementwise work is not counted): what the throughput suite divides by the kernel's time."""
    C = min(chunk, length)
    chunks = -(-length // C)
    per_chunk = (2 * C * C * k_dim * 3  # k_beta k^T, q k^T, ut @ k_in
                 + 2 * C * C * v_dim * 2  # ut @ v_beta, tril(q k^T) @ u
                 + C**3 / 3 * 2  # the unit-triangular solve against the identity
                 + 2 * C * k_dim * v_dim * 3)  # w @ S, k_out^T @ u, q_in @ S
    return float(batch * heads * chunks * per_chunk)
