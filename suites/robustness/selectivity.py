"""Selectivity: does an edit that changes a sentence's meaning move the model's prediction more than one that keeps
it? The robustness suite's score (docs/controls.md, "Robustness").

Raw change under meaning-preserving edits (``jsd_final/mean``) rewards a model for ignoring its context: a
context-free model changes by exactly 0 and would win. What a model should do is tell the two kinds of edit apart,
so the score compares them on the *same sentence*: the pair builder gives the sentences of the sensitivity
families (attribute flips: gender, number, negation) their robustness edits first (typo, synonym, ...), and for
every sentence that has both kinds,

    item(s) = share of (flip, keep) pairs of s with JSD_final(flip) > JSD_final(keep) + 1e-6 bits

``selectivity`` is the mean of the items over sentences (higher is better): 0.5 for a model that reacts to edits
without regard to meaning, 1 for one that always moves more on a meaning change, and 0 for a model whose final
prediction no edit moves (a context-free model, whose prediction depends on the final token alone): ignoring
the context scores worst, never best. Matching on the sentence removes what differs between sentences (length,
how predictable the continuation is). Items are sentences, so the interval is a bootstrap over sentences (a
cluster bootstrap of pairs) and the board compares two models on the same sentences.

``change_ratio`` (diagnostic) is the issue's suggested form: mean JSD under meaning-preserving edits over mean
JSD under meaning-changing ones on the matched sentences (lower is better; undefined, NaN, for a model that no
edit moves).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from harness import stats
from harness.stats import Interval
from harness.suite import ItemValues, Metric
from suites.robustness.pairs import Pair

#: a difference of final-position JSDs below this (bits) is a tie, not a move: rounding in two forward passes
TIE_BITS = 1e-6


def sentence_key(text: str) -> str:
    return "sentence/" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def matched_sentences(pairs: Sequence[Pair], jsd_final: np.ndarray, scored: np.ndarray,
                      kinds: dict[str, str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Sentence key -> (JSDs of its meaning-changing pairs, JSDs of its meaning-preserving pairs), for every
    original sentence with at least one scored pair of each kind (duplicated lines count once)."""
    groups: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
    for pair, ok, value in zip(pairs, scored, jsd_final, strict=True):
        if not ok or not math.isfinite(value) or pair.slice not in kinds:
            continue
        flips, keeps = groups.setdefault(sentence_key(pair.original), ({}, {}))
        (flips if kinds[pair.slice] == "sensitivity" else keeps)[f"{pair.slice}\0{pair.perturbed}"] = float(value)
    return {k: (np.array(list(f.values())), np.array(list(p.values()))) for k, (f, p) in sorted(groups.items())
            if f and p}


def selectivity_metrics(pairs: Sequence[Pair], jsd_final: np.ndarray, scored: np.ndarray, kinds: dict[str, str],
                        n_resamples: int, confidence: float, seed: int) -> tuple[list[Metric], dict]:
    """``selectivity`` (the score) and ``change_ratio`` (diagnostic), and what they rest on for the run's info."""
    matched = matched_sentences(pairs, jsd_final, scored, kinds)
    info = {"matched_sentences": len(matched),
            "matched_pairs": int(sum(len(f) + len(k) for f, k in matched.values()))}
    if not matched:
        info["selectivity"] = ("undefined: no sentence has both a meaning-changing and a meaning-preserving edit "
                               "(a pair file without shared sentences, or no sensitivity slice)")
        return [], info
    ids = tuple(matched)
    items = np.array([float(np.mean(f[:, None] > k[None, :] + TIE_BITS)) for f, k in matched.values()])
    keep_mean = np.array([k.mean() for _, k in matched.values()])
    flip_mean = np.array([f.mean() for f, _ in matched.values()])
    if np.all(items == items[0]):  # every sentence alike (a model no edit moves scores 0 on each): nothing varies
        value = stats.BootstrapResult(float(items[0]), Interval(items[0], items[0], "bootstrap", confidence),
                                      np.empty(0))
    else:
        value = stats.bootstrap([items], _mean, n_resamples=n_resamples, level=confidence, seed=[seed, 31])
    if flip_mean.sum() > 0:
        ratio = stats.bootstrap([keep_mean, flip_mean], _ratio, n_resamples=n_resamples, level=confidence,
                                seed=[seed, 37])
    else:  # no meaning-changing edit moved the prediction: the ratio does not exist
        ratio = stats.BootstrapResult(math.nan, None, np.empty(0))
    metrics = [
        Metric("selectivity", value.point, True, role="score", interval=_by_sentence(value.interval), n=len(ids),
               unit="share of (flip, keep) pairs", items=ItemValues(ids, tuple(items.tolist())), chance=0.5,
               perfect=1.0),
        Metric("change_ratio", ratio.point, False, interval=_by_sentence(ratio.interval), n=len(ids),
               unit="JSD keep / JSD flip"),
    ]
    return metrics, info


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _ratio(keep: np.ndarray, flip: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.mean(keep, axis=axis) / np.mean(flip, axis=axis)


def _by_sentence(interval: Interval | None) -> Interval | None:
    """Sentences are clusters of pairs: the bootstrap over them is a cluster bootstrap of the pairs."""
    if interval is None or not (math.isfinite(interval.low) and math.isfinite(interval.high)):
        return None
    return Interval(interval.low, interval.high, "cluster-bootstrap", interval.level)
