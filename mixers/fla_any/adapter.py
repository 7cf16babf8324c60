"""``--mixer fla:<LayerClass>``: any ``fla.layers`` layer as a mixer, on CUDA (docs/fla_mixers.md, "Any fla layer").

flash-linear-attention 0.6 ships 40+ layers; mixbench has built-in mixers, with CPU kernels and exact FLOP
counts, for a few of them. This adapter reaches the rest on a GPU: ``fla:HGRN2Attention`` builds
``fla.layers.HGRN2Attention(hidden_size=d_model, layer_idx=0, **options)`` with the options given as a JSON object
(``--mixer-config 'options={"num_heads": 4}'``), and goes through the conformance gate like any mixer.

* **Kernels.** ``triton`` (fla's own) needs CUDA tensors. On a CPU the layer runs only when a built-in mixer
  routes its Triton calls to torch (:data:`BUILTIN_LAYERS`): then its portable kernels are the built-in's
  (reference first), and otherwise construction fails naming the layers that can run there.
* **State.** fla layers create their cache on the first call, so the state starts empty (no entries, zero
  floats) and holds whatever the layer's ``Cache.update`` stored afterwards; ``state_size(T)`` is measured by a
  no-grad prefill of ``T`` tokens (the adapter cannot know the layout of every layer), so the gate's state-size
  check holds by construction and the decode, prefill and causality checks are what test the layer.
* **Cost.** FLOPs fall back to :meth:`harness.mixer.Mixer.flops_per_token` (2 per weight, forward), which
  undercounts sequence kernels; use a built-in mixer where one exists.
* **Units.** Heads, when the layer has ``o_proj`` and ``num_heads`` (masked at ``o_proj``'s input).

The name resolver is registered with :meth:`harness.registry.Registry.add_resolver` when ``mixers`` is imported.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from harness.errors import ConfigError
from harness.mixer import state_floats
from harness.values import option
from mixers.common.fla_layer import FlaLayerMixer
from mixers.common.fla_modules import quiet_import

PREFIX = "fla"


@dataclass(frozen=True)
class FlaAnyConfig:
    """Keyword arguments of the fla layer beyond ``hidden_size`` and ``layer_idx``."""

    options: str = option("{}", "a JSON object of the layer's keyword arguments, e.g. {\"num_heads\": 4}")

    def layer_options(self) -> dict[str, Any]:
        try:
            values = json.loads(self.options)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"options must be a JSON object of the layer's arguments: {exc}") from None
        if not isinstance(values, dict):
            raise ConfigError(f"options must be a JSON object, got {self.options!r}.")
        reserved = {"hidden_size", "layer_idx"} & set(values)
        if reserved:
            raise ConfigError(f"options cannot set {', '.join(sorted(reserved))}: the backbone sets them.")
        return values


def builtin_layers() -> dict[str, type]:
    """fla layer class name -> the built-in mixer that routes its Triton calls on CPU: a registered class that
    names it as its ``fla_layer`` and has ``install_routes()`` (the :class:`FlaLayerMixer` protocol)."""
    from harness.registry import MIXERS

    return {e.cls.fla_layer: e.cls for e in MIXERS.entries()
            if getattr(e.cls, "fla_layer", "") and hasattr(e.cls, "install_routes")
            and not issubclass(e.cls, FlaAnyMixer)}


@functools.lru_cache(maxsize=None)
def fla_layer_class(name: str) -> type:
    (layers,) = quiet_import("fla.layers")
    cls = getattr(layers, name, None)
    if not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
        known = sorted(n for n in dir(layers) if isinstance(getattr(layers, n), type))
        raise ConfigError(f"fla.layers has no layer '{name}'; its layers are {', '.join(known)}.")
    return cls


class FlaAnyMixer(FlaLayerMixer):
    """One fla layer by class name (see the module docstring); subclassed per name by :func:`resolve`."""

    fla_layer: ClassVar[str] = ""
    #: the built-in mixer whose routes let the layer run on CPU, if any
    cpu_twin: ClassVar[type | None] = None
    portable_kernels: ClassVar[tuple[str, ...]] = ()
    tracks_position = True  # layers with attention or rotary read the cache's token count

    def __init__(self, cfg: FlaAnyConfig, d_model: int, layer_idx: int, n_layers: int):
        twin = self.cpu_twin
        if twin is None and not torch.cuda.is_available():
            runnable = ", ".join(f"fla:{n} (or the built-in '{c.name}')" for n, c in sorted(builtin_layers().items()))
            raise ConfigError(
                f"fla:{self.fla_layer} runs only on CUDA (fla's Triton kernels) and this machine has no GPU; on a "
                f"CPU the fla layers whose kernels mixbench routes to torch can run: {runnable}."
            )
        super().__init__(cfg, d_model, layer_idx, n_layers)
        try:
            self.layer = fla_layer_class(self.fla_layer)(hidden_size=d_model, layer_idx=0, **cfg.layer_options())
        except (TypeError, AssertionError, ValueError) as exc:
            raise ConfigError(f"fla:{self.fla_layer} rejected its arguments: {exc}") from None
        self.finish_init()

    def install_routes(self) -> None:
        if self.cpu_twin is not None:
            self.cpu_twin.install_routes(self)  # the twin's routes are module-level and idempotent

    def finish_init(self) -> None:
        self.init_weights()
        if self._has_heads:
            self._install_unit_mask()

    def _unit_width(self) -> int:
        return self.layer.o_proj.in_features // self.layer.num_heads

    @property
    def _has_heads(self) -> bool:
        return hasattr(self.layer, "o_proj") and hasattr(self.layer, "num_heads")

    def units(self):
        return super().units() if self._has_heads else []

    def intervene(self, unit_ids, mode):
        if not self._has_heads:
            raise ConfigError(f"fla:{self.fla_layer} has no o_proj with num_heads: no head units to mask.")
        return super().intervene(unit_ids, mode)

    def chunk_lengths(self) -> tuple[int, ...]:
        return self.cpu_twin.chunk_lengths(self) if self.cpu_twin is not None else (64,)

    def default_kernel(self, device: torch.device) -> str:
        if device.type == "cuda" or self.cpu_twin is None:
            return "triton"
        return self.cpu_twin.default_kernel(self, device)

    def empty_cache(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
        return {}

    def state_size(self, seq_len: int) -> int:
        """Measured: the floats the layer's cache holds after a no-grad prefill of ``seq_len`` tokens."""
        if seq_len == 0:
            return 0
        param = next(self.parameters())
        with torch.no_grad():
            _, state = self.forward(torch.zeros(1, seq_len, self.d_model, device=param.device, dtype=param.dtype),
                                    self.init_state(1, param.device, param.dtype))
        return state_floats(state)


def resolve(name: str) -> tuple[type[FlaAnyMixer], type]:
    """The mixer class for ``fla:<LayerClass>`` (built once per name) and its config class."""
    layer_cls = fla_layer_class(name)
    twin = builtin_layers().get(name)
    attrs: dict[str, Any] = {
        "fla_layer": name,
        "cpu_twin": twin,
        "paper": getattr(twin, "paper", "") or f"fla.layers.{name} (flash-linear-attention)",
        "__doc__": f"fla.layers.{name} through the generic fla adapter ({layer_cls.__module__}).",
        "__module__": __name__,
    }
    if twin is not None:
        attrs["portable_kernels"] = twin.portable_kernels
        attrs["length_extrapolation"] = twin.length_extrapolation
    return type(f"Fla{name}", (FlaAnyMixer,), attrs), FlaAnyConfig
