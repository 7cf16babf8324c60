"""Matched sizes: each mixer's MLP width set so that its model's non-embedding parameters are within 5% of a
reference mixer's at the same backbone (docs/protocol.md, "Matched sizes").

Mixers differ in how many parameters their layer holds (at preset quick: the controls' 16k per layer, attention's
66k, Mamba's 116k). Compared at one MLP width, a bigger model can win by size alone; the field compares at
matched parameter counts (the Mamba paper pairs two Mamba blocks with one Transformer layer, xLSTM matches sizes).
The MLP width is the one knob every model shares, so it absorbs the difference: ``ffn_hidden`` is solved from
the parameter count per MLP unit (``3 d_model`` per layer: gate, up and down), rounded to the nearest unit.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from harness.config import BackboneConfig, ModelSpec, canonical_json
from harness.errors import ConfigError

#: the largest relative difference in non-embedding parameters a matched model may keep
MATCH_TOLERANCE = 0.05
#: the values of a preset's (or a plan's) ``match`` option
MATCH_MODES = ("params", "none")


def non_embedding_parameters(model: ModelSpec) -> int:
    """Parameters of the model without its (tied) embedding, counted on the ``meta`` device (no memory used)."""
    return _count(model.mixer, canonical_json(model.mixer_config), model.backbone)


@functools.lru_cache(maxsize=256)
def _count(mixer: str, mixer_config_json: str, backbone: BackboneConfig) -> int:
    import json

    from harness.model.backbone import MixerLM

    with torch.device("meta"):
        built = MixerLM(ModelSpec(mixer, json.loads(mixer_config_json), backbone))
    return built.num_parameters(exclude_embedding=True)


def matched_ffn(model: ModelSpec, reference: str) -> int:
    """The MLP width at which ``model`` has the non-embedding parameters of ``reference`` (default config, default
    MLP width) at the same backbone, to within one MLP unit; refuses a model whose layers alone outgrow the target."""
    default = dataclasses.replace(model.backbone, ffn_hidden=0)
    target = non_embedding_parameters(ModelSpec(reference, {}, default))
    own = non_embedding_parameters(ModelSpec(model.mixer, model.mixer_config, default))
    per_unit = 3 * default.d_model * default.n_layers
    width = default.ffn_dim + round((target - own) / per_unit)
    if width < 1:
        raise ConfigError(
            f"cannot match {model.mixer}'s parameters to {reference}'s ({target:,} without the embedding) by the MLP "
            f"width: its {own - per_unit * default.ffn_dim:,} parameters outside the MLPs exceed them; use a smaller "
            f"mixer config, or `match: none` (--match none) to compare at unmatched sizes."
        )
    return width


def match_backbone(model: ModelSpec, reference: str) -> BackboneConfig:
    """``model``'s backbone with the matched MLP width; refused when even that width leaves the model more than
    :data:`MATCH_TOLERANCE` from the reference (a backbone so small that one MLP unit is a large step)."""
    backbone = dataclasses.replace(model.backbone, ffn_hidden=matched_ffn(model, reference))
    gap = relative_gap(ModelSpec(model.mixer, model.mixer_config, backbone), reference)
    if abs(gap) > MATCH_TOLERANCE:
        raise ConfigError(f"{model.mixer} cannot be matched to {reference}'s parameters within "
                          f"{MATCH_TOLERANCE:.0%} at this backbone (it stays {gap:+.1%} away); use a wider backbone, "
                          "or `match: none` (--match none) to compare at unmatched sizes.")
    return backbone


def relative_gap(model: ModelSpec, reference: str) -> float:
    """(model - reference) / reference in non-embedding parameters, the reference at the default MLP width."""
    target = non_embedding_parameters(ModelSpec(reference, {}, dataclasses.replace(model.backbone, ffn_hidden=0)))
    return (non_embedding_parameters(model) - target) / target
