"""Training tokens/s of each mixer at a preset's backbone (default: quick), measured side by side in one process.

One training step = forward + loss + backward + AdamW on random tokens, each mixer on its default kernel for the
device. After warm-up steps the mixers take turns, one step each per round, so that machine noise hits every
mixer alike; the median step time per mixer is reported (with the spread over rounds).

    python benchmarks/train_speed.py [--mixers protot,attention,mamba,deltanet] [--rounds 5] [--preset quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from harness.backbone import build_model
from harness.config import BackboneConfig, ModelSpec, get_preset
from harness.training import lm_loss, param_groups

ALL = "protot,attention,mamba,mamba2,deltanet,gated-deltanet"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default=ALL)
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=0, help="0 = the preset's")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # as the CLI does

    preset = get_preset(args.preset)
    backbone = BackboneConfig(vocab_size=preset.vocab_size, **preset.backbone)
    batch = args.batch_size or preset.train["batch_size"]
    context = backbone.context
    device = torch.device("cpu")
    runs = {}
    for name in args.mixers.split(","):
        model = build_model(ModelSpec(name, {}, backbone), seed=0).to(device)
        kernel = model.set_kernel(None, device)
        optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
        runs[name] = (model, optimizer, kernel)

    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, backbone.vocab_size, (batch, context + 1), generator=gen)

    def step(model, optimizer) -> float:
        t0 = time.perf_counter()
        loss = lm_loss(model, tokens[:, :-1], tokens[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.warmup + args.rounds):
        for name, (model, optimizer, _) in runs.items():
            seconds = step(model, optimizer)
            if r >= args.warmup:
                times[name].append(seconds)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"preset {args.preset}: d_model {backbone.d_model}, {backbone.n_layers} layers, context {context}, "
          f"batch {batch}, vocab {backbone.vocab_size}; {torch.get_num_threads()} threads, load {load:.1f}; "
          f"median of {args.rounds} interleaved steps after {args.warmup} warm-up")
    print(f"{'mixer':<16}{'kernel':<11}{'params':>10}{'s/step':>9}{'spread':>15}{'tokens/s':>10}")
    for name, (model, _, kernel) in runs.items():
        med = statistics.median(times[name])
        spread = f"{min(times[name]):.2f}-{max(times[name]):.2f}"
        print(f"{name:<16}{kernel:<11}{model.num_parameters():>10,}{med:>9.2f}{spread:>15}"
              f"{batch * context / med:>10,.0f}")


if __name__ == "__main__":
    main()
