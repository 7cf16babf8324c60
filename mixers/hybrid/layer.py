"""``--mixers "hybrid:gated-deltanet*3+attention"``: a stack whose layers are other registered mixers, repeated
over the depth (docs/hybrids.md).

The name is the pattern: parts joined by ``+``, each optionally repeated with ``*N``; the period (the parts
expanded) repeats over the model's depth, which must be a multiple of it. A period as long as the depth is an
explicit per-layer list (``hybrid:deltanet+attention+deltanet+deltanet``).

A hybrid is a **factory**, not a layer of its own: the registry builds one class per pattern
(:func:`resolve`), and calling it as the backbone calls every mixer class, ``cls(config, d_model, i,
n_layers)``, returns the registered mixer of ``pattern[i mod period]`` built at layer ``i`` with its own config.
The model therefore holds the parts' layers themselves (their weights, kernels, states, FLOPs, units and
interventions, each layer's own), and everything that walks ``model.mixers`` sums or checks them per layer
without knowing a hybrid exists: the state and FLOPs are the layers' sums, the gate checks every layer and the
whole stack, and the parts' identities enter the hybrid's through :meth:`HybridMixer.components`.

Per-part configs are one option, ``parts``: a JSON object keyed by part name (``--mixer-config
'parts={"deltanet": {"num_heads": 2}}'``, or a mapping in a plan). It is normalised to every part's full config
(defaults filled in), so the hybrid's config, and hence its identity and recipe key, says exactly what each
part is. One name appears once in the object: two layers of one mixer share its config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.config import canonical_json, to_dict
from harness.errors import ConfigError, MixbenchError
from harness.mixer import Mixer
from harness.values import option

PREFIX = "hybrid"


def parse_pattern(rest: str) -> tuple[str, ...]:
    """``"gated-deltanet*3+attention"`` -> the period, one mixer name per layer; every error is one sentence."""
    name = f"{PREFIX}:{rest}"
    if not rest.strip():
        raise ConfigError(f"'{name}' names an empty pattern; write its parts, e.g. "
                          f"{PREFIX}:gated-deltanet*3+attention.")
    period: list[str] = []
    for k, term in enumerate(rest.split("+"), 1):
        part, star, count = term.strip().partition("*")
        part = part.strip()
        if not part:
            raise ConfigError(f"'{name}': part {k} is empty; join mixer names with '+', e.g. deltanet*3+attention.")
        if part.split(":")[0] == PREFIX:
            raise ConfigError(f"'{name}': a hybrid cannot contain a hybrid ({part}); write the layers out in one "
                              "pattern.")
        repeat = 1
        if star:
            if not count.strip().isdigit() or int(count) < 1:
                raise ConfigError(f"'{name}': '{term}' must repeat its part a positive whole number of times "
                                  f"(e.g. {part}*3).")
            repeat = int(count)
        period += [part] * repeat
    return tuple(period)


@dataclass(frozen=True)
class HybridConfig:
    """Every part's config; normalised to the full configs of all parts (see the module docstring)."""

    #: the pattern's distinct parts, in order (set per pattern by :func:`resolve`)
    part_names: ClassVar[tuple[str, ...]] = ()

    parts: str | dict[str, Any] = option("{}", "per-part configs: a JSON object keyed by part name, e.g. "
                                                "{\"deltanet\": {\"num_heads\": 2}}")

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", canonical_json(self.part_configs()))

    def part_configs(self) -> dict[str, dict[str, Any]]:
        """Part name -> its full config as a dict (every part of the pattern, defaults filled in)."""
        from harness.registry import MIXERS

        given = self.parts
        if isinstance(given, str):
            try:
                given = json.loads(given or "{}")
            except json.JSONDecodeError as exc:
                raise ConfigError(f"parts must be a JSON object keyed by part name: {exc}.") from None
        if not isinstance(given, dict):
            raise ConfigError(f"parts must be a JSON object keyed by part name, got {self.parts!r}.")
        unknown = sorted(set(given) - set(self.part_names))
        if unknown:
            raise ConfigError(f"parts configures {', '.join(unknown)}, which the pattern does not hold (its parts: "
                              f"{', '.join(self.part_names)}).")
        out = {}
        for part in self.part_names:
            values = given.get(part) or {}
            if not isinstance(values, dict):
                raise ConfigError(f"parts.{part} must be an object of {part}'s config fields, got {values!r}.")
            out[part] = to_dict(MIXERS.get(part).make_config(values))
        return out


class HybridMixer(Mixer):
    """Base of every ``hybrid:<pattern>`` class; calling one builds the part of layer ``i`` (module docstring)."""

    #: the layers of one period, one mixer name each (set per pattern by :func:`resolve`)
    period: ClassVar[tuple[str, ...]] = ()

    def __new__(cls, cfg: HybridConfig, d_model: int, layer_idx: int, n_layers: int) -> Mixer:  # type: ignore[misc]
        from harness.registry import MIXERS

        if n_layers % len(cls.period):
            raise ConfigError(
                f"'{cls.name}' repeats a period of {len(cls.period)} layers over the depth, but the model has "
                f"{n_layers}; use a depth that is a multiple of {len(cls.period)} (--backbone n_layers=N, or a plan's "
                "backbone).")
        part = cls.period[layer_idx % len(cls.period)]
        entry = MIXERS.get(part)
        return entry.cls(entry.make_config(cfg.part_configs()[part]), d_model, layer_idx, n_layers)

    @classmethod
    def components(cls, cfg: HybridConfig) -> list[tuple[str, dict[str, Any]]]:
        """The registered mixers this one builds its layers from, each with its full config: their identities
        (name, version, code, config) are part of the hybrid's (harness/store/identity.py)."""
        return list(cfg.part_configs().items())


def resolve(rest: str) -> tuple[type[HybridMixer], type]:
    """The class and config class of ``hybrid:<rest>`` (built once per name by the registry's resolver)."""
    from harness.registry import MIXERS

    period = parse_pattern(rest)
    names = tuple(dict.fromkeys(period))
    try:
        classes = [MIXERS.get(n).cls for n in names]
    except MixbenchError as exc:
        raise ConfigError(f"'{PREFIX}:{rest}': {exc}") from None
    kernels = set.intersection(*(set(c.kernels[1:]) for c in classes))
    attrs: dict[str, Any] = {
        "period": period,
        "depth_multiple": len(period),
        "kernels": ("reference", *sorted(kernels)),  # a kernel named for the whole model must exist in every part
        "length_extrapolation": all(c.length_extrapolation for c in classes),
        "context_free": all(c.context_free for c in classes),
        "control": False,
        "paper": "hybrid of " + ", ".join(names) + " (docs/hybrids.md)",
        "__doc__": f"A hybrid stack: {' + '.join(period)}, repeated over the depth (docs/hybrids.md).",
        "__module__": __name__,
    }
    config = type("HybridConfig", (HybridConfig,), {"part_names": names, "__module__": __name__})
    return type("Hybrid", (HybridMixer,), attrs), config
