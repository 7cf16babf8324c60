"""Out-of-tree mixers written to slip through a conformance gate, plus one honest one (``--plugin tests.adversaries``).

Every adversary is a decayed linear recurrence (an honest, causal mixer with an exact O(1) step) with one thing
wrong, so the gate must find exactly that thing:

* ``_adv_nan_step``        step() returns NaN (forward is right)
* ``_adv_nan_forward``     forward() returns NaN (step is right)
* ``_adv_leak_past_40``    sees token t+1, but only in sequences longer than 40 tokens
* ``_adv_chunk_leak``      a chunked kernel whose last position of each 64-token chunk reads the next chunk
* ``_adv_batch_coupled``   adds the batch mean (sequences of one batch influence each other)
* ``_adv_train_leak``      sees token t+1 only in training mode (the gate's no-grad checks run in eval mode)
* ``_adv_wrong_width``     returns d_model + 1 channels
* ``_adv_bare_tensor``     forward returns a bare tensor instead of (y, state)
* ``_adv_faint_leak``      sees token t+1 with a weight of 1e-5: too faint for a check across lengths, not for a
                           changed suffix
* ``_adv_honest``          nothing wrong: must pass every check
* ``_adv_order_noise``     honest, with a length-dependent rounding of ~1e-6 (what a chunked kernel's padding
                           gives): must pass every check
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness import Mixer, register_mixer


@dataclass(frozen=True)
class DecayConfig:
    decay: float = 0.8


class DecayedRecurrence(Mixer):
    """y_t = W (sum_{s<=t} a^{t-s} V x_s): causal, with an exact O(1) step."""

    kernels = ("reference",)

    def __init__(self, cfg, d_model, layer_idx, n_layers):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def _scan(self, v: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        outs = []
        for t in range(v.shape[1]):
            h = self.cfg.decay * h + v[:, t]
            outs.append(h)
        return (torch.stack(outs, 1) if outs else v), h

    def forward(self, x, state=None):
        h0 = x.new_zeros(x.shape[0], self.d_model) if state is None else state
        mixed, h = self._scan(self.value(x), h0)
        return self.out(mixed), (None if state is None else h)

    def init_state(self, batch_size, device, dtype):
        return torch.zeros(batch_size, self.d_model, device=device, dtype=dtype)

    def step(self, x_t, state):
        h = self.cfg.decay * state + self.value(x_t)
        return self.out(h), h

    def state_size(self, seq_len):
        return self.d_model


def _next_token(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], 1)


@register_mixer("_adv_honest", config=DecayConfig)
class Honest(DecayedRecurrence):
    pass


@register_mixer("_adv_nan_step", config=DecayConfig)
class NaNStep(DecayedRecurrence):
    def step(self, x_t, state):
        y, h = super().step(x_t, state)
        return y * float("nan"), h


@register_mixer("_adv_nan_forward", config=DecayConfig)
class NaNForward(DecayedRecurrence):
    def forward(self, x, state=None):
        y, s = super().forward(x, state)
        return y * float("nan"), s


@register_mixer("_adv_leak_past_40", config=DecayConfig)
class LeakPast40(DecayedRecurrence):
    def forward(self, x, state=None):
        y, s = super().forward(x, state)
        if x.shape[1] > 40:
            y = y + 0.1 * _next_token(x)
        return y, s


@register_mixer("_adv_chunk_leak", config=DecayConfig)
class ChunkLeak(DecayedRecurrence):
    """Its 'chunked kernel' adds the first input of the next chunk to the last output of each chunk of 64."""

    def chunk_lengths(self):
        return (64,)

    def forward(self, x, state=None):
        y, s = super().forward(x, state)
        T = x.shape[1]
        if T > 64:
            y = y.clone()
            for end in range(63, T - 1, 64):
                y[:, end] = y[:, end] + 0.1 * x[:, end + 1]
        return y, s


@register_mixer("_adv_batch_coupled", config=DecayConfig)
class BatchCoupled(DecayedRecurrence):
    def forward(self, x, state=None):
        y, s = super().forward(x, state)
        return y + 0.1 * x.mean(0, keepdim=True), s

    def step(self, x_t, state):
        y, h = super().step(x_t, state)
        return y + 0.1 * x_t.mean(0, keepdim=True), h


@register_mixer("_adv_train_leak", config=DecayConfig)
class TrainLeak(DecayedRecurrence):
    def forward(self, x, state=None):
        y, s = super().forward(x, state)
        return (y + 0.1 * _next_token(x) if self.training else y), s


@register_mixer("_adv_wrong_width", config=DecayConfig)
class WrongWidth(DecayedRecurrence):
    def __init__(self, cfg, d_model, layer_idx, n_layers):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        self.out = nn.Linear(d_model, d_model + 1, bias=False)


@register_mixer("_adv_bare_tensor", config=DecayConfig)
class BareTensor(DecayedRecurrence):
    def forward(self, x, state=None):
        y, _ = super().forward(x, state)
        return y


@register_mixer("_adv_faint_leak", config=DecayConfig)
class FaintLeak(DecayedRecurrence):
    def forward(self, x, state=None):
        y, s = super().forward(x, state)
        return y + 1e-5 * _next_token(x), s


@register_mixer("_adv_order_noise", config=DecayConfig)
class OrderNoise(DecayedRecurrence):
    """Causal, but its outputs move by a few 1e-6 with the sequence length, as fp32 sums in another order do."""

    def forward(self, x, state=None):
        y, s = super().forward(x, state)
        return y * (1 + 2e-6 * (x.shape[1] % 5 - 2)), s


@register_mixer("_adv_inplace_state", config=DecayConfig)
class InPlaceState(DecayedRecurrence):
    """Updates the state it is given in place (and returns it): every output is right, so only a check that the
    passed state is unchanged can catch it; a caller reusing a saved state (a timed round, a branch) gets garbage."""

    def forward(self, x, state=None):
        y, h = super().forward(x, state)
        if state is not None:
            state.copy_(h)
            h = state
        return y, h

    def step(self, x_t, state):
        y, h = super().step(x_t, state)
        state.copy_(h)
        return y, state


@register_mixer("_adv_inplace_sometimes", config=DecayConfig)
class InPlaceSometimes(DecayedRecurrence):
    """Modifies the state it is given only on every seventh step (counted across calls), so a check that looks
    at a few chosen positions can miss it."""

    calls = 0

    def step(self, x_t, state):
        y, h = super().step(x_t, state)
        type(self).calls += 1
        if type(self).calls % 7 == 0:
            state.copy_(h)
            return y, state
        return y, h


#: adversary -> the check that must catch it
EXPECTED = {
    "_adv_faint_leak": "causality",
    "_adv_inplace_sometimes": "decode",
    "_adv_inplace_state": "decode",
    "_adv_nan_step": "decode",
    "_adv_nan_forward": "determinism",
    "_adv_leak_past_40": "causality",
    "_adv_chunk_leak": "causality",
    "_adv_batch_coupled": "batch_independence",
    "_adv_train_leak": "causality",
    "_adv_wrong_width": "contract",
    "_adv_bare_tensor": "contract",
}
