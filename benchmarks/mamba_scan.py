"""Mamba-1's selective scan on CPU, side by side: mamba-ssm's ``selective_scan_ref``, the PyTorch recurrence of
``mixers.mamba.kernel`` and the compiled loop of ``mixers.mamba.kernel_c``; then the whole layer per kernel.

Forward + backward at B = 4, T = 256, d_model = 256 by default (Mamba's expand 2 and d_state 16: 512 channels of
16 states), on inputs shaped and scaled as the Mamba layer makes them (step sizes in Mamba's [1e-3, 1e-1]). Two
views, each timed by :func:`harness.timing.interleaved` (rounds alternate, warm-up until settled):

* ``scan``: the scan alone, softplus of the step size, skip and gate included (what every variant computes);
* ``layer``: the whole ``mamba`` mixer layer per kernel (``reference``, ``cpu-scan``, ``fused``).

    python benchmarks/mamba_scan.py [--rounds 5] [--threads N] [--no-reference]
"""

from __future__ import annotations

import argparse
import math

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch

import _common
from harness.timing import Candidate, interleaved
from mixers.mamba import fused, kernel_c, routing
from mixers.mamba.layer import MambaConfig, MambaMixer
from mixers.mamba.kernel import selective_scan_cpu


def scan_inputs(batch: int, channels: int, states: int, length: int, gen: torch.Generator) -> dict:
    """Time-major u, raw dt, B, C, z ~ N(0, 1); S4D-real A; dt bias with softplus(bias) in [1e-3, 1e-1]."""
    dt = torch.exp(torch.rand(channels, generator=gen) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    t = {
        "u": torch.randn(length, batch, channels, generator=gen),
        "delta": torch.randn(length, batch, channels, generator=gen) * 0.1,
        "A": -torch.arange(1, states + 1, dtype=torch.float32).repeat(channels, 1),
        "B": torch.randn(length, batch, states, generator=gen),
        "C": torch.randn(length, batch, states, generator=gen),
        "D": torch.ones(channels),
        "z": torch.randn(length, batch, channels, generator=gen),
        "delta_bias": dt + torch.log(-torch.expm1(-dt)),  # inverse softplus
    }
    return {k: v.requires_grad_(True) for k, v in t.items()}


def package_layout(fn):
    """A scan with selective_scan_ref's signature ([batch, channels, T] tensors), on time-major inputs."""
    def run(x):
        cl = (lambda t: t.permute(1, 2, 0))
        return fn(cl(x["u"]), cl(x["delta"]), x["A"], cl(x["B"]), cl(x["C"]), x["D"], z=cl(x["z"]),
                  delta_bias=x["delta_bias"], delta_softplus=True).permute(2, 0, 1)

    return run


def compiled(x):
    return fused.scan(x["u"], x["delta"], x["delta_bias"], x["A"], x["B"], x["C"], x["D"], x["z"])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--no-reference", action="store_true", help="leave out selective_scan_ref (slow)")
    args = parser.parse_args()
    _common.set_threads(args.threads)
    routing.install()
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

    cfg = MambaConfig()
    channels = cfg.expand * args.d_model
    gen = torch.Generator().manual_seed(0)
    inputs = scan_inputs(args.batch, channels, cfg.d_state, args.length, gen)
    grad = torch.randn(args.length, args.batch, channels, generator=gen)

    def fwd_bwd(fn):
        def run(_):
            for t in inputs.values():
                t.grad = None
            fn(inputs).backward(grad)

        return run

    scans = {"selective_scan_ref": package_layout(selective_scan_ref),
             "selective_scan_cpu": package_layout(selective_scan_cpu)}
    if args.no_reference:
        del scans["selective_scan_ref"]
    if kernel_c.available():
        scans["compiled (fused)"] = compiled
    layer = MambaMixer(cfg, args.d_model, 0, 1)
    x = torch.randn(args.batch, args.length, args.d_model, generator=gen, requires_grad=True)
    layer_grad = torch.randn_like(x)

    def with_kernel(kernel):
        def run(_):
            layer.set_kernel(kernel)
            layer.zero_grad(set_to_none=True)
            x.grad = None
            layer(x)[0].backward(layer_grad)

        return run

    kernels = [k for k in layer.kernels if not (args.no_reference and k == "reference")]
    start = _common.machine_line()
    scan_t = interleaved([Candidate(n, fwd_bwd(f)) for n, f in scans.items()], args.rounds)
    layer_t = interleaved([Candidate(k, with_kernel(k)) for k in kernels], args.rounds)
    print(f"forward + backward, B={args.batch} T={args.length} d_model={args.d_model} ({channels} channels x "
          f"{cfg.d_state} states); {args.rounds} interleaved rounds per view")
    print(f"at start: {start}\nat end:   load average {_common.load_average()}")
    if not kernel_c.available():
        print(f"no compiled scan here: {kernel_c.unavailable_reason()}")
    for view, t in (("scan", scan_t), ("layer", layer_t)):
        names = list(t.seconds)
        slowest = names[0]
        for name in names:
            ratio = _common.fmt_ratio(t.ratio(name, slowest)) if name != slowest else "-"
            print(f"  {view:<6} {name:<20} {t.median(name) * 1e3:9.1f} ms   time / {slowest}: {ratio}")
        for note in t.notes:
            print(f"  note ({view}): {note}")


if __name__ == "__main__":
    main()
