"""Whole-model training speed at a preset against the machine's matmul peak: ProtoT and attention, side by side.

One training step = forward + loss + backward + AdamW on random tokens (what ``mixbench train`` does per step),
each mixer on its default CPU kernel. The steps and a dense fp32 1024^2 matmul are timed in the same interleaved
rounds (``harness.timing.interleaved``); a step's achieved rate counts 6 N FLOPs per token (N = all parameters,
the tied embedding included: it is the output layer's matmul) and its fraction of the matmul peak is per round
(median, 95% bootstrap interval over rounds). The 6 N count leaves out each mixer's own sequence work (ProtoT's
chunked kernel, attention's T^2 products), so it understates both a little.

    python benchmarks/protot_train.py [--preset quick] [--mixers protot,attention] [--rounds 5] [--threads N]
"""

from __future__ import annotations

import argparse

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch

import _common
from harness.config import BackboneConfig
from harness.timing import Candidate, interleaved
from harness.running.training import adamw, param_groups

PEAK_N = 1024


def step_candidate(name: str, backbone: BackboneConfig, batch: int) -> tuple[Candidate, int]:
    model = _common.build(name, backbone)
    model.train()
    optimizer = adamw(param_groups(model, 0.1), lr=1e-3)
    step = _common.train_step(model, optimizer, _common.random_tokens(backbone, batch))
    return Candidate(f"{name} ({model.kernel})", step), model.num_parameters()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--mixers", default="protot,attention")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=0, help="0: the preset's")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    _common.set_threads(args.threads)
    backbone, preset_batch = _common.quick_backbone(args.preset)
    batch = args.batch_size or preset_batch
    tokens = batch * backbone.context
    a, b = torch.randn(PEAK_N, PEAK_N), torch.randn(PEAK_N, PEAK_N)
    steps = [step_candidate(name, backbone, batch) for name in args.mixers.split(",")]
    print(f"preset {args.preset}: d_model {backbone.d_model}, {backbone.n_layers} layers, context {backbone.context}, "
          f"batch {batch}, vocab {backbone.vocab_size}; {_common.machine_line()} at start")
    timings = interleaved([Candidate("matmul", lambda _: a @ b), *(c for c, _ in steps)], repeats=args.rounds)
    peak = 2 * PEAK_N**3 / timings.median("matmul")
    print(f"dense fp32 matmul peak {peak / 1e9:.1f} GFLOP/s (median of {args.rounds} interleaved rounds)")
    print(f"{'step':<22}{'params':>11}{'s/step':>9}{'tokens/s':>10}{'6N GFLOP/s':>12}{'of matmul peak [95%]':>26}")
    for cand, n_params in steps:
        seconds = timings.median(cand.name)
        flops = 6 * n_params * tokens
        frac = timings.ratio("matmul", cand.name)
        scale = flops / (2 * PEAK_N**3)
        iv = frac.interval
        frac_s = f"{frac.median * scale:.2f} [{iv.low * scale:.2f}, {iv.high * scale:.2f}]" if iv else f"{frac.median * scale:.2f}"
        print(f"{cand.name:<22}{n_params:>11,}{seconds:>9.3f}{tokens / seconds:>10,.0f}{flops / seconds / 1e9:>12.1f}"
              f"{frac_s:>26}")
    for note in timings.notes:
        print("note:", note)
    print(f"load average {_common.load_average()} at end")


if __name__ == "__main__":
    main()
