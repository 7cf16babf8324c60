"""Helpers shared by the mixer families' tests (the contract every built-in meets: tests/test_mixer_contract.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from harness import Recorder
from harness.errors import ConfigError
from mixers.common import parity


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference relative to the largest magnitude of ``b``."""
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


def check_kernels_per_device(layer: torch.nn.Module, cpu_kernels: tuple[str, ...], cpu_default: str,
                             cuda_kernel: str, cuda_default: bool = True) -> None:
    """A CPU layer lists ``cpu_kernels``; its class adds ``cuda_kernel``, which the layer refuses to take here (what
    `mixbench mixers` lists versus what the gate compares on this machine) and which is CUDA's default unless
    ``cuda_default`` is False (a default that depends on compiled kernels being installed)."""
    assert type(layer).kernels == (*cpu_kernels, cuda_kernel)
    assert layer.kernels == cpu_kernels
    assert layer.default_kernel(torch.device("cpu")) == cpu_default
    assert not cuda_default or layer.default_kernel(torch.device("cuda")) == cuda_kernel
    with pytest.raises(ConfigError, match="needs CUDA"):
        layer.set_kernel(cuda_kernel)


def check_parity(name: str, modes: Sequence[str] = parity.MODES, kernel: str | None = None, **where) -> None:
    """``parity.compare`` (what benchmarks/gpu_parity.py reports) passes for ``name`` in every one of ``modes``;
    with ``device="cpu"`` in ``where`` it compares the CPU default kernel, which must then be ``kernel``."""
    for mode in modes:
        result = parity.compare(name, mode, **where)
        assert result.passed and (kernel is None or result.kernel == kernel), result


def check_every_unit_masked_is_zero(layer: torch.nn.Module, x: torch.Tensor) -> None:
    """Masking every unit of ``layer`` zeroes its output: its units sit right before an output projection without
    bias (one masked unit changing the output is the conformance gate's interventions check)."""
    with torch.no_grad(), layer.intervene(range(len(layer.units())), "mask"):
        assert layer(x)[0].abs().max() == 0


def recorded_by_a_step(layer: torch.nn.Module, x: torch.Tensor, name: str) -> torch.Tensor:
    """What ``layer`` records as ``name`` in a decode step after a prefill of ``x`` (the Recorder's second call)."""
    with torch.no_grad(), Recorder() as rec:
        _, state = layer(x, layer.init_state(x.shape[0], x.device, x.dtype))
        layer.step(x[:, 0], state)
    return rec.get(1, name)
