"""The perturbation registry and the edit machinery every family shares.

A family lists the *sites* of a sentence it could change (a character span and the replacements it allows there);
:meth:`Perturbation.perturb` draws up to ``max_edits`` non-overlapping sites and one replacement each from the
example's own random stream, applies them, and records every :class:`Edit`. A sentence without a site gives None,
never an unchanged copy, so a pair set holds only real perturbations.

``kind`` separates robustness families (meaning-preserving: a smaller change of the model's predictions is better)
from sensitivity families (attribute flips: a larger change is the expected outcome); the suite reports their
aggregates separately.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any, ClassVar

from harness.errors import ConfigError, UnknownNameError
from suites.robustness.text import example_rng, pick, sample, words

KINDS = ("robustness", "sensitivity")


@dataclass(frozen=True)
class Option:
    replacement: str
    op: str  # what the edit does, e.g. "synonym", "keyboard", "misspelling", "us->gb", "expand"


@dataclass(frozen=True)
class Site:
    start: int  # character span in the original; start == end is an insertion
    end: int
    options: tuple[Option, ...]


@dataclass(frozen=True)
class Edit:
    """One change: ``text[start:end]`` (``word``) became ``replacement``, which starts at ``new_start`` in the
    perturbed text. ``word_index`` counts the original's words that end before the edit (for an edit of a word,
    that word's index)."""

    op: str
    word: str
    replacement: str
    start: int
    end: int
    new_start: int
    word_index: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Perturbed:
    text: str
    edits: tuple[Edit, ...]


def apply_edits(text: str, chosen: list[tuple[Site, Option]]) -> Perturbed:
    """The text with every chosen (site, option) applied, and the edits with positions in both texts."""
    chosen = sorted(chosen, key=lambda so: (so[0].start, so[0].end))
    ends = [w.end for w in words(text)]
    parts, edits, cursor, shift = [], [], 0, 0
    for site, option in chosen:
        if site.start < cursor:
            raise ValueError(f"overlapping edits at character {site.start}")
        parts += [text[cursor : site.start], option.replacement]
        word_index = sum(1 for e in ends if e <= site.start)
        word = text[site.start : site.end]
        edits.append(Edit(option.op, word, option.replacement, site.start, site.end, site.start + shift, word_index))
        shift += len(option.replacement) - len(word)
        cursor = site.end
    parts.append(text[cursor:])
    return Perturbed("".join(parts), tuple(edits))


class Perturbation:
    """Base class of a family; subclasses implement :meth:`sites` (and may override :meth:`choose`)."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "robustness"
    #: attribute flips change every site at once (a half-flipped sentence contradicts itself)
    all_sites: ClassVar[bool] = False

    def sites(self, text: str) -> list[Site]:
        raise NotImplementedError

    def choose(self, site: Site, rng: random.Random) -> Option:
        """Draw the kind of edit among those the site allows, then one replacement of that kind, so a site with many
        variants of one kind (keyboard typos) does not crowd out a rarer kind (attested misspellings)."""
        ops = sorted({o.op for o in site.options})
        op = pick(rng, ops)
        return pick(rng, [o for o in site.options if o.op == op])

    def perturb(self, text: str, rng: random.Random, max_edits: int = 1) -> Perturbed | None:
        sites = [s for s in self.sites(text) if s.options]
        if not sites:
            return None
        chosen: list[Site] = []
        order = sorted(sites, key=lambda s: (s.start, s.end)) if self.all_sites else sample(rng, sites, len(sites))
        for site in order:
            if not self.all_sites and len(chosen) == max_edits:
                break
            if not any(_overlaps(site, c) for c in chosen):
                chosen.append(site)
        return apply_edits(text, [(site, self.choose(site, rng)) for site in chosen])


def _overlaps(a: Site, b: Site) -> bool:
    if a.start == a.end == b.start == b.end:  # two insertions at one point
        return True
    return a.start < b.end and b.start < a.end


PERTURBATIONS: dict[str, type[Perturbation]] = {}


def register_perturbation(name: str, kind: str = "robustness") -> Callable[[type[Perturbation]], type[Perturbation]]:
    """Class decorator: ``@register_perturbation("typo")``; ``kind`` is "robustness" or "sensitivity"."""
    if kind not in KINDS:
        raise ValueError(f"perturbation {name}: kind must be one of {KINDS}, got {kind!r}")

    def decorate(cls: type[Perturbation]) -> type[Perturbation]:
        existing = PERTURBATIONS.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ValueError(f"perturbation name '{name}' is already registered by {existing.__qualname__}")
        cls.name, cls.kind = name, kind
        PERTURBATIONS[name] = cls
        return cls

    return decorate


@cache
def get_perturbation(name: str) -> Perturbation:
    try:
        return PERTURBATIONS[name]()
    except KeyError:
        raise UnknownNameError("perturbation", name, PERTURBATIONS) from None


def check_names(names: tuple[str, ...], field: str) -> None:
    unknown = [n for n in names if n not in PERTURBATIONS]
    if unknown:
        raise ConfigError(
            f"robustness: {field} has unknown perturbation(s) {unknown}; known: {', '.join(PERTURBATIONS)}."
        )


def perturb(name: str, text: str, seed: int, example_id: str, max_edits: int = 1) -> Perturbed | None:
    """Perturb ``text`` with family ``name``; the result depends only on (seed, family, example id, text)."""
    return get_perturbation(name).perturb(text, example_rng(seed, name, example_id), max_edits)
