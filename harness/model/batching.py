"""Turning token windows into padded model inputs and targets."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

IGNORE_INDEX = -100


def collate_windows(windows: Sequence[np.ndarray], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad windows of up to ``context + 1`` tokens into ``inputs [B, T]`` and ``targets [B, T]``.

    Targets are the inputs shifted by one; padded positions get ``IGNORE_INDEX`` so they never count. Because
    every mixer is causal, right padding cannot change the real positions' predictions.
    """
    longest = max(len(w) for w in windows) - 1
    inputs = torch.full((len(windows), longest), pad_id, dtype=torch.long)
    targets = torch.full((len(windows), longest), IGNORE_INDEX, dtype=torch.long)
    for i, w in enumerate(windows):
        ids = torch.as_tensor(np.asarray(w, dtype=np.int64))
        n = len(ids) - 1
        inputs[i, :n] = ids[:-1]
        targets[i, :n] = ids[1:]
    return inputs, targets


def batched(items: Sequence, size: int) -> list[Sequence]:
    return [items[i : i + size] for i in range(0, len(items), size)]
