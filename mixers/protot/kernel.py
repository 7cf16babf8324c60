"""ProtoT's chunk-parallel prefix-mean kernel for CPUs: a few large batched matmuls and a written-out backward.

It computes what :func:`mixers.protot.reference.prefix_mean_recurrent` defines (docs/protot_kernels.md): per
channel k a decayed sum S of ``w v`` and a mass M of ``w``, read strictly before each write:
``o_t = sum_k rho_tk S_{t-1,k} / max(M_{t-1,k}, floor)``. Positions are cut into chunks of C (64); all chunks
are processed at once:

* **state path**: each chunk's increment of the state, ``(w * beta^(C-1-s))^T v``, is one batched matmul; a loop
  over the T/C chunks carries the states (sums and masses); every chunk reads its carried state with
  ``(q * beta^t) @ H``, one batched matmul;
* **inside a chunk**: masses ``sum_{s<t} beta^(t-1-s) w_s`` and scores ``A[t, s] = sum_k q_tk beta_k^(t-1-s)
  w_sk`` (s < t), then ``A @ v``. For gentle decays ``beta^(t-1-s) = beta^(t-c) beta^(c-1-s)`` around the chunk
  middle c makes both one matmul (masses: a shared strictly-lower matrix of ones; scores: ``Qf @ Kf^T``); both
  factors stay within a dtype-aware budget (:func:`exp_budget`) and nothing is materialised per position.
  Steeper decays split the chunk into 4 blocks: a block reads the earlier blocks through factors taken at its
  own first position n_i (``beta^(t - n_i)``, ``beta^(n_i - 1 - s)``: exponents >= 0, safe for any decay) and
  the blocks recurse (gentle again at 16 positions for beta >= ~0.02; down to single positions, which read
  nothing, for beta = 1e-9). Every power of beta has a non-negative exponent or stays within the budget;
  nothing divides by a power that can underflow.

The backward is an ``autograd.Function``: it runs the same batched matmuls transposed, carries the state
gradients with one reverse loop, recomputes the clamp and the decay tables instead of storing them, and gets the
decay's gradient in closed form from per-position products with chunk-local positions t, s:
``d log beta_k = sum_t t [q dq]_(M < floor) - sum_s (s + 1) w dw + sum_chunks C <H_end, dH_end>`` -- the
lag-weighted sum over every (read, write) pair without forming the pairs (where the mass is not floored, the
read weight's and the mass's dependence on the decay cancel, which is why only floored reads appear).

On a CPU with a C compiler (float32), the two recurrences -- the masses, position by position, and the loop over
chunks that carries the states -- run as compiled loops (:mod:`mixers.protot.kernel_c`), which also form the factored
tensors and assemble the per-position gradients; the masses then need no products and no power of beta.
Elsewhere (no compiler, float64, CUDA) they run in PyTorch as described above; both give the same numbers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mixers.protot import kernel_c

#: positions per chunk (the layer's default ``chunk_size``)
DEFAULT_CHUNK = 64
#: blocks per split of a chunk whose decays are too steep for one factorised product
SPLIT = 4


def exp_budget(dtype: torch.dtype, floor: float, block: int, R: int) -> float:
    """Largest |exponent| the two factors of a factorised block product may take in ``dtype``.

    A discarded entry (s >= t) multiplies two factors of up to e^budget each, a read weight of up to 1/floor
    and is summed over ``block * R`` terms; all of it must stay finite before it is masked out.
    """
    log_max = math.log(torch.finfo(dtype).max)
    return (log_max - 4.0 - math.log(1.0 / floor) - math.log(block * R)) / 2


def is_gentle(steepest: float, block: int, dtype: torch.dtype, floor: float, R: int) -> bool:
    """Whether a block of ``block`` positions takes the factorised products for decays this steep (-log beta)."""
    return steepest * (block // 2) <= exp_budget(dtype, floor, block, R)


def _powers(exponents: torch.Tensor, log_beta: torch.Tensor) -> torch.Tensor:
    """beta^e for a column of exponents e: one row per exponent, one column per channel."""
    return torch.exp(exponents.to(log_beta.dtype).unsqueeze(-1) * log_beta)


def _arange(n: int, like: torch.Tensor) -> torch.Tensor:
    return torch.arange(n, device=like.device, dtype=like.dtype)


def _mid(b: int, log_beta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The factorised decay around the block middle c: (beta^(t-c), beta^(c-1-s)), each [b, R]."""
    idx = _arange(b, log_beta)
    return _powers(idx - b // 2, log_beta), _powers(b // 2 - 1 - idx, log_beta)


def _strictly_lower(b: int, like: torch.Tensor) -> torch.Tensor:
    return torch.ones(b, b, device=like.device, dtype=like.dtype).tril_(-1)


class _Blocks:
    """Inside-chunk masses and scores for decays too steep for one factorised product: split and recurse.

    Tensors are [N, b, R] (N blocks of b positions). Every operation is linear in w (and in q), so each has
    a transpose, which is its backward.
    """

    def __init__(self, log_beta: torch.Tensor, floor: float):
        self.lb = log_beta
        self.floor = floor
        self.steepest = float(-log_beta.min()) if log_beta.numel() else 0.0

    def gentle(self, b: int) -> bool:
        return is_gentle(self.steepest, b, self.lb.dtype, self.floor, self.lb.numel())

    def _split(self, b: int) -> tuple[int, int]:
        k = min(SPLIT, b)
        return k, b // k

    # masses: M[t] = sum_{s<t} beta^(t-1-s) w[s]
    def masses(self, w: torch.Tensor) -> torch.Tensor:
        N, b, R = w.shape
        if b == 1:
            return torch.zeros_like(w)
        if self.gentle(b):
            pq, pk = _mid(b, self.lb)
            return torch.matmul(_strictly_lower(b, w), w * pk).mul_(pq)
        k, c = self._split(b)
        out = self.masses(w.reshape(N * k, c, R)).view(N, k, c, R)
        u = _arange(c, w)
        ends = (w.view(N, k, c, R) * _powers(c - 1 - u, self.lb)).sum(2)  # each block's writes at its end
        carried = torch.zeros_like(ends)  # mass entering block i from the blocks before it
        step = torch.exp(c * self.lb)
        for i in range(1, k):
            torch.addcmul(ends[:, i - 1], carried[:, i - 1], step, out=carried[:, i])
        return out.addcmul_(_powers(u, self.lb), carried[:, :, None, :]).view(N, b, R)

    def masses_t(self, d: torch.Tensor) -> torch.Tensor:
        """The transpose of :meth:`masses`: dw[s] = sum_{t>s} beta^(t-1-s) d[t]."""
        N, b, R = d.shape
        if b == 1:
            return torch.zeros_like(d)
        if self.gentle(b):
            pq, pk = _mid(b, self.lb)
            return torch.matmul(_strictly_lower(b, d).T, d * pq).mul_(pk)
        k, c = self._split(b)
        out = self.masses_t(d.reshape(N * k, c, R)).view(N, k, c, R)
        u = _arange(c, d)
        d_carried = (d.view(N, k, c, R) * _powers(u, self.lb)).sum(2)
        step = torch.exp(c * self.lb)
        d_ends = torch.zeros_like(d_carried)  # d_ends[i] = total gradient of carried[i + 1]
        d_ends[:, k - 2] = d_carried[:, k - 1]
        for i in range(k - 3, -1, -1):
            torch.addcmul(d_carried[:, i + 1], d_ends[:, i + 1], step, out=d_ends[:, i])
        return out.addcmul_(_powers(c - 1 - u, self.lb), d_ends[:, :, None, :]).view(N, b, R)

    # scores: A[t, s] = sum_k q[t, k] beta_k^(t-1-s) w[s, k] for s < t, 0 elsewhere
    def scores(self, q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        N, b, R = q.shape
        if b == 1:
            return q.new_zeros(N, 1, 1)
        if self.gentle(b):
            pq, pk = _mid(b, self.lb)
            return torch.bmm(q * pq, (w * pk).transpose(1, 2)).tril_(-1)
        k, c = self._split(b)
        A = q.new_zeros(N, b, b)
        qs = q * _powers(_arange(b, q) % c, self.lb)  # beta^(t - n_i): from the start of t's block
        for i in range(1, k):
            lo = i * c
            ks = w[:, :lo] * _powers(lo - 1 - _arange(lo, q), self.lb)  # beta^(n_i - 1 - s), s < n_i
            A[:, lo : lo + c, :lo] = torch.bmm(qs[:, lo : lo + c], ks.transpose(1, 2))
        diag = self.scores(q.reshape(N * k, c, R), w.reshape(N * k, c, R))
        A.view(N, k, c, k, c).diagonal(dim1=1, dim2=3).copy_(diag.view(N, k, c, c).permute(0, 2, 3, 1))
        return A

    def scores_t(self, dA: torch.Tensor, q: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients of q and w for a ``dA`` that is zero on and above the diagonal."""
        N, b, R = q.shape
        if b == 1:
            return torch.zeros_like(q), torch.zeros_like(w)
        if self.gentle(b):
            pq, pk = _mid(b, self.lb)
            return torch.bmm(dA, w * pk).mul_(pq), torch.bmm(dA.transpose(1, 2), q * pq).mul_(pk)
        k, c = self._split(b)
        pmod = _powers(_arange(b, q) % c, self.lb)
        qs = q * pmod
        dqs, dw = torch.zeros_like(q), torch.zeros_like(w)
        for i in range(1, k):
            lo = i * c
            table = _powers(lo - 1 - _arange(lo, q), self.lb)
            block = dA[:, lo : lo + c, :lo]
            dqs[:, lo : lo + c] = torch.bmm(block, w[:, :lo] * table)
            dw[:, :lo].add_(torch.bmm(block.transpose(1, 2), qs[:, lo : lo + c]).mul_(table))
        ddiag = dA.view(N, k, c, k, c).diagonal(dim1=1, dim2=3).permute(0, 3, 1, 2).reshape(N * k, c, c)
        dq2, dw2 = self.scores_t(ddiag, q.reshape(N * k, c, R), w.reshape(N * k, c, R))
        return dqs.mul_(pmod).add_(dq2.view(N, b, R)), dw.add_(dw2.view(N, b, R))


class _Tables:
    """Powers of beta for a chunk of C: beta^t (reading the carried state), beta^(C-1-s) (writes decayed to the
    chunk's end), beta^C (one chunk's decay), and the same for a last chunk of ``last`` real positions."""

    def __init__(self, log_beta: torch.Tensor, C: int, last: int):
        idx = _arange(C, log_beta)
        self.into = _powers(idx, log_beta)
        self.to_end = _powers(C - 1 - idx, log_beta)
        self.decay = torch.exp(C * log_beta)
        self.last_to_end = _powers((last - 1 - idx).clamp(min=0), log_beta) * (idx < last)[:, None]
        self.last_decay = torch.exp(last * log_beta)

    def chunk_decay(self, j: int, n: int, padded: bool) -> torch.Tensor:
        return self.last_decay if padded and j == n - 1 else self.decay


class ChunkedPrefixMean(torch.autograd.Function):
    """(w, v, rho, log_beta, S0, M0, floor, C, compiled) -> (o, S_T, M_T); see the module docstring."""

    @staticmethod
    def forward(ctx, w, v, rho, log_beta, S0, M0, floor: float, C: int, compiled: bool):
        B, T, R = w.shape
        m = v.shape[-1]
        n = -(-T // C)
        pad = n * C - T
        lb = log_beta.detach()
        N = B * n
        tab = _Tables(lb, C, C - pad)
        blocks = _Blocks(lb, floor)
        gentle = blocks.gentle(C)
        pq, pk = _mid(C, lb) if gentle else (None, None)
        if compiled:  # masses and read weights from the recurrence, with every factored tensor, in one C pass
            q, m_prev, final_mass, Kf, to_end, Qf, q_into = kernel_c.masses_forward(
                w, rho, lb, M0, floor, n * C, C, (pq, pk, tab.into, tab.to_end, tab.last_to_end))
            q, to_end, q_into = q.view(N, C, R), to_end.view(N, C, R), q_into.view(N, C, R)
            Kf, Qf = (t.view(N, C, R) if gentle else None for t in (Kf, Qf))
        if pad:  # zero writes and reads on the padded tail; the final state is taken at T (``_Tables.last_*``)
            w, v = F.pad(w, (0, 0, 0, pad)), F.pad(v, (0, 0, 0, pad))
            rho = rho if compiled else F.pad(rho, (0, 0, 0, pad))
        w3, v3 = w.view(N, C, R), v.view(N, C, m)
        if not compiled:
            Kf = w3 * pk if gentle else None
            to_end = w3 * tab.to_end
            if pad:
                to_end.view(B, n, C, R)[:, -1] = w.view(B, n, C, R)[:, -1] * tab.last_to_end

        # the state path: increments, then the carried states (before each chunk; the final one after the last)
        inc = torch.bmm(to_end.transpose(1, 2), v3).view(B, n, R, m)
        last = tab.chunk_decay(n - 1, n, bool(pad))
        if compiled:
            before, final = kernel_c.states_forward(inc, S0, tab.decay, last)
            saved = (m_prev,)
        else:
            inc_mass = to_end.sum(1).view(B, n, R)
            before = w.new_empty(B, n, R, m)
            mass_before = w.new_empty(B, n, R)
            before[:, 0], mass_before[:, 0] = S0, M0
            for j in range(n - 1):
                torch.addcmul(inc[:, j], before[:, j], tab.decay[:, None], out=before[:, j + 1])
                torch.addcmul(inc_mass[:, j], mass_before[:, j], tab.decay, out=mass_before[:, j + 1])
            final = torch.addcmul(inc[:, -1], before[:, -1], last[:, None])
            final_mass = torch.addcmul(inc_mass[:, -1], mass_before[:, -1], last)
            # masses M_{t-1} (inside the chunk + carried), read weights q = rho / max(M, floor)
            if gentle:
                den = torch.matmul(_strictly_lower(C, w), Kf).mul_(pq)
            else:
                den = blocks.masses(w3)
            den.view(B, n, C, R).addcmul_(tab.into, mass_before[:, :, None, :])
            floored = _floored(den, floor)
            den.clamp_(min=floor)
            q = rho.view(N, C, R) / den
            Qf = q * pq if gentle else None
            q_into = q * tab.into
            saved = (den, mass_before, final_mass, *floored)

        # scores A inside the chunk, then the output
        A = torch.bmm(Qf, Kf.transpose(1, 2)).tril_(-1) if gentle else blocks.scores(q, w3)
        out = torch.bmm(A, v3).baddbmm_(q_into, before.view(N, R, m))

        ctx.save_for_backward(w, v, q, Qf, Kf, q_into, A, to_end, before, final, lb, *saved)
        ctx.meta = (floor, C, T, pad, gentle, compiled)
        o = out.view(B, n * C, m)
        return (o[:, :T] if pad else o), final, final_mass

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_final, d_final_mass):
        with torch.autocast(ctx.saved_tensors[0].device.type, enabled=False):  # backward() may run under autocast
            return ChunkedPrefixMean._backward(ctx, d_out, d_final, d_final_mass)

    @staticmethod
    def _backward(ctx, d_out, d_final, d_final_mass):
        w, v, q, Qf, Kf, q_into, A, to_end, before, final, lb, *saved = ctx.saved_tensors
        floor, C, T, pad, gentle, compiled = ctx.meta
        B, TP, R = w.shape
        m = v.shape[-1]
        n = TP // C
        N = B * n
        tab = _Tables(lb, C, C - pad)
        blocks = _Blocks(lb, floor)
        w3, v3 = w.view(N, C, R), v.view(N, C, m)
        if d_out is None:
            d_out = v.new_zeros(B, T, m)
        dO = (F.pad(d_out, (0, 0, 0, pad)) if pad else d_out.contiguous()).view(N, C, m)
        pq, pk = _mid(C, lb) if gentle else (None, None)

        # read side: scores and carried states -> the read weights' gradient, dq = dq_scores pq + dq_read beta^t
        dA = torch.bmm(dO, v3.transpose(1, 2)).tril_(-1)
        if gentle:
            dq_scores = torch.bmm(dA, Kf)
        else:
            dq_scores, dw_scores = blocks.scores_t(dA, q, w3)
        dq_read = torch.bmm(dO, before.view(N, R, m).transpose(1, 2))
        d_read = torch.bmm(q_into.transpose(1, 2), dO).view(B, n, R, m)
        if compiled:
            # the carried states' gradients, last chunk first, and <H_end, dH_end> per chunk for the decay
            d_after, d_S0, states = kernel_c.states_backward(d_read, d_final, tab.decay,
                                                             tab.chunk_decay(n - 1, n, bool(pad)), before, final)
        else:
            dq = dq_scores.mul_(pq) if gentle else dq_scores
            dq.addcmul_(dq_read, tab.into)
            d_rho, neg_dm, floored_q_dq, d_after, d_mass_after, d_S0, d_M0, states = _masses_and_states_backward(
                dq, q, saved, d_read, d_final, d_final_mass, before, final, tab, n, pad)

        # write side: scores and state increments -> the writes' gradient, dw = dw_scores pk + d_to_end beta^(C-1-s)
        after3 = d_after.view(N, R, m)
        dv = torch.bmm(A.transpose(1, 2), dO).baddbmm_(to_end, after3)
        d_to_end = torch.bmm(v3, after3.transpose(1, 2)).view(B, n, C, R)
        if gentle:
            dw_scores = torch.bmm(dA.transpose(1, 2), Qf)
        lengths = torch.full((n,), float(C), dtype=lb.dtype, device=lb.device)
        if pad:
            lengths[-1] = C - pad
        if compiled:  # both sums above, then the masses' reverse pass and the decay's per-position terms, in C
            (m_prev,) = saved
            tables = (pq, pk, tab.into, tab.to_end, tab.last_to_end)
            dw, d_rho, d_M0, d_lb = kernel_c.masses_backward(
                w, dq_scores.view(B, TP, R), dq_read.view(B, TP, R), dw_scores.view(B, TP, R),
                d_to_end.view(B, TP, R), tables, q.view(B, TP, R), m_prev, lb, d_final_mass, floor, T, C)
            d_lb = d_lb + lengths @ states
        else:
            dw = _writes_backward(dw_scores, d_to_end, neg_dm, d_mass_after, pq, pk, tab, blocks, gentle, pad)
            # the decay: lag-weighted sum over all (read, write) pairs, from per-position products (module docstring)
            d_lb = -((_arange(C, lb) + 1) @ (w3 * dw).sum(0)) + lengths @ states
            if floored_q_dq is not None:
                floored = saved[3:]
                d_lb.index_put_((floored[2],), floored[1].to(lb.dtype) * floored_q_dq, accumulate=True)

        def unpad(t: torch.Tensor, width: int) -> torch.Tensor:
            t = t.view(B, TP, width)
            return t[:, :T] if pad else t

        return unpad(dw, R), unpad(dv, m), unpad(d_rho, R), d_lb, d_S0, d_M0, None, None, None


def _writes_backward(dw_scores, d_to_end, neg_dm, d_mass_after, pq, pk, tab, blocks, gentle, pad):
    """The PyTorch path's gradient of the writes: through the scores, the masses inside the chunk (``neg_dm``,
    minus their gradient) and the increments of the carried sums and masses."""
    B, n, C, R = d_to_end.shape
    d_to_end.add_(d_mass_after[:, :, None, :])
    if gentle:
        dw = dw_scores.sub_(torch.matmul(_strictly_lower(C, dw_scores).T, neg_dm.mul_(pq))).mul_(pk)
    else:
        dw = dw_scores.sub_(blocks.masses_t(neg_dm))
    dw4 = dw.view(B, n, C, R)
    if pad:
        dw4[:, :-1].addcmul_(d_to_end[:, :-1], tab.to_end)
        dw4[:, -1].addcmul_(d_to_end[:, -1], tab.last_to_end)
    else:
        dw4.addcmul_(d_to_end, tab.to_end)
    return dw


def _floored(den: torch.Tensor, floor: float) -> tuple[torch.Tensor, ...]:
    """Indices of the masses below the floor (few: positions before the first writes), found chunk by chunk so
    that ``nonzero`` only scans the chunks that have any."""
    below = den < floor
    chunks = below.flatten(1).any(1).nonzero().squeeze(1)
    c, t, k = below[chunks].nonzero(as_tuple=True)
    return chunks[c], t, k


def _masses_and_states_backward(dq, q, saved, d_read, d_final, d_final_mass, before, final, tab, n, pad):
    """The PyTorch path's reverse over chunks: through ``q = rho / max(M, floor)`` (a floored mass gets no
    gradient; ``neg_dm`` is minus the masses' gradient), then the carried sums' and masses' gradients, last chunk
    first, and the per-chunk ``<H_end, dH_end>`` (sums and masses) for the decay."""
    den, mass_before, final_mass, *floored = saved
    B = mass_before.shape[0]
    d_rho = dq / den
    neg_dm = d_rho * q
    floored_q_dq = None
    if floored[0].numel():
        floored = tuple(floored)
        floored_q_dq = neg_dm[floored] * den[floored]  # q dq there (den = floor), for the decay's gradient
        neg_dm[floored] = 0.0
    d_mass_read = (neg_dm * tab.into).sum(1).neg_().view(B, n, -1)
    d_after = torch.empty_like(before)  # d_after[:, j]: gradient of the state after chunk j
    d_mass_after = torch.empty_like(d_mass_read)
    d_after[:, -1] = 0 if d_final is None else d_final
    d_mass_after[:, -1] = 0 if d_final_mass is None else d_final_mass
    for j in range(n - 1, 0, -1):
        decay = tab.chunk_decay(j, n, bool(pad))
        torch.addcmul(d_read[:, j], d_after[:, j], decay[:, None], out=d_after[:, j - 1])
        torch.addcmul(d_mass_read[:, j], d_mass_after[:, j], decay, out=d_mass_after[:, j - 1])
    first = tab.chunk_decay(0, n, bool(pad))
    d_S0 = torch.addcmul(d_read[:, 0], d_after[:, 0], first[:, None])
    d_M0 = torch.addcmul(d_mass_read[:, 0], d_mass_after[:, 0], first)
    # <H_end, dH_end> per chunk: the state after chunk j is the one before chunk j + 1, the last is final
    states = torch.empty(n, before.shape[2], dtype=before.dtype, device=before.device)
    states[:-1] = (before[:, 1:] * d_after[:, :-1]).sum((0, 3)) + (mass_before[:, 1:] * d_mass_after[:, :-1]).sum(0)
    states[-1] = (final * d_after[:, -1]).sum((0, 2)) + (final_mass * d_mass_after[:, -1]).sum(0)
    return d_rho, neg_dm, floored_q_dq, d_after, d_mass_after, d_S0, d_M0, states


def prefix_mean_chunked(
    w: torch.Tensor,
    v: torch.Tensor,
    rho: torch.Tensor,
    log_beta: torch.Tensor,
    S0: torch.Tensor,
    M0: torch.Tensor,
    floor: float,
    chunk: int = DEFAULT_CHUNK,
    compiled: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chunk-parallel kernel: the signature and numbers of :func:`mixers.protot.reference.prefix_mean_recurrent`.

    Half-precision inputs (autocast) are computed in float32 and the output is cast back. ``compiled``: run the
    two recurrences as the compiled loops of :mod:`mixers.protot.kernel_c` (None: wherever they can run, float32 on a
    CPU with a C compiler) or in PyTorch (False).
    """
    _check_shapes(w, v, rho, log_beta, S0, M0)
    T = w.shape[1]
    if T == 0:
        return v.new_zeros(v.shape), S0, M0
    work = torch.promote_types(torch.promote_types(w.dtype, v.dtype), torch.float32)
    inputs = [t.to(work) for t in (w, v, rho, log_beta, S0, M0)]
    usable = kernel_c.usable(*inputs)
    if compiled and not usable:
        raise RuntimeError(f"the compiled recurrences cannot run on {work} {w.device.type} tensors here"
                           + (f" ({kernel_c.unavailable_reason()})" if kernel_c.unavailable_reason() else ""))
    with torch.autocast(w.device.type, enabled=False):
        o, S, M = ChunkedPrefixMean.apply(*inputs, floor, chunk_length(chunk, T),
                                          usable if compiled is None else compiled)
    return o.to(v.dtype), S, M


def _check_shapes(w, v, rho, log_beta, S0, M0) -> None:
    """Exact shapes, no broadcasting: the compiled loops index every tensor by these sizes, so a mismatch must
    stop here rather than read past a tensor's end."""
    if w.dim() != 3 or v.dim() != 3:
        raise ValueError(f"prefix_mean_chunked: w and v must be [B, T, R] and [B, T, m], got {tuple(w.shape)} and "
                         f"{tuple(v.shape)}")
    B, T, R = w.shape
    m = v.shape[-1]
    expected = {"v": (B, T, m), "rho": (B, T, R), "log_beta": (R,), "S0": (B, R, m), "M0": (B, R)}
    for name, t in zip(expected, (v, rho, log_beta, S0, M0)):
        if tuple(t.shape) != expected[name]:
            raise ValueError(f"prefix_mean_chunked: {name} must be {list(expected[name])} for w of shape "
                             f"{list(w.shape)}, got {list(t.shape)}")


def chunk_length(chunk: int, T: int) -> int:
    """The chunk: the largest power of two <= ``chunk``, no longer than T rounded up to a power of two."""
    C = 1 << (max(chunk, 1).bit_length() - 1)
    return max(1, min(C, 1 << (max(T, 1) - 1).bit_length()))


def chunked_flops(B: int, T: int, R: int, m: int, C: int = DEFAULT_CHUNK, backward: bool = False) -> float:
    """Matmul FLOPs of the chunked algorithm on [B, T] positions in chunks of C: forward, or forward + backward.

    Per position (MACs): forward ``2 R m`` (state increment and read) ``+ C R`` (scores inside the chunk) ``+ C m``
    (scores times values); backward ``4 R m + 2 C R + 2 C m``. The masses are not counted: the CPU kernel runs
    them as a recurrence of R multiply-adds per position (:mod:`mixers.protot.kernel_c`; its PyTorch fallback spends
    another ``C R`` each way on them as matmuls), and elementwise work is not counted either. The same count serves
    every kernel of this algebra (the GLA kernels do the same products), so a kernel's achieved rate against the
    matmul peak compares like with like.
    """
    tokens = B * -(-T // C) * C
    forward = 2 * R * m + C * R + C * m
    macs = forward + (4 * R * m + 2 * C * R + 2 * C * m if backward else 0)
    return 2.0 * tokens * macs
