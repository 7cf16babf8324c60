"""A ``transformers`` causal LM that mixbench did not train, scored by the suites (docs/huggingface.md).

:func:`load_external` loads a model folder or hub name with ``AutoModelForCausalLM`` and its own tokenizer, and
wraps it in :class:`ExternalLM`, which offers what the suites that accept external models
(:attr:`harness.suite.Suite.external`) use of a mixbench model: ``model(ids) -> (logits, states)``, the decode
states and ``step`` (the model's own ``transformers`` cache), ``generate`` (the very sampling loop of
:meth:`harness.model.backbone.MixerLM.generate`), the context it supports and its size. It has no mixers: the
conformance gate's mixer checks do not apply, :func:`model_checks` runs the model-level ones instead.

What names an external model: its name, its revision (the hub commit when transformers knows it, else
``sha256:`` of its weight and config files) and a fingerprint of the weights' bytes, so a re-saved or edited
folder is another model (:func:`harness.store.identity.external_identity`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.corpus.tokenizer import Tokenizer
from harness.errors import ConfigError, MixbenchError
from harness.model.backbone import MixerLM

#: files whose bytes name a local model (weights and the config that gives them meaning)
_MODEL_FILES = ("*.safetensors", "*.bin", "config.json")


@dataclass(frozen=True)
class ExternalConfig:
    """The sizes suites read of a model (``model.config``): context, vocabulary, width, depth."""

    context: int
    vocab_size: int
    d_model: int | None = None
    n_layers: int | None = None


@dataclass(frozen=True)
class ExternalDescriptor:
    """Who an external model is, for its board row and its identity."""

    name: str  # what the user gave (a hub name or the folder's name)
    source: str  # the path or hub name it was loaded from
    revision: str  # hub commit, or sha256 of the local files
    model_class: str
    parameters: int
    dtype: str
    transformers: str


class ExternalLM(nn.Module):
    """A ``transformers`` causal LM behind the interface the suites use of a mixbench model."""

    external = True

    def __init__(self, hf_model: nn.Module, tokenizer: Tokenizer, descriptor: ExternalDescriptor, context: int):
        super().__init__()
        self.hf = hf_model
        self.tokenizer = tokenizer
        self.descriptor = descriptor
        cfg = hf_model.config
        self.config = ExternalConfig(context, int(cfg.vocab_size), getattr(cfg, "hidden_size", None),
                                     getattr(cfg, "num_hidden_layers", None))
        self.mixers: list[Any] = []  # no mixbench mixers: nothing to route, intervene on or gate
        self.kernel = "transformers"

    def num_parameters(self, exclude_embedding: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        return n - self.hf.get_input_embeddings().weight.numel() if exclude_embedding else n

    def check_context(self, length: int) -> None:
        if length > self.config.context:
            raise ConfigError(f"a context of {length} tokens is longer than {self.descriptor.name} supports "
                              f"({self.config.context}); use --suite-config context={self.config.context} or less.")

    def forward(self, ids: torch.Tensor, states: list[Any] | None = None,
                targets: torch.Tensor | None = None) -> tuple[torch.Tensor, list[Any] | None]:
        """``ids: [B, T]`` -> logits ``[B, T, V]`` (float32) and, when ``states`` is given (the list
        :meth:`init_states` returns), the states after these tokens; with ``targets`` the mean cross-entropy."""
        if states is None:
            logits = self.hf(input_ids=ids, use_cache=False).logits.float()
            if targets is not None:
                return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100), None
            return logits, None
        out = self.hf(input_ids=ids, cache=states[0], use_cache=True)
        cache = out.get("cache", None)
        if cache is None:
            cache = out.get("past_key_values", None)
        return out.logits.float(), [cache]

    def init_states(self, batch_size: int, device: torch.device | None = None) -> list[Any]:
        return [None]  # the model's own cache, made by its first forward

    def step(self, ids_t: torch.Tensor, states: list[Any]) -> tuple[torch.Tensor, list[Any]]:
        logits, states = self(ids_t[:, None], states)
        return logits[:, -1], states

    def hidden_states(self, ids: torch.Tensor) -> list[torch.Tensor]:
        return list(self.hf(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states)

    def state_size(self, seq_len: int) -> int | None:
        return None  # a transformers cache's size is the model's business; not measured

    #: the same prefill-then-step sampling loop as a mixbench model's, so decoding settings mean the same
    generate = MixerLM.generate


def _revision(source: str, hf_model: nn.Module, local: Path | None) -> str:
    commit = getattr(hf_model.config, "_commit_hash", None)
    if commit:
        return str(commit)
    if local is None:
        return "unknown"
    h = hashlib.sha256()
    for pattern in _MODEL_FILES:
        for file in sorted(local.glob(pattern)):
            h.update(file.name.encode() + b"\0")
            with open(file, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return "sha256:" + h.hexdigest()[:16]


def _context(hf_model: nn.Module, tokenizer: Any) -> int:
    """The longest sequence the model is meant for: its position table, else the tokenizer's limit, else 2048."""
    cfg = hf_model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return int(limit) if isinstance(limit, int) and 0 < limit < 1_000_000 else 2048


def load_external(source: str, revision: str | None = None, device: str = "cpu",
                  trust_remote_code: bool = False) -> ExternalLM:
    """``AutoModelForCausalLM`` + ``AutoTokenizer`` from a folder or a hub name, in float32 and eval mode."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(source).expanduser()
    local = local if local.is_dir() else None
    if local is None and source.startswith((".", "/", "~")):
        raise MixbenchError(f"--hf-model {source}: no such folder; give a transformers model folder or a hub name "
                            "(owner/name).")
    where = str(local) if local is not None else source
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, revision=revision, trust_remote_code=trust_remote_code)
        hf_model = AutoModelForCausalLM.from_pretrained(where, revision=revision, dtype=torch.float32,
                                                        trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise MixbenchError(f"--hf-model {source} could not be loaded as a transformers causal LM "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}).") from None
    hf_model.to(device).eval()
    ours = Tokenizer.from_transformers(tokenizer, where)
    name = source if local is None else local.resolve().name
    descriptor = ExternalDescriptor(
        name=name, source=where, revision=_revision(source, hf_model, local),
        model_class=type(hf_model).__name__, parameters=sum(p.numel() for p in hf_model.parameters()),
        dtype="float32", transformers=transformers.__version__,
    )
    return ExternalLM(hf_model, ours, descriptor, _context(hf_model, tokenizer))


@torch.no_grad()
def model_checks(model: ExternalLM, length: int = 24, batch: int = 3, tolerance: float = 1e-4) -> list[str]:
    """What an external model must satisfy for its scores to mean what they say, as failures (empty: passed):
    deterministic, causal (logits at a position do not change when later tokens do) and batch independent (a
    sequence scores the same alone and in a batch). The conformance gate's mixer checks (decode == forward, state
    size, kernels) do not apply to a model mixbench did not build."""
    length = min(length, model.config.context)
    vocab = min(model.tokenizer.vocab_size, model.config.vocab_size)
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, length), generator=g).to(device)
    failures = []

    def worst(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(((a - b).abs() / (1 + b.abs())).max())

    first, _ = model(ids)
    again, _ = model(ids)
    if not torch.isfinite(first).all():
        failures.append("non-finite logits")
    if worst(first, again) > tolerance:
        failures.append(f"not deterministic (relative difference {worst(first, again):.2e})")
    cut = length // 2
    changed = ids.clone()
    changed[:, cut:] = torch.randint(0, vocab, (batch, length - cut), generator=g).to(device)
    after, _ = model(changed)
    if worst(after[:, :cut], first[:, :cut]) > tolerance:
        failures.append(f"not causal: logits before position {cut} changed when later tokens did "
                        f"(relative difference {worst(after[:, :cut], first[:, :cut]):.2e})")
    alone, _ = model(ids[1:2])
    if worst(alone, first[1:2]) > tolerance:
        failures.append(f"batch dependent: a sequence scores differently alone and in a batch "
                        f"(relative difference {worst(alone, first[1:2]):.2e})")
    return failures
