"""Robustness suite (docs/DESIGN.md §5): lexical perturbations of held-out sentences and how far each mixer's next-token
predictions move. Importing the package registers the suite and the built-in perturbation families.

Public API: :func:`register_perturbation` / :class:`Perturbation` (add a family), :func:`perturb`,
:func:`build_pairs` / :func:`held_out_sentences` / :func:`save_pairs` / :func:`load_pairs` (pair sets),
:class:`RobustnessConfig` and :class:`Robustness` (the suite).
"""

from suites.robustness import attributes, families  # noqa: F401  (register the built-in families, in this order)
from suites.robustness.pairs import Pair, PairSetSpec, build_pairs, held_out_sentences, load_pairs, save_pairs
from suites.robustness.perturbations import (
    PERTURBATIONS,
    Edit,
    Option,
    Perturbation,
    Perturbed,
    Site,
    perturb,
    register_perturbation,
)
from suites.robustness.suite import Robustness, RobustnessConfig

__all__ = [
    "PERTURBATIONS", "Edit", "Option", "Pair", "PairSetSpec", "Perturbation", "Perturbed", "Robustness",
    "RobustnessConfig", "Site", "build_pairs", "held_out_sentences", "load_pairs", "perturb",
    "register_perturbation", "save_pairs",
]  # fmt: skip
