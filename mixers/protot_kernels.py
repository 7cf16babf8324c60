"""ProtoT's discounted, mass-normalised, strictly-past prefix mean: the two kernels.

Per prototype channel k (R channels), with write weights ``w[t, k] = (1 - beta_k) * pi[t, k]``, values
``v[t]`` (m floats) and decay ``beta_k`` (PAPERS.md, addendum items 4-5):

    S_t = beta * S_{t-1} + w_t v_t          (R x m)      M_t = beta * M_{t-1} + w_t     (R)
    PM_t = S_{t-1} / max(M_{t-1}, floor)                  o_t = sum_k rho[t, k] PM_t[k]

``recurrent`` is this definition, a Python loop over time. ``chunked`` computes the same numbers in
parallel: it is gated linear attention with a data-independent decay per key channel, so within a chunk of C
positions the decay between t and s is ``beta_k^(t-1-s)``, materialised directly as ``exp(lag * log beta)``
for non-negative lags only, and across chunks a carried state is decayed by ``beta_k^(t - chunk start)``.
Every power of beta in this kernel has a non-negative exponent, so nothing ever divides by a power that
underflows (the released implementation's ``beta^s * cumsum(x / beta^s)`` does, and stops being an EMA after a
few hundred tokens). Its cost is linear in T: O(T * C * R) for the intra-chunk decays and O(T * R * m) for
the state path.

Both kernels take and return a state (S, M) so prefill and continuation work from any position.

Performance note: with small beta, decaying sums pass through denormal floats, which x86 CPUs process about
100x slower; the CLI and the benchmarks enable ``torch.set_flush_denormal(True)`` (values below 1e-38 become 0).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

#: the longest chunk of the parallel kernel (shorter when steep decays require it, see ``chunk_size``)
DEFAULT_CHUNK = 64


def prefix_mean_recurrent(
    w: torch.Tensor,
    v: torch.Tensor,
    rho: torch.Tensor,
    log_beta: torch.Tensor,
    S0: torch.Tensor,
    M0: torch.Tensor,
    floor: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The definition, one position at a time.

    w, rho: [B, T, R]; v: [B, T, m]; log_beta: [R]; S0: [B, R, m]; M0: [B, R] -> (o [B, T, m], S_T, M_T).
    """
    beta = log_beta.exp()
    S, M = S0, M0
    outs = []
    for w_t, v_t, rho_t in zip(w.unbind(1), v.unbind(1), rho.unbind(1)):
        pm = S / M.clamp(min=floor).unsqueeze(-1)  # read strictly before writing token t
        outs.append(torch.einsum("bk,bkm->bm", rho_t, pm))
        S = beta[:, None] * S + w_t.unsqueeze(-1) * v_t.unsqueeze(1)
        M = beta * M + w_t
    if not outs:
        return v.new_zeros(v.shape), S, M
    return torch.stack(outs, dim=1), S, M


def _scan_chunks(start: torch.Tensor, decay: torch.Tensor, increments: torch.Tensor) -> torch.Tensor:
    """States at the start of each chunk and after the last one: H_0 = start, H_{c+1} = decay * H_c + inc_c.

    start: [B, R, ...]; decay: broadcastable to start; increments: [B, n, R, ...] -> [B, n + 1, R, ...].
    A loop over n = T / C chunks: cheap next to the chunk-parallel work, and exact.
    """
    states = [start]
    for inc in increments.unbind(1):
        states.append(decay * states[-1] + inc)
    return torch.stack(states, dim=1)


def prefix_mean_chunked(
    w: torch.Tensor,
    v: torch.Tensor,
    rho: torch.Tensor,
    log_beta: torch.Tensor,
    S0: torch.Tensor,
    M0: torch.Tensor,
    floor: float,
    chunk: int = DEFAULT_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chunk-parallel kernel; same signature and numbers as :func:`prefix_mean_recurrent`."""
    B, T, R = w.shape
    m = v.shape[-1]
    if T == 0:
        return v.new_zeros(v.shape), S0, M0
    C = chunk_size(log_beta, chunk, T, floor)
    n = -(-T // C)
    pad = n * C - T
    if pad:  # zero writes and reads on the padded tail; the final state is taken at T below
        w, v, rho = (F.pad(t, (0, 0, 0, pad)) for t in (w, v, rho))
    w = w.view(B, n, C, R)
    v = v.view(B, n, C, m)
    rho = rho.view(B, n, C, R)

    def powers(exponents: torch.Tensor, lb: torch.Tensor = log_beta) -> torch.Tensor:
        """beta^e for a grid of exponents e, one column per channel: exp(e * log beta)."""
        return torch.exp(exponents.to(lb.dtype).unsqueeze(-1) * lb)

    idx = torch.arange(C, device=w.device)
    lag = idx[:, None] - 1 - idx[None, :]  # t - 1 - s: decay of a write at s seen by a read at t (s < t)
    past = lag >= 0
    to_read = powers(idx)  # [C, R] beta^(t - a): state carried into the chunk, seen at t
    w_end = w * powers(C - 1 - idx)  # writes decayed to the chunk's last position

    # one scan carries sums and masses together: the mass is the sum of a constant value 1
    with_ones = torch.cat([v, v.new_ones(B, n, C, 1)], dim=-1)
    starts = _scan_chunks(
        torch.cat([S0, M0.unsqueeze(-1)], dim=-1),
        torch.exp(C * log_beta)[:, None],
        w_end.transpose(-1, -2) @ with_ones,
    )  # [B, n + 1, R, m + 1]: state before each chunk, and after the last

    # masses M_{t-1} inside the chunk (a per-channel causal decayed sum, batched over channels) -> read weights
    intra = powers(lag.clamp(min=0)) * past[..., None]  # [C(t), C(s), R], beta^(t-1-s) for s < t else 0
    w_by_channel = w.permute(3, 2, 0, 1).reshape(R, C, B * n)
    mass_local = torch.bmm(intra.permute(2, 0, 1), w_by_channel).view(R, C, B, n).permute(2, 3, 1, 0)
    q = rho / (mass_local + to_read * starts[:, :n, None, :, m]).clamp(min=floor)

    scores = torch.where(past, _intra_scores(q, w, log_beta, intra, idx, powers, floor), 0.0)
    out = scores @ v + (q * to_read) @ starts[:, :n, :, :m]
    out = out.reshape(B, n * C, m)[:, :T]

    if pad == 0:
        final = starts[:, n]
    else:  # the last chunk holds r = C - pad real positions: decay to position T - 1, not to the padded end
        r = C - pad
        w_last = w[:, -1] * powers((r - 1 - idx).clamp(min=0)) * (idx < r)[:, None]
        final = torch.exp(r * log_beta)[:, None] * starts[:, n - 1] + w_last.transpose(-1, -2) @ with_ones[:, -1]
    return out, final[..., :m], final[..., m]


def _exp_budget(dtype: torch.dtype, floor: float, C: int, R: int) -> float:
    """Largest |exponent| the split decay factors of ``_intra_scores`` may take in ``dtype``.

    A masked-out product (s >= t) multiplies two factors of up to e^budget each, a read weight of up to 1/floor
    and is summed over C * R terms; all of it must stay finite (it is discarded by ``torch.where`` afterwards).
    """
    log_max = math.log(torch.finfo(dtype).max)
    return (log_max - 4.0 - math.log(1.0 / floor) - math.log(C * R)) / 2


def chunk_size(log_beta: torch.Tensor, chunk: int, T: int, floor: float) -> int:
    """The chunk length: the largest power of two <= ``chunk`` (and >= 16) at which no channel is too steep
    for the factorised scores; fewer, longer chunks mean fewer sequential steps and larger matmuls."""
    steepest = float(-log_beta.detach().min()) if log_beta.numel() else 0.0
    C = max(16, 1 << (max(chunk, 1).bit_length() - 1))
    while C > 16 and steepest * (C // 2) > _exp_budget(log_beta.dtype, floor, C, log_beta.numel()):
        C //= 2
    return min(C, T)


def _intra_scores(q, w, log_beta, intra, idx, powers, floor) -> torch.Tensor:
    """A[t, s] = sum_k q[t, k] beta_k^(t-1-s) w[s, k] inside each chunk (entries s >= t are discarded later).

    For most channels beta^(t-1-s) = beta^(t - c) * beta^(c - 1 - s) around the chunk middle c turns the sum
    into one matmul: both factors stay within e^(+-budget) (see ``_exp_budget``) and every term is
    non-negative, so nothing overflows or cancels. Channels that decay too steeply for that use the
    materialised decays ``intra`` instead (exact, at O(C) more memory per position).
    """
    C = idx.shape[0]
    mid = C // 2
    budget = _exp_budget(log_beta.dtype, floor, C, log_beta.numel())
    steep = -log_beta.detach() * max(mid, C - 1 - mid) > budget
    gentle = (~steep).to(log_beta.dtype)
    safe = torch.where(steep, torch.zeros_like(log_beta), log_beta)
    scores = (q * (powers(idx - mid, safe) * gentle)) @ (w * (powers(mid - 1 - idx, safe) * gentle)).transpose(-1, -2)
    if steep.any():
        ks = steep.nonzero().squeeze(1)
        scores = scores + (q[..., ks].unsqueeze(3) * w[..., ks].unsqueeze(2) * intra[..., ks]).sum(-1)
    return scores


def chunked_flops(B: int, T: int, R: int, m: int, C: int) -> float:
    """Floating-point operations of one ``prefix_mean_chunked`` forward (its matmuls; elementwise work is minor)."""
    n = -(-T // C)
    macs = B * n * (R * C * (m + 1) + R * C * C + C * C * R + C * C * m + C * R * m)
    return 2.0 * macs


KERNELS = {"recurrent": prefix_mean_recurrent, "chunked": prefix_mean_chunked}
