"""Helpers shared by the mixer families' tests (the contract every built-in meets: tests/test_mixer_contract.py)."""

from __future__ import annotations

import torch


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference relative to the largest magnitude of ``b``."""
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
