"""ProtoT kernels side by side: chunked vs recurrent, and the attention mixer, forward + backward.

Shapes from the task: B = 8, d = 256, R = 32, T in {256, 1024, 4096}. Every variant is timed in this one
process, interleaved round-robin so machine noise hits them alike; medians are printed. Two views:

* ``kernel``: the prefix-mean kernel alone (where the two kernels differ), at the initial decay beta = 0.9
  and at decays spread over [0.05, 0.99] (steep channels force shorter chunks);
* ``layer``: the whole ProtoT mixer layer (projections included: what training pays), next to the attention
  mixer (4 heads, SDPA) at the same shapes.

    python benchmarks/protot_kernels.py [--repeats 5] [--lengths 256,1024,4096]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from mixers.attention import Attention, AttentionConfig
from mixers.protot import ProtoT, ProtoTConfig
from mixers.protot_kernels import KERNELS, chunk_size

Inputs = Callable[[], tuple[torch.Tensor, ...]]


def time_fwd_bwd(fn: Callable[..., torch.Tensor], make_inputs: Inputs) -> float:
    """Seconds of one forward + backward; inputs and the output gradient are built before the clock starts."""
    inputs = make_inputs()
    with torch.no_grad():
        grad = torch.randn_like(fn(*inputs))
    t0 = time.perf_counter()
    fn(*inputs).backward(grad)
    return time.perf_counter() - t0


def kernel_fn(name: str, R: int, m: int) -> Callable[..., torch.Tensor]:
    kernel = KERNELS[name]

    def run(w, v, rho, log_beta):
        B = w.shape[0]
        return kernel(w, v, rho, log_beta, w.new_zeros(B, R, m), w.new_zeros(B, R), 1e-6)[0]

    return run


def kernel_inputs(B: int, T: int, R: int, m: int, betas: torch.Tensor) -> Inputs:
    def make():
        w = (torch.rand(B, T, R).softmax(-1) * 0.1).requires_grad_(True)
        v = torch.randn(B, T, m, requires_grad=True)
        rho = torch.rand(B, T, R).softmax(-1).requires_grad_(True)
        return w, v, rho, betas.log().requires_grad_(True)

    return make


def median_times(variants: dict[str, tuple[Callable, Inputs, int]], repeats: int) -> dict[str, float]:
    """Round-robin over variants (after one warm-up each); each variant runs its own number of repeats."""
    for fn, make, _ in variants.values():
        time_fwd_bwd(fn, make)
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(repeats):
        for key, (fn, make, reps) in variants.items():
            if r < reps:
                times[key].append(time_fwd_bwd(fn, make))
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--prototypes", type=int, default=32)
    parser.add_argument("--lengths", default="256,1024,4096")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--recurrent-repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_flush_denormal(True)  # as the CLI does: decayed sums must not run at denormal speed
    torch.manual_seed(0)
    B, d, R = args.batch, args.d_model, args.prototypes
    m = d // 2
    lengths = [int(t) for t in args.lengths.split(",")]
    betas = {"beta=0.9": torch.full((R,), 0.9), "beta in [0.05,0.99]": torch.linspace(0.05, 0.99, R)}
    protot = {k: ProtoT(ProtoTConfig(n_prototypes=R), d, layer_idx=2, n_layers=6) for k in ("recurrent", "chunked")}
    for k, layer in protot.items():
        layer.load_state_dict(protot["recurrent"].state_dict())
        layer.set_kernel(k)
    attention = Attention(AttentionConfig(n_heads=4), d, layer_idx=2, n_layers=6)
    attention.set_kernel("sdpa")

    print(f"threads={torch.get_num_threads()} B={B} d={d} R={R}; forward+backward, median seconds "
          f"({args.repeats} repeats, recurrent {args.recurrent_repeats})")
    print(f"{'T':>6} {'view':<36} {'recurrent':>10} {'chunked':>9} {'rec/chunk':>10} {'attention':>10} "
          f"{'chunk/attn':>10} {'chunk us/token':>15}")
    per_token: dict[tuple[str, int], float] = {}
    for T in lengths:
        rows: dict[str, dict[str, float]] = {}
        for label, beta in betas.items():
            make = kernel_inputs(B, T, R, m, beta)
            rows[f"kernel {label} (C={chunk_size(beta.log(), 64, T, 1e-6)})"] = median_times(
                {
                    "recurrent": (kernel_fn("recurrent", R, m), make, args.recurrent_repeats),
                    "chunked": (kernel_fn("chunked", R, m), make, args.repeats),
                },
                max(args.repeats, args.recurrent_repeats),
            )

        def x_in() -> tuple[torch.Tensor]:
            return (torch.randn(B, T, d, requires_grad=True),)

        rows["layer (projections included)"] = median_times(
            {
                "recurrent": (lambda x: protot["recurrent"](x)[0], x_in, args.recurrent_repeats),
                "chunked": (lambda x: protot["chunked"](x)[0], x_in, args.repeats),
                "attention": (lambda x: attention(x)[0], x_in, args.repeats),
            },
            max(args.repeats, args.recurrent_repeats),
        )
        for view, med in rows.items():
            rec, chk, attn = med["recurrent"], med["chunked"], med.get("attention")
            per_token[(view.split(" (")[0], T)] = chk / (B * T) * 1e6
            attn_s = f"{attn:10.4f}" if attn else f"{'-':>10}"
            ratio_s = f"{chk / attn:10.2f}" if attn else f"{'-':>10}"
            print(f"{T:>6} {view:<36} {rec:10.4f} {chk:9.4f} {rec / chk:10.1f} {attn_s} {ratio_s} "
                  f"{per_token[(view.split(' (')[0], T)]:15.3f}")
    if 1024 in lengths and 4096 in lengths:
        for view in sorted({v for v, _ in per_token}):
            ratio = per_token[(view, 4096)] / per_token[(view, 1024)]
            print(f"linear cost, {view}: chunked time per token at T=4096 / T=1024 = {ratio:.2f} (bound 1.5)")


if __name__ == "__main__":
    main()
