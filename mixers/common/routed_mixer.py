"""The shared shell of mixers that wrap a third-party layer whose kernels are routed per call (mamba, deltanet).

* Kernels. A class lists every kernel it has (what ``mixbench mixers`` prints); an instance lists only those it
  can run where its parameters are now (:class:`DeviceKernels`): the package's CUDA/Triton kernel appears once the
  layer sits on a CUDA device (and, for Mamba-1, mamba-ssm was built with its CUDA extension). So the conformance
  gate, which runs on CPU, compares the portable kernels with the reference, and a CUDA kernel is checked against
  the reference by the parity test and ``benchmarks/gpu_parity.py`` on a GPU.
* Interventions. Units (channels or heads) are contiguous slices of the input of the layer's output projection;
  ``intervene(ids, "mask")`` zeroes them there through a forward pre-hook registered once at construction, a
  no-op while nothing is masked. Fused whole-layer CUDA paths skip the projection module, so subclasses take them
  only while :attr:`masking` is false.
* Provenance: :meth:`package_versions` reports the installed versions of :attr:`packages`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from harness.errors import ConfigError
from harness.mixer import Mixer


class DeviceKernels:
    """``Mixer.kernels`` of a routed mixer: its ``portable_kernels`` (reference first), then its ``cuda_kernels``,
    which an instance lists only while :meth:`RoutedMixer.cuda_kernels_usable` holds."""

    def __get__(self, obj: Any, owner: type) -> tuple[str, ...]:
        if obj is None or obj.cuda_kernels_usable():
            return owner.portable_kernels + owner.cuda_kernels
        return owner.portable_kernels


class RoutedMixer(Mixer):
    #: kernels that run on any device, the reference first
    portable_kernels: ClassVar[tuple[str, ...]] = ("reference",)
    #: kernels that run the package's own CUDA/Triton code
    cuda_kernels: ClassVar[tuple[str, ...]] = ()
    kernels = DeviceKernels()  # type: ignore[assignment]
    #: distributions whose code the mixer runs (recorded with results)
    packages: ClassVar[tuple[str, ...]] = ()
    #: dtype the CUDA kernels compute in when they cannot take fp32 (None: the input's)
    cuda_dtype: ClassVar[torch.dtype | None] = None
    intervention_modes = ("mask",)

    def __init__(self, cfg: Any, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        self._keep: torch.Tensor | None = None  # 1/0 per channel of the output projection's input

    # ------------------------------------------------------------------ kernels
    def cuda_kernels_usable(self) -> bool:
        param = next(self.parameters(), None)
        return param is not None and param.is_cuda and self.cuda_kernels_installed()

    def cuda_kernels_installed(self) -> bool:
        """Whether the package's CUDA kernels exist in this installation (overridden where a build may lack them)."""
        return True

    def set_kernel(self, kernel: str) -> None:
        if kernel in self.cuda_kernels and not self.cuda_kernels_usable():
            param = next(self.parameters())
            why = "this installation lacks them" if param.is_cuda else f"this layer is on {param.device}"
            raise ConfigError(
                f"{self.name}: kernel '{kernel}' needs CUDA tensors and the package's compiled kernels, but {why}; "
                f"move the model to a GPU first or choose one of {', '.join(self.kernels)}."
            )
        super().set_kernel(kernel)

    def _check_device(self, x: torch.Tensor) -> None:
        if self.kernel in self.cuda_kernels and not x.is_cuda:
            raise ConfigError(
                f"{self.name}: kernel '{self.kernel}' runs on CUDA tensors only, got {x.device}; after moving the "
                f"model call model.set_kernel(None, device) to pick the kernel for the new device."
            )

    def no_weight_decay(self) -> set[str]:
        """The matrices the package itself marks ``_no_weight_decay`` (Mamba-1's A_log); 1-D ones never decay."""
        return {n for n, p in self.named_parameters() if getattr(p, "_no_weight_decay", False) and p.ndim >= 2}

    def package_versions(self) -> dict[str, str]:
        from harness.kit import package_versions

        return package_versions(tuple(self.packages))

    # ------------------------------------------------------------------ interventions
    def output_projection(self) -> nn.Linear:
        raise NotImplementedError

    def _unit_width(self) -> int:
        """Channels of the output projection's input per unit."""
        raise NotImplementedError

    def _install_unit_mask(self) -> None:
        """Call once the wrapped layer exists."""
        self.output_projection().register_forward_pre_hook(self._mask_units)

    def _mask_units(self, module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...] | None:
        if self._keep is None:
            return None
        return (args[0] * self._keep.to(args[0].dtype),) + args[1:]

    @property
    def masking(self) -> bool:
        return self._keep is not None

    @contextlib.contextmanager
    def intervene(self, unit_ids: Sequence[int], mode: str) -> Iterator[None]:
        width = self._unit_width()
        n_units = self.output_projection().in_features // width
        ids = self._check_intervention(unit_ids, mode, n_units)
        keep = torch.ones(n_units, device=self.output_projection().weight.device)
        keep[ids] = 0.0
        keep = keep.repeat_interleave(width)
        previous = self._keep
        self._keep = keep if previous is None else previous * keep
        try:
            yield
        finally:
            self._keep = previous
