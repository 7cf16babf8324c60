"""Interpretability suite (docs/DESIGN.md §5; docs/PAPERS.md §A.4 items 7-8 and §B): unit profiles, judge-free (and optional
judge) scores, coverage of known concepts, targeted interventions, corpus-statistics basis functions.

``mixbench eval --suite interpretability --checkpoint C [--suite-config KEY=VALUE ...]`` runs the parts in
``parts`` (default: units, null, sae, coverage, interventions, basis; add ``toy`` for the leading-terms toy
reproduction, ~8 min of one CPU core at the defaults). The LLM-judge scores are off unless ``judge_url`` is set
(``local`` or an OpenAI-compatible URL with ``judge_model``); every other metric is judge-free. The basis part
compares B, Sigma, Phi^T B^T and Q with the model's token-space maps (bigram logits, embeddings, residual stream,
mixer output, key-query map) at the checkpoint, at its initialisation and at any ``basis_checkpoints``. Modules,
one job each:

* :mod:`.windows` the token windows every part reads; :mod:`.activations` per-unit activations through the public
  mixer interfaces (recorded gates, unit masks); :mod:`.profiles` top tokens/contexts, dead units, ProtoT's
  read-versus-write lag; :mod:`.embedding` offline MiniLM sentence embeddings; :mod:`.scores` coherence, themes,
  summaries; :mod:`.coverage` Hungarian-matched concept coverage; :mod:`.sae` the top-k SAE baseline;
  :mod:`.interventions` unit choice, prompts, dprob / dppl; :mod:`.basis` B, Sigma, Phi, Q, Delta;
  :mod:`.tokenspace` the Pythia single-token protocol; :mod:`.toy` the one-hot toy model; :mod:`.judge` optional
  judge scores; :mod:`.cards` the HTML unit cards; :mod:`.suite` the orchestration and metric names.

Quickstart (judge-free metrics and one intervention, <= 45 s per quick-preset mixer on the 2-core CPU):
:data:`QUICKSTART`.
"""

from suites.interpretability.basis import Basis, basis_functions, frobenius_cosine
from suites.interpretability.config import InterpConfig
from suites.interpretability.coverage import correlations, hungarian_coverage
from suites.interpretability.suite import Interpretability
from suites.interpretability.toy import OneHotAttention, train_toy

#: suite overrides for `mixbench quickstart` / a grid's quick pass
QUICKSTART = Interpretability.quickstart

__all__ = [
    "QUICKSTART",
    "Basis",
    "InterpConfig",
    "Interpretability",
    "OneHotAttention",
    "basis_functions",
    "correlations",
    "frobenius_cosine",
    "hungarian_coverage",
    "train_toy",
]
