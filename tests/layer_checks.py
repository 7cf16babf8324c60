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
