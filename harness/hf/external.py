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

What is refused, in one sentence each and before transformers builds anything (:func:`check_folder`): a folder
without ``config.json`` or weights, a ``config.json`` that is not JSON or gives a size that is not a positive whole
number or that its weights cannot hold, an unreadable or truncated ``*.safetensors``, and ``--revision`` with a local
folder (it names a hub commit; a folder is scored as its files are). Whatever transformers still raises while
loading becomes one sentence too. A folder written by ``mixbench export`` whose weights no longer hash to the
``weights_sha256`` it records is refused as a checkpoint with changed weights is; one whose ``tokenizer.json`` is
the tokenizer mixbench trained it with is scored with that tokenizer (:func:`_mixbench_tokenizer`).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.corpus.tokenizer import Tokenizer
from harness.errors import ConfigError, MixbenchError, short_repr
from harness.hf import reference_kernels
from harness.model.backbone import MixerLM

#: files whose bytes name a local model (weights and the config that gives them meaning)
_MODEL_FILES = ("*.safetensors", "*.bin", "config.json")
#: config.json keys (top level, ``text_config``, a mixbench export's ``backbone``) that give a size: a positive
#: whole number (or a list of them) where set; ``None`` leaves the default to transformers
_SIZE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings", "n_positions", "n_embd", "n_inner",
              "n_layer", "n_head", "d_model", "d_ff", "ffn_dim", "num_layers", "state_size", "conv_kernel", "n_layers",
              "context")
#: sizes of a tensor's dimension: none can exceed the numbers the weight files hold (positions need no table)
_WIDTH_KEYS = tuple(k for k in _SIZE_KEYS if k not in ("max_position_embeddings", "n_positions", "context"))
#: files of which a folder's tokenizer is made (transformers converts the slow ones to a fast tokenizer)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")
#: the input embedding's name in the causal LMs transformers ships (and mixbench's ``embed``)
_EMBEDDING = re.compile(r"(?:^|\.)(?:embed_tokens|embeddings|wte|word_embeddings|embed_in|tok_embeddings|embed)"
                        r"\.weight$")


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
    tokenizer: str = ""  # Tokenizer.fingerprint of its tokenizer, which a mixbench row's data fingerprint hashes
    #: its tokenizer is the one mixbench trained it with (an unedited export): its tokens are mixbench's, so its
    #: per-token metrics compare with mixbench rows
    mixbench_tokenizer: bool = False


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

    @property
    def mixbench_tokenizer(self) -> bool:
        """Its tokens are mixbench's (:attr:`ExternalDescriptor.mixbench_tokenizer`): per-token metrics of it are
        in the unit of a mixbench row's, not another tokenizer's."""
        return self.descriptor.mixbench_tokenizer

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


def _model_class(raw: dict[str, Any]) -> Any:
    """The class that loads a folder whose config.json is ``raw``. Another package imported in the same process may
    re-register a model type with the Auto classes (fla registers its own ``mamba``, whose kernels need Triton), so a
    folder whose config names a causal LM class transformers itself ships is loaded with that class; custom code
    (``auto_map``) and other architectures go through ``AutoModelForCausalLM``, which refuses what is not a causal
    LM."""
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if "AutoModelForCausalLM" in (raw.get("auto_map") or {}):
        return AutoModelForCausalLM
    causal_lms = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())  # transformers' own table: not re-registered
    for name in raw.get("architectures") or []:
        if name in causal_lms:
            return getattr(transformers, name)
    return AutoModelForCausalLM


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message, with the next one when it only announces it (transformers'
    validation errors read "Validation error for field 'x':" then the reason), cut to 300 characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    text = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return text if len(text) <= 300 else text[:300] + "..."


def _sections(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The parts of a config.json that give sizes: the top level, a language model's ``text_config`` and a mixbench
    export's ``backbone`` (what its model is built from)."""
    return [("", raw)] + [(f"{k}.", raw[k]) for k in ("text_config", "backbone") if isinstance(raw.get(k), dict)]


def _check_sizes(raw: dict[str, Any], config: str) -> None:
    """Every size ``config`` (config.json, as ``raw``) sets is a positive whole number (or a list of them):
    transformers would answer a negative one with a traceback from deep in torch."""
    for where, section in _sections(raw):
        for key in _SIZE_KEYS:
            value = section.get(key)
            for v in value if isinstance(value, list) else [] if value is None else [value]:
                if not isinstance(v, int) or isinstance(v, bool):
                    raise MixbenchError(f"{config}: {where}{key} {short_repr(value)} is not a whole number.")
                if v <= 0:
                    raise MixbenchError(f"{config}: {where}{key} {short_repr(value)} is not a positive size.")


def _safetensors_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    """The tensors' shapes a safetensors file declares, read from its header alone; safetensors checks that the
    header is whole and that the data it describes fills the file exactly, so a truncated file is found here."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), "pt") as fh:
            return {name: tuple(fh.get_slice(name).get_shape()) for name in fh.keys()}
    except OSError as exc:
        raise MixbenchError(f"{file} cannot be read ({exc.strerror or exc}).") from None
    except Exception as exc:  # safetensors' own SafetensorError (a Rust exception), which subclasses nothing useful
        raise MixbenchError(f"{file} is truncated or not a safetensors file ({type(exc).__name__}: "
                            f"{_first_line(exc)}).") from None


def _check_fit(raw: dict[str, Any], config: Path, shapes: dict[str, tuple[int, ...]], nbytes: int) -> None:
    """The vocabulary and widths config.json gives fit the weights, before transformers allocates them: the
    vocabulary is the embedding's row count (where the safetensors headers show an embedding), and no size, nor
    the embedding it implies, is more numbers than the weight files hold (at least half a byte each: 4-bit)."""
    embeddings = [shape for name, shape in shapes.items() if len(shape) == 2 and _EMBEDDING.search(name)]
    capacity = 2 * nbytes
    for where, section in _sections(raw):
        vocab = section.get("vocab_size")
        if isinstance(vocab, int) and embeddings and all(rows != vocab for rows, _ in embeddings):
            raise MixbenchError(f"{config} gives {where}vocab_size {vocab} but the weights' embedding has "
                                f"{embeddings[0][0]} rows.")
        for key in _WIDTH_KEYS:
            value = section.get(key)
            if isinstance(value, int) and value > capacity:
                raise MixbenchError(f"{config} gives {where}{key} {value}, more than the {nbytes:,} bytes of its "
                                    "weight files could hold.")
        width = next((section[k] for k in ("hidden_size", "n_embd", "d_model") if isinstance(section.get(k), int)),
                     None)
        if isinstance(vocab, int) and width is not None and vocab * width > capacity:
            raise MixbenchError(f"{config} gives {where}vocab_size {vocab} and a width of {width}, an embedding of "
                                f"{vocab * width:,} numbers, more than the {nbytes:,} bytes of its weight files "
                                "could hold.")


def check_folder(folder: Path) -> dict[str, Any]:
    """The config.json of a local model folder, once the folder passed the checks that keep it from transformers'
    loader, which answers a broken folder with a traceback, or with an allocation of the size config.json gives (a
    vocabulary of 1e9): config.json is a JSON object whose sizes are positive, the weight files and a tokenizer
    exist, every safetensors header reads and covers its file, and the sizes fit the weights."""
    config = folder / "config.json"
    if not config.is_file():
        raise MixbenchError(f"{folder} holds no model: no config.json (give the folder a transformers model was saved "
                            "into with save_pretrained).")
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise MixbenchError(f"{config} is not readable JSON ({type(exc).__name__}: {_first_line(exc)}).") from None
    if not isinstance(raw, dict):
        raise MixbenchError(f"{config} holds a JSON {type(raw).__name__}, not an object of settings.")
    _check_sizes(raw, str(config))
    weights = sorted(f for pattern in ("*.safetensors", "*.bin") for f in folder.glob(pattern) if f.is_file())
    if not weights:
        raise MixbenchError(f"{folder} holds no weights: no *.safetensors or *.bin file beside its config.json.")
    shapes: dict[str, tuple[int, ...]] = {}
    for file in weights:
        if file.suffix == ".safetensors":
            shapes.update(_safetensors_shapes(file))
    _check_fit(raw, config, shapes, sum(f.stat().st_size for f in weights))
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        raise MixbenchError(f"{folder} holds no tokenizer (no {', '.join(_TOKENIZER_FILES)}): mixbench scores a "
                            "model with its own tokenizer, saved beside it with tokenizer.save_pretrained.")
    return raw


def _check_export_weights(hf_model: nn.Module, raw: dict[str, Any], where: str) -> None:
    """A folder written by ``mixbench export`` records the checkpoint's ``weights_sha256``
    (:func:`harness.model.checkpoint.weights_hash` over the mixbench model's state dict); the loaded weights, under
    their names in that model (without the ``model.`` prefix the export adds), must hash to it, or they are not the
    model the folder says it is."""
    from harness.model.checkpoint import weights_hash

    export = raw.get("mixbench_export")
    recorded = export.get("weights_sha256") if isinstance(export, dict) else None
    if not isinstance(recorded, str):
        return
    prefix = f"{getattr(hf_model, 'base_model_prefix', '')}."
    weights = {name.removeprefix(prefix): t for name, t in hf_model.state_dict().items()}
    if weights_hash(weights) != recorded:
        raise MixbenchError(f"exported model {where}: the weights do not match the hash in config.json "
                            "(mixbench_export.weights_sha256); it is corrupt or was edited after export: export the "
                            "checkpoint again.")


def _template_adds_nothing(processor: Any) -> bool:
    """The post-processor transformers' ``save_pretrained`` writes for a tokenizer that had none (the text alone,
    no special token): mixbench encodes without special tokens, so it changes nothing mixbench reads."""
    return (isinstance(processor, dict) and processor.get("type") == "TemplateProcessing"
            and processor.get("single") == [{"Sequence": {"id": "A", "type_id": 0}}]
            and not processor.get("special_tokens"))


def _mixbench_tokenizer(local: Path | None, raw: dict[str, Any], theirs: Tokenizer) -> Tokenizer | None:
    """The tokenizer mixbench trained an exported model with, when the folder's ``tokenizer.json`` still is it: read
    as mixbench reads its own (:meth:`Tokenizer.from_file`, without the empty post-processor transformers adds),
    with the end-of-text, pad and beginning ids transformers gives, its fingerprint and the documents of the
    export's data make the corpus fingerprint the export records. The model's tokens are then mixbench's, and its
    per-token metrics are in a mixbench row's unit; otherwise (not an export, an edited tokenizer, data that cannot
    be read here) None: it is scored as any external model, with its own tokenizer."""
    import tokenizers

    from harness.config import DataConfig, content_hash, from_dict
    from harness.corpus.data import SPLITS, load_documents
    from harness.corpus.tokenizer import digest_texts

    export = raw.get("mixbench_export")
    if local is None or not isinstance(export, dict) or not (local / "tokenizer.json").is_file():
        return None
    try:
        spec = json.loads((local / "tokenizer.json").read_text(encoding="utf-8"))
        if _template_adds_nothing(spec.get("post_processor")):
            spec["post_processor"] = None
        ours = Tokenizer(tokenizers.Tokenizer.from_str(json.dumps(spec)), str(local / "tokenizer.json"))
        if (ours.eos_id, ours.pad_id, ours.bos_id) != (theirs.eos_id, theirs.pad_id, theirs.bos_id):
            return None
        documents = load_documents(from_dict(DataConfig, export.get("data") or {}))
    except Exception:  # not mixbench's tokenizer, or its data is not here: scored with its own, as any external model
        return None
    # the corpus fingerprint as harness.corpus.data.load_corpus computes it: documents of every split, tokenizer
    docs = digest_texts((part for s in SPLITS for d in documents[s] for part in (s, d.id, d.text)), "docs")
    if content_hash({"documents": docs, "tokenizer": ours.fingerprint}) != export.get("corpus_fingerprint"):
        return None
    return ours


def load_external(source: str, revision: str | None = None, device: str = "cpu",
                  trust_remote_code: bool = False) -> ExternalLM:
    """A folder or a hub name as a causal LM (:func:`_model_class`) with its ``AutoTokenizer``, in float32 and eval
    mode. A broken folder, and whatever transformers raises, end in one sentence (:class:`MixbenchError`)."""
    import transformers
    from transformers import AutoTokenizer

    local = Path(source).expanduser()
    local = local if local.is_dir() else None
    if local is None and source.startswith((".", "/", "~")):
        raise MixbenchError(f"--hf-model {source}: no such folder; give a transformers model folder or a hub name "
                            "(owner/name).")
    if local is not None and revision is not None:
        raise MixbenchError(f"--revision {revision} picks a commit of a hub model, but {source} is a local folder, "
                            "scored as its files are now: drop --revision, or give the hub name.")
    where = str(local) if local is not None else source
    raw = check_folder(local) if local is not None else None
    try:
        if raw is None:
            raw, _ = transformers.PreTrainedConfig.get_config_dict(where, revision=revision)
            _check_sizes(raw, f"{source}'s config.json")
        tokenizer = AutoTokenizer.from_pretrained(where, revision=revision, trust_remote_code=trust_remote_code)
        model_class = _model_class(raw)
        remote = {"trust_remote_code": trust_remote_code} if model_class.__name__.startswith("Auto") else {}
        hf_model = model_class.from_pretrained(where, revision=revision, dtype=torch.float32, **remote)
    except MixbenchError:
        raise
    except Exception as exc:  # transformers, torch, safetensors and the model's own code raise anything
        hint = (" Its folder ships its own modeling code: pass --trust-remote-code if you trust it."
                if "custom code" in str(exc) and not trust_remote_code else "")
        raise MixbenchError(f"--hf-model {source} could not be loaded as a transformers causal LM "
                            f"({type(exc).__name__}: {_first_line(exc)}).{hint}") from None
    _check_export_weights(hf_model, raw, where)
    hf_model.to(device).eval()
    ours = Tokenizer.from_transformers(tokenizer, where)
    mixbench = _mixbench_tokenizer(local, raw, ours)
    ours = mixbench or ours
    name = source if local is None else local.resolve().name
    descriptor = ExternalDescriptor(
        name=name, source=where, revision=_revision(source, hf_model, local),
        model_class=type(hf_model).__name__, parameters=sum(p.numel() for p in hf_model.parameters()),
        dtype="float32", transformers=transformers.__version__, tokenizer=ours.fingerprint,
        mixbench_tokenizer=mixbench is not None,
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
