"""ProtoT's discounted, mass-normalised, strictly-past prefix mean: the definition and the kernel registry.

Per prototype channel k (R channels), with write weights ``w[t, k] = (1 - beta_k) * pi[t, k]``, values
``v[t]`` (m floats) and decay ``beta_k`` (docs/PAPERS.md, addendum items 4-5):

    S_t = beta * S_{t-1} + w_t v_t          (R x m)      M_t = beta * M_{t-1} + w_t     (R)
    PM_t = S_{t-1} / max(M_{t-1}, floor)                  o_t = sum_k rho[t, k] PM_t[k]

Kernels (all take and return a state (S, M), so prefill and continuation work from any position):

* ``recurrent`` (the reference): this definition, a Python loop over time;
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

from harness.mixer import KernelBenchmark
from mixers.protot.kernel import chunk_length, prefix_mean_chunked
from mixers.protot.routing import prefix_mean_gla

#: positions per chunk of the chunked kernel
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


def chunk_size(log_beta: torch.Tensor, chunk: int, T: int, floor: float) -> int:
    """The chunk length the chunked kernel uses (it no longer shortens chunks for steep decays)."""
    return chunk_length(chunk, T)


KERNELS = {"recurrent": prefix_mean_recurrent, "chunked": prefix_mean_chunked, "gla": prefix_mean_gla}


def kernel_benchmark(
    kernel: str, log_beta: torch.Tensor, floor: float, chunk: int, m: int, batch: int, seq_len: int,
    device: torch.device,
) -> KernelBenchmark:
    """One forward + backward of ``kernel`` on synthetic inputs of this shape at the layer's own decays.

    Write weights are softmax gates times (1 - beta), as the layer makes them; inputs are built once, outside
    ``run``; the FLOP count is :func:`chunked_flops` (forward + backward) for every kernel.
    """
    R = log_beta.numel()
    gen = torch.Generator().manual_seed(0)
    lb = log_beta.detach().float().cpu()
    w = torch.rand(batch, seq_len, R, generator=gen).softmax(-1) * -torch.expm1(lb)
    v = torch.randn(batch, seq_len, m, generator=gen)
    rho = torch.rand(batch, seq_len, R, generator=gen).softmax(-1)
    d_out = torch.randn(batch, seq_len, m, generator=gen).to(device)
    leaves = [t.to(device).requires_grad_(True) for t in (w, v, rho, lb)]
    state = (torch.zeros(batch, R, m, device=device), torch.zeros(batch, R, device=device))
    fn = KERNELS[kernel]
    kwargs = {} if kernel == "recurrent" else {"chunk": chunk}

    def run() -> None:
        for t in leaves:
            t.grad = None
        out, _, _ = fn(*leaves, *state, floor, **kwargs)
        out.backward(d_out)

    C = chunk_length(chunk, seq_len)
    return KernelBenchmark(run, chunked_flops(batch, seq_len, R, m, C, backward=True), f"{kernel} forward+backward")
