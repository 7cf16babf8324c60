"""RWKV-7 "Goose" (``rwkv7``) from flash-linear-attention's own ``RWKV7Attention`` layer (the time mixing).

RWKV-7 (Peng et al., 2025) keeps per head a matrix state ``S`` [K, V] updated by a diagonal-plus-low-rank
transition, a generalised delta rule with a per-channel decay and an in-context learning rate:

    S_t = (diag(exp(w_t)) - kk_t (kk_t a_t)^T) S_{t-1} + k_t v_t^T,        o_t = S_t^T r_t

with the decay ``w_t = -exp(-0.5) sigmoid(LoRA_w(x))`` per channel, ``kk`` the l2-normalised ``k * k_k`` per head,
``a_t = sigmoid(LoRA_a(x))`` and ``k`` replaced by ``k (1 + (a - 1) k_a)``; every input is a token-shift
interpolation of this token and the previous one. The output is group-normed per head, corrected by
``(r k r_k).sum v`` and gated by ``LoRA_g``. The mixer is one ``fla.layers.RWKV7Attention`` at the backbone width
(:class:`FlaLayerMixer` does the calls and the state); its Triton calls are routed per call by
:mod:`mixers.rwkv7.routing`. Kernels:

* ``recurrent`` — the reference: fla's naive DPLR recurrence (``dplr_recurrence``), token by token;
* ``chunk`` — the default off CUDA: :mod:`mixers.rwkv7.kernel`, mixbench's chunked form of the same recurrence
  (batched [C, C] products and one triangular solve per chunk, a short loop over chunks for the state, autograd's
  backward); every call's first token, and so a decode step, runs the recurrence in the reference's order;
* ``triton`` — fla's Triton kernels, under bf16 autocast (fla's chunked DPLR kernel warns that fp32 is not
  supported on every platform).

Decisions where the contract (one layer, independent of the others) or the backbone differ from RWKV-7's model:

* **Value residual (``v_first``).** In RWKV-7, layers after the first mix their values with the first layer's,
  ``v = lerp(v, v_first, sigmoid(LoRA_v(x)))``. Our mixers see only their own input and state, so every layer is
  built as fla's *first* layer (``layer_idx=0``): it has no ``v_lora`` and uses its own ``v``; the ``v_first`` the
  layer returns is dropped. A documented deviation: the value-residual path of the paper is absent at every depth.
* **Channel mixing.** RWKV-7's block also has its own FFN (``RWKV7FeedForward``, squared-ReLU channel mixing with
  a token shift); it is not part of the mixer: the backbone's SwiGLU is every mixer's FFN.
* **Initialisation.** fla's RWKV-7 recipe (``RWKV7Attention._initialize_weights``, which follows BlinkDL's),
  applied at the mixer's real depth ``layer_idx`` of ``n_layers`` (the recipe depends on it; the fla layer itself
  is index 0): token-shift mixes ``1 - (i / D)^(p (1 - l / L))``, the decay bias ``-6 + 6 (i / (D - 1))^(1 + (l / (L
  - 1))^0.3) + 0.5 + 2.5 zigzag``, ``a``'s bias, ``k_k = 0.71 - 0.1 linear``, ``k_a = 1.02``, ``r_k = -0.04``, the
  GroupNorm weight ``((l + 1) / L)^0.7``, orthogonal ``r``/``v`` (gain 1) and ``k`` (gain 0.1) projections,
  orthogonal second LoRA matrices (gain 0.1, times sqrt(rank / width) when the rank is the larger). One deviation:
  the recipe's exact zeros, ``o_proj`` and the first matrix of each LoRA, are drawn from fla's generic N(0, 0.02)
  instead (``o_proj`` then by the backbone's one rule for every mixer, docs/protocol.md). With the zeros only
  ``o_proj`` gets a gradient at the first step (and with ``o_proj`` drawn, the w and
  a LoRAs' second matrices and the w, a, g token-shift mixes still get none), which the conformance gate rejects:
  every parameter must get a gradient from the start.
* **Sizes.** ``head_dim`` 0 is RWKV-7's 64 (or d_model when narrower: one head): 1 head at preset tiny, 2 at
  quick, 4 and 8 at the paper presets; the LoRA ranks 0 are fla's rule (32, 32 and 64 at quick). ``fuse_norm``
  stays off (torch's GroupNorm, which runs everywhere).
* **Short calls.** A forward without a state of fewer than :data:`MIN_STATELESS_TOKENS` tokens runs padded to that
  length with zero inputs (the layer is causal; the padding's outputs are dropped), so that its projections are
  computed like a longer call's (see the constant).

State (fla's cache entries for the layer): ``recurrent_state`` [B, H, K, V] and ``conv_state``, the token shift's
last token [B, D]: O(1) in the length. Units are heads (zeroed before ``o_proj`` by the mask intervention).

Measured (the shared 2-core CPU machine, OMP_WAIT_POLICY=PASSIVE; one layer at preset quick's shape, d_model 128,
2 heads of 64, batch 4 x 256 tokens, forward + backward, median of 9 interleaved repetitions): ``recurrent`` 390 ms,
``chunk`` 37.5 ms (10x; with 1 thread 342 and 44 ms, 8x). The chunk kernel's advantage grows with the length (the
reference runs one Python step per token).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from harness.errors import ConfigError
from harness.mixer import FlopCount
from harness.registry import register_mixer
from harness.values import option
from mixers.common.fla_layer import INIT_STD, FlaLayerMixer
from mixers.rwkv7 import kernel, routing

#: RWKV-7's head size
HEAD_DIM = 64
#: forward calls without a state shorter than this run on the sequence padded with zero inputs to this length
#: (the outputs of the padding are dropped; the layer is causal): MKL computes a product of fewer than about 16
#: rows in another order than a longer one, and RWKV-7's first output (rank one in v, then group-normed)
#: amplifies that rounding past the conformance gate's 1e-6 prefix-consistency limit at preset quick (1.5e-6
#: with the reference kernel). Padded, a short call's projections are those of any longer call, to the bit.
MIN_STATELESS_TOKENS = 16
#: fla's bound on the log-decay: w = -exp(-0.5) sigmoid(.)
W_SCALE = 0.6065306597126334


@dataclass(frozen=True)
class RWKV7Config:
    """``fla.layers.RWKV7Attention`` options. Keys and values are d_model wide (RWKV-7's); 0 picks fla's sizes."""

    head_dim: int = option(0, "channels per head, keys and values; 0 = RWKV-7's 64, or d_model when narrower "
                              "(must divide d_model)", min=0)
    decay_low_rank_dim: int = option(0, "rank of the decay LoRA (w); 0 = fla's rule, max(32, 2.5 sqrt(d_model) "
                                        "head_dim / 64 rounded to 32)", min=0)
    a_low_rank_dim: int = option(0, "rank of the in-context learning rate LoRA (a); 0 = fla's rule, as the "
                                    "decay's", min=0)
    gate_low_rank_dim: int = option(0, "rank of the output gate LoRA (g); 0 = fla's rule, max(32, 5 sqrt(d_model) "
                                       "rounded to 32)", min=0)
    norm_eps: float = option(1e-5, "eps of the per-head GroupNorm, per channel (fla multiplies it by head_dim)",
                             gt=0)


@register_mixer("rwkv7", config=RWKV7Config)
class RWKV7Mixer(FlaLayerMixer):
    fla_layer = "RWKV7Attention"
    paper = "RWKV-7 \"Goose\" with Expressive Dynamic State Evolution (Peng et al., 2025), arXiv:2503.14456"
    cuda_dtype = torch.bfloat16  # fla's chunked DPLR kernel warns that fp32 is unsupported on some platforms

    def __init__(self, cfg: RWKV7Config, d_model: int, layer_idx: int, n_layers: int):
        head_dim = cfg.head_dim or min(HEAD_DIM, d_model)
        if d_model % head_dim:
            raise ConfigError(f"rwkv7: head_dim ({head_dim}) must divide d_model ({d_model}).")
        super().__init__(cfg, d_model, layer_idx, n_layers)
        from fla.layers import RWKV7Attention

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="According to Bo")  # fla's notice on every construction
            # layer_idx=0: fla's first layer, without the value residual (module docstring); fla's constructor
            # initialises with num_hidden_layers (dividing by it - 1), then init_weights redoes it at our depth
            self.layer = RWKV7Attention(
                mode="chunk", hidden_size=d_model, head_dim=head_dim,
                decay_low_rank_dim=cfg.decay_low_rank_dim or None, gate_low_rank_dim=cfg.gate_low_rank_dim or None,
                a_low_rank_dim=cfg.a_low_rank_dim or None, norm_eps=cfg.norm_eps, layer_idx=0,
                num_hidden_layers=max(n_layers, 2), fuse_norm=False,
            )
        self.layer.num_hidden_layers = n_layers
        self.finish_init()

    def install_routes(self) -> None:
        routing.install()

    def forward(self, x: torch.Tensor, state: dict[str, Any] | None = None):
        T = x.shape[1]
        if state is not None or T >= MIN_STATELESS_TOKENS:
            return super().forward(x, state)
        padded = torch.cat([x, x.new_zeros(x.shape[0], MIN_STATELESS_TOKENS - T, x.shape[2])], dim=1)
        y, _ = super().forward(padded)
        return y[:, :T], None

    def chunk_lengths(self) -> tuple[int, ...]:
        """Kernel ``chunk``'s chunks (they start after each call's first token: the gate's lengths C + 1 and
        2 C + 1 end exactly on their boundaries, C and 2 C straddle them)."""
        return (kernel.CHUNK,)

    def _chunk_benchmark(self, batch, seq_len, tensor, gen, device):
        """The chunked DPLR recurrence at this layer's head sizes, on inputs shaped as the layer makes them
        (:func:`mixers.rwkv7.kernel.chunked_flops`)."""
        H, K, V = self.layer.num_heads, self.layer.head_dim, self.layer.head_v_dim
        q, k = tensor(batch, seq_len, H, K), tensor(batch, seq_len, H, K)
        v = tensor(batch, seq_len, H, V)
        kk = torch.nn.functional.normalize(torch.randn(batch, seq_len, H, K, generator=gen), dim=-1)
        a = (-kk).to(device).requires_grad_(True)
        b = (kk * torch.rand(batch, seq_len, H, K, generator=gen)).to(device).requires_grad_(True)
        w = tensor(batch, seq_len, H, K, fn=lambda t: -W_SCALE * torch.sigmoid(t))
        return (lambda: kernel.chunk_dplr(q, k, v, a, b, w, scale=1.0, lower_bound=-W_SCALE)[0],
                kernel.chunked_flops(batch, seq_len, H, K, V), "chunked DPLR recurrence")

    # ------------------------------------------------------------------ initialisation
    @torch.no_grad()
    def init_weights(self) -> None:
        """fla's RWKV-7 recipe (``RWKV7Attention._initialize_weights``) at this mixer's depth, with N(0, 0.02)
        for the recipe's zero matrices (module docstring). The same float32 arithmetic as fla's, so at any depth
        the recipe's deterministic tensors equal those of an fla layer built at that index."""
        layer = self.layer
        D, hd = layer.hidden_size, layer.head_dim
        l, L = self.layer_idx, self.n_layers
        ratio_0_to_1 = l / (L - 1) if L > 1 else 0.0
        ratio_1_to_almost0 = 1.0 - l / L
        device = layer.x_r.device
        n = torch.arange(D, dtype=torch.float64, device=device)
        # fla computes these in Python floats and stores them in float32 tensors
        linear = (n / max(D - 1, 1) - 0.5).float()
        zigzag = (((n % hd) - (hd - 1) / 2) / max((hd - 1) / 2, 0.5)).float()
        zigzag = zigzag * zigzag.abs()
        www = (-6 + 6 * (n / max(D - 1, 1)) ** (1 + ratio_0_to_1**0.3)).float()
        ddd = (n / D).float().view(1, 1, D)
        for name, power in (("x_r", 0.2), ("x_w", 0.9), ("x_k", 0.7), ("x_v", 0.7), ("x_a", 0.9), ("x_g", 0.2)):
            param = getattr(layer, name)
            param.copy_(1.0 - torch.pow(ddd, power * ratio_1_to_almost0))
        nn.init.constant_(layer.k_a, 1.02)
        nn.init.constant_(layer.r_k, -0.04)
        layer.k_k.copy_(torch.zeros(D, device=device) + 0.71 - linear * 0.1)
        for lora in (layer.w_lora, layer.a_lora, layer.g_lora):
            first, second = lora.lora[0], lora.lora[2]
            nn.init.normal_(first.weight, 0.0, INIT_STD)  # the recipe's zeros (module docstring)
            out_dim, in_dim = second.weight.shape
            gain = math.sqrt(in_dim / out_dim) if in_dim > out_dim else 1.0
            _orthogonal(second.weight, 0.1 * gain)
            if second.bias is not None:
                nn.init.zeros_(second.bias)
        layer.w_lora.set_bias_value(www + 0.5 + zigzag * 2.5)
        layer.a_lora.set_bias_value(-0.19 + zigzag * 0.3 + linear * 0.4)
        if layer.g_norm.weight is not None:
            layer.g_norm.weight.fill_(((l + 1) / L) ** 0.7)
            nn.init.zeros_(layer.g_norm.bias)
        _orthogonal(layer.r_proj.weight, 1.0)
        _orthogonal(layer.k_proj.weight, 0.1)
        _orthogonal(layer.v_proj.weight, 1.0)
        nn.init.normal_(layer.o_proj.weight, 0.0, INIT_STD)  # the recipe's zeros (module docstring)

    # ------------------------------------------------------------------ state
    def empty_cache(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
        """``recurrent_state`` [B, H, K, V] (what ``chunk_rwkv7`` / ``fused_mul_recurrent_rwkv7`` take and return)
        and ``conv_state`` [B, D], the token shift's previous token (fla's ``token_shift`` cache; zeros = the
        zero padding before the first token)."""
        layer = self.layer
        return {
            "recurrent_state": torch.zeros(batch_size, layer.num_heads, layer.head_dim, layer.head_v_dim,
                                           device=device, dtype=dtype),
            "conv_state": torch.zeros(batch_size, layer.hidden_size, device=device, dtype=dtype),
        }

    def state_size(self, seq_len: int) -> int:
        layer = self.layer
        return layer.num_heads * layer.head_dim * layer.head_v_dim + layer.hidden_size

    # ------------------------------------------------------------------ cost
    def flops_per_token(self, context: int) -> FlopCount:
        """With H heads, K = head_dim, V = head_v_dim, Kd = H K = Vd = H V = d, and the LoRA ranks Rw, Ra, Rg.

        Products: r, k, v and o ``4 d Kd + 4 d Vd``; the LoRAs, two matrices each, ``2 Rw (d + Kd) + 2 Ra (d + Kd)
        + 2 Rg (d + Vd)``.

        The recurrence as fla's reference (``dplr_recurrence``) computes it, per head and token: the output
        ``S^T q`` (a multiply-add per state float, 2 K V); per state float the write ``k v^T`` (1), the low-rank
        read ``a^T S`` (a product and a sum, 2), its write ``b (a^T S)`` (1) and their sum (1), the decay and the
        decayed state's update (2): 7 K V; per key channel the decay's exponential and the query's scale (2 K):

            H (9 K V + 2 K)

        Left out (docs/flops.md): the token shift and its interpolations, the sigmoids, the l2 norm of kk, the
        GroupNorm, the output correction and gate, the value and key updates: O(d) per token."""
        layer, d = self.layer, self.d_model
        H, K, V = layer.num_heads, layer.head_dim, layer.head_v_dim
        Kd, Vd = H * K, H * V
        products = 4 * d * Kd + 4 * d * Vd
        products += 2 * layer.decay_low_rank_dim * (d + Kd) + 2 * layer.a_low_rank_dim * (d + Kd)
        products += 2 * layer.gate_low_rank_dim * (d + Vd)
        recurrence = H * (9 * K * V + 2 * K)
        return FlopCount.training(products + recurrence)


def _orthogonal(weight: torch.Tensor, gain: float) -> None:
    """fla's ``_orthogonal_init``: an orthogonal matrix drawn in float32, copied into ``weight``."""
    float_weight = weight.float()
    nn.init.orthogonal_(float_weight, gain=gain)
    weight.copy_(float_weight)
