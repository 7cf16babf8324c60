"""Gated DeltaProduct (``gated-deltaproduct``) from flash-linear-attention's own ``GatedDeltaProduct`` layer.

DeltaProduct (Siems et al., 2025) takes ``n`` (``num_householder``) delta-rule steps per token, each with its own
key, value and strength, so each token's state transition is a product of ``n`` generalised Householder matrices
(times the forget gate's decay in the gated variant): ``n = 1`` is Gated DeltaNet; more steps give transitions of
rank up to ``n``, which lets a linear RNN track states a single step cannot.

The mixer is one ``fla.layers.GatedDeltaProduct`` at the backbone width (:class:`FlaLayerMixer` does the calls,
the state and the initialisation); its sequence ops are routed per call by :mod:`mixers.deltaproduct.routing`.
Kernels:

* ``recurrent`` — the reference: fla's ``naive_recurrent_gated_delta_product``, step by step;
* ``chunk`` — the default off CUDA: mixbench's chunked WY/UT delta rule
  (:func:`mixers.deltanet.kernel.chunk_delta_rule`) over the interleaved ``n T`` steps
  (:mod:`mixers.deltaproduct.kernel`); decode steps take the recurrence;
* ``triton`` — fla's Triton kernels, under bf16 autocast (its chunk kernel rejects fp32).

Config decisions (fla's defaults, which are the paper's): ``num_householder = 2`` (the smallest product that
solves S3 state tracking in the paper) and ``allow_neg_eigval = True``: beta in (0, 2), so each Householder factor
``I - beta k k^T`` has an eigenvalue in (-1, 1) instead of (0, 1). The paper's state-tracking results need it (with
eigenvalues in [0, 1] a product of Householders cannot express the reflections and permutations of S3; Grazzi et
al., 2025), so unlike ``gated-deltanet`` (fla's ``False``) it is on by default here; set it false to compare the
[0, 1] range. Widths follow ``gated-deltanet``'s rule: ``head_dim = 0`` gives num_heads * head_dim = 0.75
d_model (d_model / 8 with the 6 default heads: 8 at preset tiny, 16 at quick), values ``expand_v`` wider.

State (fla's cache entries for the layer): ``recurrent_state`` [B, H, K, V] and, with short convolutions,
``conv_state``, the last ``conv_size`` inputs of the q, k and v convolutions (k's and v's are n times wider, one
slice per Householder step): O(1) in the length. Units are heads (zeroed before ``o_proj`` by the mask
intervention), each with its decay and half-life at zero input when the forget gate is on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.mixer import FlopCount, Unit
from harness.registry import register_mixer
from harness.values import option
from mixers.common.fla_layer import FlaLayerMixer
from mixers.deltanet.layer import GatedHeadsConfig, decay_units, gated_head_dim
from mixers.deltaproduct import kernel, routing


@dataclass(frozen=True)
class GatedDeltaProductConfig(GatedHeadsConfig):
    """``fla.layers.GatedDeltaProduct`` options: the heads as ``gated-deltanet``'s (:class:`GatedHeadsConfig`),
    then fla's defaults."""

    num_householder: int = option(2, "Householder (delta-rule) steps per token; 1 is Gated DeltaNet", min=1)
    allow_neg_eigval: bool = option(True, "beta in (0, 2): transition eigenvalues in (-1, 1), the paper's "
                                          "state-tracking setting")
    use_forget_gate: bool = option(True, "per-head decay of the state (the 'gated' of Gated DeltaProduct)")
    use_output_gate: bool = option(True, "output gate (gated RMSNorm)")
    use_short_conv: bool = option(True, "short causal convs on q, k, v")
    conv_size: int = option(4, "width of those convs", min=2)


@register_mixer("gated-deltaproduct", config=GatedDeltaProductConfig)
class GatedDeltaProductMixer(FlaLayerMixer):
    fla_layer = "GatedDeltaProduct"
    paper = ("DeltaProduct: Improving State-Tracking in Linear RNNs via Householder Products (Siems et al., 2025), "
             "arXiv:2502.10297")
    cuda_dtype = torch.bfloat16  # fla's chunk_gated_delta_product asserts non-fp32 inputs

    def __init__(self, cfg: GatedDeltaProductConfig, d_model: int, layer_idx: int, n_layers: int):
        head_dim = gated_head_dim("gated-deltaproduct", d_model, cfg)
        super().__init__(cfg, d_model, layer_idx, n_layers)
        from fla.layers import GatedDeltaProduct

        self.layer = GatedDeltaProduct(
            hidden_size=d_model, expand_v=cfg.expand_v, head_dim=head_dim, num_heads=cfg.num_heads,
            use_output_gate=cfg.use_output_gate, use_short_conv=cfg.use_short_conv, conv_size=cfg.conv_size,
            use_forget_gate=cfg.use_forget_gate, allow_neg_eigval=cfg.allow_neg_eigval,
            num_householder=cfg.num_householder, layer_idx=0,
        )
        self.finish_init()

    def install_routes(self) -> None:
        routing.install()

    def chunk_lengths(self) -> tuple[int, ...]:
        """Tokens per chunk of kernel ``chunk`` (whole tokens of the interleaved steps)."""
        return (kernel.tokens_per_chunk(self.cfg.num_householder),)

    # ------------------------------------------------------------------ state
    @property
    def _conv_dims(self) -> tuple[int, int, int]:
        n, layer = self.cfg.num_householder, self.layer
        return layer.key_dim, n * layer.key_dim, n * layer.value_dim

    @property
    def _recurrent_shape(self) -> tuple[int, int, int]:  # keys first: fla's layout for this layer
        return self.layer.num_v_heads, self.layer.head_k_dim, self.layer.head_v_dim

    # ------------------------------------------------------------------ cost
    def flops_per_token(self, context: int) -> FlopCount:
        """With n = num_householder, H heads, K = head_dim, V = expand_v K, Kd = H K, Vd = H V, W = conv_size.

        Products: q ``2 d Kd``; k and v, n per token, ``2 n d (Kd + Vd)``; o ``2 d Vd``; beta, n per head,
        ``2 n d H``; the forget gate's ``a_proj`` ``2 d H``; the output gate ``2 d Vd``; the short convs
        ``2 W (Kd + n Kd + n Vd)``, each when configured.

        The recurrence as fla's reference (``naive_recurrent_gated_delta_product``) computes it, per head and
        token: per Householder step the read ``S^T k`` (a product and a sum per state float), the write
        ``S + beta k (v - S^T k)^T`` (the outer product, its scaling by beta and the addition: 3), ``5 K V + V``;
        then the output ``S^T q`` (2 K V), the query's scale (K) and, with the forget gate, the state's decay and
        its exponential (K V + 1):

            H (n (5 K V + V) + 2 K V + K + gate (K V + 1))

        (as ``_DeltaBase.flops_per_token``, with the recurrence and the k, v, beta projections n times over).
        Backward is twice the forward (docs/flops.md)."""
        layer, d, cfg = self.layer, self.d_model, self.cfg
        n, H, K, V = cfg.num_householder, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
        Kd, Vd = H * K, H * V
        gate = int(cfg.use_forget_gate)
        products = 2 * d * Kd + 2 * n * d * (Kd + Vd) + 2 * d * Vd + 2 * n * d * H + gate * 2 * d * H
        if cfg.use_output_gate:
            products += 2 * d * Vd
        if cfg.use_short_conv:
            products += 2 * cfg.conv_size * (Kd + n * Kd + n * Vd)
        recurrence = H * (n * (5 * K * V + V) + 2 * K * V + K + gate * (K * V + 1))
        return FlopCount.training(products + recurrence)

    # ------------------------------------------------------------------ units
    def units(self) -> list[Unit]:
        if not self.cfg.use_forget_gate:
            return super().units()
        return decay_units(self.layer_idx, self.layer, head_v_dim=float(self._unit_width()))
