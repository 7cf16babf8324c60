"""Recording of internal tensors for suites (docs/DESIGN.md §2, "Recording").

While a :class:`Recorder` is active, mixers call :func:`record` with a name and a tensor (ProtoT gate
weights, attention probabilities, state norms). Mixers never import suites; suites open a recorder around a
forward pass and read what was emitted. When no recorder is active, :func:`record` costs one list lookup.
"""

from __future__ import annotations

from collections import defaultdict

import torch

_ACTIVE: list["Recorder"] = []


class Recorder:
    """Collects ``(layer, name) -> [tensor, ...]`` while active. Tensors are detached and moved to CPU."""

    def __init__(self, names: set[str] | None = None):
        self.names = names
        self.records: dict[tuple[int, str], list[torch.Tensor]] = defaultdict(list)

    def __enter__(self) -> "Recorder":
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self)

    def wants(self, name: str) -> bool:
        return self.names is None or name in self.names

    def get(self, layer: int, name: str) -> torch.Tensor:
        """The recorded tensors of one layer and name, concatenated along the time axis (dim 1)."""
        parts = self.records.get((layer, name))
        if not parts:
            raise KeyError(f"nothing recorded for layer {layer}, name '{name}'")
        return torch.cat(parts, dim=1) if parts[0].dim() > 1 else torch.stack(parts)


def recording() -> bool:
    return bool(_ACTIVE)


def wanted(name: str) -> bool:
    """Whether an active recorder wants ``name`` (lets a mixer skip or switch work that only recording needs)."""
    return any(rec.wants(name) for rec in _ACTIVE)


def record(layer: int, name: str, tensor: torch.Tensor) -> None:
    for rec in _ACTIVE:
        if rec.wants(name):
            rec.records[(layer, name)].append(tensor.detach().to("cpu", torch.float32))
