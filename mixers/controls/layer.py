"""Control mixers: what a board's numbers are worth when a model does no real token mixing (docs/controls.md).

A comparison of mixers only means something where mixing helps. Two controls sit on every board beside the mixers,
trained and scored exactly like them, never ranked:

* ``none``: no token mixing, ``y_t = W x_t``. The model is context-free (a bigram model with an MLP): what the
  backbone and the data give without any context. A column that ``none`` wins measures the budget or the data,
  not mixing.
* ``mean``: fixed, content-independent mixing, ``y_t = W mean(x_1..x_t)``, O(1) state (a running sum and a
  count). It sees the context but cannot choose what to read: a mixer that does not beat it has learned nothing
  content-dependent from the context.

Both declare ``control = True`` (the core finds controls by that flag, never by name); ``none`` also declares
``context_free = True``, which the conformance gate verifies (no output may depend on another position).
``W`` is the output projection: the backbone initialises it like every mixer's (docs/protocol.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from harness.mixer import FlopCount, Mixer
from harness.registry import register_mixer


@dataclass(frozen=True)
class ControlConfig:
    """The controls have no options: their only parameter is the d x d map W."""


class _LinearControl(Mixer):
    """A control whose only parameter is the output map W (d x d, no bias)."""

    control = True
    kernels = ("reference",)
    length_extrapolation = True

    def __init__(self, cfg: ControlConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        self.proj = nn.Linear(d_model, d_model, bias=False)  # initialised by the backbone (output_projection)

    def output_projection(self) -> nn.Linear:
        return self.proj


@register_mixer("none", config=ControlConfig)
class NoMixing(_LinearControl):
    """``y_t = W x_t``: each position alone; no decode state."""

    context_free = True

    def forward(self, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        return self.proj(x), state

    def flops_per_token(self, context: int) -> FlopCount:
        """``W x_t``: ``2 d^2``."""
        return FlopCount.training(2 * self.d_model**2)

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> tuple:
        return ()

    def step(self, x_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        return self.proj(x_t), state

    def state_size(self, seq_len: int) -> int:
        return 0


@dataclass
class PrefixSum:
    """The running sum of the inputs seen so far (``[B, D]``, float) and how many there were (``[B]``, int64)."""

    total: torch.Tensor
    count: torch.Tensor


@register_mixer("mean", config=ControlConfig)
class PrefixMean(_LinearControl):
    """``y_t = W mean(x_1..x_t)``: uniform causal averaging, the same weights whatever the content."""

    def flops_per_token(self, context: int) -> FlopCount:
        """``W`` (``2 d^2``) and the running mean: one addition (the prefix sum) and one division per channel."""
        return FlopCount.training(2 * self.d_model**2 + 2 * self.d_model)

    def forward(self, x: torch.Tensor, state: PrefixSum | None = None) -> tuple[torch.Tensor, Any]:
        T = x.shape[1]
        sums = x.float().cumsum(1)
        counts = torch.arange(1, T + 1, device=x.device, dtype=torch.float32)[None, :, None]
        if state is not None:
            sums = sums + state.total.float()[:, None, :]
            counts = counts + state.count.float()[:, None, None]
        y = self.proj((sums / counts).to(x.dtype))
        if state is None:
            return y, None
        return y, PrefixSum(sums[:, -1].to(state.total.dtype), state.count + T)

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> PrefixSum:
        return PrefixSum(torch.zeros(batch_size, self.d_model, device=device, dtype=dtype),
                         torch.zeros(batch_size, dtype=torch.long, device=device))

    def step(self, x_t: torch.Tensor, state: PrefixSum) -> tuple[torch.Tensor, PrefixSum]:
        y, state = self.forward(x_t.unsqueeze(1), state)
        return y.squeeze(1), state

    def state_size(self, seq_len: int) -> int:
        return self.d_model
