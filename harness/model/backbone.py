"""The LLaMA-3 style backbone shared by every mixer (docs/DESIGN.md §3).

token embedding -> L x [pre-RMSNorm -> mixer -> residual; pre-RMSNorm -> SwiGLU FFN -> residual] -> RMSNorm
-> head tied to the embedding. Positional information is the mixer's business (RoPE inside attention; none
in ProtoT). Only the mixer differs between models, so comparisons are at a matched backbone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from harness.model.backbone_kernels import rms_norm, silu_mul
from harness.model.batching import IGNORE_INDEX
from harness.config import BackboneConfig, ModelSpec
from harness.errors import ConfigError
from harness.model.lm_head import cross_entropy
from harness.mixer import Mixer


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int, dropout: float):
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the activation is one fused pass (harness/model/backbone_kernels.py); gate and up stay two products, which
        # at d_model 128 ran faster than one of twice the width
        return self.down(self.dropout(silu_mul(self.gate(x), self.up(x))))


class Block(nn.Module):
    def __init__(self, cfg: BackboneConfig, mixer: Mixer):
        super().__init__()
        self.mixer_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mixer = mixer
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = SwiGLU(cfg.d_model, cfg.ffn_dim, cfg.dropout)
        self.dropout = nn.Dropout(cfg.dropout)
        # gates on residual branches (docs/protocol.md; ReZero, SkipInit, LayerScale): scalars that start small,
        # so every update of the branch is scaled down until the layer's gradient asks for more of it
        gates = {"none": (), "mixer": ("mixer",), "all": ("mixer", "ffn")}[cfg.residual_gates]
        self.mixer_gate = nn.Parameter(torch.full((), cfg.residual_gate_init)) if "mixer" in gates else None
        self.ffn_gate = nn.Parameter(torch.full((), cfg.residual_gate_init)) if "ffn" in gates else None

    @staticmethod
    def _gated(y: torch.Tensor, gate: nn.Parameter | None) -> torch.Tensor:
        return y if gate is None else y * gate

    def forward(self, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        y, state = self.mixer(self.mixer_norm(x), state)
        x = x + self.dropout(self._gated(y, self.mixer_gate))
        x = x + self.dropout(self._gated(self.ffn(self.ffn_norm(x)), self.ffn_gate))
        return x, state

    def step(self, x_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        y, state = self.mixer.step(self.mixer_norm(x_t), state)
        x_t = x_t + self._gated(y, self.mixer_gate)
        return x_t + self._gated(self.ffn(self.ffn_norm(x_t)), self.ffn_gate), state


class MixerLM(nn.Module):
    """A causal language model whose token mixer is a registered plugin."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        from harness.registry import MIXERS

        self.spec = spec
        cfg = spec.backbone
        entry = MIXERS.get(spec.mixer)
        self.mixer_config = entry.make_config(spec.mixer_config)
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            Block(cfg, entry.cls(self.mixer_config, cfg.d_model, i, cfg.n_layers)) for i in range(cfg.n_layers)
        )
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self._init_weights()
        self.set_kernel(None, torch.device("cpu"))  # each mixer's fast kernel; call again after moving devices

    # ------------------------------------------------------------------ setup
    def _init_weights(self) -> None:
        """N(0, 0.02) embedding (docs/PAPERS.md §A.1); every branch's output projection, the MLP's and each
        mixer's (:meth:`harness.mixer.Mixer.output_projection`), N(0, 0.02 / sqrt(2L)) (GPT-2/nanoGPT, Mamba's
        ``rescale_prenorm_residual``): one rule for every mixer, applied here, so no mixer's branch starts louder
        than another's (docs/protocol.md, "One backbone rule").

        Mixers initialise their other parameters in their constructors.
        """
        std = self.config.init_std
        out_std = std / math.sqrt(2 * self.config.n_layers)
        nn.init.normal_(self.embed.weight, 0.0, std)
        for block in self.blocks:
            for lin in (block.ffn.gate, block.ffn.up):
                nn.init.normal_(lin.weight, 0.0, std)
            nn.init.normal_(block.ffn.down.weight, 0.0, out_std)
            init_output_projection(block.mixer, std)

    @property
    def output_init(self) -> str:
        """``backbone`` when the backbone initialised every mixer's output projection, else ``mixer``: a plugin
        that declares none keeps its own (recorded with the model; docs/protocol.md)."""
        return "backbone" if all(m.output_projection() is not None for m in self.mixers) else "mixer"

    @property
    def mixers(self) -> list[Mixer]:
        return [b.mixer for b in self.blocks]

    def set_kernel(self, kernel: str | None, device: torch.device | None = None) -> str:
        """Use ``kernel`` in every layer, or each mixer's default for ``device`` when ``kernel`` is None."""
        device = device or next(self.parameters()).device
        for m in self.mixers:
            m.set_kernel(kernel or m.default_kernel(device))
        return self.mixers[0].kernel

    @property
    def kernel(self) -> str:
        return self.mixers[0].kernel

    def num_parameters(self, exclude_embedding: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        return n - self.embed.weight.numel() if exclude_embedding else n

    def state_size(self, seq_len: int) -> int:
        return sum(m.state_size(seq_len) for m in self.mixers)

    # ------------------------------------------------------------------ compute
    def forward(
        self, ids: torch.Tensor, states: Sequence[Any] | None = None, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[Any] | None]:
        """``ids: [B, T]`` -> logits ``[B, T, V]`` and per-layer states (None in training). With ``targets``
        [B, T] (training; ``IGNORE_INDEX`` where none) the first element is instead their mean cross-entropy,
        the head and the loss fused (:mod:`harness.model.lm_head`); it goes through ``forward`` so that a
        DistributedDataParallel wrapper sees the call."""
        x = self.embed_dropout(self.embed(ids))
        new_states: list[Any] = []
        for i, block in enumerate(self.blocks):
            x, s = block(x, None if states is None else states[i])
            new_states.append(s)
        x = self.norm(x)
        if targets is not None:
            loss = cross_entropy(x.flatten(0, 1), self.embed.weight, targets.flatten(), IGNORE_INDEX)
            return loss, (None if states is None else new_states)
        return x @ self.embed.weight.T, (None if states is None else new_states)

    def hidden_states(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """Residual stream after the embedding and after each block (L + 1 tensors), for probes and suites."""
        x = self.embed(ids)
        out = [x]
        for block in self.blocks:
            x, _ = block(x)
            out.append(x)
        return out

    def init_states(self, batch_size: int, device: torch.device | None = None) -> list[Any]:
        device = device or self.embed.weight.device
        dtype = self.embed.weight.dtype
        return [m.init_state(batch_size, device, dtype) for m in self.mixers]

    def step(self, ids_t: torch.Tensor, states: list[Any]) -> tuple[torch.Tensor, list[Any]]:
        """One token per sequence ``ids_t: [B]`` -> logits ``[B, V]``, through each mixer's ``step()``."""
        x = self.embed(ids_t)
        new_states = []
        for block, s in zip(self.blocks, states):
            x, s = block.step(x, s)
            new_states.append(s)
        return self.norm(x) @ self.embed.weight.T, new_states

    def check_context(self, length: int) -> None:
        """Refuse sequences longer than the model supports: past the training context only if every mixer
        declares length extrapolation (attention's RoPE positions past training are never seen)."""
        if length > self.config.context and not all(m.length_extrapolation for m in self.mixers):
            raise ConfigError(
                f"a context of {length} tokens is longer than this {self.spec.mixer} model supports "
                f"({self.config.context}); use --context {self.config.context} or less."
            )

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        stop_token: int | None = None,
    ) -> torch.Tensor:
        """Autoregressive sampling: one prefill ``forward`` with a fresh state, then ``step()`` per token.

        ``prompt: [B, T0]`` (equal lengths). ``temperature == 0`` is greedy. Returns ``[B, T0 + n]``; after a
        sequence emits ``stop_token`` it keeps emitting it so the batch stays rectangular.
        """
        if prompt.dim() != 2 or prompt.shape[1] == 0:
            raise ConfigError("generate needs a non-empty prompt of shape [batch, length].")
        self.check_context(prompt.shape[1] + max_new_tokens)
        was_training = self.training
        self.eval()
        try:
            states = self.init_states(prompt.shape[0], prompt.device)
            logits, states = self(prompt, states)
            next_logits = logits[:, -1]
            out = [prompt]
            done = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
            for i in range(max_new_tokens):
                tok = sample_next(next_logits, temperature, top_k, top_p, generator)
                if stop_token is not None:
                    tok = torch.where(done, torch.full_like(tok, stop_token), tok)
                    done |= tok == stop_token
                out.append(tok[:, None])
                if i + 1 < max_new_tokens:
                    next_logits, states = self.step(tok, states)
            return torch.cat(out, dim=1)
        finally:
            self.train(was_training)


def sample_next(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    """Pick the next token from ``logits: [B, V]`` with temperature, top-k and nucleus (top-p) filtering."""
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        remove = cum - sorted_logits.softmax(-1) > top_p  # keep the smallest set whose mass reaches top_p
        sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def init_output_projection(mixer: Mixer, init_std: float = 0.02) -> None:
    """The one rule for a mixer's output projection (docs/protocol.md): N(0, init_std / sqrt(2L)), zero bias. The
    backbone applies it to every layer; code that builds a mixer alone (a kernel parity check) calls it to get the
    layer a model would hold."""
    out = mixer.output_projection()
    if out is not None:
        nn.init.normal_(out.weight, 0.0, init_std / math.sqrt(2 * mixer.n_layers))
        if out.bias is not None:
            nn.init.zeros_(out.bias)


def build_model(spec: ModelSpec, seed: int | None = None) -> MixerLM:
    """Construct a model; with ``seed`` the initial weights are a function of the seed alone."""
    if seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return MixerLM(spec)
    return MixerLM(spec)
