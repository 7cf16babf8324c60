"""Makes mamba-ssm 2.3.x run on any device: its kernels, routed per call (docs/cpu_kernels.md, "The packages on a
machine without CUDA").

On a machine without nvcc, mamba-ssm installs as a pure-Python wheel with no compiled ``selective_scan_cuda``,
which ``mamba_ssm/__init__`` imports unconditionally; its Triton kernels and the optional ``causal_conv1d``
extension only run on CUDA tensors. :func:`install` (idempotent, before first use):

1. puts an empty stand-in module at ``sys.modules["selective_scan_cuda"]`` only when importing the real one fails,
   so a compiled extension that is present is never shadowed;
2. replaces the module-level kernel names the package's ``Mamba`` / ``Mamba2`` modules call by
   :func:`mixers.common.routing.route` dispatchers. The package kernel runs for kernel "cuda" (or, outside a mixer, for
   CUDA tensors); otherwise the package's own pure-torch code does:

   =========================================  ============================================================
   package name                               torch path
   =========================================  ============================================================
   ``mamba_simple.selective_scan_fn``         ``selective_scan_ref`` (kernel "reference") or our
                                              :func:`selective_scan_cpu` (same maths, much faster; kernel
                                              "fused" bypasses the package's forward: mixers/mamba/fused.py)
   ``mamba2.mamba_chunk_scan_combined``       ``ssd_minimal_discrete`` (the SSD paper's listing; stable, and
                                              it carries states; kernel "reference") or our
                                              :func:`mixers.mamba.kernel.ssd_chunked` (same maths, linear in T)
   ``layernorm_gated.rmsnorm_fn``             ``layernorm_gated.rms_norm_ref``
   ``selective_state_update`` (decode)        ``selective_state_update_ref``
   ``causal_conv1d_fn`` / ``_update``         depthwise ``F.conv1d`` / the package's own rolling update,
   (only where causal-conv1d is installed)    as in its code path for a missing causal-conv1d
   =========================================  ============================================================

The modules and their parameters are untouched, so one checkpoint serves both paths. Fused whole-layer paths
(``mamba_inner_fn``, ``mamba_split_conv1d_scan_combined``) are chosen by the mixer per call, only for "cuda".
Caveat from DEPENDENCIES.md §4: with the stand-in present, HF transformers' Mamba models in the same process
think mamba-ssm's CUDA kernels exist; mixbench does not use them.
"""

from __future__ import annotations

import sys
import types
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mixers.common.routing import current, route
from mixers.mamba.kernel import selective_scan_cpu

#: kernels that run mamba-ssm's own CUDA/Triton code
PACKAGE_KERNELS = frozenset({"cuda"})
#: block length of the pure-torch SSD: any length gives the same result (the chunked form is exact); 32-128 are
#: equally fast on CPU, well ahead of 16
CPU_SSD_BLOCK = 64


@dataclass(frozen=True)
class MambaRouting:
    """What :func:`install` found."""

    selective_scan_cuda: bool  # the compiled Mamba-1 scan is importable (needs a CUDA build of mamba-ssm)
    causal_conv1d: bool  # the causal-conv1d CUDA package is importable (enables the fused paths)


_INSTALLED: MambaRouting | None = None


def install() -> MambaRouting:
    global _INSTALLED
    if _INSTALLED is not None:
        return _INSTALLED
    try:
        import selective_scan_cuda  # noqa: F401
        has_scan_extension = True
    except ImportError:
        stand_in = types.ModuleType("selective_scan_cuda")
        stand_in.__doc__ = "mixbench stand-in: mamba-ssm was built without its CUDA extension"
        sys.modules["selective_scan_cuda"] = stand_in
        has_scan_extension = False

    with warnings.catch_warnings():  # import-time DeprecationWarnings of mamba-ssm's GPU-only dependencies
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        from mamba_ssm.modules import mamba2, mamba_simple
        from mamba_ssm.ops.triton import layernorm_gated
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update_ref

    mamba_simple.selective_scan_fn = route(
        mamba_simple.selective_scan_fn if has_scan_extension else None, _selective_scan,
        probe="u", package_kernels=PACKAGE_KERNELS,
    )
    mamba2.mamba_chunk_scan_combined = route(
        mamba2.mamba_chunk_scan_combined, _ssd_reference, probe="x", package_kernels=PACKAGE_KERNELS
    )
    layernorm_gated.rmsnorm_fn = route(
        layernorm_gated.rmsnorm_fn, layernorm_gated.rms_norm_ref, probe="x", package_kernels=PACKAGE_KERNELS
    )
    for module in (mamba_simple, mamba2):
        if module.selective_state_update is not None:  # None when Triton is missing: the package's torch step
            module.selective_state_update = route(
                module.selective_state_update, selective_state_update_ref,
                probe="state", package_kernels=PACKAGE_KERNELS,
            )
        if module.causal_conv1d_fn is not None:  # None without causal-conv1d: the package's own torch conv
            module.causal_conv1d_fn = route(
                module.causal_conv1d_fn, _causal_conv1d, probe="x", package_kernels=PACKAGE_KERNELS
            )
            module.causal_conv1d_update = route(
                module.causal_conv1d_update, _causal_conv1d_update, probe="x", package_kernels=PACKAGE_KERNELS
            )
    _INSTALLED = MambaRouting(has_scan_extension, mamba_simple.causal_conv1d_fn is not None)
    return _INSTALLED


def _selective_scan(*args, **kwargs):
    """The Mamba-1 scan in torch: the package's definition for kernel "reference", else the fast equal one."""
    from mamba_ssm.ops import selective_scan_interface

    scan = selective_scan_interface.selective_scan_ref if current() == "reference" else selective_scan_cpu
    return scan(*args, **kwargs)


def _ssd_reference(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
                   cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False,
                   return_varlen_states=False):
    """``mamba_chunk_scan_combined`` (its signature, no varlen) through ``ssd_minimal_discrete``, or under kernel
    "chunk" through :func:`mixers.mamba.kernel.ssd_chunked` (groups broadcast, not repeated per head).

    That is the SSD paper's listing: it takes an initial state, returns the final one, and masks its segment sums
    with -inf before the exponential. (``ssd_chunk_scan_combined_ref`` has no state arguments and exponentiates
    unmasked segment sums, whose gradient is inf * 0 = NaN once a chunk's decay passes e^88.)
    """
    from mamba_ssm.modules.ssd_minimal import ssd_minimal_discrete

    if seq_idx is not None or cu_seqlens is not None or return_varlen_states:
        raise NotImplementedError("Mamba2's torch path has no variable-length (seq_idx / cu_seqlens) support.")
    if tuple(dt_limit) != (0.0, float("inf")):
        raise NotImplementedError("Mamba2's torch path does not clamp dt (dt_limit).")
    T, H = x.shape[1], x.shape[2]
    dt = dt.float()
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    if dt_softplus:
        dt = F.softplus(dt)
    X = x.float() * dt[..., None]  # both take discretised inputs: x dt and A dt
    A_dt = A.float() * dt
    if current() == "chunk":
        from mixers.mamba.kernel import ssd_chunked

        y, final = ssd_chunked(X, A_dt, B, C, initial_states)
    else:
        heads_per_group = H // B.shape[2]  # ssd_minimal takes per-head B and C
        B_h = B.float().repeat_interleave(heads_per_group, dim=2)
        C_h = C.float().repeat_interleave(heads_per_group, dim=2)
        pad = (-T) % CPU_SSD_BLOCK  # zero input and zero log-decay: padded steps leave the state as it is
        if pad:
            X, B_h, C_h = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (X, B_h, C_h))
            A_dt = F.pad(A_dt, (0, 0, 0, pad))
        h0 = initial_states.float()[:, None] if initial_states is not None else None
        y, final = ssd_minimal_discrete(X, A_dt, B_h, C_h, CPU_SSD_BLOCK, initial_states=h0)
        y = y[:, :T]
    if D is not None:
        y = y + x.float() * (D.float()[:, None] if D.dim() == 1 else D.float())
    if z is not None:
        y = y * F.silu(z.float())
    y = y.to(x.dtype)
    return (y, final.to(x.dtype)) if return_final_states else y


def _causal_conv1d(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                   final_states_out=None, activation=None):
    """causal-conv1d's ``causal_conv1d_fn`` in torch: x (batch, dim, T), weight (dim, width)."""
    if seq_idx is not None or initial_states is not None or return_final_states:
        raise NotImplementedError("the torch causal conv takes no seq_idx or states.")
    y = F.conv1d(x, weight.unsqueeze(1), bias, padding=weight.shape[1] - 1, groups=x.shape[1])[..., : x.shape[-1]]
    return F.silu(y) if activation in ("silu", "swish") else y


def _causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                          conv_state_indices=None):
    """causal-conv1d's one-token update in torch: shifts ``conv_state`` (batch, dim, width) in place, as the
    kernel does, and returns the output (batch, dim)."""
    if cache_seqlens is not None or conv_state_indices is not None:
        raise NotImplementedError("the torch conv update takes no cache_seqlens or conv_state_indices.")
    conv_state.copy_(torch.roll(conv_state, shifts=-1, dims=-1))
    conv_state[:, :, -1] = x
    y = (conv_state * weight).sum(-1)
    if bias is not None:
        y = y + bias
    return (F.silu(y) if activation in ("silu", "swish") else y).to(x.dtype)
