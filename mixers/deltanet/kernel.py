"""The delta rule (DeltaNet) and the gated delta rule (Gated DeltaNet) in chunks, for CPU, in PyTorch.

The recurrence, per head, with the state ``S`` [K, V], the log-decay ``g_t`` (0 without a gate) and ``beta_t``:

    S_t = exp(g_t) S_{t-1} + k_t u_t^T,    u_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t),    o_t = S_t^T (scale q_t)

is flash-linear-attention's ``delta_rule_recurrence`` / ``naive_recurrent_gated_delta_rule`` (the reference
kernels of the two mixers). Token by token it is thousands of tiny operations; this module computes the same
numbers chunk by chunk in the WY/UT form of Yang et al. (2024, "Parallelizing Linear Transformers with the Delta
Rule over Sequence Length"), as one autograd function (:class:`_DeltaChunks`) for both:

* within a chunk of ``C`` tokens (cumulative log-decay ``G``, pairwise decays ``D_ts = exp(G_t - G_s)`` for
  s <= t, never an exponential of a positive number), the UT transform ``T = (I + tril(diag(beta) K K^T * D,
  -1))^-1`` (the compiled forward substitution of :mod:`mixers.deltanet.kernel_c`, 5-10x faster than
  ``solve_triangular`` at 32 x 32, else the solve) gives the chunk's pseudo-values ``U = T diag(beta) V - W S``
  with ``W = T diag(beta) K exp(G)``, the state ``S <- exp(G_C) S + (K exp(G_C - G))^T U`` and the outputs
  ``(Q exp(G)) S + tril(Q K^T * D) U``: a dozen products per chunk;
* only the pseudo-values and the state need the chunks in order (two products per chunk); the rest is one
  batched product per block of chunks, sized to stay in cache (over all chunks at once, each product streamed
  megabytes through memory; chunk by chunk, a few sequences gave too few matrices per call);
* the backward is written out: the inverse's gradient ``-T^T dT T^T`` as two products where autograd would solve
  again, no copies, masks or gradient sums around each use of the keys, and the log-decays' gradient collected
  per position from the decayed factors (:class:`_ChunkGates`). Without a gate, every decay product is skipped.

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
#: [C, C] matrices per block of chunks (B * H per chunk): each of a block's tensors is then about 1 MB at C = 32,
#: in L2 (2 MB a core here). 128-256 were fastest forward + backward at B * T = 4096, 4 heads of 32, B = 16 and
#: 4; blocks of one chunk (64 matrices at B = 16) 0.9-1.1x and all chunks at once 1.1x their time; at B = 4,
#: 64 matrices were 1.0-1.15x, 16 1.35-1.46x (docs/cpu_kernels.md)
MATRICES_PER_BLOCK = 256


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
    o, S = _DeltaChunks.apply(q, k, v, beta, None if g is None else chunk_major(g).squeeze(-1), S0)
    o = o.permute(1, 0, 3, 2, 4).reshape(B, N * C, H, Vd)[:, :T]
    return o.to(dtype), (S.view(B, H, K, Vd) if output_final_state else None)


def _unit_lower_inverse_into(kk: torch.Tensor, out: torch.Tensor) -> None:
    """``(I + strictly-lower part of kk)^-1`` for a batch of [C, C] matrices, written into ``out`` (no
    autograd: :class:`_DeltaChunks` has its own backward): by the compiled forward substitution of
    :mod:`mixers.deltanet.kernel_c` where it can run, else solve_triangular, which with unitriangular=True never
    reads the diagonal or what is above it, so kk goes in as it is."""
    from mixers.deltanet import kernel_c

    if kernel_c.usable(kk):
        kernel_c.unit_lower_inverse(kk, out)
        return
    eye = torch.eye(kk.shape[-1], device=kk.device, dtype=kk.dtype).expand_as(kk)
    torch.linalg.solve_triangular(kk, eye, upper=False, unitriangular=True, out=out)


class _DeltaChunks(torch.autograd.Function):
    """The delta rule, with or without a gate, over chunk-major inputs, block of chunks after block, with a
    written-out backward.

    ``q`` (already scaled), ``k`` [N, B, H, C, K], ``v`` [N, B, H, C, V], ``beta`` [N, B, H, C, 1], the
    log-decays ``g`` [N, B, H, C] or None (no gate), all contiguous fp32; ``S0`` [B, H, K, V]. Returns ``o``
    [N, B, H, C, V] and the final state [B * H, K, V]. Per chunk n, with ``G`` the chunk's cumulative log-decay,
    ``D_ts = exp(G_t - G_s)`` for s <= t (0 above the diagonal) and ``kb = beta k``:

        T = (I + tril(kb k^T * D, -1))^-1,   w = T (kb exp(G)),   u = T (beta v) - w S_n,
        S_{n+1} = exp(G_C) S_n + (k exp(G_C - G))^T u,   o = (q exp(G)) S_n + (tril(q k^T) * D) u

    (without a gate every decay is 1 and those products are skipped). Only ``u`` and the state need the chunks
    in order: everything else is one batched product per block of chunks, around a short loop of two products
    per chunk. The backward walks the blocks in reverse with the same products transposed: the inverse's
    gradient is ``dA = -T^T dT T^T``, and the log-decays' gradient collects, per position, what each decayed
    factor contributed (for the pairwise decays ``rowsum(dX * X) - colsum(dX * X)`` of the two decayed [C, C]
    products X), then a reverse cumulative sum.

    Why blocks (:func:`_blocks`): a product over all chunks at once is bound by memory traffic, three 2 MB
    tensors per call at preset quick, while a block of about :data:`MATRICES_PER_BLOCK` [C, C] matrices stays
    in cache through all of its products; one chunk of a few sequences is too few matrices, and each of the
    thirty-odd calls per block then costs more in overhead than in arithmetic. Why a written-out backward:
    autograd would solve a triangular system again for the inverse, and add copies, masks and gradient sums
    around every use of the keys (docs/cpu_kernels.md)."""

    @staticmethod
    def forward(ctx, q, k, v, beta, g, S0):
        with torch.autocast(q.device.type, enabled=False):
            N, B, H, C, K = k.shape
            Vd, M = v.shape[-1], B * H
            q, k, v, beta = (t.view(N, M, C, t.shape[-1]) for t in (q, k, v, beta))
            k_beta, v_beta = k * beta, v * beta
            k_t = k.transpose(-1, -2).contiguous()  # [N, M, K, C]: transposed operands multiply slower
            gates = None if g is None else _ChunkGates(g.view(N, M, C), q, k_beta, k)
            q_in, k_in, k_out_t = (q, k_beta, k_t) if gates is None else (gates.q_in, gates.k_in, gates.k_out_t)
            kk, ut, qk = (k.new_empty(N, M, C, C) for _ in range(3))
            w, us, o = torch.empty_like(k), torch.empty_like(v), torch.empty_like(v)
            starts, final = k.new_empty(N, M, K, Vd), k.new_empty(M, K, Vd)
            starts[0] = S0.reshape(M, K, Vd)
            for block in _blocks(N, M):
                def flat(t: torch.Tensor) -> torch.Tensor:
                    return t[block].flatten(0, 1)  # a view: every tensor here is contiguous

                torch.bmm(flat(k_beta), flat(k_t), out=flat(kk))
                torch.bmm(flat(q), flat(k_t), out=flat(qk))
                if gates is None:
                    qk[block].tril_()
                else:
                    kk[block].mul_(gates.pairwise[block])
                    qk[block].mul_(gates.pairwise[block])  # zero above the diagonal already
                _unit_lower_inverse_into(flat(kk), flat(ut))
                torch.bmm(flat(ut), flat(k_in), out=flat(w))
                torch.bmm(flat(ut), flat(v_beta), out=flat(us))  # u0, made u in the loop
                for n in range(block.start, block.stop):
                    S = starts[n]
                    us[n].baddbmm_(w[n], S, alpha=-1)
                    torch.baddbmm(S if gates is None else S * gates.chunk_decay[n], k_out_t[n], us[n],
                                  out=starts[n + 1] if n + 1 < N else final)
                torch.bmm(flat(q_in), flat(starts), out=flat(o)).baddbmm_(flat(qk), flat(us))
            ctx.save_for_backward(q, k, v, beta, k_beta, v_beta, kk, ut, qk, w, starts, us)
            ctx.gates, ctx.heads = gates, (B, H)
            return o.view(N, B, H, C, Vd), final

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_o, d_final):
        with torch.autocast(d_o.device.type, enabled=False):
            return _DeltaChunks._backward(ctx, d_o, d_final)

    @staticmethod
    def _backward(ctx, d_o, d_final):
        q, k, v, beta, k_beta, v_beta, kk, ut, qk, w, starts, us = ctx.saved_tensors
        gates = ctx.gates
        N, M, C, K = k.shape
        Vd = v.shape[-1]
        q_in, k_in, k_out_t = (q, k_beta, k.transpose(-1, -2)) if gates is None else (
            gates.q_in, gates.k_in, gates.k_out_t)

        def tr(t: torch.Tensor) -> torch.Tensor:
            return t.transpose(-1, -2)

        d_o = torch.zeros_like(us) if d_o is None else d_o.reshape(N, M, C, Vd).contiguous()
        d_S_after = torch.empty_like(starts)  # [n]: the gradient of the state chunk n wrote
        d_S0 = torch.empty_like(starts[0])
        if d_final is None:
            d_S_after[N - 1].zero_()
        else:
            d_S_after[N - 1] = d_final
        d_q, d_k, d_k_beta = (torch.empty_like(k) for _ in range(3))
        d_u, d_v_beta = torch.empty_like(us), torch.empty_like(v)
        d_G = None if gates is None else k.new_zeros(N, M, C)
        for block in reversed(_blocks(N, M)):
            def flat(t: torch.Tensor) -> torch.Tensor:
                return t[block].flatten(0, 1)

            # o = q_in S_n + P u with P = tril(q k^T) (* D); S_{n+1} = d S_n + k_out^T u; u = u0 - w S_n
            torch.bmm(tr(flat(qk)), flat(d_o), out=flat(d_u))
            read_share = torch.bmm(tr(flat(q_in)), flat(d_o)).view(-1, M, K, Vd)
            for i, n in reversed(list(enumerate(range(block.start, block.stop)))):
                d_S = d_S_after[n]
                d_u[n].baddbmm_(tr(k_out_t[n]), d_S)
                into = d_S_after[n - 1] if n > 0 else d_S0
                torch.add(read_share[i], d_S if gates is None else d_S * gates.chunk_decay[n], out=into)
                into.baddbmm_(tr(w[n]), d_u[n], alpha=-1)
            S, d_S, g_o, u, du = flat(starts), flat(d_S_after), flat(d_o), flat(us), flat(d_u)
            d_qk = torch.bmm(g_o, tr(u)).tril_()
            d_q_in = torch.bmm(g_o, tr(S), out=flat(d_q))
            d_k_out = torch.bmm(u, tr(d_S), out=flat(d_k))
            d_w = torch.bmm(du, tr(S)).neg_()
            # u0 = T (beta v), w = T k_in, T = (I + A)^-1 with A the strictly lower part of kb k^T (* D)
            d_T = torch.bmm(du, tr(flat(v_beta))).baddbmm_(d_w, tr(flat(k_in)))
            torch.bmm(tr(flat(ut)), du, out=flat(d_v_beta))
            d_k_in = torch.bmm(tr(flat(ut)), d_w, out=flat(d_k_beta))
            d_A = torch.bmm(tr(flat(ut)), torch.bmm(d_T, tr(flat(ut)))).neg_().tril_(-1)
            if gates is not None:  # the decayed factors: each gradient through its decay, and the decay's share
                shape = (-1, M, C, C)
                gates.backward_block(block, d_G[block], d_q[block], d_k_beta[block], d_k[block],
                                     (d_S_after[block] * starts[block]).sum((-1, -2)),
                                     (d_qk.view(shape), qk[block]), (d_A.view(shape), kk[block]))
                d_qk.view(shape).mul_(gates.pairwise[block])
                d_A.view(shape).mul_(gates.pairwise[block])
            d_q_in.baddbmm_(d_qk, flat(k))
            d_k_out.baddbmm_(tr(d_qk), flat(q)).baddbmm_(tr(d_A), flat(k_beta))
            d_k_in.baddbmm_(d_A, flat(k))
        d_k.addcmul_(d_k_beta, beta)
        d_beta = (d_k_beta * k).sum(-1, keepdim=True) + (d_v_beta * v).sum(-1, keepdim=True)
        B, H = ctx.heads
        d_g = None if d_G is None else d_G.flip(-1).cumsum(-1).flip(-1).view(N, B, H, C)  # G is g's cumsum
        return tuple(t.view(N, B, H, *t.shape[2:]) for t in (d_q, d_k, d_v_beta * beta, d_beta)) + (
            d_g, d_S0.view(B, H, K, Vd))


def _blocks(chunks: int, matrices_per_chunk: int) -> list[slice]:
    """The chunks in blocks of about :data:`MATRICES_PER_BLOCK` [C, C] matrices (B * H per chunk), in order."""
    size = max(1, min(chunks, round(MATRICES_PER_BLOCK / matrices_per_chunk)))
    return [slice(start, min(start + size, chunks)) for start in range(0, chunks, size)]


class _ChunkGates:
    """The decayed factors of :class:`_DeltaChunks` for the log-decays ``g`` [N, M, C], over all chunks at once
    (elementwise work, once per call), and their share of the backward. ``G`` = cumsum(g) within each chunk;
    only differences ``G_t - G_s`` with s <= t and ``G`` itself (all <= 0 for log-decays) are exponentiated,
    so steep decays underflow to 0 and never overflow."""

    def __init__(self, g: torch.Tensor, q: torch.Tensor, k_beta: torch.Tensor, k: torch.Tensor) -> None:
        C = g.shape[-1]
        G = g.cumsum(-1)
        above = torch.ones(C, C, dtype=torch.bool, device=g.device).triu(1)
        self.pairwise = (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill_(above, float("-inf")).exp_()  # D
        self.to_start = G.exp().unsqueeze(-1)  # exp(G_t) [N, M, C, 1]: reads see the chunk's start decayed to t
        self.to_end = (G[..., -1:] - G).exp_().unsqueeze(-1)  # exp(G_C - G_t): writes decayed to the chunk's end
        self.chunk_decay = G[..., -1].exp().view(*G.shape[:2], 1, 1)  # exp(G_C) [N, M, 1, 1]
        self.q_in = q * self.to_start
        self.k_in = k_beta * self.to_start
        self.k_out_t = (k * self.to_end).transpose(-1, -2).contiguous()

    def backward_block(self, block, d_G, d_q_in, d_k_in, d_k_out, d_chunk_decay, *pairs):
        """A block of chunks' gradients through the decays: turns those of the decayed q_in, k_in, k_out into
        those of q, kb, k in place, and accumulates into ``d_G`` [n, M, C] every factor's share: the chunk
        decay's (``d_chunk_decay`` [n, M]) and, ``pairs`` being (dX, X) for the two [C, C] products X that the
        pairwise decays scale (dX masked like X), theirs."""
        d_G += (d_q_in * self.q_in[block]).sum(-1) + (d_k_in * self.k_in[block]).sum(-1)
        to_end_share = (d_k_out * self.k_out_t[block].transpose(-1, -2)).sum(-1)  # [n, M, C]
        d_G -= to_end_share
        d_G[..., -1] += to_end_share.sum(-1) + d_chunk_decay * self.chunk_decay[block].flatten(-3)
        for d_x, x in pairs:
            share = d_x * x
            d_G += share.sum(-1) - share.sum(-2)
        d_q_in.mul_(self.to_start[block])
        d_k_in.mul_(self.to_start[block])
        d_k_out.mul_(self.to_end[block])


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
