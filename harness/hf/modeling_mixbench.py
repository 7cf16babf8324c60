"""A mixbench model as a ``transformers`` causal LM (docs/huggingface.md, "What an exported folder holds").

``mixbench export`` copies this file, unchanged apart from a header, into the exported folder as
``modeling_mixbench.py``; ``config.json``'s ``auto_map`` names its classes, so
``AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`` builds the model with mixbench's own
backbone and mixer code (``pip install mixbench`` is the one requirement, as fla's models need fla) and loads
the exported weights into it. The file therefore imports only torch, transformers and mixbench's public
modules, and the copy in a folder is exactly the code the tests run.

A plugin mixer registers when its module is imported, so :func:`import_mixer` imports it before anything looks
the mixer up: the installed module, else (a single-file plugin) the copy ``mixbench export`` put in the model's
folder, checked against the sha256 in ``config.json``'s ``mixbench_plugin`` (a hybrid's plugin parts:
``mixbench_part_plugins``, docs/hybrids.md). Plain ``transformers``, lm-eval's
``hf`` model and ``mixbench eval --hf-model`` then load a plugin model in a fresh process without ``--plugin``.

Faithfulness: the mixer's source fingerprint and the backbone's are written into ``config.json`` at export; a
different mixbench whose code would compute other numbers from the same weights is refused when the model is
built (``mixbench_allow_code_change=True`` in ``from_pretrained`` accepts it, and a warning says so).

Generation goes through each mixer's ``step()``: :class:`MixbenchCache` is a ``transformers`` ``Cache`` that
holds the per-layer decode states of :meth:`harness.model.backbone.MixerLM.init_states`; the prompt is one
prefill ``forward`` from a fresh state, and every later token one ``step`` (what ``mixbench`` decodes with).
Padding: right padding is exact (every mixer is causal); left padding would feed pad tokens into a stateful
mixer's state, so a batch with a zero at the start of the attention mask is refused.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache
from transformers.modeling_outputs import CausalLMOutputWithPast

MODEL_TYPE = "mixbench"


class MixbenchConfig(PretrainedConfig):
    """The run spec's model part (mixer, full mixer config, backbone) plus the code fingerprints at export."""

    model_type = MODEL_TYPE

    def __init__(
        self,
        mixer: str = "attention",
        mixer_config: dict[str, Any] | None = None,
        mixer_source: str = "",
        backbone: dict[str, Any] | None = None,
        mixbench_code: dict[str, str] | None = None,
        mixbench_allow_code_change: bool = False,
        mixbench_plugin: dict[str, str] | None = None,
        mixbench_part_plugins: list[dict[str, str]] | None = None,
        use_cache: bool = True,
        **kwargs: Any,
    ):
        self.mixer = mixer
        self.mixbench_plugin = dict(mixbench_plugin or {})
        self.mixbench_part_plugins = [dict(p) for p in mixbench_part_plugins or []]
        self.mixer_config = dict(mixer_config or {})
        self.mixer_source = mixer_source
        self.backbone = dict(backbone or {"d_model": 64, "n_layers": 2, "context": 128, "vocab_size": 512})
        self.mixbench_code = dict(mixbench_code or {})
        self.mixbench_allow_code_change = mixbench_allow_code_change
        self.use_cache = use_cache
        # the names transformers and lm-eval read (hidden size, depth, context, vocabulary)
        self.vocab_size = int(self.backbone["vocab_size"])
        self.hidden_size = int(self.backbone["d_model"])
        self.num_hidden_layers = int(self.backbone["n_layers"])
        self.max_position_embeddings = int(self.backbone["context"])
        kwargs.setdefault("tie_word_embeddings", True)
        super().__init__(**kwargs)


def _model_spec(config: MixbenchConfig):
    from harness.config import BackboneConfig, ModelSpec

    import_mixer(config)
    return ModelSpec(config.mixer, dict(config.mixer_config), BackboneConfig(**config.backbone))


def import_mixer(config: MixbenchConfig) -> None:
    """Register the model's mixer before anything looks it up: a plugin mixer registers when its module is
    imported. An installed module is imported; else a single-file plugin the export copied beside this file
    (``mixbench_plugin``: its module, file and sha256) is loaded from the model's folder, once its bytes match."""
    from harness.registry import MIXERS

    for part in getattr(config, "mixbench_part_plugins", None) or []:  # a hybrid's plugin parts (docs/hybrids.md)
        _import_plugin(config, str(part.get("module", "")), dict(part))
    if _registered(config.mixer) or not config.mixer_source:
        return
    _import_plugin(config, config.mixer_source.rsplit(".", 1)[0], dict(getattr(config, "mixbench_plugin", None) or {}))
    if config.mixer not in MIXERS.names():
        raise RuntimeError(f"importing {config.mixer_source.rsplit('.', 1)[0]} did not register the mixer "
                           f"'{config.mixer}'.")


def _registered(mixer: str) -> bool:
    """Whether ``mixer`` is known here, a name a resolver builds (``hybrid:...``) included."""
    from harness.errors import MixbenchError
    from harness.registry import MIXERS

    try:
        MIXERS.get(mixer)
    except MixbenchError:
        return False
    return True


def _import_plugin(config: MixbenchConfig, module: str, plugin: dict[str, Any]) -> None:
    """Import ``module``: installed, else the single file ``plugin`` names beside the model, once its bytes match."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0] and exc.name != module:
            raise  # the plugin is there but imports something missing: that message says what
        folder = Path(str(getattr(config, "_name_or_path", "") or ""))
        file = folder / str(plugin.get("file", ""))
        if not plugin.get("file") or not file.is_file():
            raise RuntimeError(
                f"this model's mixer '{config.mixer}' comes from the plugin module {module}, which is not installed "
                f"here{' and not beside the model' if plugin.get('file') else ''}: install it (pip install the "
                "package that provides it, or put its file on PYTHONPATH).") from None
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        if digest != plugin.get("sha256"):
            raise RuntimeError(f"{file} is not the plugin the model was exported with (sha256 {digest[:16]} instead "
                               f"of {str(plugin.get('sha256'))[:16]}): export the model again.") from None
        spec = importlib.util.spec_from_file_location(module, file)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules[module]
            raise


def code_fingerprints(mixer: str, mixer_config: dict[str, Any] | None = None) -> dict[str, str]:
    """Fingerprints of the code that turns these weights into numbers: the mixer's source (its module and what it
    imports from its own package), each part's for a hybrid (``part_code:NAME``, docs/hybrids.md), and the
    backbone's."""
    from harness.registry import MIXERS
    from harness.store.identity import core_fingerprint, plugin_fingerprint

    entry = MIXERS.get(mixer)
    out = {"mixer_code": plugin_fingerprint(entry.cls),
           "backbone_code": core_fingerprint(("harness.model.backbone",))}
    components = getattr(entry.cls, "components", None)
    if components is not None:
        for part, _ in components(entry.make_config(mixer_config)):
            out[f"part_code:{part}"] = plugin_fingerprint(MIXERS.get(part).cls)
    return out


def _check_code(config: MixbenchConfig) -> None:
    exported = config.mixbench_code
    if not exported:
        return
    now = code_fingerprints(config.mixer, config.mixer_config)
    changed = sorted(k for k in exported if now.get(k) != exported[k])
    if not changed:
        return
    message = (f"this mixbench's {' and '.join(changed)} for '{config.mixer}' differ from the code the model was "
               f"exported with ({', '.join(f'{k} {exported[k]}' for k in changed)}): the same weights may give "
               "other numbers. Install the mixbench revision named in the model card")
    if not config.mixbench_allow_code_change:
        raise RuntimeError(message + ", or pass mixbench_allow_code_change=True to from_pretrained.")
    warnings.warn(message + "; loading anyway (mixbench_allow_code_change=True).", stacklevel=3)


class MixbenchCache(Cache):
    """Per-layer decode states of a mixbench model (each mixer's own ``init_state``/``step`` state) and the number
    of tokens they have consumed."""

    def __init__(self, states: list[Any]):
        super().__init__(layers=[])
        self.states = states
        self.seen = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("mixbench models decode with opaque per-mixer states: beam search is not "
                                  "supported; use greedy or sampling.")


class MixbenchForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = MixbenchConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]

    def __init__(self, config: MixbenchConfig):
        super().__init__(config)
        from harness.model.backbone import build_model

        import_mixer(config)  # before the code check looks the mixer up
        _check_code(config)
        self.model = build_model(_model_spec(config))
        self.post_init()

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> "MixbenchForCausalLM":
        """transformers builds the model on the meta device and loads the saved tensors; buffers a mixer computes
        in its constructor and does not save (RoPE frequencies) would be left uninitialised, so they are computed
        again here from a model built on the CPU."""
        model = super().from_pretrained(*args, **kwargs)
        model.restore_computed_buffers()
        return model

    def restore_computed_buffers(self) -> None:
        from harness.model.backbone import build_model

        saved = set(self.model.state_dict())
        computed = [name for name, _ in self.model.named_buffers() if name not in saved]
        if not computed:
            return
        with torch.device("cpu"):
            fresh = dict(build_model(_model_spec(self.config), seed=0).named_buffers())
        for name in computed:
            owner, _, attr = name.rpartition(".")
            module = self.model.get_submodule(owner)
            current = getattr(module, attr)
            module._buffers[attr] = fresh[name].to(device=current.device, dtype=current.dtype)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the first forward with use_cache makes a MixbenchCache from the mixers' own states

    def _init_weights(self, module: nn.Module) -> None:
        """Nothing: the backbone and each mixer initialise their own parameters, and loading replaces them."""

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.embed = value

    def get_output_embeddings(self) -> None:
        return None  # the head is the embedding matrix itself (MixerLM), not a separate tied layer

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: MixbenchCache | None = None,
        use_cache: bool | None = None,
        labels: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        if input_ids is None:
            raise ValueError("a mixbench model needs input_ids (inputs_embeds are not supported).")
        if cache is None:
            cache = kwargs.pop("past_key_values", None)  # the older name of the argument
        if attention_mask is not None and bool((attention_mask[:, :1] == 0).any()):
            raise ValueError("left padding would feed pad tokens into the mixers' states: pad on the right, or "
                             "generate one prompt (or equal-length prompts) at a time.")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if cache is not None and cache.seen > 0:
            if input_ids.shape[1] == 1:
                logits, states = self.model.step(input_ids[:, 0], cache.states)
                logits = logits[:, None]
            else:
                logits, states = self.model(input_ids, cache.states)  # prefill continuation
        elif use_cache or cache is not None:
            cache = cache if cache is not None else MixbenchCache([])
            logits, states = self.model(input_ids, self.model.init_states(input_ids.shape[0], input_ids.device))
        else:
            logits, states = self.model(input_ids)
        if cache is not None:
            cache.states = states
            cache.seen += input_ids.shape[1]
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache if use_cache else None)

    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, cache: MixbenchCache | None = None,
                                      attention_mask: torch.Tensor | None = None, use_cache: bool = True,
                                      **kwargs: Any) -> dict[str, Any]:
        """The tokens the states have not consumed yet (all of them at the first call, then the newest one)."""
        if cache is not None and cache.seen > 0:
            input_ids = input_ids[:, cache.seen:]
            attention_mask = None  # only the new token: its mask says nothing about padding
        return {"input_ids": input_ids, "cache": cache, "use_cache": use_cache, "attention_mask": attention_mask}
