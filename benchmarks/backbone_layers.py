"""The backbone's compiled layers against their torch paths, side by side: RMSNorm and SwiGLU's activation
(forward + backward, :mod:`harness.model.backbone_kernels`), the head's softmax (:mod:`harness.model.lm_head`), the fused
AdamW step, then whole training steps of one mixer with all of them against none of them.

Shapes: a preset's (default quick: d_model 128, SwiGLU width 336, the preset's batch; docs/cpu_kernels.md's
figures were measured at the earlier 16 x 256 tokens). Timed by
:func:`harness.timing.interleaved` (rounds alternate, warm-up until settled); ratios are paired per round
(median and 95% bootstrap interval).

    python benchmarks/backbone_layers.py [--rounds 9] [--mixer protot] [--preset quick]
"""

from __future__ import annotations

import argparse
import contextlib
from unittest import mock

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch

import _common
from harness.model import backbone_kernels, lm_head
from harness.timing import Candidate, interleaved
from harness.running.training import adamw, lm_loss, param_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--mixer", default="protot", help="the mixer of the whole-step comparison ('' skips it)")
    args = parser.parse_args()
    torch.set_flush_denormal(True)  # as the CLI does
    backbone, batch = _common.quick_backbone(args.preset)
    layers(args, backbone, batch)
    if args.mixer:
        whole_step(args, backbone, batch)


def layers(args, backbone, batch) -> None:
    gen = torch.Generator().manual_seed(0)
    n, d, h = batch * backbone.context, backbone.d_model, backbone.ffn_dim
    x = torch.randn(n, d, generator=gen).requires_grad_(True)
    weight = (1 + 0.1 * torch.randn(d, generator=gen)).requires_grad_(True)
    dy = torch.randn(n, d, generator=gen)
    a, b = (torch.randn(n, h, generator=gen).requires_grad_(True) for _ in range(2))
    dh = torch.randn(n, h, generator=gen)

    def norm(compiled):
        return lambda _: torch.autograd.grad(backbone_kernels.rms_norm(x, weight, 1e-5, compiled=compiled),
                                             [x, weight], dy)

    def activation(compiled):
        return lambda _: torch.autograd.grad(backbone_kernels.silu_mul(a, b, compiled=compiled), [a, b], dh)

    model = _common.build(args.mixer or "protot", backbone, None)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    optimizers = {"foreach": torch.optim.AdamW(param_groups(model, 0.1), lr=1e-5),
                  "fused": adamw(param_groups(model, 0.1), lr=1e-5)}
    pairs = [("RMSNorm", norm(False), norm(True)), ("silu(gate) * up", activation(False), activation(True)),
             ("AdamW step", lambda _: optimizers["foreach"].step(), lambda _: optimizers["fused"].step())]
    candidates = [Candidate(f"{name}: {kind}", fn) for name, torch_fn, compiled_fn in pairs
                  for kind, fn in (("torch", torch_fn), ("compiled", compiled_fn))]
    start = _common.machine_line()
    timings = interleaved(candidates, args.rounds)
    print(f"layers forward + backward at preset {args.preset}: {n} tokens, d_model {d}, SwiGLU width {h}; "
          f"{args.rounds} interleaved rounds")
    print(f"at start: {start}\nat end:   load average {_common.load_average()}")
    print(f"{'':<30}{'torch ms':>10}{'compiled ms':>13}{'compiled / torch':>22}")
    for name, _, _ in pairs:
        slow, fast = f"{name}: torch", f"{name}: compiled"
        print(f"{name:<30}{timings.median(slow) * 1e3:>10.2f}{timings.median(fast) * 1e3:>13.2f}"
              f"{_common.fmt_ratio(timings.ratio(fast, slow)):>22}")


def whole_step(args, backbone, batch) -> None:
    """Training steps of two models of one mixer (the same seed): one with every torch path (the compiled
    libraries hidden, multi-tensor AdamW), one as shipped."""
    tokens = torch.randint(0, backbone.vocab_size, (batch, backbone.context + 1),
                           generator=torch.Generator().manual_seed(1))
    plain_model, shipped_model = (_common.build(args.mixer, backbone, None) for _ in range(2))
    plain_opt = torch.optim.AdamW(param_groups(plain_model, 0.1), lr=1e-3)
    shipped_opt = adamw(param_groups(shipped_model, 0.1), lr=1e-3)

    def torch_paths():
        stack = contextlib.ExitStack()
        for library in (backbone_kernels._LIBRARY, lm_head._LIBRARY):
            stack.enter_context(mock.patch.object(library, "get", lambda: None))
        return stack

    def step(model, optimizer, context):
        def run(_):
            with context():
                optimizer.zero_grad(set_to_none=True)
                lm_loss(model, tokens[:, :-1], tokens[:, 1:]).backward()
                optimizer.step()

        return run

    _common.compare_steps(f"training step of {args.mixer} at preset {args.preset} ({batch} x {backbone.context} tokens)",
                          [Candidate("torch paths", step(plain_model, plain_opt, torch_paths)),
                           Candidate("as shipped", step(shipped_model, shipped_opt, contextlib.nullcontext))],
                          args.rounds)

if __name__ == "__main__":
    main()
