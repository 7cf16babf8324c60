"""GLA (``gla``) and RetNet's multi-scale retention (``retnet``) from flash-linear-attention's own layers.

Each mixer holds one ``fla.layers.GatedLinearAttention`` / ``fla.layers.MultiScaleRetention`` at the backbone
width, through :class:`mixers.common.fla_layer.FlaLayerMixer` (calls, state, initialisation, units), with its
sequence ops routed per call by :mod:`mixers.gla.routing`. Kernels: ``recurrent`` (the reference, fla's naive
recurrences), ``chunk`` (the CPU default: :func:`mixers.common.ops.gla.chunk_gla`), ``triton`` (fla's own, on CUDA).

Both are linear attention with a decaying state ``S_t = diag(a_t) S_{t-1} + k_t v_t^T``, read ``o_t = q_t^T S_t``:
GLA's decay is data-dependent per key channel (``a_t = sigmoid(W x_t)^(1/16)``, a low-rank projection), RetNet's
is fixed per head (``1 - 2^(-5-h)``) and its queries and keys carry a rotary position embedding; each output goes
through a per-head RMS norm and a swish output gate before ``o_proj``. The decode state is O(1) in the length:
the [H, V, K] (GLA) / [H, K, V] (RetNet) state plus, with short convolutions, their last ``conv_size`` inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.errors import ConfigError
from harness.mixer import FlopCount
from harness.registry import register_mixer
from harness.values import option
from mixers.common.fla_layer import FlaLayerMixer
from mixers.common.ops import gla as gla_ops
from mixers.gla import routing


@dataclass(frozen=True)
class GLAConfig:
    """``fla.layers.GatedLinearAttention`` options; the defaults are fla's (and the GLA paper's)."""

    num_heads: int = option(4, "heads (must divide the key and value widths)", min=1)
    expand_k: float = option(0.5, "key width = expand_k * d_model", gt=0)
    expand_v: float = option(1.0, "value width = expand_v * d_model", gt=0)
    gate_low_rank_dim: int = option(16, "rank of the decay's projection", min=1)
    gate_logit_normalizer: int = option(16, "decay = sigmoid(logit) ^ (1 / this)", min=1)
    use_output_gate: bool = option(True, "swish output gate")
    use_short_conv: bool = option(False, "short causal convs on q, k, v")
    conv_size: int = option(4, "width of those convs", min=2)


@dataclass(frozen=True)
class RetNetConfig:
    """``fla.layers.MultiScaleRetention`` options; fla's defaults (the RetNet paper's: keys d_model wide, values
    twice that, a swish gate) except the heads: 4, so that heads are 32 key channels wide at the quick preset."""

    num_heads: int = option(4, "heads, each with its own fixed decay (must divide the key and value widths)", min=1)
    expand_k: float = option(1.0, "key width = expand_k * d_model", gt=0)
    expand_v: float = option(2.0, "value width = expand_v * d_model", gt=0)
    use_output_gate: bool = option(True, "swish output gate")
    use_short_conv: bool = option(False, "short causal convs on q, k, v")
    conv_size: int = option(4, "width of those convs", min=2)


def _widths(name: str, d_model: int, cfg: Any) -> tuple[int, int]:
    """Key and value widths, refused unless integers divisible by the heads (fla asserts it; we explain it)."""
    widths = []
    for option_name, expand in (("expand_k", cfg.expand_k), ("expand_v", cfg.expand_v)):
        dim = d_model * expand
        if dim != int(dim) or int(dim) % cfg.num_heads:
            raise ConfigError(
                f"{name}: d_model * {option_name} ({dim:g}) must be an integer divisible by num_heads "
                f"({cfg.num_heads})."
            )
        widths.append(int(dim))
    return widths[0], widths[1]


class _LinearAttentionBase(FlaLayerMixer):
    def install_routes(self) -> None:
        routing.install()

    def chunk_lengths(self) -> tuple[int, ...]:
        return (gla_ops.CHUNK,)

    #: FLOPs per state float per step of the reference recurrence, and per key channel (the gate's exp)
    _per_state_float = 5
    _per_key = 0

    def _projection_products(self) -> float:
        """2 per weight of every matrix and convolution applied per token."""
        d, layer, cfg = self.d_model, self.layer, self.cfg
        Kd, Vd = layer.key_dim, layer.value_dim
        products = 2 * d * (2 * Kd + Vd) + 2 * Vd * d  # q, k, v, o
        if cfg.use_output_gate:
            products += 2 * d * Vd
        if cfg.use_short_conv:
            products += 2 * cfg.conv_size * (2 * Kd + Vd)
        return products

    def flops_per_token(self, context: int) -> FlopCount:
        """Products (:meth:`_projection_products`) plus the recurrence as fla's reference computes it, per head
        and step: decay, outer product, sum and the read's product and sum, 5 per state float, and the query's
        scale per key channel; the norm and gate are ``O(V)`` per head (docs/flops.md)."""
        H, K, V = self.layer.num_heads, self.layer.head_k_dim, self.layer.head_v_dim
        recurrence = H * (self._per_state_float * K * V + (1 + self._per_key) * K)
        return FlopCount.training(self._projection_products() + recurrence)


@register_mixer("gla", config=GLAConfig)
class GLAMixer(_LinearAttentionBase):
    paper = "Gated Linear Attention Transformers with Hardware-Efficient Training (Yang et al., ICML 2024)"
    fla_layer = "GatedLinearAttention"
    _per_key = 1  # exp of the gate

    def __init__(self, cfg: GLAConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        _widths("gla", d_model, cfg)
        from fla.layers import GatedLinearAttention

        self.layer = GatedLinearAttention(
            mode="chunk", hidden_size=d_model, expand_k=cfg.expand_k, expand_v=cfg.expand_v,
            num_heads=cfg.num_heads, use_short_conv=cfg.use_short_conv, conv_size=cfg.conv_size,
            use_output_gate=cfg.use_output_gate, gate_logit_normalizer=cfg.gate_logit_normalizer,
            gate_low_rank_dim=cfg.gate_low_rank_dim, layer_idx=0,
        )
        self.finish_init()

    @property
    def _recurrent_shape(self) -> tuple[int, int, int]:  # value-first, as fla's GLA layer stores it
        return self.layer.num_heads, self.layer.head_v_dim, self.layer.head_k_dim

    def _projection_products(self) -> float:
        d, r, Kd = self.d_model, self.cfg.gate_low_rank_dim, self.layer.key_dim
        return super()._projection_products() + 2 * (d * r + r * Kd)


@register_mixer("retnet", config=RetNetConfig)
class RetNetMixer(_LinearAttentionBase):
    paper = "Retentive Network: A Successor to Transformer for Large Language Models (Sun et al., 2023)"
    fla_layer = "MultiScaleRetention"
    tracks_position = True  # the rotary embedding reads absolute positions
    length_extrapolation = False  # rotary positions beyond the training context were never seen

    def __init__(self, cfg: RetNetConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        Kd, _ = _widths("retnet", d_model, cfg)
        if (Kd // cfg.num_heads) % 2:
            raise ConfigError(f"retnet: the key width per head ({Kd // cfg.num_heads}) must be even (rotary pairs).")
        from fla.layers import MultiScaleRetention

        self.layer = MultiScaleRetention(
            mode="chunk", hidden_size=d_model, expand_k=cfg.expand_k, expand_v=cfg.expand_v,
            num_heads=cfg.num_heads, use_short_conv=cfg.use_short_conv, conv_size=cfg.conv_size,
            use_output_gate=cfg.use_output_gate, layer_idx=0,
        )
        self.finish_init()

    @property
    def _recurrent_shape(self) -> tuple[int, int, int]:
        return self.layer.num_heads, self.layer.head_k_dim, self.layer.head_v_dim

    def units(self):
        units = super().units()
        for unit, decay in zip(units, routing.retention_log_decay(len(units)).exp().tolist()):
            unit.attrs.update({"decay": decay, "half_life": float(torch.tensor(0.5).log() / torch.tensor(decay).log())})
        return units
