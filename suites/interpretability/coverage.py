"""Coverage of known concepts: does some unit track each label the corpus carries (Brown genre, SOTU era)?

For a family of labelled windows, each unit gets one number per window (its mean activation over the window), and
each concept a one-vs-rest membership indicator. Their Pearson correlation (the point-biserial correlation, the
MCC-style score SAELens uses for ground-truth features) fills a [units x concepts] matrix; the Hungarian algorithm
(``scipy.optimize.linear_sum_assignment``) then gives every concept its own unit, maximising the total correlation,
so one broad unit cannot cover every concept. A concept's coverage is its matched correlation (signed: a unit that
fires *less* for a concept does not represent it; 0 when there are fewer units than concepts and it gets none);
the family's coverage is the mean over concepts, with their standard deviation as the spread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment


def correlations(unit_values: np.ndarray, labels: np.ndarray, n_concepts: int) -> np.ndarray:
    """Pearson correlation of each unit's per-window value ``[n, U]`` with each concept's membership: [U, C].
    A unit constant over the windows correlates 0 with everything."""
    x = unit_values.astype(np.float64)
    x = x - x.mean(0)
    member = (labels[:, None] == np.arange(n_concepts)[None, :]).astype(np.float64)
    m = member - member.mean(0)
    num = x.T @ m
    den = np.sqrt((x**2).sum(0))[:, None] * np.sqrt((m**2).sum(0))[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, 0.0)


@dataclass(frozen=True)
class Coverage:
    per_concept: np.ndarray  # [C] matched correlation
    unit_of: np.ndarray  # [C] matched unit (column into the unit list), -1 when unmatched

    @property
    def mean(self) -> float:
        return float(self.per_concept.mean())

    @property
    def sd(self) -> float:
        return float(self.per_concept.std(ddof=1)) if len(self.per_concept) > 1 else 0.0


def hungarian_coverage(corr: np.ndarray) -> Coverage:
    """One unit per concept maximising the summed correlation ``corr [U, C]``."""
    rows, cols = linear_sum_assignment(corr, maximize=True)
    per = np.zeros(corr.shape[1])
    unit_of = np.full(corr.shape[1], -1)
    per[cols] = corr[rows, cols]
    unit_of[cols] = rows
    return Coverage(per, unit_of)
