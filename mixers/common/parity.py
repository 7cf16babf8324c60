"""A mixer's CUDA path against its CPU reference, with the same weights (the parity tests, benchmarks/gpu_parity.py).

The reference kernel runs on CPU in fp32; a copy of the same layer on the GPU runs the kernel the mixer picks for
CUDA. Modes:

* ``fp32``: outputs and the gradients of the input and of every parameter of a fixed random loss, CUDA in fp32
  (TF32 off); kernels that compute in bf16 anyway (fla's, see ``RoutedMixer.cuda_dtype``) get the bf16 tolerance;
* ``bf16``: the same under bf16 autocast, as training on CUDA runs;
* ``decode``: on the GPU, prefill the first half from a fresh state, then step token by token; against the CPU
  reference's single forward (this exercises the package's state-passing and decode kernels).

The error is relative to the reference's largest magnitude, max |cuda - ref| / max |ref|, over every compared
tensor; fp32 must agree to 2e-3, bf16 to 1e-1 (gradients summed over many bf16 products, such as
Mamba-2's D, drift by a few per cent even on a correct kernel).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from harness.mixer import Mixer
from harness.kit import init_output_projection
from harness.registry import MIXERS

MODES = ("fp32", "bf16", "decode")
TOLERANCE = {torch.float32: 2e-3, torch.bfloat16: 1e-1}


@dataclass(frozen=True)
class Parity:
    mixer: str
    kernel: str
    mode: str
    max_abs: float
    max_rel: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_rel <= self.tolerance


def compare(
    mixer: str, mode: str, device: str = "cuda", d_model: int = 64, batch: int = 2, seq_len: int = 96, seed: int = 0
) -> Parity:
    """Build layer 1 of a 2-layer model of ``mixer`` with ``seed``; compare the copy on ``device``, running that
    device's default kernel, with the reference on CPU (``device="cpu"`` checks the CPU default kernel)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    entry = MIXERS.get(mixer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reference: Mixer = entry.cls(entry.make_config({}), d_model, 1, 2)
        init_output_projection(reference)  # as the backbone would: the layer a model holds
    reference.set_kernel(reference.reference_kernel)
    device = torch.device(device)
    fast = copy.deepcopy(reference).to(device)
    fast.set_kernel(fast.default_kernel(device))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq_len, d_model, generator=gen)
    weights = torch.randn(batch, seq_len, d_model, generator=gen)

    bf16 = mode == "bf16" or getattr(fast, "cuda_dtype", None) == torch.bfloat16
    with _no_tf32():
        if mode == "decode":
            with torch.no_grad():
                want = [reference(x)[0]]
                got = [_prefill_then_step(fast, x.to(device))]
        else:
            want = _outputs_and_grads(reference, x, weights)
            with torch.autocast(device.type, torch.bfloat16, enabled=mode == "bf16"):
                got = _outputs_and_grads(fast, x.to(device), weights.to(device))
    max_abs = max_rel = 0.0
    for a, b in zip(got, want, strict=True):
        diff = (a.detach().float().cpu() - b.detach()).abs().max().item()
        max_abs = max(max_abs, diff)
        max_rel = max(max_rel, diff / max(b.detach().abs().max().item(), 1e-12))
    tolerance = TOLERANCE[torch.bfloat16 if bf16 else torch.float32]
    return Parity(mixer, fast.kernel, mode, max_abs, max_rel, tolerance)


def _outputs_and_grads(layer: Mixer, x: torch.Tensor, weights: torch.Tensor) -> list[torch.Tensor]:
    x = x.clone().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    y, _ = layer(x)
    (y.float() * weights).sum().backward()
    grads = [p.grad for _, p in sorted(layer.named_parameters())]
    return [y, x.grad, *grads]


def _prefill_then_step(layer: Mixer, x: torch.Tensor) -> torch.Tensor:
    half = x.shape[1] // 2
    state = layer.init_state(x.shape[0], x.device, x.dtype)
    y, state = layer(x[:, :half], state)
    outs = [y]
    for t in range(half, x.shape[1]):
        y_t, state = layer.step(x[:, t], state)
        outs.append(y_t.unsqueeze(1))
    return torch.cat(outs, dim=1)


@contextlib.contextmanager
def _no_tf32() -> Iterator[None]:
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32  # harmless without CUDA
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
