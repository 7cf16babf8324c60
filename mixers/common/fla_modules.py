"""Plain-torch stand-ins for the Triton kernels inside flash-linear-attention 0.6's shared modules.

fla's layers call Triton for everything, their building blocks included (``ShortConvolution``, ``RMSNorm``,
``FusedRMSNormGated``, the rotary embedding), and Triton has no CPU driver (docs/cpu_kernels.md).
:func:`install` (idempotent) replaces the module-level kernel names those blocks call by
:func:`mixers.common.routing.route` dispatchers: fla's kernel for a mixer that selected a kernel in
:data:`PACKAGE_KERNELS` (or, outside a mixer, for CUDA tensors), else the functions below, which follow fla's own
references (``rms_norm_ref``, ``rotary_embedding_ref``) and its kernels' cache semantics.

Every fla mixer (DeltaNet, GLA, RetNet, RWKV-7, Gated DeltaProduct) calls :func:`install` before building its
layer; its own sequence ops, and helpers a layer imports by name (RWKV-7's ``l2_norm``), are routed by its own
package with :func:`routed`; :func:`l2_norm` is here for them.
"""

from __future__ import annotations

import importlib
import types
import warnings

import torch
import torch.nn.functional as F

from mixers.common.routing import route

#: kernels that run fla's own Triton code
PACKAGE_KERNELS = frozenset({"triton"})
#: eps of fla's in-kernel l2 norm (``fla.modules.l2norm``)
L2_EPS = 1e-6

_INSTALLED = False


def routed(package_fn, torch_fn, probe: str):
    """A dispatcher between one of fla's Triton kernels and its torch stand-in (see the module docstring)."""
    return route(package_fn, torch_fn, probe=probe, package_kernels=PACKAGE_KERNELS)


def quiet_import(*names: str) -> list[types.ModuleType]:
    """Import fla modules without the warnings fla prints on a machine without a GPU (Triton's absence, the
    deprecated ``torch.jit.script_method`` in its modules)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Triton is not supported", category=UserWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        return [importlib.import_module(name) for name in names]


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    gated_deltanet, conv_ops, fused_norm_gate, layernorm, rotary = quiet_import(
        "fla.layers.gated_deltanet", "fla.modules.causal_conv1d.ops", "fla.modules.norm.fused_norm_gate",
        "fla.modules.norm.layernorm", "fla.modules.rotary.ops",
    )

    conv = routed(conv_ops.causal_conv1d, causal_conv1d, "x")
    conv_ops.causal_conv1d = conv  # ShortConvolution.forward
    gated_deltanet.causal_conv1d = conv  # GatedDeltaNet's fused q/k/v convolution
    conv_ops.causal_conv1d_update = routed(conv_ops.causal_conv1d_update, causal_conv1d_update, "x")
    layernorm.rms_norm = routed(layernorm.rms_norm, rms_norm, "x")
    fused_norm_gate.rms_norm_gated = routed(fused_norm_gate.rms_norm_gated, rms_norm_gated, "x")
    rotary.rotary_embedding = routed(rotary.rotary_embedding, rotary_embedding, "x")
    _INSTALLED = True


def l2_norm(x: torch.Tensor, eps: float = L2_EPS, output_dtype: torch.dtype | None = None, **_) -> torch.Tensor:
    """``x / sqrt(|x|^2 + eps)`` over the last axis, computed in fp32 like fla's kernel."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.square().sum(-1, keepdim=True) + eps)
    return y.to(output_dtype or x.dtype)


def no_varlen(cu_seqlens, unsupported: dict) -> None:
    """The torch paths handle padded batches only: variable-length packing (``cu_seqlens``) is refused, and so is
    any option they do not implement (``unsupported``, by name) that was given (not None)."""
    if cu_seqlens is not None:
        raise NotImplementedError("fla's torch path has no variable-length (cu_seqlens) support.")
    given = sorted(name for name, value in unsupported.items() if value is not None)
    if given:
        raise NotImplementedError(f"fla's torch path does not take {', '.join(given)}.")


def causal_conv1d(x, weight=None, bias=None, residual=None, initial_state=None, output_final_state=False,
                  activation=None, backend=None, cu_seqlens=None, **unsupported):
    """fla's ``causal_conv1d``: x [B, T, D], weight [D, W]; the cache [B, D, W] holds the last W inputs."""
    no_varlen(cu_seqlens, unsupported)
    B, T, D = x.shape
    W = weight.shape[1]
    inputs = x.transpose(1, 2)
    history = initial_state.to(x.dtype) if initial_state is not None else x.new_zeros(B, D, W)
    window = torch.cat([history, inputs], dim=-1)
    y = F.conv1d(window[..., 1:], weight.unsqueeze(1), bias, groups=D).transpose(1, 2)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    if residual is not None:
        y = y + residual
    return y, (window[..., -W:] if output_final_state else None)


def causal_conv1d_update(x, cache, residual=None, weight=None, bias=None, activation=None):
    """fla's one-token conv update; returns the output and a new cache (the Triton kernel writes it in place)."""
    cache = torch.cat([cache[..., 1:], x.reshape(cache.shape[0], cache.shape[1], 1).to(cache.dtype)], dim=-1)
    y = (cache * weight).sum(-1) if weight is not None else cache.sum(-1)
    if bias is not None:
        y = y + bias
    if activation in ("silu", "swish"):
        y = F.silu(y)
    y = y.to(x.dtype).view(x.shape)
    return (y + residual if residual is not None else y), cache


def rms_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False):
    from fla.modules.norm.layernorm import rms_norm_ref

    return rms_norm_ref(x, weight, bias, residual=residual, eps=eps, prenorm=prenorm, upcast=True)


def rms_norm_gated(x, g, weight, bias, activation="swish", residual=None, prenorm=False, residual_in_fp32=False,
                   eps=1e-6):
    from fla.modules.norm.layernorm import rms_norm_ref

    if prenorm or residual is not None:
        raise NotImplementedError("fla's torch gated norm takes no residual.")
    y = rms_norm_ref(x.float(), weight, bias, eps=eps, upcast=True)
    gate = F.silu(g.float()) if activation in ("swish", "silu") else torch.sigmoid(g.float())
    return (y * gate).to(x.dtype)


def rotary_embedding(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     chunk_indices=None):
    """fla's ``rotary_embedding`` (x [B, T, H, D], cos/sin [L, R/2]): ``rotary_embedding_ref`` at the offset."""
    from fla.modules.rotary import rotary_embedding_ref

    no_varlen(cu_seqlens, {})
    if not isinstance(seqlen_offsets, int):
        raise NotImplementedError("fla's torch rotary path takes one integer offset for the whole batch.")
    T = x.shape[1]
    return rotary_embedding_ref(x, cos[seqlen_offsets:seqlen_offsets + T], sin[seqlen_offsets:seqlen_offsets + T],
                                interleaved=interleaved)
