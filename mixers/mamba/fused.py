"""The forward pass of mamba-ssm's ``Mamba`` (Mamba-1) layer, written for CPU: kernel ``fused`` of the mamba mixer.

The same maths and parameters as ``mamba_ssm.Mamba.forward`` (whose routed torch path, with
``selective_scan_ref``, is the mixer's reference), laid out time-major ([T, batch, channels]) from the input
projection to the output projection, the layout the scan works in (the package's path transposes between
[batch, channels, T] and [batch, T, channels] five times per layer). Between the projections there are two
autograd nodes, each one compiled loop forward and one backward (:mod:`mixers.mamba.kernel_c`):
:class:`mixers.common.short_conv.ConvSiLU` (the depthwise causal conv and its SiLU) and :class:`_Scan` (the step size's bias and
softplus, the recurrence, the skip ``D`` and the ``silu(z)`` gate). Where no C compiler is available, the same
maths runs in PyTorch (``F.conv1d`` and :mod:`mixers.mamba.kernel`'s recurrence, autograd around them).
A decode state in and out is the package's pair (the last ``d_conv`` conv inputs [batch, D, d_conv], the SSM
state [batch, D, N]), so prefill, continuation and training all take this path; single-token decode keeps the
package's own ``step``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def forward(m: nn.Module, x: torch.Tensor, conv_state: torch.Tensor | None, ssm_state: torch.Tensor | None,
            with_state: bool, neg: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``m`` (a ``mamba_ssm.Mamba``) on ``x`` [batch, T, d_model] from the given states (None: zeros). Returns the
    output and, when ``with_state``, the new conv and SSM states; ``neg``: the transition ``2 exp(dt A) - 1``
    (:func:`mixers.mamba.reference.transition`)."""
    xz = m.in_proj(x.transpose(0, 1)).float()  # [T, batch, 2 D], contiguous
    D = m.d_inner
    u, z = xz.split(D, dim=-1)  # split, not slicing: the backward is one cat, not two zero-filled copies
    new_conv = None
    if with_state:  # the last d_conv inputs of the conv, the package's [batch, D, d_conv] layout
        history = conv_state if conv_state is not None else u.new_zeros(u.shape[1], D, m.d_conv)
        new_conv = torch.cat([history.to(u.dtype), u.permute(1, 2, 0)], dim=-1)[..., -m.d_conv:]
    hist = None if conv_state is None else conv_state.float().contiguous()
    if _compiled(u):
        from mixers.common.short_conv import ConvSiLU

        u = ConvSiLU.apply(u, m.conv1d.weight, m.conv1d.bias, hist)
    else:
        u = _torch_conv_silu(m.conv1d, u, hist)
    dt, B, C = torch.split(m.x_proj(u), [m.dt_rank, m.d_state, m.d_state], dim=-1)
    delta = F.linear(dt, m.dt_proj.weight)  # the scan adds the bias
    out, last = scan(u, delta, m.dt_proj.bias, -torch.exp(m.A_log.float()), B, C, m.D, z, ssm_state,
                     with_state=with_state, neg=neg)
    # the module, on [batch, T, D] like every other kernel's: unit masks and the interpretability suite's
    # contribution capture hook its input and read the batch and time axes from it
    y = m.out_proj(out.transpose(0, 1).to(x.dtype))
    return y, new_conv, (None if last is None else last.to(x.dtype))


def _compiled(t: torch.Tensor) -> bool:
    """Whether the C loops run for ``t``: CPU tensors where the kernel could be built (else the PyTorch path, which
    also serves CUDA tensors)."""
    from mixers.common import short_conv
    from mixers.mamba import kernel_c

    return t.device.type == "cpu" and kernel_c.available() and short_conv.available()


def _torch_conv_silu(conv: nn.Conv1d, u: torch.Tensor, hist: torch.Tensor | None) -> torch.Tensor:
    """:class:`mixers.common.short_conv.ConvSiLU` in torch (no C compiler): ``u`` [T, batch, D], ``hist`` [batch, D, W] or None."""
    W = conv.weight.shape[-1]
    inputs = u.permute(1, 2, 0)
    window = F.pad(inputs, (W - 1, 0)) if hist is None else torch.cat([hist, inputs], dim=-1)[..., 1:]
    return F.silu(F.conv1d(window, conv.weight, conv.bias, groups=conv.groups)).permute(2, 0, 1)


def scan(u, delta, delta_bias, A, B, C, D, z, h0=None, with_state=False, neg=False):
    """``(C_t . h_t + D u_t) * silu(z_t)`` [T, batch, D] and, with ``with_state``, the last state [batch, D, N],
    all time-major: ``u``, ``delta`` (before bias and softplus), ``z`` [T, batch, D]; ``delta_bias``, ``D`` [D];
    ``A`` [D, N] (negative); ``B``, ``C`` [T, batch, N]; ``h0`` [batch, D, N] or None (zero). Computes in fp32."""
    u, delta, B, C = (t.float().contiguous() for t in (u, delta, B, C))
    A, D, delta_bias = A.float().contiguous(), D.float().contiguous(), delta_bias.float().contiguous()
    h0 = u.new_zeros(u.shape[1], A.shape[0], A.shape[1]) if h0 is None else h0.float().contiguous()
    if _compiled(u):
        z = z.float()
        if z.stride(-1) != 1 or z.stride(0) != z.shape[1] * z.stride(1):  # rows of a wider tensor are fine
            z = z.contiguous()
        out, last = _Scan.apply(u, delta, delta_bias, A, B, C, D, z, h0, neg)
    else:
        out, last = _torch_scan(u, delta, delta_bias, A, B, C, D, z.float(), h0, neg)
    return out, (last if with_state else None)


class _Scan(torch.autograd.Function):
    """The compiled scan (:mod:`mixers.mamba.kernel_c`): one node, forward and backward in C."""

    @staticmethod
    def forward(ctx, u, delta, delta_bias, A, B, C, D, z, h0, neg=False):
        from mixers.mamba import kernel_c

        out, last, (checkpoints, y_skip) = kernel_c.forward(u, delta, delta_bias, A, B, C, D, z, h0, neg)
        ctx.save_for_backward(u, delta, delta_bias, A, B, C, D, z, checkpoints, y_skip)
        ctx.neg = neg
        return out, last

    @staticmethod
    def backward(ctx, d_out, d_last):
        from mixers.mamba import kernel_c

        u, delta, delta_bias, A, B, C, D, z, checkpoints, y_skip = ctx.saved_tensors
        g_last = d_last.contiguous() if d_last is not None else u.new_zeros(u.shape[1], A.shape[0], A.shape[1])
        return (*kernel_c.backward(u, delta, delta_bias, A, B, C, D, z, (checkpoints, y_skip),
                                           d_out.contiguous(), g_last, ctx.neg), None)


def _torch_scan(u, delta, delta_bias, A, B, C, D, z, h0, neg=False):
    """Without a C compiler: :mod:`mixers.mamba.kernel`'s recurrence, the rest by autograd."""
    from mixers.mamba.kernel import _Scan as TorchScan
    from mixers.mamba.reference import transition

    dt = F.softplus(delta + delta_bias)
    y, last = TorchScan.apply(u, dt, A, B.unsqueeze(2), C.unsqueeze(2), neg)
    # that scan starts from zero; by linearity h0 adds C_t . (prod_{s<=t} a_s) h0, a_s the transition
    if neg:
        decay = torch.cumprod(transition(dt.unsqueeze(-1) * A, True), 0)  # [T, batch, D, N]
    else:
        decay = torch.exp(dt.cumsum(0).unsqueeze(-1) * A)
    y = y + torch.einsum("tbdn,bdn,tbn->tbd", decay, h0, C)
    last = last + decay[-1] * h0
    return (y + u * D) * F.silu(z), last
