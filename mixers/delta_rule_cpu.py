"""The delta rule (DeltaNet) and the gated delta rule (Gated DeltaNet) in chunks, for CPU, in PyTorch.

The recurrence, per head, with the state ``S`` [K, V], the log-decay ``g_t`` (0 without a gate) and ``beta_t``:

    S_t = exp(g_t) S_{t-1} + k_t u_t^T,    u_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t),    o_t = S_t^T (scale q_t)

is flash-linear-attention's ``delta_rule_recurrence`` / ``naive_recurrent_gated_delta_rule`` (the reference
kernels of the two mixers). Token by token it is thousands of tiny operations; this module computes the same
numbers chunk by chunk in the WY/UT form of Yang et al. (2024, "Parallelizing Linear Transformers with the Delta
Rule over Sequence Length"), so almost all the work is batched matrix products over every chunk at once:

* within a chunk of ``C`` tokens (cumulative log-decay ``G``, pairwise decays ``D_ts = exp(G_t - G_s)`` for
  s <= t, never an exponential of a positive number), the UT transform ``T = (I + tril(diag(beta) K K^T * D,
  -1))^-1`` is one call for all chunks (the compiled forward substitution of :mod:`mixers.delta_rule_c`, 5-10x
  faster than ``solve_triangular`` at 32 x 32, else the solve), and gives the chunk's pseudo-values
  ``U = T diag(beta) V`` and ``W = T diag(beta) K exp(G)``;
* across chunks only a short loop remains, two products per chunk on the [K, V] state:
  ``U_n - W_n S`` (the chunk's true pseudo-values) and ``S <- exp(G_C) S + (K exp(G_C - G))^T U``. The loop is
  one autograd function (:class:`_ChunkStates`) with a written-out backward: the reverse loop keeps only the
  two products that carry the state's gradient, and the gradients of ``W``, of the written keys and of the
  chunk decays are three batched products over all chunks after it, instead of autograd's six small products
  and their bookkeeping per chunk;
* the outputs are then one batched product for all chunks: ``(Q exp(G)) S_n + tril(Q K^T * D) U``.

Without a gate (DeltaNet) the whole computation is one autograd function (:class:`_DeltaChunks`) that runs
chunk after chunk, each chunk's products in cache, with a written-out backward: the inverse's gradient
``-T^T dT T^T`` as two products where autograd would solve again, and no copies, masks or gradient sums around
each use of the keys. The gated path (Gated DeltaNet) goes through autograd over all chunks at once, its decays
included.

Every tensor is laid out chunk-major, [chunks, B, H, C, ...] and contiguous, so each batched product is one BLAS
call over contiguous matrices and each chunk of the loop is a contiguous slice (strided batches make torch fall
back to a matrix-by-matrix loop). Any chunk length gives the same result up to rounding; padding the length to
a multiple of the chunk with zero keys, values, betas and log-decays leaves the state unchanged, so the final
state is exact. See docs/cpu_kernels.md.
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
    S0 = initial_state.float() if initial_state is not None else k.new_zeros(B, H, K, Vd)
    if g is None:
        o, S = _DeltaChunks.apply(q, k, v, beta, S0)
    else:
        o, S = _gated_chunks(q, k, v, beta, chunk_major(g).squeeze(-1), S0)
    o = o.permute(1, 0, 3, 2, 4).reshape(B, N * C, H, Vd)[:, :T]
    return o.to(dtype), (S.view(B, H, K, Vd) if output_final_state else None)


def _unit_lower_inverse(kk: torch.Tensor) -> torch.Tensor:
    """``(I + strictly-lower part of kk)^-1`` for a batch of [C, C] matrices: by the compiled forward
    substitution of :mod:`mixers.delta_rule_c` when no gradient is wanted through it (the ungated path's own
    backward) and it can run, else solve_triangular, which with unitriangular=True never reads the diagonal or
    what is above it, so kk goes in as it is."""
    from mixers import delta_rule_c

    if not (torch.is_grad_enabled() and kk.requires_grad) and delta_rule_c.usable(kk):
        return delta_rule_c.unit_lower_inverse(kk)
    eye = torch.eye(kk.shape[-1], device=kk.device, dtype=kk.dtype).expand_as(kk)
    return torch.linalg.solve_triangular(kk, eye, upper=False, unitriangular=True)


def _unit_lower_inverse_into(kk: torch.Tensor, out: torch.Tensor) -> None:
    """:func:`_unit_lower_inverse` (no autograd) written into ``out``."""
    from mixers import delta_rule_c

    if delta_rule_c.usable(kk):
        delta_rule_c.unit_lower_inverse(kk, out)
    else:
        out.copy_(_unit_lower_inverse(kk))


def _gated_chunks(q, k, v, beta, g, S0):
    """The gated delta rule over chunk-major inputs (``q`` already scaled; ``g`` [N, B, H, C]), through
    autograd: the within-chunk decays ``D_ts = exp(G_t - G_s)`` scale the key and query products, reads see the
    chunk's starting state decayed to t, writes are decayed to the chunk's end. Returns ``o`` chunk-major and
    the final state [B * H, K, V]."""
    N, B, H, C, K = k.shape
    Vd = v.shape[-1]
    lower = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    k_beta = k * beta
    G = g.cumsum(-1)  # [N, B, H, C]
    decay = (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill(~lower, float("-inf")).exp()  # exp(G_t - G_s), s <= t
    kk = (k_beta @ k.transpose(-1, -2)) * decay
    qk = (q @ k.transpose(-1, -2)) * decay  # zero above the diagonal already
    q_in = q * G.unsqueeze(-1).exp()  # reads the state as it was at the chunk's start, decayed to t
    k_in = k_beta * G.unsqueeze(-1).exp()
    k_out = k * (G[..., -1:] - G).unsqueeze(-1).exp()  # writes decayed to the chunk's end
    chunk_decay = G[..., -1].exp().reshape(N, B * H, 1, 1)
    ut = _unit_lower_inverse(kk)
    u0, w = ut @ (v * beta), ut @ k_in
    M = B * H  # the loop works on [N, B * H, ...]: every product one bmm over contiguous matrices
    starts, us, S = _ChunkStates.apply(u0.float().reshape(N, M, C, Vd), w.float().reshape(N, M, C, K),
                                       k_out.float().transpose(-1, -2).reshape(N, M, K, C), chunk_decay,
                                       S0.reshape(M, K, Vd).contiguous())  # fp32 also under autocast
    return q_in @ starts.view(N, B, H, K, Vd) + qk @ us.view(N, B, H, C, Vd), S


class _DeltaChunks(torch.autograd.Function):
    """The delta rule without a gate over chunk-major inputs, chunk after chunk, with a written-out backward.

    ``q`` (already scaled), ``k`` [N, B, H, C, K], ``v`` [N, B, H, C, V], ``beta`` [N, B, H, C, 1], all
    contiguous fp32; ``S0`` [B, H, K, V]. Returns ``o`` [N, B, H, C, V] and the final state [B * H, K, V].
    Per chunk n: ``T = (I + tril(kb k^T, -1))^-1`` (kb = beta k), ``w = T kb``, ``u = T (beta v) - w S_n``,
    ``S_{n+1} = S_n + k^T u``, ``o = q S_n + tril(q k^T) u``; the backward walks the chunks in reverse with the
    same products transposed, the inverse's gradient being ``dA = -T^T dT T^T``.

    Why chunk by chunk: at these sizes (32 x 32 per head) a product over all chunks at once is bound by memory
    traffic, three 2 MB tensors per call at preset quick, while one chunk's [B * H] matrices (256 KB each)
    stay in cache through all of its products. Why a written-out backward: autograd would solve a triangular
    system again for the inverse, and add copies, masks and gradient sums around every use of the keys
    (docs/cpu_kernels.md)."""

    @staticmethod
    def forward(ctx, q, k, v, beta, S0):
        with torch.autocast(q.device.type, enabled=False):
            N, B, H, C, K = k.shape
            Vd, M = v.shape[-1], B * H
            q, k, v, beta = (t.view(N, M, C, t.shape[-1]) for t in (q, k, v, beta))
            k_beta, v_beta = k * beta, v * beta
            k_t = k.transpose(-1, -2).contiguous()  # [N, M, K, C]: transposed operands multiply slower
            ut, qk = k.new_empty(N, M, C, C), k.new_empty(N, M, C, C)
            w, us, o = torch.empty_like(k), torch.empty_like(v), torch.empty_like(v)
            starts, final = k.new_empty(N, M, K, Vd), k.new_empty(M, K, Vd)
            starts[0] = S0.reshape(M, K, Vd)
            for n in range(N):
                S = starts[n]
                _unit_lower_inverse_into(torch.bmm(k_beta[n], k_t[n]), ut[n])
                torch.bmm(ut[n], k_beta[n], out=w[n])
                torch.baddbmm(torch.bmm(ut[n], v_beta[n]), w[n], S, alpha=-1, out=us[n])
                torch.baddbmm(S, k_t[n], us[n], out=starts[n + 1] if n + 1 < N else final)
                torch.bmm(q[n], k_t[n], out=qk[n]).tril_()
                torch.bmm(q[n], S, out=o[n]).baddbmm_(qk[n], us[n])
            ctx.save_for_backward(q, k, v, beta, k_beta, v_beta, ut, qk, w, starts, us)
            ctx.heads = (B, H)
            return o.view(N, B, H, C, Vd), final

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_o, d_final):
        with torch.autocast(d_o.device.type, enabled=False):
            return _DeltaChunks._backward(ctx, d_o, d_final)

    @staticmethod
    def _backward(ctx, d_o, d_final):
        q, k, v, beta, k_beta, v_beta, ut, qk, w, starts, us = ctx.saved_tensors
        N, M, C, K = k.shape
        Vd = v.shape[-1]

        def tr(t: torch.Tensor) -> torch.Tensor:
            return t.transpose(-1, -2)

        d_o = torch.zeros_like(us) if d_o is None else d_o.reshape(N, M, C, Vd).contiguous()
        dS = torch.zeros_like(starts[0]) if d_final is None else d_final.contiguous().clone()  # of S_{n+1}
        d_q, d_k, d_k_beta = (torch.empty_like(k) for _ in range(3))
        d_v_beta = torch.empty_like(v)
        for n in range(N - 1, -1, -1):
            S, g = starts[n], d_o[n]
            # o = q S_n + P u with P = tril(q k^T); S_{n+1} = S_n + k^T u
            d_u = torch.bmm(tr(qk[n]), g).baddbmm_(k[n], dS)
            d_qk = torch.bmm(g, tr(us[n])).tril_()
            torch.bmm(g, tr(S), out=d_q[n]).baddbmm_(d_qk, k[n])
            torch.bmm(tr(d_qk), q[n], out=d_k[n]).baddbmm_(us[n], tr(dS))
            # u = u0 - w S_n: the state's gradient before this chunk
            d_w = torch.bmm(d_u, tr(S)).neg_()
            dS.baddbmm_(tr(q[n]), g).baddbmm_(tr(w[n]), d_u, alpha=-1)
            # u0 = T (beta v), w = T kb, T = (I + A)^-1 with A the strictly lower part of kb k^T
            d_T = torch.bmm(d_u, tr(v_beta[n])).baddbmm_(d_w, tr(k_beta[n]))
            torch.bmm(tr(ut[n]), d_u, out=d_v_beta[n])
            torch.bmm(tr(ut[n]), d_w, out=d_k_beta[n])
            d_A = torch.bmm(tr(ut[n]), torch.bmm(d_T, tr(ut[n]))).neg_().tril_(-1)
            d_k_beta[n].baddbmm_(d_A, k[n])
            d_k[n].baddbmm_(tr(d_A), k_beta[n])
        d_k.addcmul_(d_k_beta, beta)
        d_beta = (d_k_beta * k).sum(-1, keepdim=True) + (d_v_beta * v).sum(-1, keepdim=True)
        B, H = ctx.heads
        return tuple(t.view(N, B, H, *t.shape[2:]) for t in (d_q, d_k, d_v_beta * beta, d_beta)) + (
            dS.view(B, H, K, Vd),)


def _states_forward(u0, w, k_t, decay, S0):
    """The loop of :class:`_ChunkStates` (see there), without autograd: (starts, us, final state). Each
    product writes straight into the next chunk's starting state, so nothing is copied per chunk."""
    N = u0.shape[0]
    starts = u0.new_empty(N, *S0.shape)
    us = torch.empty_like(u0)
    final = torch.empty_like(S0)
    starts[0] = S0
    for n in range(N):
        S = starts[n]
        torch.baddbmm(u0[n], w[n], S, alpha=-1, out=us[n])
        torch.baddbmm(S if decay is None else S * decay[n], k_t[n], us[n], out=starts[n + 1] if n + 1 < N else final)
    return starts, us, final


def _states_backward(w, k_t, decay, starts, us, d_starts, d_us, d_final):
    """The written-out backward of :class:`_ChunkStates`: (du0, dw, dk_t, d_decay, dS0); None gradients are
    zeros. The reverse loop writes each state's gradient straight into its slot of ``dS_next``."""
    N = us.shape[0]
    d_us = torch.zeros_like(us) if d_us is None else d_us.contiguous()
    d_starts = torch.zeros_like(starts) if d_starts is None else d_starts.contiguous()
    du = torch.empty_like(us)
    dS_next = torch.empty_like(starts)  # the gradient of the state each chunk wrote
    d_S0 = torch.empty_like(starts[0])
    if d_final is None:
        dS_next[N - 1].zero_()
    else:
        dS_next[N - 1] = d_final
    for n in range(N - 1, -1, -1):
        dS = dS_next[n]
        torch.baddbmm(d_us[n], k_t[n].transpose(-1, -2), dS, out=du[n])
        into = dS_next[n - 1] if n > 0 else d_S0
        torch.add(d_starts[n], dS if decay is None else dS * decay[n], out=into)
        into.baddbmm_(w[n].transpose(-1, -2), du[n], alpha=-1)
    d_w = (du @ starts.transpose(-1, -2)).neg_()
    d_k_t = dS_next @ us.transpose(-1, -2)
    d_decay = None if decay is None else (dS_next * starts).sum((-1, -2), keepdim=True)
    return du, d_w, d_k_t, d_decay, d_S0


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
            starts, us, S = _states_forward(u0, w, k_t, decay, S0)
            ctx.save_for_backward(w, k_t, decay, starts, us)
            return starts, us, S

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_starts, d_us, d_final):
        with torch.autocast(ctx.saved_tensors[0].device.type, enabled=False):
            return _states_backward(*ctx.saved_tensors, d_starts, d_us, d_final)


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
