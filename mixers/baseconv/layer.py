"""BaseConv (Arora, Eyuboglu et al. 2023, "Zoology", Section 4): a gated convolution, the simplest mixer of the
class that the paper proves can solve multi-query associative recall only with a width that grows with the length.

    g = W_g u + b_g                      (the gate: a linear projection)
    s = short_conv(W_v u)                (a depthwise causal convolution of ``short_conv`` taps, with a bias)
    z = long_conv(s) + s                 (a depthwise causal convolution with an explicit filter h: [D, filter_len])
    y = W_o (g * z)

Zoology's BaseConv layer is ``y = conv(u) * (W u + b) + u`` with the conv short (3 taps) in one layer and long in
the next; here one layer holds both, with an input and an output projection so that it fits the backbone's
residual and its one initialisation rule (docs/protocol.md). The long filter is explicit (zoology's
``LongConvolution``, not Hyena's implicit MLP filter), ``filter_len`` taps long: zoology sets it to the input
length; taps past the input are unused, and lags past ``filter_len`` read nothing (a finite impulse response), so
any length runs (``length_extrapolation``).

Kernels of the long convolution: ``direct`` (the reference: a causal Toeplitz product, mixers/baseconv/reference.py)
and ``fft`` (the default, mixers/baseconv/kernel.py). The decode state is the input history the filters read: the last
``short_conv - 1`` inputs of the short convolution and the last ``filter_len - 1`` of the long one, so it grows with
the context up to the filter's length (docs/state_contract.md, "Growth with T"); ``step`` reads it directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harness.mixer import FlopCount, Mixer
from harness.registry import register_mixer
from harness.values import option
from mixers.baseconv import kernel, reference

KERNELS = {"direct": reference.causal_long_conv, "fft": kernel.causal_long_conv}


@dataclass(frozen=True)
class BaseConvConfig:
    filter_len: int = option(256, "taps of the long filter (zoology: the input length; 256: preset quick's context)",
                             min=1)
    short_conv: int = option(3, "taps of the short causal convolution (zoology's BaseConv: 3)", min=1)


@dataclass
class ConvHistory:
    """The inputs the filters still read: the short convolution's last ``short_conv - 1`` ([B, n, D]) and the long
    one's last ``filter_len - 1`` ([B, m, D]); both shorter until that many tokens have been seen."""

    short: torch.Tensor
    long: torch.Tensor


def _keep(x: torch.Tensor, n: int) -> torch.Tensor:
    """The last ``n`` positions of ``x: [B, T, D]`` (all of them when fewer; none when ``n`` is 0)."""
    return x[:, max(0, x.shape[1] - n):]


@register_mixer("baseconv", config=BaseConvConfig)
class BaseConv(Mixer):
    kernels = ("direct", "fft")
    length_extrapolation = True

    def __init__(self, cfg: BaseConvConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        d = d_model
        self.gate = nn.Linear(d, d, bias=True)
        self.value = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)  # initialised by the backbone (output_projection)
        for lin in (self.gate, self.value):
            nn.init.normal_(lin.weight, 0.0, 0.02)
        nn.init.zeros_(self.gate.bias)
        self.short = nn.Conv1d(d, d, cfg.short_conv, groups=d, bias=True)  # PyTorch's init; causal by padding
        # N(0, 1 / filter_len): the long sum over a whole filter keeps the skip's scale (zoology draws N(0, 1))
        self.filter = nn.Parameter(torch.randn(d, cfg.filter_len) / math.sqrt(cfg.filter_len))

    def output_projection(self) -> nn.Linear:
        return self.o_proj

    def default_kernel(self, device: torch.device) -> str:
        return "fft"

    # ------------------------------------------------------------------ state
    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> ConvHistory:
        empty = torch.zeros(batch_size, 0, self.d_model, device=device, dtype=dtype)
        return ConvHistory(empty, empty.clone())

    def state_size(self, seq_len: int) -> int:
        return self.d_model * (min(seq_len, self.cfg.short_conv - 1) + min(seq_len, self.cfg.filter_len - 1))

    # ------------------------------------------------------------------ compute
    def forward(self, x: torch.Tensor, state: ConvHistory | None = None):
        B, T, D = x.shape
        k = self.cfg.short_conv
        empty = x.new_zeros(B, 0, D)
        v = torch.cat([state.short if state is not None else empty, self.value(x)], dim=1)
        padded = F.pad(v.transpose(1, 2), (k - 1 - (v.shape[1] - T), 0))
        s = F.conv1d(padded, self.short.weight, self.short.bias, groups=D).transpose(1, 2)  # [B, T, D]
        history = state.long if state is not None else empty
        s_all = torch.cat([history, s], dim=1)
        z = KERNELS[self.kernel](s_all, self.filter, history.shape[1]) + s
        y = self.o_proj(self.gate(x) * z)
        if state is None:
            return y, None
        return y, ConvHistory(_keep(v, k - 1), _keep(s_all, self.cfg.filter_len - 1))

    def step(self, x_t: torch.Tensor, state: ConvHistory):
        """One token, reading the history directly: O(filter_len) per channel, where ``forward`` on one token
        would transform the whole history."""
        k, L = self.cfg.short_conv, self.cfg.filter_len
        v = torch.cat([state.short, self.value(x_t)[:, None]], dim=1)  # [B, n + 1, D]
        m = min(v.shape[1], k)
        s = torch.einsum("bmd,dm->bd", v[:, v.shape[1] - m:], self.short.weight[:, 0, k - m:]) + self.short.bias
        s_all = torch.cat([state.long, s[:, None]], dim=1)
        m = min(s_all.shape[1], L)
        z = torch.einsum("bmd,dm->bd", s_all[:, s_all.shape[1] - m:], self.filter[:, :m].flip(-1)) + s
        y = self.o_proj(self.gate(x_t) * z)
        return y, ConvHistory(_keep(v, k - 1), _keep(s_all, L - 1))

    def flops_per_token(self, context: int) -> FlopCount:
        """The gate, value and output projections (``6 d^2``), the short convolution (``2 k d``), the long one as
        its definition computes it (``2 d`` per causal tap: ``min(t + 1, filter_len)`` at position t, averaged
        over the context), and the skip and the gate's product (``2 d``); docs/flops.md."""
        d, L, T = self.d_model, self.cfg.filter_len, max(1, context)
        taps = (sum(range(1, min(T, L) + 1)) + max(0, T - L) * L) / T
        return FlopCount.training(6 * d * d + 2 * self.cfg.short_conv * d + 2 * d * taps + 2 * d)
