"""GLUE's metrics in numpy alone (intervals come from :mod:`harness.stats`).

The metric functions follow scikit-learn's and scipy's definitions (the tests check them against those
libraries), so the suite needs neither at run time. Two conventions where those libraries warn instead:
F1 is 0 when there is no positive prediction or label, and a correlation with a constant input is 0 (a
predictor that outputs one value carries no information about the ranking; NaN would poison the average).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.stats import rankdata



def accuracy(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean(np.asarray(y) == np.asarray(p)))


def f1_binary(y: np.ndarray, p: np.ndarray) -> float:
    """F1 of the positive class (label 1), as GLUE scores MRPC and QQP."""
    y, p = np.asarray(y) == 1, np.asarray(p) == 1
    tp = np.sum(y & p)
    denom = 2 * tp + np.sum(~y & p) + np.sum(y & ~p)
    return float(2 * tp / denom) if denom else 0.0


def mcc(y: np.ndarray, p: np.ndarray) -> float:
    """Matthews correlation, multi-class form (Gorodkin's R_K, as scikit-learn); 0 when undefined."""
    y, p = np.asarray(y, dtype=np.int64), np.asarray(p, dtype=np.int64)
    k = int(max(y.max(), p.max())) + 1
    c = np.bincount(y * k + p, minlength=k * k).reshape(k, k).astype(np.float64)
    t_sum, p_sum, n = c.sum(1), c.sum(0), c.sum()
    cov_tp = np.trace(c) * n - t_sum @ p_sum
    cov_pp = n * n - p_sum @ p_sum
    cov_tt = n * n - t_sum @ t_sum
    denom = math.sqrt(cov_tt * cov_pp)
    return float(cov_tp / denom) if denom else 0.0


def pearson(y: np.ndarray, p: np.ndarray) -> float:
    y, p = np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64)
    yc, pc = y - y.mean(), p - p.mean()
    denom = math.sqrt(float(yc @ yc) * float(pc @ pc))
    return float(yc @ pc / denom) if denom else 0.0


def spearman(y: np.ndarray, p: np.ndarray) -> float:
    return pearson(rankdata(y), rankdata(p))


METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "acc": accuracy,
    "f1": f1_binary,
    "mcc": mcc,
    "pearson": pearson,
    "spearman": spearman,
}
