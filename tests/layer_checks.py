"""Assertions shared by the per-package mixer tests (Mamba, DeltaNet): one body, each test file its own shapes."""

from __future__ import annotations

import torch


def assert_every_parameter_trains(layer: torch.nn.Module, seq_len: int, d_model: int) -> None:
    """Forward + backward on a [2, seq_len, d_model] input: stateless output of the input's shape, and a non-zero
    gradient on the input and on every parameter."""
    x = torch.randn(2, seq_len, d_model, requires_grad=True)
    y, state = layer(x)
    assert y.shape == x.shape and state is None
    y.square().mean().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for pname, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


def assert_causal(layer: torch.nn.Module, seq_len: int, cut: int, d_model: int) -> None:
    """Changing positions >= cut leaves the outputs before cut bit-for-bit unchanged."""
    x = torch.randn(2, seq_len, d_model)
    x2 = x.clone()
    x2[:, cut:] = torch.randn(2, seq_len - cut, d_model)
    with torch.no_grad():
        assert torch.equal(layer(x)[0][:, :cut], layer(x2)[0][:, :cut])


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference relative to the largest magnitude of ``b``."""
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


def assert_continues_from_any_state(layer: torch.nn.Module, x: torch.Tensor | None = None, tol: float = 1e-5,
                                    ) -> dict[str, torch.Tensor]:
    """For every kernel of ``layer``: a prefill from a non-zero state (positions 11-19 after 0-10) and decode steps
    (20-29) equal one forward over the whole input (``x``: [2, 30, 32] random by default). Returns each kernel's
    full output."""
    x = torch.randn(2, 30, 32) if x is None else x
    outs = {}
    for kernel in layer.kernels:
        layer.set_kernel(kernel)
        with torch.no_grad():
            full, _ = layer(x)
            _, state = layer(x[:, :11], layer.init_state(2, x.device, x.dtype))
            y_mid, state = layer(x[:, 11:20], state)  # a continuation: the state is not zero here
            steps = []
            for t in range(20, 30):
                y_t, state = layer.step(x[:, t], state)
                steps.append(y_t)
        assert rel(y_mid, full[:, 11:20]) <= tol, kernel
        assert rel(torch.stack(steps, 1), full[:, 20:]) <= tol, kernel
        outs[kernel] = full
    return outs
