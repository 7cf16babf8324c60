"""The forward pass of fla's DeltaNet and GatedDeltaNet layers, written for CPU: kernel ``chunk`` of the mixers.

The same maths and the same parameters as ``fla.layers.DeltaNet.forward`` / ``GatedDeltaNet.forward`` (whose
routed torch path is the mixers' reference kernel), in fewer and larger operations, since on CPU a layer's time
goes to the number of tensor passes and copies rather than to arithmetic (docs/cpu_kernels.md):

* q, k and v come from one matrix product (the three weight matrices concatenated) and one depthwise causal
  convolution + SiLU over all their channels (the compiled loop of :mod:`mixers.common.short_conv` where a C
  compiler is available, else ``F.conv1d``), instead of three of each;
* q and k are l2-normalised per head as fla's kernels do in-kernel (``x / sqrt(|x|^2 + 1e-6)``), and the output
  norm is an RMSNorm per head: both one fused pass each way (:func:`harness.model.backbone_kernels.rms_norm`);
* the delta rule is :func:`mixers.deltanet.kernel.chunk_delta_rule` in fla's own [B, T, H, K] layout, with a
  state carried in and out, so training, prefill and decode all take this path;
* the output norm is fla's RMSNorm or gated RMSNorm over each head, then ``o_proj`` (called as the module, so the
  mixer's unit-mask hook applies).

Conv state layout is the layer's cache: per q, k and v, the last ``conv_size`` inputs, [B, channels, W].
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.kit import rms_norm

#: eps of fla's in-kernel l2 norm (``fla.modules.l2norm``)
L2_EPS = 1e-6


def forward(layer: nn.Module, x: torch.Tensor, recurrent: torch.Tensor | None, conv: tuple[torch.Tensor, ...] | None,
            with_state: bool) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
    """``layer`` (an fla DeltaNet or GatedDeltaNet) on ``x`` [B, T, D], continuing from ``recurrent`` (the layer's
    state layout: [B, H, K, V], GatedDeltaNet [B, H, V, K]) and ``conv`` (None: zeros). Returns the output and, when
    ``with_state``, the new recurrent and conv states."""
    from mixers.deltanet.kernel import chunk_delta_rule

    gated = hasattr(layer, "A_log")
    B, T, _ = x.shape
    H, K, V = layer.num_heads, layer.head_k_dim, layer.head_v_dim
    weight = torch.cat([layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight])
    qkv = F.linear(x, weight)
    new_conv = None
    if layer.use_short_conv:
        qkv, new_conv = _short_conv(layer, qkv, conv, with_state)
    else:
        qkv = F.silu(qkv)
    q, k, v = qkv.split([layer.key_dim, layer.key_dim, layer.value_dim], dim=-1)
    q, k = _l2norm(q.reshape(B, T, H, K)), _l2norm(k.reshape(B, T, H, K))
    v = v.reshape(B, T, H, V)
    if gated:
        beta = layer.b_proj(x).float().sigmoid()
        g = -layer.A_log.float().exp() * F.softplus(layer.a_proj(x).float() + layer.dt_bias.float())
    else:
        beta = layer.b_proj(x).float().sigmoid() if layer.use_beta else x.new_ones(B, T, H, dtype=torch.float32)
        g = None
    if layer.allow_neg_eigval:
        beta = beta * 2.0
    if recurrent is not None and gated:  # the gated layer stores its state value-first
        recurrent = recurrent.transpose(-1, -2)
    o, final = chunk_delta_rule(q, k, v, beta, g, scale=K**-0.5, initial_state=recurrent,
                                output_final_state=with_state)
    if final is not None and gated:
        final = final.transpose(-1, -2)
    o = _output_norm(layer, o, x).reshape(B, T, H * V)
    return layer.o_proj(o), final, new_conv


def _l2norm(t: torch.Tensor) -> torch.Tensor:
    """fla's in-kernel l2 norm ``t / sqrt(|t|^2 + 1e-6)`` as the backbone's fused RMSNorm, which is the same
    function: ``t / sqrt(|t|^2 + e) = (t / sqrt(mean(t^2) + e / D)) / sqrt(D)``. One pass each way instead of
    autograd's five."""
    D = t.shape[-1]
    return rms_norm(t.float(), t.new_full((D,), D**-0.5, dtype=torch.float32), L2_EPS / D).to(t.dtype)


def _short_conv(layer: nn.Module, qkv: torch.Tensor, conv: tuple[torch.Tensor, ...] | None, with_state: bool):
    """The q, k and v ShortConvolutions (depthwise, causal, SiLU) as one convolution over their channels: the
    compiled loop of :mod:`mixers.mamba.kernel_c` (one pass forward, one backward) where it is available."""
    convs = (layer.q_conv1d, layer.k_conv1d, layer.v_conv1d)
    weight = torch.cat([c.weight for c in convs])  # [channels, 1, W]
    bias = torch.cat([c.bias for c in convs]) if convs[0].bias is not None else None
    W = weight.shape[-1]
    history = torch.cat(conv, dim=1).to(qkv.dtype) if conv is not None else None
    new = None
    if with_state:
        if history is None:
            history = qkv.new_zeros(qkv.shape[0], weight.shape[0], W)
        window = torch.cat([history, qkv.transpose(1, 2)], dim=-1)
        new = tuple(window[..., -W:].split([c.weight.shape[0] for c in convs], dim=1))
    if _compiled(qkv):
        from mixers.common.short_conv import ConvSiLU

        hist = None if history is None else history.float().contiguous()
        return ConvSiLU.apply(qkv.float().transpose(0, 1), weight, bias, hist, True).transpose(0, 1), new
    inputs = qkv.transpose(1, 2)  # [B, channels, T]
    if history is None:
        y = F.conv1d(F.pad(inputs, (W - 1, 0)), weight, bias, groups=weight.shape[0])
    else:
        y = F.conv1d(torch.cat([history, inputs], dim=-1)[..., 1:], weight, bias, groups=weight.shape[0])
    return F.silu(y).transpose(1, 2), new


def _compiled(t: torch.Tensor) -> bool:
    """Whether the compiled conv of :mod:`mixers.common.short_conv` runs for ``t`` (fp32 CPU tensors where it
    could be built; else ``F.conv1d``)."""
    from mixers.common import short_conv

    return t.device.type == "cpu" and t.dtype == torch.float32 and short_conv.available()


def _output_norm(layer: nn.Module, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """fla's ``o_norm`` per head: RMSNorm, or RMSNorm gated by ``g_proj(x)`` (swish or sigmoid)."""
    norm = layer.o_norm
    of = o.float()
    weight = norm.weight.float() if norm.weight is not None else of.new_ones(of.shape[-1])
    y = rms_norm(of, weight, norm.eps)
    if getattr(norm, "bias", None) is not None:
        y = y + norm.bias.float()
    if layer.use_gate:
        gate = layer.g_proj(x).reshape(o.shape).float()
        y = y * (torch.sigmoid(gate) if norm.activation == "sigmoid" else F.silu(gate))
    return y.to(o.dtype)


def state_tuple(state: dict[str, Any] | None) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
    """The recurrent and conv parts of a mixer state, fla's cache entries (None when there is no state)."""
    if state is None:
        return None, None
    return state["recurrent_state"], state.get("conv_state")
