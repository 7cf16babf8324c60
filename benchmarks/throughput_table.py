"""The throughput suite for several mixers at a preset's backbone, as one table (speed does not depend on the
weights, so the models are freshly initialised; no training, no store).

Each mixer's run times it and the attention reference interleaved at every grid point (the suite's own method,
``suites/throughput``); printed per mixer: training and prefill tokens/s and decode latency at the preset's
context (min-max over rounds), the paired time ratios against attention there, the scaling exponents, the
crossover lengths (from the paired ratios; 95% bootstrap intervals where defined) and the kernel's fraction of
the measured matmul peak (mixers that declare a kernel benchmark), with the threading policy and load average.

    python benchmarks/throughput_table.py [--mixers protot,attention,mamba,deltanet] [--lengths 256,...,8192]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch

import _common
from harness.suite import SuiteContext
from suites.throughput import Throughput, ThroughputConfig


def fmt(metric, digits: int = 0, scale: float = 1.0) -> str:
    if metric is None:
        return "-"
    if math.isnan(metric.value):
        return "none in grid"
    text = f"{metric.value * scale:,.{digits}f}"
    iv = metric.interval
    if iv is not None:
        text += f" [{iv.low * scale:,.{digits}f}, {iv.high * scale:,.{digits}f}]"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default="protot,attention,mamba,deltanet")
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--lengths", default="", help="comma-separated; empty = the suite's CPU default grid")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default="", help="also write every metric here")
    args = parser.parse_args()
    torch.set_flush_denormal(True)  # as the CLI does
    backbone, _ = _common.quick_backbone(args.preset)
    cfg = ThroughputConfig(lengths=tuple(int(t) for t in args.lengths.split(",") if t), repeats=args.repeats)
    start = _common.machine_line()
    rows, dump = [], {}
    for mixer in args.mixers.split(","):
        model = _common.build(mixer, backbone)
        with tempfile.TemporaryDirectory() as tmp:
            result = Throughput(cfg).run(model, SuiteContext(None, Path(tmp), progress=True))
        m = {x.name: x for x in result.metrics}
        dump[mixer] = {"kernel": model.kernel, "info": result.info,
                       "metrics": {k: {"value": v.value, "interval": None if v.interval is None else
                                       [v.interval.low, v.interval.high, v.interval.kind]} for k, v in m.items()}}
        rows.append((mixer, model.kernel, m, result.info))
    print(f"throughput suite v{Throughput.version}, preset {args.preset} (d_model {backbone.d_model}, "
          f"{backbone.n_layers} layers, context {backbone.context}), batch 1, {args.repeats} rounds per point")
    print(f"at start: {start}\nat end:   load average {_common.load_average()}")
    columns = [  # (row label, metric, digits)
        ("train tok/s", "train_tok_s", 0),
        ("prefill tok/s", "prefill_tok_s", 0),
        ("decode ms/token", "decode_ms", 2),
        ("train / attn", "train_time_ratio", 2),
        ("prefill / attn", "prefill_time_ratio", 2),
        ("decode / attn", "decode_time_ratio", 2),
        ("crossover prefill", "crossover_prefill", 0),
        ("crossover train", "crossover_train", 0),
        ("crossover decode", "crossover_decode", 0),
        ("prefill exponent", "prefill_exponent", 2),
        ("train exponent", "train_exponent", 2),
        ("decode longest/shortest", "decode_ratio", 2),
        ("kernel peak fraction", "kernel_peak_fraction", 3),
        ("matmul GFLOP/s", "matmul_gflops", 1),
    ]
    print("| metric | " + " | ".join(f"{mixer} ({kernel})" for mixer, kernel, _, _ in rows) + " |")
    print("|---" * (len(rows) + 1) + "|")
    for name, key, digits in columns:
        print(f"| {name} | " + " | ".join(fmt(m.get(key), digits) for _, _, m, _ in rows) + " |")
    print("| load average start / end | " + " | ".join(
        f"{'/'.join(map(str, info['load_average_start'] or []))} / {'/'.join(map(str, info['load_average_end'] or []))}"
        for *_, info in rows) + " |")
    print(f"device (part of the run identity): {json.dumps(rows[0][3]['device'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=1, default=str))


if __name__ == "__main__":
    main()
