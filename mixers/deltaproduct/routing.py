"""Routes the sequence ops of flash-linear-attention 0.6's ``GatedDeltaProduct`` layer per call (docs/fla_mixers.md).

``fla.layers.gated_deltaproduct`` calls two Triton ops through module-level names, which :func:`install`
(idempotent) replaces by :func:`mixers.common.fla_modules.routed` dispatchers: fla's kernel under kernel
``triton`` (or, outside a mixer, for CUDA tensors), otherwise the torch paths below. The layer's building blocks
(ShortConvolution, the norms) are :func:`mixers.common.fla_modules.install`'s.

* ``chunk_gated_delta_product`` — every call with gradients enabled, and calls of more than 64 tokens (or in
  training mode) without: ``q`` [B, T, H, K] per token, ``k``, ``v``, ``beta`` [B, n T, H, ...] per
  Householder step, ``g`` [B, T, H] per token; :func:`gated_delta_product`;
* ``fused_recurrent_gated_delta_rule`` — inference calls of at most 64 tokens in eval mode (decode, short
  prefills): the layer interleaves the query (at each token's last step) and the log-decay (at its first) itself
  and reads every n-th output, so this is a plain gated delta rule over the n T steps; :func:`gated_delta_rule`,
  which runs it as a DeltaProduct with one Householder step per token.

Kernels, for both: ``recurrent`` (and no kernel selected) — fla's ``naive_recurrent_gated_delta_product``;
``chunk`` — :func:`mixers.deltaproduct.kernel.chunk_gated_delta_product` (the chunked delta rule over the
interleaved steps), except calls of at most :data:`RECURRENT_MAX_STEPS` steps (a decode step), which take the
recurrence. The naive op takes its inputs without the options fla's kernels apply internally, so those are applied
here first: ``use_qk_l2norm_in_kernel`` (:func:`mixers.common.fla_modules.l2_norm`, the kernels' eps), the default
scale ``K^-0.5``; for the gated delta rule also ``use_gate_in_kernel`` (``naive_gdn_gate``),
``use_beta_sigmoid_in_kernel`` / ``allow_neg_eigval`` (beta = (1 or 2) sigmoid(beta)), ``beta=None`` (ones) and
``state_v_first`` (the state stored [V, K]). Variable-length packing (``cu_seqlens``), context parallelism,
per-channel gates (``gk``, ``gv``) and grouped value heads are refused.
"""

from __future__ import annotations

from mixers.common import fla_modules
from mixers.common.routing import current
from mixers.deltanet.routing import torch_gated_delta_rule
from mixers.deltaproduct import kernel

#: calls of at most this many Householder steps take the recurrence under kernel ``chunk``: one token's steps
#: (decode) up to n = 8, where the chunked kernel's dozen products per call cost more than the steps themselves
RECURRENT_MAX_STEPS = 8

_INSTALLED = False


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    (layer_module,) = fla_modules.quiet_import("fla.layers.gated_deltaproduct")

    layer_module.chunk_gated_delta_product = fla_modules.routed(
        layer_module.chunk_gated_delta_product, gated_delta_product, "q")
    layer_module.fused_recurrent_gated_delta_rule = fla_modules.routed(
        layer_module.fused_recurrent_gated_delta_rule, gated_delta_rule, "q")
    _INSTALLED = True


def _run(q, k, v, g, beta, scale, initial_state, output_final_state, num_householder=1):
    """The selected kernel on prepared inputs (l2-normalised, beta final, state [B, H, K, V])."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if current() == "chunk" and k.shape[1] > RECURRENT_MAX_STEPS:
        fn = kernel.chunk_gated_delta_product
    else:
        fn = kernel.recurrent_gated_delta_product
    return fn(q, k, v, g, beta, num_householder, scale=scale, initial_state=initial_state,
              output_final_state=output_final_state)


def gated_delta_product(q, k, v, g, beta, num_householder, scale=None, initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None,
                        **unsupported):
    """``chunk_gated_delta_product`` (fla's signature and layout) on CPU."""
    fla_modules.no_varlen(cu_seqlens if cu_seqlens is not None else cu_seqlens_cpu,
                          dict(unsupported, cp_context=cp_context))
    if use_qk_l2norm_in_kernel:
        q, k = fla_modules.l2_norm(q), fla_modules.l2_norm(k)
    return _run(q, k, v, g, beta, scale, initial_state, output_final_state, num_householder)


def gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None,
                     output_final_state=False, **options):
    """``fused_recurrent_gated_delta_rule`` (fla's signature and layout) on CPU: a DeltaProduct of one step per
    token (the layer's interleaved steps)."""
    return torch_gated_delta_rule(_run, q, k, v, g, beta, scale, initial_state, output_final_state, gk=gk, gv=gv,
                                  **options)
