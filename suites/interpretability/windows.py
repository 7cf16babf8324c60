"""The token windows each part of the suite reads, drawn deterministically from the corpus.

* held-out windows (profiles, interventions): full windows of ``Corpus.eval_windows`` of the named held-out splits,
  the same number from each split, evenly spaced over the split (so every document contributes);
* concept windows (coverage): Brown documents of the train split labelled by genre and State of the Union
  addresses (every split) labelled by era, ``per_concept`` windows per label taken round-robin over the label's
  documents (a seeded order), at evenly spaced offsets inside each document;
* basis windows: random windows of the training stream, as training draws them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from harness.kit import SPLITS, Corpus
from harness.errors import ConfigError


def held_out_windows(corpus: Corpus, splits: tuple[str, ...], window: int, tokens: int) -> torch.Tensor:
    """``[n, window + 1]`` int64 token windows, n = tokens // window split evenly over ``splits``."""
    per_split = max(1, tokens // window // len(splits))
    parts = []
    for split in splits:
        full = [w.ids for w in corpus.eval_windows(split, window) if len(w.ids) == window + 1]
        if not full:
            continue
        take = min(per_split, len(full))
        pick = (np.arange(take) * len(full)) // take
        parts.extend(full[i] for i in pick)
    if not parts:
        raise ConfigError(
            f"interpretability: the splits {list(splits)} hold no document of {window + 1} tokens; choose other "
            f"splits or a shorter window."
        )
    return torch.from_numpy(np.stack(parts).astype(np.int64))


@dataclass(frozen=True)
class ConceptFamily:
    """Windows labelled with one concept each (one-vs-rest membership within the family)."""

    name: str  # "genre" | "era"
    concepts: tuple[str, ...]
    ids: torch.Tensor  # [n, window] int64
    labels: np.ndarray  # [n] concept index


#: Brown corpus category letters (the corpus's own labels)
BROWN_GENRES = {
    "a": "press: reportage", "b": "press: editorial", "c": "press: reviews", "d": "religion",
    "e": "skill and hobbies", "f": "popular lore", "g": "belles-lettres", "h": "miscellaneous: government",
    "j": "learned", "k": "general fiction", "l": "mystery", "m": "science fiction", "n": "adventure",
    "p": "romance", "r": "humor",
}


def concept_families(corpus: Corpus, per_concept: int, window: int, era_bounds: tuple[int, ...],
                     seed: int) -> list[ConceptFamily]:
    """The families the corpus labels: Brown genres and SOTU eras (empty list for other corpora)."""
    docs = [d for s in SPLITS for d in corpus.documents[s]]
    genre = {}
    for d in docs:
        if d.source == "brown" and isinstance(d.meta.get("genre"), str):
            genre.setdefault(d.meta["genre"], []).append(d)
    era = {}
    edges = [-10**9, *era_bounds, 10**9]
    for d in docs:
        year = d.meta.get("year")
        if d.source == "sotu" and isinstance(year, int):
            i = int(np.searchsorted(edges, year, side="right")) - 1
            era.setdefault(_era_name(edges, i), []).append(d)
    families = []
    for name, groups in (("genre", genre), ("era", dict(sorted(era.items())))):
        if len(groups) >= 2:
            labels = {k: BROWN_GENRES.get(k, k) for k in groups} if name == "genre" else {k: k for k in groups}
            families.append(_family(corpus, name, groups, labels, per_concept, window, seed))
    return families


def _era_name(edges: list[int], i: int) -> str:
    lo, hi = edges[i], edges[i + 1]
    return f"<{hi}" if lo < 0 else (f">={lo}" if hi >= 10**9 else f"{lo}-{hi - 1}")


def _family(corpus, name, groups, labels, per_concept, window, seed) -> ConceptFamily:
    rng = np.random.default_rng([seed, len(name)])
    rows, concept_of = [], []
    keys = sorted(groups)
    for c, key in enumerate(keys):
        members = sorted(groups[key], key=lambda d: d.id)
        encoded = []  # the first documents of a seeded order that hold a window (only those are tokenised)
        for i in rng.permutation(len(members)):
            ids = np.asarray(corpus.tokenizer.encode(members[i].text), dtype=np.int64)
            if len(ids) >= window:
                encoded.append(ids)
                if len(encoded) == per_concept:
                    break
        if not encoded:
            continue
        slots = -(-per_concept // len(encoded))  # windows per document, spread over it
        for j in range(per_concept):
            ids = encoded[j % len(encoded)]
            slot = j // len(encoded)
            start = (len(ids) - window) * (2 * slot + 1) // (2 * slots)
            rows.append(ids[start : start + window])
            concept_of.append(c)
    return ConceptFamily(name, tuple(labels[k] for k in keys), torch.from_numpy(np.stack(rows)),
                         np.asarray(concept_of))


def top_vocabulary(corpus: Corpus, k: int) -> np.ndarray:
    """The k most frequent token ids of the training stream (ties by id), most frequent first."""
    counts = np.bincount(corpus.train_tokens, minlength=corpus.tokenizer.vocab_size)
    order = np.lexsort((np.arange(len(counts)), -counts))
    return order[: min(k, int((counts > 0).sum()))]


def basis_windows(corpus: Corpus, vocab: np.ndarray, n: int, length: int, seed: int) -> torch.Tensor:
    """``[n, length + 1]`` windows of the training stream as vocabulary indices (-1: not among ``vocab``)."""
    stream = corpus.train_tokens
    if len(stream) < length + 1:
        raise ConfigError(f"interpretability: the training stream is shorter than basis_len + 1 = {length + 1}.")
    starts = np.random.default_rng([seed, 7]).integers(0, len(stream) - length, size=n)
    windows = stream[starts[:, None] + np.arange(length + 1)]
    index = np.full(corpus.tokenizer.vocab_size, -1, dtype=np.int64)
    index[vocab] = np.arange(len(vocab))
    return torch.from_numpy(index[windows])
