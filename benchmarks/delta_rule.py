"""The delta rule on CPU, side by side: fla's naive recurrence and naive chunkwise op against mixbench's chunked
kernel (``mixers.deltanet.kernel``), then the DeltaNet layer per kernel, forward + backward. With ``--gated``, the
gated delta rule (log-decays in [-1, 0)) and the Gated DeltaNet layer.

Shapes: the quick preset's DeltaNet (4 heads of 32, d_model 128), B * T = 4096 tokens per call, T in {256, 1024,
4096} by default. Every view is timed by :func:`harness.timing.interleaved` (rounds alternate, warm-up until
settled); ratios are paired per round (median and 95% bootstrap interval).

    python benchmarks/delta_rule.py [--lengths 256,1024,4096] [--rounds 5] [--gated]
"""

from __future__ import annotations

import argparse

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch
import torch.nn.functional as F

import _common
from harness.registry import MIXERS
from harness.timing import Candidate, interleaved
from mixers.deltanet import routing
from mixers.deltanet.kernel import chunk_delta_rule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="256,1024,4096")
    parser.add_argument("--tokens", type=int, default=4096, help="B * T per call")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--recurrent-max", type=int, default=1024, help="longest T for the token-by-token op")
    parser.add_argument("--gated", action="store_true", help="the gated delta rule and Gated DeltaNet")
    args = parser.parse_args()
    torch.set_flush_denormal(True)
    routing.install()
    from fla.ops.delta_rule.naive import delta_rule_chunkwise, delta_rule_recurrence
    from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule, naive_recurrent_gated_delta_rule

    H, K = args.heads, args.head_dim
    start = _common.machine_line()
    rule = "gated delta rule" if args.gated else "delta rule"
    print(f"{rule}, forward + backward, {H} heads of {K}, {args.tokens} tokens per call; {args.rounds} interleaved "
          "rounds")
    print(f"at start: {start}")
    for T in (int(t) for t in args.lengths.split(",")):
        B = max(1, args.tokens // T)
        gen = torch.Generator().manual_seed(T)

        def inputs():
            q = torch.randn(B, T, H, K, generator=gen, requires_grad=True)
            k = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1).requires_grad_(True)
            v = torch.randn(B, T, H, K, generator=gen, requires_grad=True)
            beta = torch.rand(B, T, H, generator=gen).requires_grad_(True)
            if not args.gated:
                return q, k, v, beta
            return q, k, v, beta, (-torch.rand(B, T, H, generator=gen)).requires_grad_(True)

        grad = torch.randn(B, T, H, K, generator=gen)

        def head_first(fn):
            def run(x):
                q, k, v, beta = (t.transpose(1, 2) for t in x)
                fn(q, k, v, beta)[0].transpose(1, 2).backward(grad)

            return run

        if args.gated:  # fla's gated ops take [B, T, H, K] and g before beta
            naive = lambda x: naive_chunk_gated_delta_rule(  # noqa: E731
                x[0], x[1], x[2], x[4], x[3], chunk_size=16, scale=K**-0.5)[0].backward(grad)
            recurrence = lambda x: naive_recurrent_gated_delta_rule(  # noqa: E731
                x[0], x[1], x[2], x[3], x[4], scale=K**-0.5)[0].backward(grad)
        else:
            naive = head_first(lambda q, k, v, b: delta_rule_chunkwise(q, k, v, b, chunk_size=16))
            recurrence = head_first(lambda q, k, v, b: delta_rule_recurrence(q, k, v, b))
        ops = {
            "fla naive chunkwise": naive,
            "mixbench chunk": lambda x: chunk_delta_rule(*x, scale=K**-0.5)[0].backward(grad),
        }
        if T <= args.recurrent_max:
            ops = {"fla recurrence": recurrence, **ops}
        op_t = interleaved([Candidate(n, f, inputs) for n, f in ops.items()], args.rounds)

        entry = MIXERS.get("gated-deltanet" if args.gated else "deltanet")
        layer = entry.cls(entry.make_config({"num_heads": H}), H * K, 1, 4)
        x = torch.randn(B, T, H * K, generator=gen, requires_grad=True)
        layer_grad = torch.randn_like(x)

        def with_kernel(kernel):
            def run(_):
                layer.set_kernel(kernel)
                layer.zero_grad(set_to_none=True)
                layer(x)[0].backward(layer_grad)

            return run

        kernels = [k for k in layer.kernels if k != "recurrent" or T <= args.recurrent_max]
        layer_t = interleaved([Candidate(k, with_kernel(k)) for k in kernels], args.rounds)
        for view, t in ((f"T={T} B={B} op", op_t), (f"T={T} B={B} layer", layer_t)):
            names = list(t.seconds)
            base = "fla naive chunkwise" if "fla naive chunkwise" in names else "naive-chunk"
            for name in names:
                print(f"  {view:<22} {name:<22} {t.median(name) * 1e3:9.1f} ms   time / {base}: "
                      f"{_common.fmt_ratio(t.ratio(name, base))}")
    print(f"at end: load average {_common.load_average()}")


if __name__ == "__main__":
    main()
