"""The mixer contract (docs/DESIGN.md §2).

A mixer maps ``x: [B, T, D] -> y: [B, T, D]`` causally. Every built-in and third-party mixer subclasses
:class:`Mixer`; the backbone, the conformance gate and every suite only use the methods below.

Decisions the design leaves open, fixed here:

* ``forward(x, state=None)`` returns ``(y, new_state)``. With ``state=None`` (training) a mixer may return
  ``None`` as the new state to skip the cost of building it; with a state (prefill or continuation) it must
  return the state after the last token of ``x``. ``forward(x[:, t:], forward(x[:, :t], s0)[1])`` equals
  ``forward(x, s0)`` on the positions ``t:``, which is how generation prefills.
* Decode states are pytrees of tensors (dicts, lists, tuples, dataclasses). :func:`state_floats` counts the
  floats a state holds so the gate can compare it with :meth:`Mixer.state_size`; a state object may define
  ``num_floats()`` when it preallocates more than it uses (a KV cache with spare capacity).
* Padding: batches are right-padded. Because every mixer is causal, pads after a sequence cannot change its
  earlier outputs, so no mask is part of the contract.
* Kernels are implementation choices, not part of a run's identity: the same weights run under every kernel,
  ``reference_kernel`` is the definition the others are checked against, and ``default_kernel(device)``
  picks the fast one per device. The chosen kernel is recorded with every result.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from harness.errors import ConfigError


@dataclass(frozen=True)
class KernelBenchmark:
    """A mixer's sequence kernel alone on synthetic inputs: what the throughput suite compares with the
    machine's matmul peak. ``run()`` does one forward+backward (or forward, per ``label``) of ``flops``."""

    run: Callable[[], Any]
    flops: float
    label: str


@dataclass(frozen=True)
class FlopCount:
    """Floating-point operations per token, forward and backward (docs/flops.md): 2 per multiply-add of every
    matrix product and convolution, 1 per elementwise operation inside a sequence kernel's definition."""

    forward: float
    backward: float

    @staticmethod
    def training(forward: float) -> FlopCount:
        """``forward`` with the usual backward of twice as much (a gradient for each operand of a product)."""
        return FlopCount(float(forward), 2.0 * forward)

    @property
    def total(self) -> float:
        """Forward + backward: one training step's FLOPs per token."""
        return self.forward + self.backward

    def __add__(self, other: FlopCount) -> FlopCount:
        return FlopCount(self.forward + other.forward, self.backward + other.backward)

    def __mul__(self, k: float) -> FlopCount:
        return FlopCount(self.forward * k, self.backward * k)

    __rmul__ = __mul__


@dataclass(frozen=True)
class Unit:
    """One interpretable unit of a mixer: a ProtoT prototype, an attention head, an SSM channel group."""

    layer: int
    index: int
    kind: str
    attrs: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"L{self.layer} {self.kind[0].upper()}{self.index}"


INTERVENTION_MODES = ("write-mask", "read-mask", "reinit", "mask")


class Mixer(nn.Module):
    """Base class of every token mixer. Subclasses are registered with ``@register_mixer``."""

    #: set by ``register_mixer``
    name: ClassVar[str] = ""
    #: bump when a change alters the mixer's numbers; part of the model identity (with a fingerprint of the
    #: mixer's source), so every model of a changed mixer is retrained and rescored
    version: ClassVar[int] = 1
    #: trained and scored by ``mixbench quickstart`` (the built-in paper mixers say yes)
    quickstart: ClassVar[bool] = False
    #: every kernel this mixer can run, the reference (definition) first
    kernels: ClassVar[tuple[str, ...]] = ("reference",)
    #: whether positions beyond the training context are meaningful (no learned or rotary position limit)
    length_extrapolation: ClassVar[bool] = True
    #: modes ``intervene`` accepts; empty when the mixer has no interventions
    intervention_modes: ClassVar[tuple[str, ...]] = ()
    #: a control (docs/controls.md): trained and scored beside the mixers of every grid, shown below the ranked
    #: rows, never ranked; a column in which no mixer beats the controls does not vote
    control: ClassVar[bool] = False
    #: no output depends on another position (the gate verifies it): the model is context-free, and the board
    #: marks every mixer cell that is not better than such a control
    context_free: ClassVar[bool] = False
    #: a model of this mixer has a depth that is a multiple of it (a hybrid's period, docs/hybrids.md); a suite
    #: that builds its own models rounds its depth up to it
    depth_multiple: ClassVar[int] = 1

    def __init__(self, cfg: Any, d_model: int, layer_idx: int, n_layers: int):
        super().__init__()
        if d_model <= 0:
            raise ConfigError(f"d_model must be positive, got {d_model}.")
        self.cfg = cfg
        self.d_model = d_model
        self.layer_idx = layer_idx
        self.n_layers = n_layers
        self.kernel = self.kernels[0]

    # ------------------------------------------------------------------ kernels
    @property
    def reference_kernel(self) -> str:
        return self.kernels[0]

    def default_kernel(self, device: torch.device) -> str:
        """The kernel to use on ``device`` when the user asks for none. Override to prefer a fast one."""
        return self.kernels[0]

    def set_kernel(self, kernel: str) -> None:
        """Use ``kernel``; ``reference`` names every mixer's reference kernel (its first), whatever its own name
        for it (attention's ``naive``, DeltaNet's and ProtoT's ``recurrent``), so one word means the definition."""
        kernel = self.kernels[0] if kernel == "reference" else kernel
        if kernel not in self.kernels:
            raise ConfigError(
                f"mixer '{self.name}' has no kernel '{kernel}'; choose one of {', '.join(self.kernels)}."
            )
        self.kernel = kernel

    def package_versions(self) -> dict[str, str]:
        """Versions of third-party packages whose code this mixer runs (recorded with results)."""
        return {}

    # ------------------------------------------------------------------ contract
    def forward(self, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> Any:
        raise NotImplementedError

    def step(self, x_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """One token ``x_t: [B, D]``; returns ``(y_t: [B, D], state)``."""
        raise NotImplementedError

    def state_size(self, seq_len: int) -> int:
        """Floats of decode state per sequence after ``seq_len`` tokens."""
        raise NotImplementedError

    def units(self) -> list[Unit]:
        return []

    def output_projection(self) -> nn.Linear | None:
        """The linear map that writes this mixer's output into the residual stream (attention's ``o_proj``,
        Mamba's ``out_proj``). The backbone initialises it, one rule for every mixer (docs/protocol.md, "One
        backbone rule"), so no mixer starts its branch louder than another. ``None`` (the default) leaves the
        mixer's own initialisation in place, and the model's manifest says so (``out_init: mixer``)."""
        return None

    def chunk_lengths(self) -> tuple[int, ...]:
        """Chunk lengths of the kernels this layer runs, so the conformance gate tests sequences that straddle
        every chunk boundary (it always adds 16, 32 and 64). Override when a kernel chunks at other lengths."""
        return ()

    def flops_per_token(self, context: int) -> FlopCount:
        """This layer's FLOPs per token (:class:`FlopCount`: its projections and its sequence kernel), averaged
        over the positions of a training sequence of ``context`` tokens; training records them (docs/flops.md).

        Every built-in mixer overrides this with its own formula, checked against a measured count. This
        default, for plugins that do not, is ``2`` FLOPs forward per weight of each matrix or convolution
        parameter (the old ``6 N`` rule, restricted to the layer): it ignores the sequence kernel (attention's
        scores, a scan's state updates), so it undercounts, but training and the board keep working."""
        weights = sum(p.numel() for p in self.parameters() if p.dim() >= 2)
        return FlopCount.training(2.0 * weights)

    def kernel_benchmark(self, batch: int, seq_len: int, device: torch.device) -> KernelBenchmark | None:
        """The mixer's core kernel on synthetic inputs of this shape, with its FLOP count, so the throughput suite
        can report the fraction of the matmul peak it reaches; ``None`` when the mixer has no kernel of its own
        to measure (the default)."""
        return None

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of matrix parameters that must not be weight-decayed.

        1-D parameters (norms, biases, scalars) are never decayed; list the rest here (ProtoT prototypes).
        """
        return set()

    @contextlib.contextmanager
    def intervene(self, unit_ids: Sequence[int], mode: str) -> Iterator[None]:
        raise ConfigError(f"mixer '{self.name}' does not support interventions.")
        yield  # pragma: no cover

    def _check_intervention(self, unit_ids: Sequence[int], mode: str, n_units: int) -> list[int]:
        if mode not in self.intervention_modes:
            raise ConfigError(
                f"mixer '{self.name}' supports interventions {', '.join(self.intervention_modes)}, not '{mode}'."
            )
        ids = [int(u) for u in unit_ids]
        bad = [u for u in ids if not 0 <= u < n_units]
        if bad:
            raise ConfigError(f"unit ids {bad} are out of range for {n_units} units in layer {self.layer_idx}.")
        return ids

    @classmethod
    def capabilities(cls) -> list[str]:
        caps = ["forward", "step"]
        if cls.units is not Mixer.units:
            caps.append("units")
        if cls.intervention_modes:
            caps.append("intervene(" + "/".join(cls.intervention_modes) + ")")
        if cls.length_extrapolation:
            caps.append("length-extrapolation")
        return caps


def state_tensors(state: Any) -> list[torch.Tensor]:
    """Every tensor of a decode state (a pytree of tensors: dicts, lists, tuples, dataclasses), in a fixed order."""
    if isinstance(state, torch.Tensor):
        return [state]
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return [t for f in dataclasses.fields(state) for t in state_tensors(getattr(state, f.name))]
    if isinstance(state, dict):
        return [t for v in state.values() for t in state_tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in state_tensors(v)]
    return []


def state_floats(state: Any) -> int:
    """Number of floats held by a decode state (a pytree of tensors)."""
    if state is None:
        return 0
    if hasattr(state, "num_floats"):
        return int(state.num_floats())
    if isinstance(state, torch.Tensor):
        return state.numel() if state.is_floating_point() else 0
    if dataclasses.is_dataclass(state):
        return sum(state_floats(getattr(state, f.name)) for f in dataclasses.fields(state))
    if isinstance(state, dict):
        return sum(state_floats(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_floats(v) for v in state)
    return 0
