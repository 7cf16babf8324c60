"""ProtoT's discounted, mass-normalised, strictly-past prefix mean: the definition (kernel ``recurrent``).

Per prototype channel k (R channels), with write weights ``w[t, k] = (1 - beta_k) * pi[t, k]``, values
``v[t]`` (m floats) and decay ``beta_k`` (docs/PAPERS.md, addendum items 4-5):

    S_t = beta * S_{t-1} + w_t v_t          (R x m)      M_t = beta * M_{t-1} + w_t     (R)
    PM_t = S_{t-1} / max(M_{t-1}, floor)                  o_t = sum_k rho[t, k] PM_t[k]

Kernels (all take and return a state (S, M), so prefill and continuation work from any position; the registry
is :data:`mixers.protot.layer.KERNELS`, beside the mixer that picks one):

* ``recurrent`` (the reference): this definition, :func:`prefix_mean_recurrent`, a Python loop over time;
* ``chunked`` (CPU default, ``mixers/protot/kernel.py``): the same numbers from a few large batched matmuls
  over chunks of 64 positions with a written-out backward;
* ``gla`` (CUDA default, ``mixers/protot/routing.py``): masses first, then one gated-linear-attention call,
  flash-linear-attention's Triton kernel on CUDA (GLA's definition elsewhere, ``mixers/common/ops/gla.py``).

Every power of beta in these kernels has a non-negative exponent or stays within a dtype-aware budget, so
nothing divides by a power that underflows (the released implementation's ``beta^s * cumsum(x / beta^s)`` does,
and stops being an EMA after a few hundred tokens). Design and cost: docs/protot_kernels.md.

Performance note: with small beta, decaying sums pass through denormal floats, which x86 CPUs process about
100x slower; the CLI and the benchmarks enable ``torch.set_flush_denormal(True)`` (values below 1e-38 become 0).
"""

from __future__ import annotations

import torch


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
