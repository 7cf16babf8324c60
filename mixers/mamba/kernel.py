"""mixbench's CPU scans for both Mamba mixers, in PyTorch: Mamba-1's selective scan (kernel ``cpu-scan``, and
kernel ``fused`` without a C compiler) and Mamba-2's chunked SSD (kernel ``chunk``).

**Mamba-1**: a fast selective scan with the maths and signature of mamba-ssm's ``selective_scan_ref``.

``selective_scan_ref`` is the package's definition of the S6 scan and stays the mamba mixer's reference kernel,
but it is too slow to train with on CPU (about 14 s forward + backward at B=4, T=256, d_model=256): every step of
its Python loop reads ``deltaA[:, :, i]``, whose backward writes a full-size gradient per step (quadratic in T),
every step is recorded by autograd, and it materialises (B, D, T, N) decays and inputs.

This scan computes the same recurrence, with the same operations per step,

    h_t = exp(delta_t A) * h_{t-1} + delta_t u_t B_t        y_t = C_t . h_t + D u_t,  then * silu(z_t)

as one autograd node with a hand-written backward. Everything runs step by step on one step's (B, D, N) slice,
which stays in cache: whole-sequence (T, B, D, N) tensors cost more in memory traffic and page faults than the
arithmetic they would vectorise. The forward pass keeps only every ``CHECKPOINT``-th state; the backward pass
recomputes one segment of states at a time from its checkpoint and walks it in reverse with the adjoint

    g_t = dL/dh_t = C_t dy_t + exp(delta_{t+1} A) g_{t+1}

from which every input's gradient follows per step. Memory is O(B D N (T / CHECKPOINT + CHECKPOINT)) instead of
the reference's O(B D N T).

The loops run thousands of small operations, so they run on one intra-op thread: splitting one step's slice
across threads gains little, and on a shared machine (more runnable threads than cores) each operation's OpenMP
barrier waits for a descheduled worker. Measured at load 8 on the 2-core machine, forward + backward at B=16,
T=256, D=256: 0.2 s on one thread, 57 s on two (OMP_WAIT_POLICY=PASSIVE also avoids it, process-wide).

Real A only (the Mamba module's S4D-real A); complex A stays with ``selective_scan_ref``.

**Mamba-2**: :func:`ssd_chunked`, the SSD (state-space duality) scan in chunks.

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

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from mixers.mamba.reference import transition

#: steps between the states the forward pass keeps for the backward pass
CHECKPOINT = 16


class _Scan(torch.autograd.Function):
    """The recurrence and its readout, all tensors time-major.

    In: ``u``, ``delta`` (T, batch, D); ``A`` (D, N); ``B``, ``C`` broadcastable to (T, batch, D, N) with a time
    dimension of T or 1. Out: ``y`` (T, batch, D) and the last state (batch, D, N).
    """

    @staticmethod
    def forward(ctx, u, delta, A, B, C, neg=False):
        with _one_intra_op_thread():
            y, last, checkpoints = _forward(u, delta, A, B, C, neg)
        ctx.save_for_backward(u, delta, A, B, C, checkpoints)
        ctx.neg = neg
        return y, last

    @staticmethod
    def backward(ctx, d_y, d_last):
        with _one_intra_op_thread():
            return (*_backward(*ctx.saved_tensors, d_y, d_last, ctx.neg), None)


def _forward(u, delta, A, B, C, neg=False):
    """y, the last state, and the state before every CHECKPOINT-th step."""
    T = u.shape[0]
    drive = (delta * u).unsqueeze(-1)
    y = torch.empty_like(u)
    checkpoints = u.new_empty(-(-T // CHECKPOINT), u.shape[1], A.shape[0], A.shape[1])
    h = torch.zeros_like(checkpoints[0])
    for t in range(T):
        if t % CHECKPOINT == 0:
            checkpoints[t // CHECKPOINT] = h  # the state before step t
        h = torch.addcmul(drive[t] * _at(B, t), transition(delta[t].unsqueeze(-1) * A, neg), h)
        _contract_n(h, _at(C, t), out=y[t])
    return y, h, checkpoints


def _backward(u, delta, A, B, C, checkpoints, d_y, d_last, neg=False):
    """Gradients of u, delta, A, B, C, one checkpointed segment at a time from the last."""
    T = u.shape[0]
    drive = delta * u
    g_B = torch.empty_like(u)  # dL/d(delta_t u_t)
    d_delta = torch.zeros_like(delta)
    d_A, d_B, d_C = torch.zeros_like(A), torch.zeros_like(B), torch.zeros_like(C)
    states = u.new_empty(CHECKPOINT, *checkpoints.shape[1:])  # one segment, reused
    decays = torch.empty_like(states)
    g = d_last.clone()
    for c in range(checkpoints.shape[0] - 1, -1, -1):
        start, stop = c * CHECKPOINT, min(T, (c + 1) * CHECKPOINT)
        h = checkpoints[c]
        for t in range(start, stop):  # recompute the segment's decays and states
            decays[t - start] = transition(delta[t].unsqueeze(-1) * A, neg)
            h = torch.addcmul(drive[t].unsqueeze(-1) * _at(B, t), decays[t - start], h, out=states[t - start])
        for t in range(stop - 1, start - 1, -1):
            i = t - start
            g = torch.addcmul(g, d_y[t].unsqueeze(-1), _at(C, t))  # g was exp(delta_{t+1} A) g_{t+1}
            _contract_n(g, _at(B, t), out=g_B[t])
            d_B[t if B.shape[0] > 1 else 0] += _contract_channels(g, drive[t], B.shape[1:])
            d_C[t if C.shape[0] > 1 else 0] += _contract_channels(states[i], d_y[t], C.shape[1:])
            if t == 0:
                break
            d_log_decay = g * (states[i - 1] if i > 0 else checkpoints[c])  # dL/d(delta_t A)
            d_log_decay *= decays[i] + 1.0 if neg else decays[i]  # d transition / d(delta A)
            torch.sum(d_log_decay * A, -1, out=d_delta[t])
            d_A += (d_log_decay * delta[t].unsqueeze(-1)).sum(0)
            g = g * decays[i]
    d_delta += g_B * u
    return g_B * delta, d_delta, d_A, d_B, d_C


@contextlib.contextmanager
def _one_intra_op_thread() -> Iterator[None]:
    """Run the block's torch operations (issued from this thread) on one intra-op thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _at(M: torch.Tensor, t: int) -> torch.Tensor:
    """Step ``t`` of a time-major B or C that may be shared over time (time dimension 1)."""
    return M[t] if M.shape[0] > 1 else M[0]


def _contract_n(x: torch.Tensor, M: torch.Tensor, out: torch.Tensor) -> None:
    """out = sum over N of x * M for one step: x (batch, D, N), M (batch or 1, D or 1, N), out (batch, D)."""
    if M.shape[-2] == 1 and M.shape[-3] == x.shape[-3]:  # one vector per sequence for all channels
        torch.bmm(x, M.transpose(-1, -2), out=out.unsqueeze(-1))
    else:
        torch.sum(x * M, -1, out=out)


def _contract_channels(x: torch.Tensor, w: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """For one step, sum over D of x * w[..., None] reduced to B's or C's step shape: x (batch, D, N), w (batch, D)."""
    if shape[-2] == 1 and shape[-3] == x.shape[-3]:
        return torch.bmm(w.unsqueeze(-2), x)  # (batch, 1, N)
    return (x * w.unsqueeze(-1)).sum_to_size(shape)


def _time_major(M: torch.Tensor, dim: int) -> torch.Tensor:
    """B or C as (T, batch, dim or 1, N): shared (D, N), per step (batch, N, T) or grouped (batch, G, N, T)."""
    M = M.float()
    if M.dim() == 2:
        return M[None, None]
    if M.dim() == 3:
        return M.permute(2, 0, 1).unsqueeze(2).contiguous()
    return M.permute(3, 0, 1, 2).repeat_interleave(dim // M.shape[1], dim=2)


def selective_scan_cpu(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    neg: bool = False,
):
    """Shapes as ``selective_scan_ref``: u, delta, z (batch, D, T); A (D, N); B, C (D, N), (batch, N, T) or
    (batch, G, N, T); D and delta_bias (D,); ``neg``: the transition ``2 exp(delta A) - 1``
    (:func:`mixers.mamba.reference.transition`).
    Returns ``out`` (batch, D, T) and, if asked, the last state (batch, D, N)."""
    if A.is_complex():
        raise NotImplementedError("selective_scan_cpu handles real A only; use selective_scan_ref for complex A.")
    dtype_in = u.dtype
    u = u.float()
    delta = delta.float()
    if delta_bias is not None:
        delta = delta + delta_bias[..., None].float()
    if delta_softplus:
        delta = F.softplus(delta)
    dim = A.shape[0]
    y, last = _Scan.apply(
        u.permute(2, 0, 1).contiguous(), delta.permute(2, 0, 1).contiguous(), A.float(),
        _time_major(B, dim), _time_major(C, dim), neg,
    )
    out = y.permute(1, 2, 0)
    if D is not None:
        out = out + u * D[:, None]
    if z is not None:
        out = out * F.silu(z)
    out = out.to(dtype_in)
    return (out, last) if return_last_state else out


#: steps per chunk: any length gives the same result up to rounding; 64 balances the [L, L] products against the
#: loop over chunks at Mamba-2's default head size 64 and state 128 (docs/cpu_kernels.md)
SSD_CHUNK = 64


def ssd_chunked(X: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                initial_state: torch.Tensor | None = None,
                chunk_size: int = SSD_CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
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
