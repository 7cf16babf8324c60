"""Mamba-1's selective scan on CPU: mamba-ssm's ``selective_scan_ref`` against ``mixers.selective_scan_cpu``.

Forward + backward at B = 4, T = 256, d_model = 256 (Mamba's expand 2 and d_state 16: 512 channels of 16
states), on inputs shaped and scaled as the Mamba layer makes them. Two views, each timed in this one process,
round-robin so that machine noise hits both variants alike, medians reported:

* ``scan``: the scan function alone (what the issue's >= 10x is about);
* ``layer``: the whole ``mamba`` mixer layer, kernel ``reference`` vs ``cpu-scan`` (projections and conv included).

    python benchmarks/mamba_scan.py [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch

from mixers import _mamba_routing
from mixers.mamba import MambaConfig, MambaMixer
from mixers.selective_scan_cpu import selective_scan_cpu


def scan_inputs(batch: int, channels: int, states: int, length: int, gen: torch.Generator) -> dict:
    """u, raw dt, B, C, z ~ N(0, 1); S4D-real A; dt bias so that softplus(bias) spans Mamba's [1e-3, 1e-1]."""
    dt = torch.exp(torch.rand(channels, generator=gen) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    tensors = {
        "u": torch.randn(batch, channels, length, generator=gen),
        "delta": torch.randn(batch, channels, length, generator=gen) * 0.1,
        "A": -torch.arange(1, states + 1, dtype=torch.float32).repeat(channels, 1),
        "B": torch.randn(batch, states, length, generator=gen),
        "C": torch.randn(batch, states, length, generator=gen),
        "D": torch.ones(channels),
        "z": torch.randn(batch, channels, length, generator=gen),
        "delta_bias": dt + torch.log(-torch.expm1(-dt)),  # inverse softplus
    }
    return {k: v.requires_grad_(True) for k, v in tensors.items()}


def fwd_bwd(fn, inputs: dict) -> float:
    for t in inputs.values():
        t.grad = None
    t0 = time.perf_counter()
    out = fn(**inputs)
    out.square().mean().backward()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # as the CLI does
    _mamba_routing.install()
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

    cfg = MambaConfig()
    channels = cfg.expand * args.d_model
    gen = torch.Generator().manual_seed(0)
    inputs = scan_inputs(args.batch, channels, cfg.d_state, args.length, gen)

    def scan(fn):
        return lambda **kw: fn(**kw, delta_softplus=True)

    layer = MambaMixer(cfg, args.d_model, 0, 1)
    x = {"x": torch.randn(args.batch, args.length, args.d_model, generator=gen, requires_grad=True)}

    def layer_with(kernel):
        def run(x):
            layer.set_kernel(kernel)
            layer.zero_grad(set_to_none=True)
            return layer(x)[0]

        return run

    variants = {
        ("scan", "selective_scan_ref"): (scan(selective_scan_ref), inputs),
        ("scan", "selective_scan_cpu"): (scan(selective_scan_cpu), inputs),
        ("layer", "reference"): (layer_with("reference"), x),
        ("layer", "cpu-scan"): (layer_with("cpu-scan"), x),
    }
    for fn, kw in variants.values():  # warm-up
        fwd_bwd(fn, kw)
    times: dict[tuple[str, str], list[float]] = {k: [] for k in variants}
    for _ in range(args.repeats):
        for key, (fn, kw) in variants.items():
            times[key].append(fwd_bwd(fn, kw))

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"forward + backward, B={args.batch} T={args.length} d_model={args.d_model} ({channels} channels x "
        f"{cfg.d_state} states); {torch.get_num_threads()} threads, load {load:.1f}; median of {args.repeats} "
        f"interleaved runs after a warm-up"
    )
    for view, slow, fast in (("scan", "selective_scan_ref", "selective_scan_cpu"), ("layer", "reference", "cpu-scan")):
        t_slow, t_fast = statistics.median(times[(view, slow)]), statistics.median(times[(view, fast)])
        print(f"  {view:<6} {slow:<20} {t_slow:8.3f} s   {fast:<20} {t_fast:8.3f} s   ratio {t_slow / t_fast:6.1f}x")


if __name__ == "__main__":
    main()
