"""A ``transformers`` causal LM that mixbench did not train, scored by the suites (docs/huggingface.md).

:func:`load_external` loads a model folder or hub name as a causal LM with its own tokenizer, and wraps it in
:class:`ExternalLM`, which offers what the suites that accept external models (:attr:`harness.suite.Suite.external`)
use of a mixbench model: ``model(ids) -> (logits, states)``, the decode states and ``step`` (the model's own
``transformers`` cache, forked where it cannot be rewound), ``generate`` (the very sampling loop of
:meth:`harness.model.backbone.MixerLM.generate`), the context it supports and its size. It has no mixers: the
conformance gate's mixer checks do not apply, :func:`model_checks` runs the model-level ones instead.

What names an external model: its name, its revision (the hub commit when transformers knows it, else
``sha256:`` of its weight and config files) and a fingerprint of the weights' bytes, so a re-saved or edited
folder is another model (:func:`harness.store.identity.external_identity`).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.corpus.tokenizer import Tokenizer
from harness.errors import ConfigError, MixbenchError
from harness.hf import reference_kernels
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
        self._kernel_bindings = reference_kernels.reference_functions(hf_model)

    def own_code(self) -> contextlib.AbstractContextManager:
        """A block in which the model runs on a CPU with transformers' reference functions, not third-party kernels
        that need CUDA or Triton (:mod:`harness.hf.reference_kernels`); on a GPU it changes nothing."""
        on_cpu = next(self.hf.parameters()).device.type == "cpu"
        return reference_kernels.using(self._kernel_bindings if on_cpu else [])

    def _call(self, **kwargs: Any) -> Any:
        with self.own_code():
            return self.hf(**kwargs)

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
            logits = self._call(input_ids=ids, use_cache=False).logits.float()
            if targets is not None:
                return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100), None
            return logits, None
        cache, seen = states[0], states[1]
        if cache is not None:
            _rewind(cache, states)
            if ids.shape[1] > 1 and not getattr(cache, "is_croppable", False):
                # transformers' recurrent models (Mamba) treat several tokens given with a cache as a new prompt:
                # a continuation goes one token at a time, which every cache supports
                logits = []
                for t in range(ids.shape[1]):
                    logits_t, states = self(ids[:, t:t + 1], states)
                    logits.append(logits_t)
                return torch.cat(logits, 1), states
        with torch.no_grad():  # a stateful forward decodes; a cache that holds no graph can be forked (deepcopy)
            out = self._call(input_ids=ids, cache=cache, use_cache=True)
        cache = out.get("cache", None)
        if cache is None:
            cache = out.get("past_key_values", None)
        starts = getattr(cache, "_mixbench_starts", [])
        cache._mixbench_starts = [*starts, seen]  # where each forward began writing: see _rewind
        return out.logits.float(), [cache, seen + ids.shape[1], len(cache._mixbench_starts)]

    def init_states(self, batch_size: int, device: torch.device | None = None) -> list[Any]:
        """``[cache, tokens it holds, forwards it has seen]``: the model's own cache is made by the first forward.
        A mixbench state is a value; a transformers cache changes in place, so a state used a second time (the
        throughput suite times decode rounds from one prefilled state) is rewound to what it held where the cache
        can be cut back (key-value caches), and refused otherwise: :meth:`fork_states` first."""
        return [None, 0, 0]

    def fork_states(self, states: list[Any]) -> list[Any]:
        """A state that can be used while ``states`` stays usable: a copy of a cache that cannot be cut back (a
        recurrent layer's fixed-size state); a key-value cache is shared and rewound when ``states`` is used."""
        cache = states[0]
        if cache is None:
            return states
        _rewind(cache, states)
        if getattr(cache, "is_croppable", False):
            return states
        return [copy.deepcopy(cache), *states[1:]]

    def step(self, ids_t: torch.Tensor, states: list[Any]) -> tuple[torch.Tensor, list[Any]]:
        logits, states = self(ids_t[:, None], states)
        return logits[:, -1], states

    def hidden_states(self, ids: torch.Tensor) -> list[torch.Tensor]:
        return list(self._call(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states)

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


def _rewind(cache: Any, states: list[Any]) -> None:
    """Make ``cache`` hold what ``states`` held when it was made, or refuse. Valid only when no forward since then
    began below its length (forks from an earlier state would have overwritten what it held)."""
    seen, made_after = states[1], states[2]
    starts = getattr(cache, "_mixbench_starts", [])
    if len(starts) == made_after:
        return  # the newest state: nothing to undo
    if made_after < len(starts) and getattr(cache, "is_croppable", False) and min(starts[made_after:]) >= seen:
        cache.crop(seen - cache.get_seq_length())
        del cache._mixbench_starts[made_after:]
        return
    raise MixbenchError("an external model's decode state was used a second time, and its cache (changed in place) "
                        "cannot be rewound to it: fork_states() before reusing a state.")


def _model_class(where: str, revision: str | None) -> Any:
    """The class that loads the folder. Another package imported in the same process may re-register a model type
    with the Auto classes (fla registers its own ``mamba``, whose kernels need Triton), so a folder whose config
    names a causal LM class transformers itself ships is loaded with that class; custom code (``auto_map``) and
    other architectures go through ``AutoModelForCausalLM``, which refuses what is not a causal LM."""
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    raw, _ = transformers.PreTrainedConfig.get_config_dict(where, revision=revision)
    if "AutoModelForCausalLM" in (raw.get("auto_map") or {}):
        return AutoModelForCausalLM
    causal_lms = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())  # transformers' own table: not re-registered
    for name in raw.get("architectures") or []:
        if name in causal_lms:
            return getattr(transformers, name)
    return AutoModelForCausalLM


def load_external(source: str, revision: str | None = None, device: str = "cpu",
                  trust_remote_code: bool = False) -> ExternalLM:
    """A folder or a hub name as a causal LM (:func:`_model_class`) with its ``AutoTokenizer``, in float32 and eval
    mode."""
    import transformers
    from transformers import AutoTokenizer

    local = Path(source).expanduser()
    local = local if local.is_dir() else None
    if local is None and source.startswith((".", "/", "~")):
        raise MixbenchError(f"--hf-model {source}: no such folder; give a transformers model folder or a hub name "
                            "(owner/name).")
    where = str(local) if local is not None else source
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, revision=revision, trust_remote_code=trust_remote_code)
        model_class = _model_class(where, revision)
        remote = {"trust_remote_code": trust_remote_code} if model_class.__name__.startswith("Auto") else {}
        hf_model = model_class.from_pretrained(where, revision=revision, dtype=torch.float32, **remote)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        hint = (" Its folder ships its own modeling code: pass --trust-remote-code if you trust it."
                if "custom code" in str(exc) and not trust_remote_code else "")
        raise MixbenchError(f"--hf-model {source} could not be loaded as a transformers causal LM "
                            f"({type(exc).__name__}: {first}).{hint}") from None
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
