"""Building a validated training run spec from a preset and command-line overrides.

Everything that can be wrong with a request (unknown mixer or preset, bad config values, d_model not
divisible by heads, a missing data path) is found here, before any data is loaded or any model trained:
the model is constructed once on the ``meta`` device, which runs every mixer's own validation for free.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from harness.config import BackboneConfig, DataConfig, ModelSpec, RunSpec, TrainConfig, get_preset, to_dict
from harness.errors import ConfigError, MixbenchError
from harness.registry import MIXERS
from harness.values import coerce_values


def parse_assignments(items: list[str] | None) -> dict[str, Any]:
    """``["n_prototypes=16", "beta_init=0.8"]`` -> ``{"n_prototypes": "16", "beta_init": "0.8"}``.

    Values stay strings: the config they are meant for converts each by its field's type (``"2.5"`` is no
    integer, ``"true"`` no count, ``"nan"`` no size; see :mod:`harness.values`), which a guess made here
    without knowing the field cannot do.
    """
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"expected KEY=VALUE, got '{item}'; write e.g. max_windows=16.")
        key, raw = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if not key:
            raise ConfigError(f"expected KEY=VALUE, got '{item}' (no key before '=').")
        if key in out:
            raise ConfigError(f"{key} is given twice ({key}={out[key]} and {item}); give it once.")
        out[key] = raw.strip()
    return out


def check_data_source(cfg: DataConfig) -> None:
    """Fail early on a local data path that does not exist (hub names are checked when loaded)."""
    src = cfg.source
    if src == "embedded" or src.startswith("hub:"):
        return
    looks_local = src.startswith((".", "/", "~")) or Path(src).suffix or "/" not in src
    if looks_local and not Path(src).expanduser().exists():
        raise MixbenchError(
            f"data path {src} does not exist; pass an existing file or folder of text/json/parquet, "
            f"'embedded', or hub:NAME for a hub dataset."
        )
    if cfg.tokenizer_file and not Path(cfg.tokenizer_file).exists():
        raise MixbenchError(f"tokenizer file {cfg.tokenizer_file} does not exist.")


def make_run_spec(
    mixer: str,
    preset: str,
    mixer_config: dict[str, Any] | None = None,
    backbone_overrides: dict[str, Any] | None = None,
    train_overrides: dict[str, Any] | None = None,
    data_overrides: dict[str, Any] | None = None,
    *,
    match: str | None = None,
    recipes: bool = True,
) -> RunSpec:
    """A validated RunSpec whose vocab size is the requested one (set to the tokenizer's by ``bind_vocab``).

    The preset is resolved for this mixer (:func:`preset_defaults`): with ``match`` ``params`` (the board presets'
    default; None = the preset's) the MLP width matches the preset's reference mixer's parameters unless
    ``ffn_hidden`` is given, and the mixer's recipe file (``recipes``) supplies its tuned training values; the
    overrides go on top of both."""
    p = get_preset(preset)
    entry = MIXERS.get(mixer)
    # typed once here, so `n_prototypes=16` from the CLI and `n_prototypes: 16` from a plan are one model
    mixer_config = coerce_values(entry.config_cls, mixer_config, mixer)
    entry.make_config(mixer_config)  # validates field names and values
    data = data_config(preset, data_overrides)
    backbone_values = coerce_values(BackboneConfig, backbone_overrides, "backbone")
    given = {k: v for k, v in (train_overrides or {}).items() if v is not None}
    unknown = set(given) - {f.name for f in dataclasses.fields(TrainConfig)}
    if unknown:
        raise ConfigError(f"unknown training option(s): {', '.join(sorted(unknown))}.")
    backbone = BackboneConfig(**{**p.backbone, "vocab_size": data.vocab_size, **backbone_values})
    backbone, train_defaults = preset_defaults(preset, mixer, mixer_config, backbone, match=match, recipes=recipes,
                                               fixed_ffn="ffn_hidden" in backbone_values)
    train = TrainConfig(**coerce_values(TrainConfig, {**train_defaults, **given}, "train"))
    spec = RunSpec(ModelSpec(mixer, mixer_config, backbone), data, train, preset)
    validate_model(spec.model)
    return spec


def data_config(preset: str, data_overrides: dict[str, Any] | None = None) -> DataConfig:
    """The data a model at ``preset`` with ``data_overrides`` trains on, its source checked (no data is read)."""
    values = coerce_values(DataConfig, data_overrides, "data")
    data = DataConfig(**{"vocab_size": get_preset(preset).vocab_size, **values})
    check_data_source(data)
    return data


def preset_defaults(preset: str, mixer: str, mixer_config: dict[str, Any], backbone: BackboneConfig, *,
                    match: str | None = None, recipes: bool = True,
                    fixed_ffn: bool = False) -> tuple[BackboneConfig, dict[str, Any]]:
    """What ``preset`` gives this mixer config at ``backbone`` before any training override: the backbone with the
    matched MLP width (unless ``fixed_ffn`` or matching is off) and the training values with the recipe's. The
    board's labels compare a model with this, so a matched width and a tuned learning rate are not "differences"
    (docs/protocol.md)."""
    from harness.model.matching import MATCH_MODES, match_backbone
    from harness.model.recipes import find_recipe

    p = get_preset(preset)
    mode = p.match if match is None else match
    if mode not in MATCH_MODES:
        raise ConfigError(f"match must be one of {', '.join(MATCH_MODES)}, got {mode!r}.")
    if mode == "params" and not fixed_ffn:
        backbone = match_backbone(ModelSpec(mixer, mixer_config, backbone), p.match_reference)
    train = dict(p.train)
    if recipes:
        entry, source = find_recipe(preset, mixer, mixer_config, to_dict(backbone))
        if entry is not None:
            bad = set(entry.values) - {f.name for f in dataclasses.fields(TrainConfig)}
            if bad:
                raise ConfigError(f"{source}: the recipe of {mixer} sets unknown training option(s) "
                                  f"{', '.join(sorted(bad))}; regenerate it with `mixbench tune`.")
            train.update(entry.values)
    return backbone, train


def validate_model(model: ModelSpec) -> None:
    """Construct the model on the meta device: every mixer's own checks run, no memory is used. Then refuse a
    model whose weights alone would not fit this machine's memory (models are built here before they move
    anywhere), from the parameter count, before anything is allocated."""
    from harness.model.backbone import MixerLM
    from harness.model.memory import Estimate, check_fits

    with torch.device("meta"):
        built = MixerLM(model)
    n = sum(p.numel() for p in built.parameters())
    check_fits(Estimate(4 * n, f"its {n:,} parameters in float32"), "cpu", f"building the {model.mixer} model",
               "choose smaller config values (width, layers, the mixer's own sizes)")


def bind_vocab(spec: RunSpec, vocab_size: int) -> RunSpec:
    """The spec with the backbone's vocabulary set to the trained tokenizer's actual size."""
    backbone = dataclasses.replace(spec.model.backbone, vocab_size=vocab_size)
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, backbone=backbone))
