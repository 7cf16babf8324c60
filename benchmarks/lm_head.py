"""The vocabulary head and its loss, forward + backward, side by side: autograd through the materialised logits
and ``F.cross_entropy`` against the fused head of :mod:`harness.model.lm_head` at several block sizes, then whole
training steps of one mixer with each head.

Shapes: the quick preset's (d_model 128; vocabulary and batch from the preset: docs/cpu_kernels.md's figures were
measured at the earlier vocab 4,096 and 16 x 256 tokens). Timed by
:func:`harness.timing.interleaved` (rounds alternate, warm-up until settled); ratios are paired per round
(median and 95% bootstrap interval).

    python benchmarks/lm_head.py [--rounds 9] [--blocks 128,256,512,1024] [--mixer protot]
"""

from __future__ import annotations

import argparse

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch
import torch.nn.functional as F

import _common
from harness.model import lm_head
from harness.model.batching import IGNORE_INDEX
from harness.timing import Candidate, interleaved
from harness.running.training import adamw, lm_loss, param_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--blocks", default="128,256,512,1024")
    parser.add_argument("--mixer", default="protot", help="the mixer of the whole-step comparison ('' skips it)")
    args = parser.parse_args()
    torch.set_flush_denormal(True)
    backbone, batch = _common.quick_backbone(args.preset)
    n, d, vocab = batch * backbone.context, backbone.d_model, backbone.vocab_size
    gen = torch.Generator().manual_seed(0)
    hidden = (torch.randn(n, d, generator=gen) / d**0.5).requires_grad_(True)
    weight = (torch.randn(vocab, d, generator=gen) * 0.02).requires_grad_(True)
    targets = torch.randint(0, vocab, (n,), generator=gen)

    def plain(_):
        F.cross_entropy((hidden @ weight.T).float(), targets, ignore_index=IGNORE_INDEX).backward()

    def fused(rows, compiled=None):
        def run(_):
            lm_head.BLOCK_ROWS = rows
            lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX, compiled=compiled).backward()

        return run

    blocks = [int(b) for b in args.blocks.split(",")]
    start = _common.machine_line()
    default = lm_head.BLOCK_ROWS
    candidates = ([Candidate("logits + F.cross_entropy", plain)]
                  + [Candidate(f"fused, {b} rows", fused(b)) for b in blocks]
                  + [Candidate(f"fused, {default} rows, torch softmax", fused(default, compiled=False))])
    timings = interleaved(candidates, args.rounds)
    print(f"head + loss, forward + backward: {n} tokens, d_model {d}, vocab {vocab}; {args.rounds} interleaved rounds")
    print(f"at start: {start}\nat end:   load average {_common.load_average()}")
    print(f"{'':<38}{'ms':>8}{'time / logits path':>22}")
    for c in candidates:
        print(f"{c.name:<38}{timings.median(c.name) * 1e3:>8.1f}"
              f"{_common.fmt_ratio(timings.ratio(c.name, candidates[0].name)):>22}")
    lm_head.BLOCK_ROWS = default
    if args.mixer:
        whole_step(args, backbone, batch)


def whole_step(args, backbone, batch) -> None:
    """Training steps (forward, loss, backward, AdamW) of one model with each head, interleaved."""
    model = _common.build(args.mixer, backbone, None)
    optimizer = adamw(param_groups(model, 0.1), lr=1e-3)
    tokens = torch.randint(0, backbone.vocab_size, (batch, backbone.context + 1),
                           generator=torch.Generator().manual_seed(1))

    def step(loss_fn):
        def run(_):
            optimizer.zero_grad(set_to_none=True)
            loss_fn().backward()
            optimizer.step()

        return run

    def logits_loss():
        logits, _ = model(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten(), ignore_index=IGNORE_INDEX)

    _common.compare_steps(f"training step of {args.mixer} at preset {args.preset} ({batch} x {backbone.context} tokens)",
                          [Candidate("logits path", step(logits_loss)),
                           Candidate("fused head", step(lambda: lm_loss(model, tokens[:, :-1], tokens[:, 1:])))],
                          args.rounds)

if __name__ == "__main__":
    main()
