"""The fla-backed mixers' CPU kernels side by side: each layer's reference recurrence vs its CPU default.

One layer at the quick preset's backbone (d = 128, T = 256, batch 4), forward + backward, every kernel of a mixer
timed in the same interleaved rounds (``harness.timing.interleaved``); the ratio is reference / default per round
(median and 95% bootstrap interval over rounds). ``--chunks`` also times ``mixers.common.ops.gla.chunk_gla`` alone at
several chunk lengths (GLA's shapes), which is how its chunk length was chosen (docs/fla_mixers.md).

    python benchmarks/fla_mixers.py [--mixers gla,retnet,...] [--repeats 5] [--chunks 8,16,32,64]
"""

from __future__ import annotations

import argparse
import functools

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch

import _common
from harness.registry import MIXERS
from harness.timing import Candidate, interleaved

DEFAULT_MIXERS = "gla,retnet,rwkv7,gated-deltaproduct,deltanet,gated-deltanet"


def fmt(ratio) -> str:
    iv = ratio.interval
    return f"{ratio.median:6.2f} [{iv.low:.2f}, {iv.high:.2f}]" if iv is not None else f"{ratio.median:6.2f}"


def layer_candidate(name: str, layer: torch.nn.Module, kernel: str, B: int, T: int, d: int) -> Candidate:
    gen = torch.Generator().manual_seed(T)
    x0, grad = torch.randn(B, T, d, generator=gen), torch.randn(B, T, d, generator=gen)

    def setup():
        layer.set_kernel(kernel)
        layer.zero_grad(set_to_none=True)
        return x0.clone().requires_grad_(True)

    return Candidate(name, lambda x: layer(x)[0].backward(grad), setup)


def chunk_candidates(chunks: list[int], B: int, T: int, H: int, K: int, V: int) -> list[Candidate]:
    from mixers.common.ops.gla import chunk_gla

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, T, H, n, generator=gen) for n in (K, K, V))
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, K, generator=gen)) / 16

    def setup():
        return [t.clone().requires_grad_(True) for t in (q, k, v, g)]

    def call(chunk, leaves):
        chunk_gla(*leaves, chunk=chunk)[0].sum().backward()

    return [Candidate(f"chunk {c}", functools.partial(call, c), setup) for c in chunks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default=DEFAULT_MIXERS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunks", default="", help="chunk lengths of chunk_gla to compare (e.g. 8,16,32,64)")
    args = parser.parse_args()
    backbone, batch = _common.quick_backbone()
    B, T, d = batch, backbone.context, backbone.d_model
    print(f"fla mixers, one layer, forward+backward, B={B} T={T} d={d}; {_common.machine_line()}")
    print(f"medians of {args.repeats} interleaved rounds; ratios per round [95% bootstrap interval]")
    print(f"{'mixer':<20} {'kernel':<12} {'ms':>9} {'tokens/s':>10} {'reference / this':>22}")
    for name in [m for m in args.mixers.split(",") if m]:
        entry = MIXERS.get(name)
        torch.manual_seed(0)
        layer = entry.cls(entry.make_config({}), d, 1, backbone.n_layers)
        kernels = layer.kernels
        timings = interleaved([layer_candidate(k, layer, k, B, T, d) for k in kernels], repeats=args.repeats)
        for k in kernels:
            ms = timings.median(k) * 1e3
            ratio = fmt(timings.ratio(kernels[0], k)) if k != kernels[0] else "-"
            print(f"{name:<20} {k:<12} {ms:9.1f} {B * T / ms * 1e3:10.0f} {ratio:>22}", flush=True)
    if args.chunks:
        chunks = [int(c) for c in args.chunks.split(",")]
        timings = interleaved(chunk_candidates(chunks, B, T, 4, 16, 32), repeats=args.repeats)
        first = f"chunk {chunks[0]}"
        for c in chunks:
            print(f"chunk_gla chunk={c:<4} {timings.median(f'chunk {c}') * 1e3:9.1f} ms   "
                  f"chunk {chunks[0]} / this: {fmt(timings.ratio(first, f'chunk {c}'))}")
    print(f"load average {_common.load_average()} at end")


if __name__ == "__main__":
    main()
