"""The throughput grid on one GPU: prefill, train and decode of the paper's four mixers from 1k to 64k tokens.

Models are the preset's backbone (default paper-small: d_model 256, 6 layers, vocab 16384) with the context
raised to the longest length, each mixer on its default kernel for the device, under bf16 autocast (fp32 master
weights), batch 1. At every (length, mode) point all mixers are timed in interleaved rounds with
``harness.timing.interleaved`` (CUDA events on a GPU), inputs built outside the clock (workloads from
``suites/throughput/measure.py``); each mixer's time over attention's is per round (median and bootstrap
interval). Decode is the time per generated token after a prefill of the point's length, and is also replayed
from a CUDA graph where the mixer's step can be captured. A mixer that fails at a point (out of memory, a kernel
error) gets that error in its cell; the others go on. Then ProtoT's kernel alone (``kernel_benchmark``) against
the dense matmul rate, and a crossover line per mixer and mode: the shortest length from which it is faster
than attention at every longer length.

``--json PATH`` writes everything after each point (a run cut short by its time limit keeps what it measured);
``--budget-s`` stops starting new points after that many seconds. ``--device cpu --preset tiny --lengths 32,64``
runs the same plumbing on a CPU.

    python benchmarks/gpu_throughput.py [--lengths 1024,...,65536] [--mixers protot,attention,mamba,deltanet]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch
from torch import nn

from harness.model.backbone import build_model
from harness.config import BackboneConfig, ModelSpec, get_preset
from harness.timing import Candidate, interleaved

MIXERS = "protot,attention,mamba,deltanet"
LENGTHS = "1024,2048,4096,8192,16384,32768,65536"
MODES = ("prefill", "train", "decode")
REFERENCE = "attention"


class Autocast(nn.Module):
    """A model whose forward and step run under autocast (cache off, so a decode step can be graph-captured)."""

    def __init__(self, model: nn.Module, device: torch.device, dtype: torch.dtype | None):
        super().__init__()
        self.model, self.device_type, self.dtype = model, device.type, dtype
        self.config = model.config

    def _cast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, self.dtype, cache_enabled=False)

    def forward(self, ids, states=None, targets=None):  # targets: lm_loss's fused head and loss (train mode)
        with self._cast():
            return self.model(ids, states, targets=targets)

    def step(self, ids_t, states):
        with self._cast():
            return self.model.step(ids_t, states)

    def init_states(self, batch_size, device=None):
        return self.model.init_states(batch_size, device)


def build(mixer: str, preset: str, context: int, device: torch.device, dtype) -> tuple[Autocast, str]:
    p = get_preset(preset)
    backbone = BackboneConfig(vocab_size=p.vocab_size, **{**p.backbone, "context": context})
    model = build_model(ModelSpec(mixer, {}, backbone), seed=0).to(device)
    kernel = model.set_kernel(None, device)
    return Autocast(model, device, dtype), kernel


def error_text(exc: BaseException) -> str:
    first = (str(exc).splitlines() or [""])[0][:120]
    oom = isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in first.lower()
    return "oom" if oom else f"{type(exc).__name__}: {first}"


def measure(models: dict, mode: str, length: int, batch: int, device: torch.device, repeats: int,
            decode_tokens: int) -> dict[str, dict]:
    """One point: each model's first call alone (errors and out-of-memory stay its own), then interleaved rounds."""
    from suites.throughput.measure import decode_with_cuda_graph, workload

    cells: dict[str, dict] = {}
    candidates = []
    for name, model in models.items():
        model.train(mode == "train")
        try:
            work = workload(model, mode, length, batch, device, decode_tokens)
            work.call(work.setup())
            candidates.append((name, work))
        except Exception as exc:  # one mixer's failure is its cell, not the point's
            cells[name] = {"error": error_text(exc)}
            model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if candidates:
        try:
            timings = interleaved(
                [Candidate(name, work.call, work.setup, device=str(device)) for name, work in candidates],
                repeats, min_warmup=2, max_warmup=6,
            )
        except Exception as exc:
            for name, _ in candidates:
                cells[name] = {"error": error_text(exc) + " (in the timed rounds)"}
            return cells
        for name, work in candidates:
            seconds = timings.median(name) / work.per_call
            tokens = batch if mode == "decode" else batch * length
            cell = {"seconds": seconds, "tokens_per_s": tokens / seconds, "notes": timings.notes}
            if name != REFERENCE and REFERENCE in timings.seconds:
                r = timings.ratio(name, REFERENCE)
                cell["ratio"] = r.median
                cell["ratio_interval"] = None if r.interval is None else [r.interval.low, r.interval.high]
            if mode == "decode" and device.type == "cuda":
                graph_seconds, detail = decode_with_cuda_graph(models[name], work.setup(), repeats)
                cell["graph_seconds"], cell["graph"] = graph_seconds, detail
            cells[name] = cell
    for model in models.values():
        model.zero_grad(set_to_none=True)
    return cells


def kernel_peak(models: dict, device: torch.device, batch: int, length: int, repeats: int) -> dict:
    """ProtoT's sequence kernel alone (forward + backward, fp32) next to a dense fp32 matmul, in the same rounds."""
    if "protot" not in models:
        return {}
    layer = next(m for m in models["protot"].model.mixers if not m.shared_routing)
    try:
        bench = layer.kernel_benchmark(batch, length, device)
        n = 4096 if device.type == "cuda" else 512
        a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
        timings = interleaved([Candidate("matmul", lambda _: a @ b, device=str(device)),
                               Candidate("kernel", lambda _: bench.run(), device=str(device))], repeats)
    except Exception as exc:
        return {"error": error_text(exc)}
    peak = 2 * n**3 / timings.median("matmul")
    achieved = bench.flops / timings.median("kernel")
    return {"label": bench.label, "batch": batch, "length": length, "kernel_gflops": achieved / 1e9,
            "matmul_gflops": peak / 1e9, "fraction": achieved / peak}


def crossovers(points: list[dict], mixers: list[str]) -> dict[str, dict[str, str]]:
    """Per mixer and mode: the shortest measured length from which the mixer is faster than attention at every
    measured longer length ('never' if it is not faster at the longest)."""
    out: dict[str, dict[str, str]] = {}
    for name in mixers:
        if name == REFERENCE:
            continue
        out[name] = {}
        for mode in MODES:
            series = sorted((p["length"], p["cells"].get(name, {}).get("ratio")) for p in points if p["mode"] == mode)
            series = [(t, r) for t, r in series if r is not None]
            cross = None
            for t, r in reversed(series):
                if r >= 1:
                    break
                cross = t
            out[name][mode] = "-" if not series else ("never" if cross is None else f"{cross}")
    return out


def table(report: dict) -> str:
    mixers = report["mixers"]
    lines = [f"{'T':>6} {'mode':<8}" + "".join(f"{m:>24}" for m in mixers)]
    for p in report["points"]:
        cells = []
        for m in mixers:
            c = p["cells"].get(m, {})
            if "error" in c:
                cells.append(f"{c['error'][:22]:>24}")
            elif "tokens_per_s" in c:
                graph = f" g{c['graph_seconds'] * 1e3:.2f}ms" if c.get("graph_seconds") else ""
                ratio = f" x{c['ratio']:.2f}" if "ratio" in c else ""
                cells.append(f"{_si(c['tokens_per_s']) + ratio + graph:>24}")
            else:
                cells.append(f"{'-':>24}")
        lines.append(f"{p['length']:>6} {p['mode']:<8}" + "".join(cells))
    lines.append("cells: tokens/s, x = time / attention's (paired by round), g = decode per token from a CUDA graph")
    for name, modes in report.get("crossovers", {}).items():
        lines.append(f"crossover {name}: " + ", ".join(f"{mode} {v}" for mode, v in modes.items()))
    k = report.get("kernel")
    if k and "error" not in k:
        lines.append(f"ProtoT kernel ({k['label']}, B={k['batch']}, T={k['length']}): {k['kernel_gflops']:.0f} GFLOP/s, "
                     f"dense fp32 matmul {k['matmul_gflops']:.0f} GFLOP/s, fraction {k['fraction']:.2f}")
    elif k:
        lines.append(f"ProtoT kernel: {k['error']}")
    return "\n".join(lines)


def _si(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default=MIXERS)
    parser.add_argument("--lengths", default=LENGTHS)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--preset", default="paper-small")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--decode-tokens", type=int, default=16)
    parser.add_argument("--kernel-length", type=int, default=4096)
    parser.add_argument("--budget-s", type=float, default=None, help="start no new point after this many seconds")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_throughput: no CUDA device here; use --device cpu to check the plumbing.", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    mixers = args.mixers.split(",")
    lengths = sorted(int(t) for t in args.lengths.split(","))
    dtype = torch.bfloat16 if device.type == "cuda" else None
    models, kernels = {}, {}
    for name in mixers:
        try:
            models[name], kernels[name] = build(name, args.preset, max(lengths) + 1, device, dtype)
        except Exception as exc:
            kernels[name] = error_text(exc)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report = {"device": name, "torch": torch.__version__, "preset": args.preset, "batch": args.batch,
              "dtype": str(dtype), "mixers": mixers, "kernels": kernels, "points": []}
    print(f"{name}; torch {torch.__version__}; preset {args.preset}, batch {args.batch}, autocast {dtype}; kernels "
          + ", ".join(f"{m} {k}" for m, k in kernels.items()), flush=True)

    def save() -> None:
        report["crossovers"] = crossovers(report["points"], mixers)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)

    for length in lengths:
        for mode in args.modes.split(","):
            if args.budget_s is not None and time.perf_counter() - t0 > args.budget_s:
                report["points"].append({"length": length, "mode": mode,
                                         "cells": {m: {"error": "skipped (time budget)"} for m in mixers}})
                continue
            cells = measure(models, mode, length, args.batch, device, args.repeats, args.decode_tokens)
            cells.update({m: {"error": kernels[m]} for m in mixers if m not in models})
            report["points"].append({"length": length, "mode": mode, "cells": cells})
            print(f"  T={length} {mode}: " + ", ".join(
                f"{m} {c['error'] if 'error' in c else _si(c['tokens_per_s']) + ' tok/s'}" for m, c in cells.items()),
                flush=True)
            save()
    report["kernel"] = kernel_peak(models, device, 8, args.kernel_length, args.repeats)
    save()
    print(table(report))
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
