"""Which torch device a command runs on: the one place that checks a ``--device`` request."""

from __future__ import annotations

from harness.errors import MixbenchError


def resolve_device(requested: str | None) -> str:
    """``requested`` checked against this machine, or cuda when available and nothing was asked."""
    import torch

    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise MixbenchError(f"--device {requested} was requested but CUDA is not available; use --device cpu.")
    if not requested.startswith(("cpu", "cuda")):
        raise MixbenchError(f"unknown device '{requested}'; use cpu or cuda.")
    return requested
