"""A worked example: flash-linear-attention's GLA op wrapped as a mixbench mixer (``example-fla-gla``).

Gate it from the repository root (``--plugin`` finds modules in the working folder)::

    mixbench check example-fla-gla --preset tiny --plugin examples.fla_gla_mixer

and use it like any mixer: ``mixbench run --plugin examples.fla_gla_mixer --mixers example-fla-gla ...``.
docs/state_contract.md says what a decode state may be; this file is one answer.

The layer is a reduced ``fla.layers.GatedLinearAttention`` (q, k, v projections, fla's low-rank forget gate
``gk = logsigmoid(W2 W1 x) / 16``, an output projection; no short convolution, output gate or norm), and its
sequence op is fla's own ``fla.ops.gla.naive.naive_recurrent_gla``, per head ``h`` of key width ``K``::

    S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T        S: [K, V], gk_t <= 0 (a decay in (0, 1] per key channel)
    o_t = (K^-1/2 q_t)^T S_t

How fla's recurrent state maps onto the mixer contract (harness/mixer.py):

* fla's ops take ``initial_state`` and, with ``output_final_state=True``, return the final state
  ``[B, H, K, V]`` (float32). That tensor is the whole decode state: O(1) in the length, so
  ``state_size(T) = H * K * V`` floats per sequence whatever T (the board's ``state`` column sums this over
  the layers).
* The state is a dict ``{"recurrent_state": S}``, the key fla's own ``Cache`` uses: any pytree of tensors
  works (docs/state_contract.md). It stays float32 whatever the model's dtype, as fla keeps it.
* ``forward(x, None)`` (training) asks fla for no final state and returns ``None``; ``forward(x, state)``
  passes ``state["recurrent_state"]`` as ``initial_state`` and returns a new dict with the final state, which
  is how prefill and continuation work. ``step(x_t, state)`` is ``forward`` on a length-1 sequence.
* fla's op never writes into ``initial_state`` (it copies it into a fresh accumulator), and this wrapper builds
  a new dict each call: a state passed in is never modified.

fla is imported by the first constructor, not by this module, so ``mixbench mixers --plugin ...`` stays fast
(importing fla takes seconds: it loads its layers and models).

Kernels. There is one, ``naive`` (fla's pure-PyTorch recurrence; it runs on every device). fla's Triton
kernels (``fla.ops.gla.chunk_gla``, ``fused_recurrent_gla``) take the same arguments (q, k, v, gk as
``[B, T, H, K]``, ``initial_state``, ``output_final_state``) and return the same state; adding one means listing
it after ``naive`` in ``kernels`` only where it can run (a CUDA tensor and an importable Triton), because the
gate compares every kernel a layer lists with the first one, and ``default_kernel(device)`` picking it on CUDA.
``mixers/deltanet/layer.py`` does this for fla's DeltaNet layers. This example leaves it out: it was written and
checked on a machine without a GPU.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness import ConfigError, Mixer, register_mixer
from harness.values import option

#: fla's ``initializer_range``
INIT_STD = 0.02


@dataclass(frozen=True)
class FlaGLAConfig:
    """Options of ``fla.layers.GatedLinearAttention`` that this reduced layer keeps; the defaults are fla's."""

    num_heads: int = option(4, "heads (must divide the key and value widths)", min=1)
    expand_k: float = option(0.5, "key width = expand_k * d_model", gt=0)
    expand_v: float = option(1.0, "value width = expand_v * d_model", gt=0)
    gate_low_rank_dim: int = option(16, "rank of the forget-gate projection", min=1)
    gate_logit_normalizer: float = option(16.0, "logsigmoid(gate logits) is divided by this", gt=0)


@functools.cache
def naive_recurrent_gla():
    """fla's ``naive_recurrent_gla`` (imported once; fla warns on import when Triton has no GPU)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fla.ops.gla.naive import naive_recurrent_gla as op
    return op


@register_mixer("example-fla-gla", config=FlaGLAConfig)
class FlaGLAMixer(Mixer):
    """Gated linear attention through fla's naive recurrent op; the decode state is fla's final state."""

    version = 1
    kernels = ("naive",)
    length_extrapolation = True  # no positions: a decaying state means the same at any length

    def __init__(self, cfg: FlaGLAConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        key_dim, value_dim = int(d_model * cfg.expand_k), int(d_model * cfg.expand_v)
        if key_dim % cfg.num_heads or value_dim % cfg.num_heads or not key_dim or not value_dim:
            raise ConfigError(
                f"example-fla-gla: num_heads ({cfg.num_heads}) must divide the key width ({key_dim} = expand_k * "
                f"d_model) and the value width ({value_dim} = expand_v * d_model)."
            )
        self.num_heads = cfg.num_heads
        self.head_k, self.head_v = key_dim // cfg.num_heads, value_dim // cfg.num_heads
        self.q_proj = nn.Linear(d_model, key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, value_dim, bias=False)
        self.gk_proj = nn.Sequential(nn.Linear(d_model, cfg.gate_low_rank_dim, bias=False),
                                     nn.Linear(cfg.gate_low_rank_dim, key_dim, bias=True))
        self.o_proj = nn.Linear(value_dim, d_model, bias=False)
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.gk_proj[0], self.gk_proj[1]):
            nn.init.normal_(lin.weight, 0.0, INIT_STD)
        nn.init.zeros_(self.gk_proj[1].bias)
        nn.init.normal_(self.o_proj.weight, 0.0, INIT_STD / math.sqrt(2 * n_layers))
        self._op = naive_recurrent_gla()  # fail at build time, not at the first call, when fla is missing

    def package_versions(self) -> dict[str, str]:
        return {"flash-linear-attention": importlib.metadata.version("flash-linear-attention")}

    # ------------------------------------------------------------------ the contract
    def gla_inputs(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k, gk: [B, T, H, K]; v: [B, T, H, V] (fla's sequence-first layout)."""
        B, T, _ = x.shape
        H = self.num_heads
        q = self.q_proj(x).view(B, T, H, self.head_k)
        k = self.k_proj(x).view(B, T, H, self.head_k)
        v = self.v_proj(x).view(B, T, H, self.head_v)
        gk = (F.logsigmoid(self.gk_proj(x)) / self.cfg.gate_logit_normalizer).view(B, T, H, self.head_k)
        return q, k, v, gk

    def forward(self, x: torch.Tensor, state: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, Any]:
        B, T, _ = x.shape
        q, k, v, gk = self.gla_inputs(x)
        o, final = self._op(q, k, v, gk, initial_state=None if state is None else state["recurrent_state"],
                            output_final_state=state is not None)
        y = self.o_proj(o.reshape(B, T, self.num_heads * self.head_v))  # o comes back in x's dtype
        return y, (None if state is None else {"recurrent_state": final})

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        # float32 whatever ``dtype`` is: fla accumulates and returns the state in float32
        return {"recurrent_state": torch.zeros(batch_size, self.num_heads, self.head_k, self.head_v,
                                               device=device, dtype=torch.float32)}

    def step(self, x_t: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
        y, state = self.forward(x_t[:, None], state)
        return y[:, 0], state

    def state_size(self, seq_len: int) -> int:
        return self.num_heads * self.head_k * self.head_v
