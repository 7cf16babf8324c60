"""Judge-free scores of a unit from its profile, and their summaries over a set of units.

* coherence: mean pairwise cosine similarity of the sentence embeddings of the unit's top contexts (higher: the
  contexts are about one thing); compared with the same statistic for random contexts of the same windows;
* themes: the number of clusters among those embeddings, average linkage on cosine distance cut at
  ``themes_distance`` (lower: fewer senses; the paper's number-of-themes, without a judge);
* token entropy and dead units come with the profile (:mod:`suites.interpretability.profiles`).

Summaries are the mean over units with a percentile bootstrap CI over units, and the standard deviation as the
spread. Dead units are left out of the means (their "top" contexts are noise) and counted separately.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage

from harness import stats
from harness.stats import Interval


def coherence(emb: np.ndarray) -> float:
    """Mean off-diagonal cosine of unit vectors ``emb [n, d]`` (n >= 2)."""
    n = len(emb)
    if n < 2:
        return float("nan")
    sims = emb @ emb.T
    return float((sims.sum() - np.trace(sims)) / (n * (n - 1)))


def n_themes(emb: np.ndarray, distance: float) -> int:
    """Average-linkage clusters of ``emb`` (cosine distance), cut at ``distance``."""
    if len(emb) < 2:
        return len(emb)
    z = linkage(emb.astype(np.float64), method="average", metric="cosine")
    return int(fcluster(z, t=distance, criterion="distance").max())


@dataclass(frozen=True)
class Summary:
    mean: float
    sd: float
    interval: Interval | None
    n: int


def summarise(values, bootstrap: int, seed: int, confidence: float = 0.95) -> Summary:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=np.float64)
    if len(v) == 0:
        return Summary(float("nan"), float("nan"), None, 0)
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    res = stats.bootstrap((v,), np.mean, n_resamples=bootstrap, level=confidence, seed=seed)
    return Summary(res.point, sd, res.interval, len(v))
