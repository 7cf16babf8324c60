"""Mamba-1 (``mamba``, the ProtoT paper's baseline) and Mamba-2 (``mamba2``) from mamba-ssm's own modules.

Each mixer holds one ``mamba_ssm.Mamba`` / ``mamba_ssm.Mamba2`` at the backbone width; the package is imported by
the first constructor (through :mod:`mixers.mamba.routing`, which makes it importable and routes its kernels),
so listing mixers stays fast. Parameter names and shapes are the package module's on every device.

Kernels (:class:`mixers.common.routed_mixer.DeviceKernels` lists the CUDA one only where it can run):

* ``mamba``: ``reference`` (``selective_scan_ref``, the package's definition; with ``allow_neg_eigval``
  :mod:`mixers.mamba.reference`'s loop), ``cpu-scan`` (:mod:`mixers.mamba.kernel`, the same maths step by step
  in PyTorch, in the package's layer), ``fused``
  (:mod:`mixers.mamba.fused`: the layer's forward written time-major, its conv and scan each one compiled loop
  from :mod:`mixers.mamba.kernel_c`; the default on CPU, and on a GPU whose mamba-ssm was built without its
  CUDA extension) and ``cuda`` (the compiled scan, and the fused ``mamba_inner_fn`` when causal-conv1d is installed).
* ``mamba2``: ``reference`` (the package's pure-torch SSD, ``ssd_minimal_discrete``), ``chunk``
  (:func:`mixers.mamba.kernel.ssd_chunked`: the same SSD chunked with a state loop, linear in the length; the
  default on CPU) and ``cuda`` (its Triton kernels).

Training calls the package module's own ``forward``. Decoding calls its own ``step`` with our state, so a decode
state is the package's pair: the last ``d_conv`` conv inputs and the SSM state (O(1) in the length). The package
forward cannot start from a non-zero state, so prefill/continuation (``forward(x, state)``) is written here with
the same parameters and the same routed scans: the conv reads the carried inputs, and the scan's response to the
carried SSM state is added in closed form for Mamba-1 (its scans have no initial-state argument) or passed as
``initial_states`` for Mamba-2.

Initialisation is the package's, except ``out_proj``, which the backbone initialises by its one rule for every
mixer (N(0, 0.02 / sqrt(2 * n_layers)), the scale ``MambaLMHeadModel`` rescales to with an MLP in every block;
docs/protocol.md). Units are Mamba-1 channels / Mamba-2 heads with their decay per step
at the bias step size; the recorder gets the SSM state's norm per unit after each stateful call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import ConfigError
from harness.mixer import FlopCount, Unit
from harness.recording import record, recording
from harness.registry import register_mixer
from harness.values import option
from mixers.mamba import fused, routing
from mixers.common.routing import selected
from mixers.common.routed_mixer import RoutedMixer
from mixers.mamba.kernel import CHECKPOINT, selective_scan_cpu
from mixers.mamba.reference import selective_scan_loop, transition

PACKAGES = ("mamba-ssm", "causal-conv1d", "triton")


@dataclass(frozen=True)
class MambaConfig:
    """``mamba_ssm.Mamba`` options; the defaults are the package's (they suit every preset width)."""

    d_state: int = option(16, "SSM state size per channel", min=1)
    d_conv: int = option(4, "width of the causal conv before the SSM", min=1)
    expand: int = option(2, "inner width = expand * d_model", min=1)
    dt_rank: int = option(0, min=0)  # 0 = the package's "auto": ceil(d_model / 16)
    allow_neg_eigval: bool = option(
        False, "transition 2 exp(dt A) - 1 in (-1, 1), not exp(dt A) in (0, 1) (Grazzi et al. 2025); no CUDA kernel"
    )


@dataclass(frozen=True)
class Mamba2Config:
    """``mamba_ssm.Mamba2`` options; the defaults are the package's. Its d_state of 128 and head size of 64 fit
    even the tiny preset (d_model 64: two heads); widths where expand * d_model is not a multiple of headdim
    need a smaller headdim."""

    d_state: int = option(128, "SSM state size per head", min=1)
    d_conv: int = option(4, "width of the causal conv before the SSM", min=1)
    expand: int = option(2, "inner width = expand * d_model", min=1)
    headdim: int = option(64, "channels per head (expand * d_model must be a multiple)", min=1)
    ngroups: int = option(1, "groups sharing B and C", min=1)
    chunk_size: int = option(
        256, "the CUDA kernels' chunk; the torch path uses its own block (any gives the same result)", min=1
    )


class _MambaBase(RoutedMixer):
    """What both Mamba mixers share: the wrapped module ``self.mamba``, routing, state handling."""

    cuda_kernels = ("cuda",)
    packages = PACKAGES
    mamba: nn.Module

    def __init__(self, cfg: Any, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        self.routing = routing.install()

    def _finish_init(self, n_layers: int) -> None:
        # out_proj: initialised by the backbone (output_projection), which also gives MambaLMHeadModel's GPT-2
        # style scale for two residual branches per block
        self._install_unit_mask()

    def default_kernel(self, device: torch.device) -> str:
        if device.type == "cuda" and self.cuda_kernels_installed() and not self._neg:
            return "cuda"
        return self.portable_kernels[-1]  # the fastest portable kernel

    def output_projection(self) -> nn.Linear:
        return self.mamba.out_proj

    @property
    def _neg(self) -> bool:
        return bool(getattr(self.cfg, "allow_neg_eigval", False))

    def set_kernel(self, kernel: str) -> None:
        if self._neg and kernel in self.cuda_kernels:
            raise ConfigError(
                f"{self.name}: allow_neg_eigval=true has no CUDA kernel (mamba-ssm's compiled scan computes "
                f"exp(dt A) only); choose one of {', '.join(self.portable_kernels)}, which also run on a GPU."
            )
        super().set_kernel(kernel)

    def forward(self, x: torch.Tensor, state: dict[str, torch.Tensor] | None = None):
        self._check_device(x)
        with selected(self.kernel):
            if state is None:
                if self._own_forward():
                    return self._continue(x, None)[0], None
                self._choose_fused_path()
                return self.mamba(x), None
            y, state = self._continue(x, state)
        self._record(state)
        return y, state

    def _own_forward(self) -> bool:
        """Whether the selected kernel is mixbench's own layer forward rather than the package module's."""
        return False

    def step(self, x_t: torch.Tensor, state: dict[str, torch.Tensor]):
        self._check_device(x_t)
        conv, ssm = state["conv"].clone(), state["ssm"].clone()  # the package updates them in place
        if self._neg:
            return self._step_neg(x_t, conv, ssm)
        with selected(self.kernel):
            y, conv, ssm = self.mamba.step(x_t.unsqueeze(1), conv, ssm)
        state = {"conv": conv, "ssm": ssm}
        self._record(state)
        return y.squeeze(1), state

    def _record(self, state: dict[str, torch.Tensor]) -> None:
        if recording():
            record(self.layer_idx, "ssm_state_norm", state["ssm"].flatten(2).norm(dim=-1).unsqueeze(1))

    def _conv_with_history(self, inputs: torch.Tensor, history: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The package's causal conv + SiLU on ``inputs`` (batch, channels, T) continuing from ``history`` (its
        last d_conv inputs, the package's conv state layout); returns the activations and the new history."""
        conv = self.mamba.conv1d
        window = torch.cat([history.to(inputs.dtype), inputs], dim=-1)
        out = F.silu(F.conv1d(window[..., 1:], conv.weight, conv.bias, groups=conv.groups))
        return out, window[..., -history.shape[-1]:].to(history.dtype)

    def _choose_fused_path(self) -> None:
        raise NotImplementedError

    def _continue(self, x: torch.Tensor, state: dict[str, torch.Tensor]):
        raise NotImplementedError


@register_mixer("mamba", config=MambaConfig)
class MambaMixer(_MambaBase):
    quickstart = True  # one of the paper's four mixers: trained and scored by `mixbench quickstart`
    portable_kernels = ("reference", "cpu-scan", "fused")

    def __init__(self, cfg: MambaConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        from mamba_ssm import Mamba

        self.mamba = Mamba(
            d_model, d_state=cfg.d_state, d_conv=cfg.d_conv, expand=cfg.expand,
            dt_rank=cfg.dt_rank or "auto", use_fast_path=False,
        )
        self._finish_init(n_layers)

    def cuda_kernels_installed(self) -> bool:
        return self.routing.selective_scan_cuda

    def chunk_lengths(self) -> tuple[int, ...]:
        from mixers.mamba.kernel_c import SEGMENT

        return (SEGMENT, CHECKPOINT)  # the compiled and the PyTorch scan's checkpoint segments

    def _choose_fused_path(self) -> None:
        # mamba_inner_fn (needs causal-conv1d) applies out_proj inside the kernel, past the unit-mask hook
        self.mamba.use_fast_path = self.kernel == "cuda" and self.routing.causal_conv1d and not self.masking

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        m = self.mamba
        return {
            "conv": torch.zeros(batch_size, m.d_inner, m.d_conv, device=device, dtype=dtype),
            "ssm": torch.zeros(batch_size, m.d_inner, m.d_state, device=device, dtype=dtype),
        }

    def state_size(self, seq_len: int) -> int:
        return self.mamba.d_inner * (self.mamba.d_conv + self.mamba.d_state)

    def flops_per_token(self, context: int) -> FlopCount:
        """Products, with E = expand * d, N = d_state, R = dt_rank: ``in_proj`` ``4 d E``, the conv ``2 E d_conv``,
        ``x_proj`` ``2 E (R + 2 N)``, ``dt_proj`` ``2 R E``, ``out_proj`` ``2 E d``; the selective scan as
        ``selective_scan_ref`` computes it, per channel and state float 8 (the discretised decay, a product and an
        exponential; the input ``dt B u``, two products; the state update, a multiply-add; the read ``C h``, a
        multiply-add) and per channel 6 (dt's bias and softplus, the skip ``D u``, the gate ``silu(z)``):
        ``E (8 N + 6)`` (docs/flops.md)."""
        m = self.mamba
        E, N, R, d = m.d_inner, m.d_state, m.dt_rank, self.d_model
        products = 4 * d * E + 2 * E * m.d_conv + 2 * E * (R + 2 * N) + 2 * R * E + 2 * E * d
        return FlopCount.training(products + E * (8 * N + 6))

    def _own_forward(self) -> bool:
        return self.kernel == "fused" or self._neg

    def _continue(self, x: torch.Tensor, state: dict[str, torch.Tensor] | None):
        from mamba_ssm.modules import mamba_simple

        neg = self._neg
        if self.kernel == "fused":
            conv, ssm = (None, None) if state is None else (state["conv"], state["ssm"])
            y, conv, ssm = fused.forward(self.mamba, x, conv, ssm, with_state=state is not None, neg=neg)
            if state is None:
                return y, None
            return y, {"conv": conv.to(state["conv"].dtype), "ssm": ssm.to(state["ssm"].dtype)}
        m = self.mamba
        if state is None:  # allow_neg_eigval: the package's forward cannot take the option, so this path serves
            state = self.init_state(x.shape[0], x.device, x.dtype)
        u, z = m.in_proj(x).transpose(1, 2).chunk(2, dim=1)  # (batch, d_inner, T) each
        u, conv_state = self._conv_with_history(u, state["conv"])
        dt, B, C = torch.split(m.x_proj(u.transpose(1, 2)), [m.dt_rank, m.d_state, m.d_state], dim=-1)
        dt = F.linear(dt, m.dt_proj.weight).transpose(1, 2)  # the scan adds the bias
        B, C = B.transpose(1, 2).contiguous(), C.transpose(1, 2).contiguous()
        A = -torch.exp(m.A_log.float())
        bias = m.dt_proj.bias.float()
        h0 = state["ssm"].float()
        if neg and self.kernel == "reference":  # the definition, step by step from h0
            y, last = selective_scan_loop(u, dt, A, B, C, m.D, z, bias, h0, neg=True)
            return m.out_proj(y.to(x.dtype).transpose(1, 2)), {"conv": conv_state,
                                                              "ssm": last.to(state["ssm"].dtype)}
        if neg:
            y, last = selective_scan_cpu(u, dt, A, B, C, m.D.float(), z=None, delta_bias=bias, delta_softplus=True,
                                         return_last_state=True, neg=True)
        else:
            y, last = mamba_simple.selective_scan_fn(
                u, dt, A, B, C, m.D.float(), z=None, delta_bias=bias, delta_softplus=True, return_last_state=True
            )
        # The scan starts from zero. By linearity the carried state h0 adds C_t . (prod_{s<=t} a_s h0), a_s the
        # transition: exp(A * sum_{s<=t} dt_s), or the running product of 2 exp(A dt_s) - 1 with allow_neg_eigval
        steps = F.softplus(dt.float() + bias[:, None])
        if neg:
            decay = torch.cumprod(transition(A[None, :, :, None] * steps[:, :, None, :], True), -1)
        else:
            decay = torch.exp(A[None, :, :, None] * steps.cumsum(-1)[:, :, None, :])
        y = y + torch.einsum("bdnt,bdn,bnt->bdt", decay, h0, C.float()).to(y.dtype)
        last = last + decay[..., -1] * h0
        y = y * F.silu(z)
        out = m.out_proj(y.transpose(1, 2))
        return out, {"conv": conv_state, "ssm": last.to(state["ssm"].dtype)}

    def _step_neg(self, x_t: torch.Tensor, conv: torch.Tensor, ssm: torch.Tensor):
        """One decode step with the transition ``2 exp(dt A) - 1`` (the package's ``step`` computes ``exp(dt A)``):
        its torch step otherwise, on copies of the caller's state."""
        m = self.mamba
        u, z = m.in_proj(x_t).chunk(2, dim=-1)  # (batch, d_inner)
        conv = torch.cat([conv[..., 1:], u.unsqueeze(-1).to(conv.dtype)], dim=-1)
        w = m.conv1d.weight.squeeze(1)
        u = F.silu((conv.to(w.dtype) * w).sum(-1) + (m.conv1d.bias if m.conv1d.bias is not None else 0))
        dt, B, C = torch.split(m.x_proj(u), [m.dt_rank, m.d_state, m.d_state], dim=-1)
        dt = F.softplus(F.linear(dt, m.dt_proj.weight).float() + m.dt_proj.bias.float())
        a = transition(dt[..., None] * -torch.exp(m.A_log.float()), True)
        h = a * ssm.float() + (dt * u.float())[..., None] * B.float()[:, None, :]
        y = (h * C.float()[:, None, :]).sum(-1) + m.D.float() * u.float()
        y = (y * F.silu(z.float())).to(x_t.dtype)
        state = {"conv": conv, "ssm": h.to(ssm.dtype)}
        self._record(state)
        return m.out_proj(y), state

    def units(self) -> list[Unit]:
        m = self.mamba
        dt = F.softplus(m.dt_proj.bias.detach().float())  # step size at zero input
        decay = transition(-torch.exp(m.A_log.detach().float()) * dt[:, None], self._neg).mean(-1)
        return [_unit(self.layer_idx, c, "channel", dt[c].item(), decay[c].item()) for c in range(m.d_inner)]

    def _unit_width(self) -> int:
        return 1


@register_mixer("mamba2", config=Mamba2Config)
class Mamba2Mixer(_MambaBase):
    portable_kernels = ("reference", "chunk")

    def __init__(self, cfg: Mamba2Config, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        d_inner = cfg.expand * d_model
        if d_inner % cfg.headdim:
            raise ConfigError(
                f"mamba2: expand * d_model ({d_inner}) must be a multiple of headdim ({cfg.headdim}); "
                f"choose a headdim that divides it."
            )
        if (d_inner // cfg.headdim) % cfg.ngroups:
            raise ConfigError(f"mamba2: ngroups ({cfg.ngroups}) must divide the {d_inner // cfg.headdim} heads.")
        from mamba_ssm import Mamba2

        self.mamba = Mamba2(
            d_model, d_state=cfg.d_state, d_conv=cfg.d_conv, expand=cfg.expand, headdim=cfg.headdim,
            ngroups=cfg.ngroups, chunk_size=cfg.chunk_size, use_mem_eff_path=False,
        )
        self._finish_init(n_layers)

    def chunk_lengths(self) -> tuple[int, ...]:
        from mixers.mamba.kernel import SSD_CHUNK

        return (SSD_CHUNK, routing.CPU_SSD_BLOCK)

    def _choose_fused_path(self) -> None:
        # mamba_split_conv1d_scan_combined (needs causal-conv1d) applies out_proj inside, past the unit-mask hook
        self.mamba.use_mem_eff_path = self.kernel == "cuda" and self.routing.causal_conv1d and not self.masking

    @property
    def _conv_dim(self) -> int:
        return self.mamba.conv1d.weight.shape[0]

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        m = self.mamba
        return {
            "conv": torch.zeros(batch_size, self._conv_dim, m.d_conv, device=device, dtype=dtype),
            "ssm": torch.zeros(batch_size, m.nheads, m.headdim, m.d_state, device=device, dtype=dtype),
        }

    def state_size(self, seq_len: int) -> int:
        m = self.mamba
        return self._conv_dim * m.d_conv + m.nheads * m.headdim * m.d_state

    def flops_per_token(self, context: int) -> FlopCount:
        """Products, with E = expand * d, H heads of P = headdim, G groups of N = d_state: ``in_proj``
        ``2 d (2 E + 2 G N + H)``, the conv ``2 (E + 2 G N) d_conv``, ``out_proj`` ``2 E d``; the SSD as the
        reference (``ssd_minimal_discrete``) computes it in chunks of L = 64 (the length padded to a multiple),
        per padded position and head: the chunk's ``C B^T`` and its product with the inputs ``2 L (N + P)``, the
        chunk states and their read ``4 P N``, and elementwise the decays (``3 L + N + 2 P + 4``); per sequence
        and head the recurrence over the c chunks, ``(c + 1)^2 (2 P N + 2)`` (docs/flops.md). The CUDA kernel
        chunks by ``chunk_size`` (256) and spends more on the in-chunk terms."""
        m = self.mamba
        E, H, P, N, G, d = m.d_ssm, m.nheads, m.headdim, m.d_state, m.ngroups, self.d_model
        products = 2 * d * (2 * E + 2 * G * N + H) + 2 * (E + 2 * G * N) * m.d_conv + 2 * E * d
        L = routing.CPU_SSD_BLOCK
        chunks = -(-context // L)
        per_position = 2 * L * (N + P) + 4 * P * N + 3 * L + N + 2 * P + 4
        per_sequence = (chunks + 1) ** 2 * (2 * P * N + 2)
        return FlopCount.training(products + H * (chunks * L * per_position + per_sequence) / context)

    def _continue(self, x: torch.Tensor, state: dict[str, torch.Tensor]):
        from mamba_ssm.modules import mamba2

        m = self.mamba
        batch, T, _ = x.shape
        groups = m.ngroups * m.d_state
        z, xBC, dt = torch.split(m.in_proj(x), [m.d_ssm, m.d_ssm + 2 * groups, m.nheads], dim=-1)
        xBC, conv_state = self._conv_with_history(xBC.transpose(1, 2), state["conv"])
        u, B, C = torch.split(xBC.transpose(1, 2), [m.d_ssm, groups, groups], dim=-1)
        y, last = mamba2.mamba_chunk_scan_combined(
            u.reshape(batch, T, m.nheads, m.headdim), dt, -torch.exp(m.A_log.float()),
            B.reshape(batch, T, m.ngroups, m.d_state), C.reshape(batch, T, m.ngroups, m.d_state),
            chunk_size=m.chunk_size, D=m.D, dt_bias=m.dt_bias, dt_softplus=True,
            initial_states=state["ssm"], return_final_states=True,
        )
        y = m.norm(y.reshape(batch, T, m.d_ssm), z)
        return m.out_proj(y), {"conv": conv_state, "ssm": last.to(state["ssm"].dtype)}

    def units(self) -> list[Unit]:
        m = self.mamba
        dt = F.softplus(m.dt_bias.detach().float())
        decay = torch.exp(-torch.exp(m.A_log.detach().float()) * dt)
        return [_unit(self.layer_idx, h, "head", dt[h].item(), decay[h].item()) for h in range(m.nheads)]

    def _unit_width(self) -> int:
        return self.mamba.headdim


def _unit(layer: int, index: int, kind: str, dt: float, decay: float) -> Unit:
    """A unit with its step size and state decay per step at zero input, and the half-life that decay implies."""
    half_life = math.log(0.5) / math.log(decay) if 0.0 < decay < 1.0 else math.inf
    return Unit(layer, index, kind, {"dt": dt, "decay": decay, "half_life": half_life})
