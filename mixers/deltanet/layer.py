"""DeltaNet (``deltanet``) and Gated DeltaNet (``gated-deltanet``) from flash-linear-attention's own layers.

Each mixer holds one ``fla.layers.DeltaNet`` / ``fla.layers.GatedDeltaNet`` at the backbone width; fla is
imported by the first constructor (through :mod:`mixers.deltanet.routing`, which routes its kernels), so listing
mixers stays fast. Parameter names and shapes are the fla layer's on every device.

Kernels (:class:`mixers.common.routed_mixer.DeviceKernels` lists the CUDA one only where it can run):

* ``recurrent`` — the reference: fla's naive token-by-token recurrences;
* ``naive-chunk`` — fla's naive chunkwise ops, the same maths (the CPU default until mixbench had its own).
  DeltaNet's chunkwise op takes no state, so calls with a state in or out (prefill, decode) run the recurrence;
  so do single-token calls of either mixer;
* ``chunk`` — :mod:`mixers.deltanet.kernel`, mixbench's chunked WY/UT kernel in PyTorch (the default off CUDA):
  batched products over all chunks, a state carried in and out (so prefill and continuation use it too); one-token
  calls (decode) run the recurrence;
* ``triton`` — fla's Triton kernels, run under bf16 autocast because its chunk delta-rule kernel rejects fp32.

The shell of every fla mixer (:class:`mixers.common.fla_layer.FlaLayerMixer`) does the calls, the state, the
initialisation and the units; kernel ``chunk`` alone bypasses the layer (:mod:`mixers.deltanet.fused`, the
same maths in fewer operations). State (fla's cache entries for the layer): ``recurrent_state`` [B, H, K, V]
(Gated DeltaNet stores it [B, H, V, K]) plus, with short convolutions, ``conv_state``, the last ``conv_size``
inputs of the q, k and v convolutions: O(1) in the length. Initialisation is fla's model recipe (N(0, 0.02) for
every linear and convolution weight, zero biases), except ``o_proj``, which the backbone initialises by its one
rule for every mixer (docs/protocol.md). Units are heads (zeroed before ``o_proj`` by the mask intervention); the
recorder gets the recurrent state's norm per head after each stateful call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from harness.errors import ConfigError
from harness.mixer import FlopCount, Unit
from harness.recording import record, recording
from harness.registry import register_mixer
from harness.values import option
from mixers.common.fla_layer import FlaLayerMixer
from mixers.deltanet import fused, kernel, routing


@dataclass(frozen=True)
class DeltaNetConfig:
    """``fla.layers.DeltaNet`` options; the defaults are fla's (4 heads of d_model / 4 suit every preset)."""

    num_heads: int = option(4, "heads (must divide d_model)", min=1)
    expand_k: float = option(1.0, "key width = expand_k * d_model", gt=0)
    expand_v: float = option(1.0, "value width = expand_v * d_model", gt=0)
    use_beta: bool = option(True, "learned per-token writing strength beta")
    use_gate: bool = option(False, "output gate")
    use_short_conv: bool = option(True, "short causal convs on q, k, v")
    conv_size: int = option(4, "width of those convs", min=2)
    allow_neg_eigval: bool = option(False, "beta in (0, 2): negative eigenvalues of the transition")


@dataclass(frozen=True)
class GatedHeadsConfig:
    """The heads of fla's gated delta-rule layers (``GatedDeltaNet``, ``GatedDeltaProduct``), sized by
    :func:`gated_head_dim`; fla's defaults except head_dim. fla's 256 is sized for d_model 2048; 0 applies fla's
    own sizing rule instead (num_heads * head_dim = 0.75 d_model, about 6 d_model^2 parameters per layer with the
    output gate): head_dim = d_model / 8 with the 6 default heads."""

    num_heads: int = option(6, "heads", min=1)
    head_dim: int = option(0, "key channels per head; 0 = fla's sizing rule (d_model / 8 with 6 heads)", min=0)
    expand_v: float = option(2.0, "value width per head = expand_v * head_dim", gt=0)


@dataclass(frozen=True)
class GatedDeltaNetConfig(GatedHeadsConfig):
    """``fla.layers.GatedDeltaNet`` options: the heads (:class:`GatedHeadsConfig`), then fla's defaults."""

    use_gate: bool = option(True, "output gate")
    use_short_conv: bool = option(True, "short causal convs on q, k, v")
    conv_size: int = option(4, "width of those convs", min=2)
    allow_neg_eigval: bool = option(False, "beta in (0, 2): negative eigenvalues of the transition")


def gated_head_dim(name: str, d_model: int, cfg: Any) -> int:
    """Key channels per head of a gated delta-rule layer (``gated-deltanet``, ``gated-deltaproduct``):
    ``cfg.head_dim``, or with 0 fla's sizing rule num_heads * head_dim = 0.75 d_model; values ``expand_v`` wider."""
    head_dim = cfg.head_dim
    if not head_dim:
        if (3 * d_model) % (4 * cfg.num_heads):
            raise ConfigError(
                f"{name}: 0.75 * d_model ({0.75 * d_model:g}) is not a multiple of num_heads "
                f"({cfg.num_heads}); set head_dim explicitly."
            )
        head_dim = 3 * d_model // (4 * cfg.num_heads)
    if head_dim * cfg.expand_v != int(head_dim * cfg.expand_v):
        raise ConfigError(f"{name}: head_dim * expand_v ({head_dim * cfg.expand_v:g}) must be an integer.")
    return head_dim


def decay_units(layer_idx: int, layer: Any, **attrs: float) -> list[Unit]:
    """Heads of a layer with fla's gated delta-rule decay (``A_log``, ``dt_bias``), each with its state decay per
    step at zero input, ``exp(-exp(A_log) softplus(dt_bias))``, that decay's half-life in steps and ``attrs``."""
    gate = -torch.exp(layer.A_log.detach().float()) * F.softplus(layer.dt_bias.detach().float())
    units = []
    for h, decay in enumerate(torch.exp(gate).tolist()):
        half_life = math.log(0.5) / math.log(decay) if 0.0 < decay < 1.0 else math.inf
        units.append(Unit(layer_idx, h, "head", {"decay": decay, "half_life": half_life, **attrs}))
    return units


class _DeltaBase(FlaLayerMixer):
    """What DeltaNet and Gated DeltaNet add to the fla shell: kernel ``chunk`` (the layer's maths written for CPU),
    the chunked delta rule's benchmark, FLOPs and the state norm's recording."""

    portable_kernels = ("recurrent", "naive-chunk", "chunk")
    cuda_dtype = torch.bfloat16  # fla's chunk delta-rule kernel asserts non-fp32 inputs

    def install_routes(self) -> None:
        routing.install()

    def chunk_lengths(self) -> tuple[int, ...]:
        return (kernel.CHUNK, routing.CHUNK)

    def _chunk_benchmark(self, batch, seq_len, tensor, gen, device):
        """The chunked delta rule at this layer's head sizes, on l2-normalised keys
        (:func:`mixers.deltanet.kernel.chunked_flops`)."""
        H, K, V = self.layer.num_heads, self.layer.head_k_dim, self.layer.head_v_dim
        q, v = tensor(batch, seq_len, H, K), tensor(batch, seq_len, H, V)
        k = tensor(batch, seq_len, H, K, fn=lambda t: F.normalize(t, dim=-1))
        beta = tensor(batch, seq_len, H, fn=torch.sigmoid)
        g = tensor(batch, seq_len, H, fn=lambda t: -0.1 * t.abs()) if hasattr(self.layer, "A_log") else None
        return (lambda: kernel.chunk_delta_rule(q, k, v, beta, g, scale=K**-0.5)[0],
                kernel.chunked_flops(batch, seq_len, H, K, V), "chunked delta rule")

    #: per-head scalar projections (beta, and Gated DeltaNet's decay), and whether the state decays at each step
    #: (Gated DeltaNet: one product per state float and one exponential per head); for ``flops_per_token``
    _head_projections = 1
    _decay = 0

    def flops_per_token(self, context: int) -> FlopCount:
        """Products, with key width Kd = H K and value width Vd = H V: q, k ``4 d Kd``, v and o ``4 d Vd``, the
        output gate ``2 d Vd``, the per-head scalars ``2 d H`` each, the short convs ``2 conv_size (2 Kd + Vd)``;
        the recurrence as fla's reference computes it, per head and step: the read ``S^T k`` (a product and a sum
        per state float), the write ``S + k u^T`` (2), the output ``S^T q`` (a multiply-add) and the state's decay
        (1, gated only), ``(6 + decay) K V``, plus ``2 V + K`` for ``u`` and the query's scale (docs/flops.md)."""
        layer, d, cfg = self.layer, self.d_model, self.cfg
        H, K, V = layer.num_heads, layer.head_k_dim, layer.head_v_dim
        Kd, Vd = H * K, H * V
        products = 4 * d * Kd + 4 * d * Vd + 2 * d * H * self._head_projections
        if cfg.use_gate:
            products += 2 * d * Vd
        if cfg.use_short_conv:
            products += 2 * cfg.conv_size * (2 * Kd + Vd)
        recurrence = H * ((6 + self._decay) * K * V + 2 * V + K + self._decay)
        return FlopCount.training(products + recurrence)

    def forward(self, x: torch.Tensor, state: dict[str, Any] | None = None):
        """Kernel ``chunk``: :func:`mixers.deltanet.fused.forward`; the others: the layer through the shell.
        After a call with a state the recorder gets the recurrent state's norm per head."""
        if self.kernel == "chunk":
            recurrent, conv = fused.state_tuple(state)
            y, final, new_conv = fused.forward(self.layer, x, recurrent, conv, with_state=state is not None)
            new_state = None
            if state is not None:
                entries = {"recurrent_state": final, **({"conv_state": new_conv} if new_conv is not None else {})}
                new_state = self._next_state(state, entries, x.shape[1])
        else:
            y, new_state = super().forward(x, state)
        if new_state is not None and recording():
            record(self.layer_idx, "delta_state_norm",
                   new_state["recurrent_state"].flatten(2).norm(dim=-1).unsqueeze(1))
        return y, new_state


@register_mixer("deltanet", config=DeltaNetConfig)
class DeltaNetMixer(_DeltaBase):
    quickstart = True  # one of the paper's four mixers: trained and scored by `mixbench quickstart`
    fla_layer = "DeltaNet"
    paper = "Parallelizing Linear Transformers with the Delta Rule over Sequence Length (Yang et al., NeurIPS 2024)"

    def __init__(self, cfg: DeltaNetConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        for name, expand in (("expand_k", cfg.expand_k), ("expand_v", cfg.expand_v)):
            dim = d_model * expand
            if dim != int(dim) or int(dim) % cfg.num_heads:
                raise ConfigError(
                    f"deltanet: d_model * {name} ({dim:g}) must be an integer divisible by num_heads ({cfg.num_heads})."
                )
        from fla.layers import DeltaNet

        self._head_projections = int(cfg.use_beta)
        self.layer = DeltaNet(
            hidden_size=d_model, expand_k=cfg.expand_k, expand_v=cfg.expand_v, num_heads=cfg.num_heads,
            use_beta=cfg.use_beta, use_gate=cfg.use_gate, use_short_conv=cfg.use_short_conv,
            conv_size=cfg.conv_size, allow_neg_eigval=cfg.allow_neg_eigval, layer_idx=0,
        )
        self.finish_init()

    @property
    def _recurrent_shape(self) -> tuple[int, ...]:
        return self.layer.num_heads, self.layer.head_k_dim, self.layer.head_v_dim

    def units(self) -> list[Unit]:
        attrs = {"head_k_dim": float(self.layer.head_k_dim), "head_v_dim": float(self.layer.head_v_dim)}
        return [Unit(self.layer_idx, h, "head", dict(attrs)) for h in range(self.layer.num_heads)]


@register_mixer("gated-deltanet", config=GatedDeltaNetConfig)
class GatedDeltaNetMixer(_DeltaBase):
    fla_layer = "GatedDeltaNet"
    paper = "Gated Delta Networks: Improving Mamba2 with Delta Rule (Yang, Kautz and Hatamizadeh, ICLR 2025)"
    _head_projections = 2  # a_proj (the decay) and b_proj (beta)
    _decay = 1

    def __init__(self, cfg: GatedDeltaNetConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        head_dim = gated_head_dim("gated-deltanet", d_model, cfg)
        from fla.layers import GatedDeltaNet

        self.layer = GatedDeltaNet(
            hidden_size=d_model, expand_v=cfg.expand_v, head_dim=head_dim, num_heads=cfg.num_heads,
            use_gate=cfg.use_gate, use_short_conv=cfg.use_short_conv, conv_size=cfg.conv_size,
            allow_neg_eigval=cfg.allow_neg_eigval, layer_idx=0,
        )
        self.finish_init()

    @property
    def _recurrent_shape(self) -> tuple[int, ...]:  # fla stores it value-first (state_v_first)
        return self.layer.num_v_heads, self.layer.head_v_dim, self.layer.head_k_dim

    def units(self) -> list[Unit]:
        return decay_units(self.layer_idx, self.layer)
