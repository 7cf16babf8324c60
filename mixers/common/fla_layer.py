"""The shell of a mixer that is one flash-linear-attention layer (docs/fla_mixers.md).

A subclass builds ``self.layer`` (an ``fla.layers`` module at the backbone width, ``layer_idx=0``), routes that
layer's sequence ops for CPU in its own package, and declares its decode state; this shell does the rest the
same way for every such mixer:

* **Calls.** ``forward`` calls the layer inside ``routing.selected(self.kernel)`` (so the routed ops run the
  selected kernel) with a :class:`OneLayerCache` when there is a state; fla's CUDA kernels run under the
  subclass's :attr:`cuda_dtype` autocast. Results are cast back to the input's dtype and a state keeps its own.
* **State.** The decode state is the dict of entries fla's own cache keeps for the layer (``recurrent_state``,
  ``conv_state``...), as :meth:`empty_cache` builds them (by default zeros: the recurrent state of
  :attr:`_recurrent_shape` and the q, k, v short convolutions' caches; empty where the layer creates them on its
  first call), plus ``seen`` (an int64 count of the tokens before,
  for layers that read positions, :attr:`tracks_position`). States are never modified in place: ``step``
  clones them first, since fla's CUDA decode kernels write caches in place.
* **Initialisation.** fla's model recipe (``FLAPreTrainedModel._init_weights``: N(0, 0.02) for every linear and
  convolution weight, zero biases) unless the subclass overrides :meth:`init_weights` (RWKV-7 has its own);
  ``o_proj`` is then drawn again by the backbone's one rule for every mixer (docs/protocol.md).
* **Units.** Heads: contiguous slices of ``o_proj``'s input of :meth:`_unit_width` channels, masked there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from harness.mixer import KernelBenchmark, Unit
from mixers.common import fla_modules, routing
from mixers.common.routed_mixer import RoutedMixer

#: fla's initializer_range
INIT_STD = 0.02


class OneLayerCache:
    """The part of fla's ``Cache`` a layer uses (``len``, ``[idx]``, ``update``, ``get_seq_length``), for one
    layer at index 0: the entries of its last ``update`` and the number of tokens seen before this call."""

    def __init__(self, entries: dict[str, Any] | None, seen: int):
        self.entries = entries
        self.seen = seen

    def __len__(self) -> int:
        return 0 if self.entries is None else 1

    def __getitem__(self, layer_idx: int) -> dict[str, Any]:
        if self.entries is None:
            raise KeyError(layer_idx)
        return self.entries

    def update(self, layer_idx: int = 0, offset: int | None = 1, cache_kwargs: Any = None, **entries: Any):
        """Keep the entries given (fla's ``Cache.update`` keeps omitted ones too); the token count is the
        shell's ``seen``, so ``offset`` is not needed here."""
        merged = dict(self.entries or {})
        merged.update({k: v for k, v in entries.items() if v is not None})
        self.entries = merged
        return merged

    def get_seq_length(self, layer_idx: int | None = 0, cache_position: Any = None) -> int:
        return self.seen


def _cast(entry: Any, like: Any) -> Any:
    """``entry`` (a tensor or a tuple of them, as fla returns it) in the dtype of ``like``."""
    if isinstance(entry, torch.Tensor):
        return entry.to(like.dtype) if isinstance(like, torch.Tensor) else entry
    if isinstance(entry, (tuple, list)):
        likes = like if isinstance(like, (tuple, list)) else [None] * len(entry)
        return tuple(_cast(e, l) for e, l in zip(entry, likes))
    return entry


def _clone(entry: Any) -> Any:
    if isinstance(entry, torch.Tensor):
        return entry.clone()
    if isinstance(entry, (tuple, list)):
        return tuple(_clone(e) for e in entry)
    return entry


class FlaLayerMixer(RoutedMixer):
    """Base of the mixers that wrap one ``fla.layers`` module (see the module docstring)."""

    portable_kernels: ClassVar[tuple[str, ...]] = ("recurrent", "chunk")
    cuda_kernels: ClassVar[tuple[str, ...]] = ("triton",)
    packages = ("flash-linear-attention", "fla-core", "triton")
    #: the ``fla.layers`` class this mixer wraps (``fla:<it>`` then runs on CPU through this mixer's routes)
    fla_layer: ClassVar[str] = ""
    #: the paper the layer comes from (``mixbench mixers`` prints it)
    paper: ClassVar[str] = ""
    #: the layer reads absolute positions (RetNet's rotary embedding): the state counts the tokens seen
    tracks_position: ClassVar[bool] = False
    layer: nn.Module

    def __init__(self, cfg: Any, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        fla_modules.install()
        self.install_routes()

    # ------------------------------------------------------------------ what a subclass provides
    def install_routes(self) -> None:
        """Route the layer's own sequence ops (idempotent); called before the layer is built."""
        raise NotImplementedError

    @property
    def _recurrent_shape(self) -> tuple[int, ...]:
        """The recurrent state per sequence, in the layer's own layout (for the default :meth:`empty_cache`)."""
        raise NotImplementedError

    @property
    def _conv_dims(self) -> tuple[int, ...]:
        """Channels of the q, k and v short convolutions (used when ``cfg.use_short_conv``)."""
        return self.layer.key_dim, self.layer.key_dim, self.layer.value_dim

    def _chunk_benchmark(self, batch: int, seq_len: int, tensor: Callable[..., torch.Tensor], gen: torch.Generator,
                         device: torch.device) -> tuple[Callable[[], torch.Tensor], float, str] | None:
        """What :meth:`kernel_benchmark` times: mixbench's chunked kernel's forward call on inputs made with
        ``tensor(*shape, fn=...)`` (``fn`` of a standard normal draw from ``gen``, a leaf on ``device``) returning
        the output [B, T, H, head_v_dim], its forward FLOPs and a label; None where the mixer has no such kernel."""
        return None

    def empty_cache(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
        """The layer's cache entries before any token, named as fla names them: ``recurrent_state`` and, with short
        convolutions, ``conv_state``, the q, k, v caches [B, channels, conv_size]; all zeros."""
        cache: dict[str, Any] = {
            "recurrent_state": torch.zeros(batch_size, *self._recurrent_shape, device=device, dtype=dtype)}
        if self.cfg.use_short_conv:
            cache["conv_state"] = tuple(torch.zeros(batch_size, d, self.cfg.conv_size, device=device, dtype=dtype)
                                        for d in self._conv_dims)
        return cache

    def state_size(self, seq_len: int) -> int:
        """The floats of :meth:`empty_cache`'s default entries (O(1) in the length)."""
        conv = sum(self._conv_dims) * self.cfg.conv_size if self.cfg.use_short_conv else 0
        return math.prod(self._recurrent_shape) + conv

    def init_weights(self) -> None:
        for module in self.layer.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d)):
                nn.init.normal_(module.weight, 0.0, INIT_STD)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    # ------------------------------------------------------------------ shell
    def finish_init(self) -> None:
        """Call once ``self.layer`` exists: initialise it and install the unit mask."""
        self.init_weights()
        self._install_unit_mask()

    def default_kernel(self, device: torch.device) -> str:
        return "triton" if device.type == "cuda" else "chunk"

    def kernel_benchmark(self, batch: int, seq_len: int, device: torch.device) -> KernelBenchmark | None:
        """Forward + backward of kernel ``chunk`` (:meth:`_chunk_benchmark`) on seeded inputs built outside the
        clock, with 3x the forward pass's FLOPs."""
        if self.kernel != "chunk":
            return None
        gen = torch.Generator().manual_seed(0)

        def tensor(*shape: int, fn: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> torch.Tensor:
            return fn(torch.randn(*shape, generator=gen)).to(device).requires_grad_(True)

        bench = self._chunk_benchmark(batch, seq_len, tensor, gen, device)
        if bench is None:
            return None
        forward, flops, label = bench
        grad = torch.randn(batch, seq_len, self.layer.num_heads, self.layer.head_v_dim, generator=gen).to(device)

        def run() -> None:
            forward().backward(grad)

        return KernelBenchmark(run, 3 * flops, f"{label}, forward + backward")

    def output_projection(self) -> nn.Linear:
        return self.layer.o_proj

    def _unit_width(self) -> int:
        return self.layer.head_v_dim

    def units(self) -> list[Unit]:
        n_heads = self.output_projection().in_features // self._unit_width()
        return [Unit(self.layer_idx, h, "head", {"head_v_dim": float(self._unit_width())}) for h in range(n_heads)]

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
        state = dict(self.empty_cache(batch_size, device, dtype))
        if self.tracks_position:
            state["seen"] = torch.zeros((), dtype=torch.long, device=device)
        return state

    def forward(self, x: torch.Tensor, state: dict[str, Any] | None = None):
        self._check_device(x)
        cache = None
        if state is not None:
            entries = {k: v for k, v in state.items() if k != "seen"}
            cache = OneLayerCache(entries or None, int(state["seen"]) if "seen" in state else 0)
        on_cuda_kernel = self.kernel in self.cuda_kernels
        with routing.selected(self.kernel), torch.autocast("cuda", self.cuda_dtype or torch.float32,
                                                           enabled=on_cuda_kernel and self.cuda_dtype is not None):
            out = self.layer(x, past_key_values=cache, use_cache=state is not None)
        y = out[0].to(x.dtype)
        if cache is None:
            return y, None
        return y, self._next_state(state, cache.entries or {}, x.shape[1])

    def _next_state(self, state: dict[str, Any], entries: dict[str, Any], n_tokens: int) -> dict[str, Any]:
        """The state after ``n_tokens`` more: the layer's new cache ``entries`` in the dtypes of ``state``'s (the
        kernels may compute in another, bf16 on CUDA), and ``seen`` advanced."""
        new_state = {k: _cast(v, state.get(k)) for k, v in entries.items()}
        if "seen" in state:
            new_state["seen"] = state["seen"] + n_tokens
        return new_state

    def step(self, x_t: torch.Tensor, state: dict[str, Any]):
        y, state = self.forward(x_t.unsqueeze(1), {k: _clone(v) for k, v in state.items()})
        return y.squeeze(1), state
