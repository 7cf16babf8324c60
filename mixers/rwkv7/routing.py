"""Routes the Triton calls of flash-linear-attention 0.6's ``RWKV7Attention`` per call (docs/fla_mixers.md).

``fla.layers.rwkv7`` imports seven kernels by name; :func:`install` (idempotent) replaces each of those module-level
names by a :func:`mixers.common.fla_modules.routed` dispatcher: fla's Triton kernel under kernel ``triton`` (or,
outside a mixer, for CUDA tensors), else plain torch, fla's own references where it has them:

* ``token_shift`` (the previous token minus this one, the cache holding the last token [B, D]): :func:`token_shift`
  below, what fla's ``token_shift_ref`` computes, with the kernel's cache in and out;
* ``fused_addcmul_rwkv7`` (the six token-shift interpolations): fla's ``torch_addcmul_rwkv7``;
* ``fused_k_rwkv7`` (``k + k (a - 1) k_a``): fla's ``k_update_ref``;
* ``gate_output_correction`` (``(o + (r k r_k).sum v) g``): fla's ``gate_output_correction_ref``;
* ``l2_norm`` (only with ``fuse_norm``, which the mixer leaves off): :func:`mixers.common.fla_modules.l2_norm`;
* ``chunk_rwkv7`` (training, gradients on, or 64 tokens and more) and ``fused_mul_recurrent_rwkv7`` (other
  calls; it takes ``kk`` and ``a`` and forms ``a = -kk, b = kk a`` itself): :func:`dplr`, the
  DPLR recurrence ``S_t = diag(exp(w_t)) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T``, ``o_t = S_t^T (scale r_t)``.
  Kernel ``recurrent`` (and any unselected call): fla's naive ``dplr_recurrence``, token by token (head-first, and
  scaling q by K^-0.5 itself, so q is pre-scaled by ``scale sqrt(K)``); kernel ``chunk``:
  :func:`mixers.rwkv7.kernel.chunk_dplr`, mixbench's chunked form (each call's first token: the recurrence step).

What the layer passes, checked here: ``w`` the log-decay ``-exp(-0.5) sigmoid(.)`` (fla's ``lower_bound``, used by
the chunk kernel to size its chunks), ``scale=1``, ``initial_state`` / ``output_final_state`` (the cache),
``cu_seqlens`` (always None from the mixer); ``safe_gate``, ``chunk_size`` and ``disable_recompute`` tune fla's
Triton kernels only and are ignored. Variable-length packing (``cu_seqlens``), context parallelism
(``cp_context``) and ``reverse`` are refused with NotImplementedError (:func:`fla_modules.no_varlen`). Inputs in
bf16 are computed in fp32 and returned in the inputs' dtype; states stay fp32.
"""

from __future__ import annotations


import torch

from mixers.common import fla_modules
from mixers.common.routing import current

_INSTALLED = False


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    rwkv7, addcmul = fla_modules.quiet_import("fla.layers.rwkv7", "fla.ops.rwkv7.fused_addcmul")
    torch_addcmul_rwkv7 = addcmul.torch_addcmul_rwkv7

    routed = fla_modules.routed
    rwkv7.token_shift = routed(rwkv7.token_shift, token_shift, "x")
    rwkv7.fused_addcmul_rwkv7 = routed(rwkv7.fused_addcmul_rwkv7, torch_addcmul_rwkv7, "hidden_states")
    rwkv7.fused_k_rwkv7 = routed(rwkv7.fused_k_rwkv7, fused_k_update, "k")
    rwkv7.gate_output_correction = routed(rwkv7.gate_output_correction, gate_output_correction, "o")
    rwkv7.l2_norm = routed(rwkv7.l2_norm, fla_modules.l2_norm, "x")
    rwkv7.chunk_rwkv7 = routed(rwkv7.chunk_rwkv7, chunk_rwkv7, "r")
    rwkv7.fused_mul_recurrent_rwkv7 = routed(rwkv7.fused_mul_recurrent_rwkv7, fused_mul_recurrent_rwkv7, "r")
    _INSTALLED = True


def token_shift(x, cu_seqlens=None, cache=None, output_cache=False, chunk_indices=None):
    """fla's ``token_shift``: ``delta_t = x_{t-1} - x_t`` with ``x_{-1}`` the cache [B, D] (zeros without one);
    with ``output_cache`` also the new cache, the last token [B, D]."""
    fla_modules.no_varlen(cu_seqlens, {})
    B, T, D = x.shape
    first = cache.to(x.dtype).view(B, 1, D) if cache is not None else x.new_zeros(B, 1, D)
    delta = torch.cat([first, x[:, :-1]], dim=1) - x
    if output_cache:
        return delta, x[:, -1].clone()  # fla's kernel writes a new tensor: no view of the caller's input
    return delta


def fused_k_update(k, a, ka, cu_seqlens=None, cu_seqlens_cpu=None):
    """fla's ``fused_k_rwkv7``: ``k_update_ref``."""
    from fla.ops.rwkv7.fused_k_update import k_update_ref

    fla_modules.no_varlen(cu_seqlens, {})
    return k_update_ref(k, a, ka)


def gate_output_correction(o, r, k, r_k, v, g):
    from fla.ops.rwkv7.gate_output_correction import gate_output_correction_ref

    return gate_output_correction_ref(o, r, k, r_k, v, g)


def chunk_rwkv7(r, w, k, v, a, b, scale=1.0, initial_state=None, output_final_state=False, cu_seqlens=None,
                cu_seqlens_cpu=None, safe_gate=False, chunk_size=None, disable_recompute=False, cp_context=None,
                lower_bound=None, **unsupported):
    """fla's ``chunk_rwkv7`` ([B, T, H, K] in and out)."""
    if cp_context is not None:
        unsupported["cp_context"] = cp_context
    fla_modules.no_varlen(cu_seqlens, unsupported)
    return dplr(r, w, k, v, a, b, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                lower_bound=lower_bound)


def fused_mul_recurrent_rwkv7(r, w, k, v, kk, a, scale=1.0, initial_state=None, output_final_state=False,
                              reverse=False, cu_seqlens=None, **unsupported):
    """fla's ``fused_mul_recurrent_rwkv7``: the same recurrence with ``a = -kk`` and ``b = kk a``."""
    if reverse:
        unsupported["reverse"] = reverse
    fla_modules.no_varlen(cu_seqlens, unsupported)
    return dplr(r, w, k, v, -kk, kk * a, scale=scale, initial_state=initial_state,
                output_final_state=output_final_state)


def dplr(r, w, k, v, a, b, *, scale, initial_state, output_final_state, lower_bound=None):
    """The DPLR recurrence on fla's layout ([B, T, H, K], v [B, T, H, V]) under the selected kernel."""
    from fla.ops.generalized_delta_rule.dplr import naive

    from mixers.rwkv7.kernel import chunk_dplr

    K = r.shape[-1]
    scale = K**-0.5 if scale is None else scale
    if current() == "chunk":
        return chunk_dplr(r, k, v, a, b, w, scale=scale, initial_state=initial_state,
                          output_final_state=output_final_state, lower_bound=lower_bound)
    q = r * (scale * K**0.5)  # the naive op scales q by K^-0.5 itself
    o, final = naive.dplr_recurrence(*(x.transpose(1, 2) for x in (q, k, v, a, b, w)),
                                     initial_state=initial_state, output_final_state=output_final_state)
    return o.transpose(1, 2).to(v.dtype), final
