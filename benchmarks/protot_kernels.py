"""ProtoT's kernels side by side: recurrent vs chunked, against the machine's matmul peak, and the layer vs attention.

Every number comes from one process, timed with ``harness.timing.interleaved`` (candidates alternate round by
round; ratios are per round, then median and a bootstrap interval over rounds). Forward + backward throughout,
B = 8, d = 256 (R = 32 prototypes, value dim 128), for each T:

* ``kernel``: the prefix-mean kernel alone, recurrent (the definition) and chunked at the initial decay beta = 0.9
  ("gentle") and with decays spread over [0.05, 0.99] ("spread"), chunked again with its two recurrences in
  PyTorch ("pytorch-rec": what runs without a C compiler, ``compiled=False``), next to a dense 1024^2 fp32
  matmul timed in the same rounds; achieved GFLOP/s use the chunked algorithm's FLOP count (``chunked_flops``,
  the same for every setting, so the fraction of peak compares time), and the fraction of peak is per round;
* ``layer``: the whole ProtoT mixer layer (projections included) on its CPU default kernel next to the attention
  mixer (4 heads, SDPA) at the same shapes.

The recurrent kernel's time does not depend on the decays (denormals are flushed), so it is timed once, at
beta = 0.9, and both chunked settings are compared with it.

    python benchmarks/protot_kernels.py [--lengths 256,1024,4096] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import functools

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch

import _common
from harness.timing import Candidate, Timings, interleaved
from mixers.protot import kernel_c
from mixers.attention.layer import Attention, AttentionConfig
from mixers.protot.kernel import chunked_flops
from mixers.protot.layer import KERNELS, ProtoT, ProtoTConfig

PEAK_N = 1024


def kernel_candidate(name: str, kernel: str, B: int, T: int, R: int, m: int, betas: torch.Tensor,
                     **options) -> Candidate:
    """Forward + backward of one kernel; fresh leaf inputs (and the output gradient) are built outside the clock."""
    fn = functools.partial(KERNELS[kernel], **options)
    gen = torch.Generator().manual_seed(T)
    w0 = torch.rand(B, T, R, generator=gen).softmax(-1) * (1 - betas)
    v0, rho0 = torch.randn(B, T, m, generator=gen), torch.rand(B, T, R, generator=gen).softmax(-1)
    grad = torch.randn(B, T, m, generator=gen)
    state = (torch.zeros(B, R, m), torch.zeros(B, R))

    def setup():
        return [t.clone().requires_grad_(True) for t in (w0, v0, rho0, betas.log())]

    def call(leaves):
        fn(*leaves, *state, 1e-6)[0].backward(grad)

    return Candidate(name, call, setup)


def layer_candidate(name: str, layer: torch.nn.Module, B: int, T: int, d: int) -> Candidate:
    gen = torch.Generator().manual_seed(T)
    x0, grad = torch.randn(B, T, d, generator=gen), torch.randn(B, T, d, generator=gen)

    def setup():
        layer.zero_grad(set_to_none=True)
        return x0.clone().requires_grad_(True)

    return Candidate(name, lambda x: layer(x)[0].backward(grad), setup)


def matmul_candidate() -> Candidate:
    a, b = torch.randn(PEAK_N, PEAK_N), torch.randn(PEAK_N, PEAK_N)
    return Candidate("matmul", lambda _: a @ b)


def fmt(ratio) -> str:
    iv = ratio.interval
    return f"{ratio.median:7.2f} [{iv.low:.2f}, {iv.high:.2f}]" if iv is not None else f"{ratio.median:7.2f}"


def kernel_rows(T: int, timings: Timings, flops: float, names: list[str]) -> list[str]:
    peak_flops = 2.0 * PEAK_N**3
    peak = peak_flops / timings.median("matmul") / 1e9
    rows = []
    for name in names:
        seconds = timings.median(name)
        if name.startswith(("chunked", "pytorch-rec")):
            achieved = flops / seconds / 1e9
            # fraction of peak per round = (flops / t_kernel) / (peak_flops / t_matmul)
            frac = timings.ratio("matmul", name)
            scale = flops / peak_flops
            iv = frac.interval
            frac_s = f"{frac.median * scale:5.2f} [{iv.low * scale:.2f}, {iv.high * scale:.2f}]" if iv else "-"
            speedup = fmt(timings.ratio("recurrent", name))
            rows.append(f"{T:>6} {name:<18} {seconds * 1e3:10.1f} {achieved:9.1f} {frac_s:>18} {speedup:>24}")
        else:
            rows.append(f"{T:>6} {name:<18} {seconds * 1e3:10.1f} {'-':>9} {'-':>18} {'-':>24}")
    rows.append(f"{T:>6} {'matmul peak':<18} {timings.median('matmul') * 1e3:10.1f} {peak:9.1f}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--prototypes", type=int, default=32)
    parser.add_argument("--lengths", default="256,1024,4096")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    _common.set_threads(args.threads)
    torch.manual_seed(0)
    B, d, R = args.batch, args.d_model, args.prototypes
    m = d // 2
    betas = {"gentle": torch.full((R,), 0.9), "spread": torch.linspace(0.05, 0.99, R)}
    protot = ProtoT(ProtoTConfig(n_prototypes=R), d, layer_idx=2, n_layers=6)
    protot.set_kernel(protot.default_kernel(torch.device("cpu")))
    attention = Attention(AttentionConfig(n_heads=4), d, layer_idx=2, n_layers=6)
    attention.set_kernel("sdpa")

    print(f"ProtoT kernels, forward+backward, B={B} d={d} R={R} m={m}; {_common.machine_line()} at start")
    print(f"medians of {args.repeats} interleaved rounds; [95% bootstrap intervals over rounds of per-round ratios]")
    kernel_table = [f"{'T':>6} {'kernel':<18} {'ms':>10} {'GFLOP/s':>9} {'of matmul peak':>18} "
                    f"{'recurrent / this':>24}"]
    layer_table = [f"{'T':>6} {'ProtoT layer ms':>16} {'attention ms':>13} {'ProtoT / attention':>24}"]
    for T in [int(t) for t in args.lengths.split(",")]:
        kernels = [kernel_candidate("recurrent", "recurrent", B, T, R, m, betas["gentle"])]
        kernels += [kernel_candidate(f"chunked {k}", "chunked", B, T, R, m, b) for k, b in betas.items()]
        if kernel_c.usable(torch.zeros(1)):  # the same kernel with its recurrences in PyTorch (no C compiler)
            kernels += [kernel_candidate(f"pytorch-rec {k}", "chunked", B, T, R, m, b, compiled=False)
                        for k, b in betas.items()]
        timings = interleaved([matmul_candidate(), *kernels], repeats=args.repeats)
        kernel_table += kernel_rows(T, timings, chunked_flops(B, T, R, m, backward=True), [c.name for c in kernels])
        kernel_table += [f"{T:>6}   chunked {k} / pytorch-rec {k}: "
                         f"{fmt(timings.ratio(f'chunked {k}', f'pytorch-rec {k}'))}"
                         for k in betas if f"pytorch-rec {k}" in timings.seconds]
        kernel_table += [f"{T:>6}   note: {n}" for n in timings.notes]

        layers = interleaved([layer_candidate("protot", protot, B, T, d), layer_candidate("attention", attention, B, T, d)],
                             repeats=args.repeats)
        layer_table.append(f"{T:>6} {layers.median('protot') * 1e3:16.1f} {layers.median('attention') * 1e3:13.1f} "
                           f"{fmt(layers.ratio('protot', 'attention')):>24}")
        print(f"  T={T} done, load average {_common.load_average()}", flush=True)
    print("\n".join(kernel_table))
    print()
    print("\n".join(layer_table))
    print(f"load average {_common.load_average()} at end")


if __name__ == "__main__":
    main()
