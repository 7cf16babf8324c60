"""ProtoT kernels side by side: chunked vs recurrent vs the attention mixer, forward + backward.

Shapes from the task: B = 8, d = 256, R = 32, T in {256, 1024, 4096}. Each configuration is timed in this
one process, interleaved round-robin so that machine noise hits every variant alike; medians are reported.
Two views: the whole mixer layer (projections included, what training pays) and the prefix-mean kernel alone
(where the two kernels differ).

    python benchmarks/protot_kernels.py [--repeats 5] [--lengths 256,1024,4096]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from mixers.attention import Attention, AttentionConfig
from mixers.protot import ProtoT, ProtoTConfig
from mixers.protot_kernels import KERNELS


def time_fwd_bwd(fn, make_inputs, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        inputs = make_inputs()
        t0 = time.perf_counter()
        out = fn(*inputs)
        out.square().mean().backward()
        times.append(time.perf_counter() - t0)
    return times


def layer_runner(mixer: torch.nn.Module):
    def run(x):
        return mixer(x)[0]

    return run


def kernel_runner(name: str, R: int, m: int):
    kernel = KERNELS[name]

    def run(w, v, rho, log_beta):
        B = w.shape[0]
        out, _, _ = kernel(w, v, rho, log_beta, w.new_zeros(B, R, m), w.new_zeros(B, R), 1e-6)
        return out

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--prototypes", type=int, default=32)
    parser.add_argument("--lengths", default="256,1024,4096")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--recurrent-repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    B, d, R = args.batch, args.d_model, args.prototypes
    m = d // 2
    lengths = [int(t) for t in args.lengths.split(",")]
    protot = ProtoT(ProtoTConfig(n_prototypes=R), d, layer_idx=2, n_layers=6)  # a general layer: own read query
    attention = Attention(AttentionConfig(n_heads=4), d, layer_idx=2, n_layers=6)
    attention.set_kernel("sdpa")

    print(f"threads={torch.get_num_threads()} B={B} d={d} R={R}; forward+backward, median seconds")
    header = f"{'T':>6} {'view':>7} {'recurrent':>10} {'chunked':>9} {'rec/chunk':>10} {'attention':>10} {'chunk/attn':>10} {'chunk us/token':>15}"
    print(header)
    per_token: dict[tuple[str, int], float] = {}
    for T in lengths:
        def x_in():
            return (torch.randn(B, T, d, requires_grad=True),)

        def k_in():
            w = torch.rand(B, T, R).softmax(-1).mul(0.1).requires_grad_(True)
            v = torch.randn(B, T, m, requires_grad=True)
            rho = torch.rand(B, T, R).softmax(-1).requires_grad_(True)
            log_beta = torch.log(torch.rand(R) * 0.98 + 0.01).requires_grad_(True)
            return w, v, rho, log_beta

        results: dict[str, dict[str, list[float]]] = {"layer": {}, "kernel": {}}
        for name in ("chunked", "recurrent"):  # warm-up
            protot.set_kernel(name)
            time_fwd_bwd(layer_runner(protot), x_in, 1)
        time_fwd_bwd(layer_runner(attention), x_in, 1)
        for r in range(max(args.repeats, args.recurrent_repeats)):
            for name in ("chunked", "recurrent"):
                if name == "recurrent" and r >= args.recurrent_repeats:
                    continue
                protot.set_kernel(name)
                results["layer"].setdefault(name, []).extend(time_fwd_bwd(layer_runner(protot), x_in, 1))
                results["kernel"].setdefault(name, []).extend(time_fwd_bwd(kernel_runner(name, R, m), k_in, 1))
            if r < args.repeats:
                results["layer"].setdefault("attention", []).extend(time_fwd_bwd(layer_runner(attention), x_in, 1))
        for view in ("layer", "kernel"):
            med = {k: statistics.median(v) for k, v in results[view].items()}
            rec, chk = med["recurrent"], med["chunked"]
            per_token[(view, T)] = chk / (B * T) * 1e6
            attn = med.get("attention")
            attn_s = f"{attn:10.4f}" if attn else f"{'-':>10}"
            ratio_s = f"{chk / attn:10.2f}" if attn else f"{'-':>10}"
            print(f"{T:>6} {view:>7} {rec:10.4f} {chk:9.4f} {rec / chk:10.1f} {attn_s} {ratio_s} {per_token[(view, T)]:15.3f}")
    if 1024 in lengths and 4096 in lengths:
        for view in ("layer", "kernel"):
            ratio = per_token[(view, 4096)] / per_token[(view, 1024)]
            print(f"linear cost ({view}): chunked time per token at T=4096 / T=1024 = {ratio:.2f} (bound 1.5)")


if __name__ == "__main__":
    main()
