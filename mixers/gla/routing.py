"""Routes the sequence ops of fla 0.6's ``GatedLinearAttention`` and ``MultiScaleRetention`` layers per call.

:func:`install` (idempotent) replaces the op names those layers import (``fla.layers.gla.chunk_gla`` ...,
``fla.layers.multiscale_retention.chunk_retention`` ...) by :func:`mixers.common.fla_modules.routed`
dispatchers: fla's Triton op for kernel "triton", else

* kernel "recurrent" (the reference): fla's own naive recurrences, ``naive_recurrent_gla`` and, for retention,
  ``naive_recurrent_simple_gla`` with RetNet's fixed decay per head ``log(1 - 2^(-5 - h))`` (the value fla's
  retention ops pass to their simple-GLA kernels);
* kernel "chunk": :func:`mixers.common.ops.gla.chunk_gla` for calls of several tokens, the recurrence for one.

Both layers store the state as fla's ops do: GLA value-first ([B, H, V, K], ``state_v_first=True``), retention
key-first ([B, H, K, V]); the naive ops and ours take [B, H, K, V], so GLA's is transposed in and out here.
"""

from __future__ import annotations

import math

import torch

from mixers.common.fla_modules import no_varlen, quiet_import, routed
from mixers.common.ops.gla import chunk_gla
from mixers.common.routing import current

_INSTALLED = False


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    gla_layer, retention_layer = quiet_import("fla.layers.gla", "fla.layers.multiscale_retention")

    for name in ("chunk_gla", "fused_chunk_gla", "fused_recurrent_gla"):
        setattr(gla_layer, name, routed(getattr(gla_layer, name), gated_linear_attention, "q"))
    for name in ("chunk_retention", "fused_chunk_retention", "fused_recurrent_retention"):
        setattr(retention_layer, name, routed(getattr(retention_layer, name), retention, "q"))
    _INSTALLED = True


def retention_log_decay(num_heads: int, device: torch.device | None = None) -> torch.Tensor:
    """RetNet's per-head log-decay ``log(1 - 2^(-5 - h))`` (fla's retention ops; Sun et al. 2023, §2.2)."""
    return (1 - 2.0 ** (-5.0 - torch.arange(num_heads, dtype=torch.float, device=device))).log()


def gated_linear_attention(q, k, v, g=None, gk=None, scale=None, initial_state=None, output_final_state=False,
                           state_v_first=False, cu_seqlens=None, reverse=False, gv=None, **unsupported):
    """``chunk_gla`` / ``fused_chunk_gla`` (gate ``g``) and ``fused_recurrent_gla`` (gate ``gk``) in torch."""
    no_varlen(cu_seqlens, {**unsupported, "reverse": reverse or None, "gv": gv})
    gate = g if g is not None else gk
    if initial_state is not None and state_v_first:
        initial_state = initial_state.transpose(-1, -2)
    o, final = _gla(q, k, v, gate, scale, initial_state, output_final_state)
    if final is not None and state_v_first:
        final = final.transpose(-1, -2)
    return o, final


def retention(q, k, v, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None, **unsupported):
    """fla's retention ops in torch: GLA with RetNet's fixed decay per head."""
    no_varlen(cu_seqlens, unsupported)
    return _gla(q, k, v, retention_log_decay(q.shape[2], q.device), scale, initial_state, output_final_state)


def _gla(q, k, v, gate, scale, initial_state, output_final_state):
    """GLA [B, T, H, *] by the selected kernel; ``gate`` [B, T, H, K], or [H] for one decay per head."""
    K = q.shape[-1]
    if current() == "chunk" and q.shape[1] > 1:
        return chunk_gla(q, k, v, gate, scale=scale, initial_state=initial_state,
                         output_final_state=output_final_state)
    if scale is not None and not math.isclose(scale, K**-0.5):
        q = q * (scale * K**0.5)  # the naive ops scale q by K^-0.5 themselves
    if gate.dim() == 1:
        from fla.ops.simple_gla.naive import naive_recurrent_simple_gla

        per_head = gate.view(1, 1, -1).expand(*q.shape[:3])
        o, final = naive_recurrent_simple_gla(q, k, v, per_head, initial_state=initial_state,
                                              output_final_state=output_final_state)
    else:
        from fla.ops.gla.naive import naive_recurrent_gla

        o, final = naive_recurrent_gla(q, k, v, gate, initial_state=initial_state,
                                       output_final_state=output_final_state)
    return o.to(v.dtype), final
