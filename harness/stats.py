"""The one statistics module: every interval and test in mixbench comes from here (docs/ARCHITECTURE.md, "Statistics").

Built on well-kept libraries where they have the method, hand-written only where they do not:

* percentile and BCa bootstrap, and paired resampling: ``scipy.stats.bootstrap``;
* Student-t and normal intervals: ``scipy.stats``; Wilson intervals: ``statsmodels``' ``proportion_confint``;
* the cluster bootstrap (duplicated or grouped items resampled as one unit) is not in either library and is
  written here, as is the bootstrap p-value of a paired difference; Holm's step-down correction is written
  here too (statsmodels has it, but runs a full garbage collection on every call; the tests compare the two).

Every interval is an :class:`Interval` that says what it is (``kind`` and ``level``), so a reader and the
nightly comparison never combine a min-max range with a 95% bootstrap interval as if they were the same thing.
An interval is never widened to contain its point estimate: a skewed statistic can fall outside its percentile
interval, and :meth:`Interval.contains` lets a caller report that as what it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: what an interval is: resampling (percentile / BCa / cluster), a parametric interval, or a plain range
INTERVAL_KINDS = ("bootstrap", "bca", "cluster-bootstrap", "t", "normal", "wilson", "range")
#: kinds whose ``level`` is a coverage probability (a ``range`` has none)
_PROBABILISTIC = frozenset(INTERVAL_KINDS) - {"range"}


@dataclass(frozen=True)
class Interval:
    """A two-sided interval with what it means: ``kind`` (one of :data:`INTERVAL_KINDS`) and ``level``.

    ``level`` is the nominal coverage (0.95) for every kind but ``range`` (min-max over repeats), whose level
    is ``None``. Bounds may be NaN when the data could not support an interval (one observation).
    """

    low: float
    high: float
    kind: str
    level: float | None = 0.95

    def __post_init__(self) -> None:
        if self.kind not in INTERVAL_KINDS:
            raise ValueError(f"interval kind must be one of {', '.join(INTERVAL_KINDS)}, got {self.kind!r}")
        if self.kind in _PROBABILISTIC:
            if self.level is None or not 0.0 < float(self.level) < 1.0:
                raise ValueError(f"a {self.kind} interval needs a level in (0, 1), got {self.level!r}")
            object.__setattr__(self, "level", float(self.level))
        elif self.level is not None:
            raise ValueError(f"a {self.kind} interval has no level, got {self.level!r}")
        for bound in ("low", "high"):
            value = getattr(self, bound)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise ValueError(f"interval {bound} must be a number, got {value!r}")
            object.__setattr__(self, bound, float(value))
        if self.low > self.high:
            raise ValueError(f"interval low {self.low} is above high {self.high}")

    @property
    def finite(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0

    def normal_stderr(self) -> float | None:
        """The standard error a normal interval of this width and level would have; ``None`` for a range.

        The one sanctioned way to put intervals of different kinds on one scale (the nightly comparison):
        it is exact for ``normal``, an approximation for the others, and refused for ``range``.
        """
        if self.level is None or not self.finite:
            return None
        from scipy.stats import norm

        return self.half_width / float(norm.ppf(0.5 + self.level / 2.0))

    def to_json(self) -> dict[str, Any]:
        return {"low": _json_float(self.low), "high": _json_float(self.high), "kind": self.kind, "level": self.level}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Interval":
        low = math.nan if d.get("low") is None else d["low"]
        high = math.nan if d.get("high") is None else d["high"]
        return Interval(low, high, d["kind"], d.get("level"))


def _json_float(x: float) -> float | None:
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class BootstrapResult:
    """A statistic's point value, its interval and the bootstrap replicates behind it."""

    point: float
    interval: Interval | None
    replicates: np.ndarray


def rng_for(seed: int | Sequence[int] | np.random.Generator) -> np.random.Generator:
    """A numpy generator from a seed (or a sequence of seeds); nothing in mixbench reads global RNG state."""
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------- bootstrap


def bootstrap(
    data: Sequence[np.ndarray],
    statistic: Callable[..., Any],
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    method: str = "percentile",
    seed: int | Sequence[int] | np.random.Generator = 0,
    vectorized: bool = True,
) -> BootstrapResult:
    """Bootstrap of ``statistic(*data)`` with the items (rows of every array in ``data``) resampled jointly.

    ``data`` holds item-aligned arrays (e.g. per-document NLL and token counts); ``statistic`` takes them and,
    when ``vectorized``, an ``axis`` keyword (scipy's convention, resamples along the last axis). ``method`` is
    ``percentile`` or ``bca``. With fewer than two items, or ``n_resamples=0``, there is no interval.
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in data]
    point = float(statistic(*arrays, axis=-1)) if vectorized else float(statistic(*arrays))
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError("bootstrap: every data array needs one entry per item")
    if n < 2 or n_resamples <= 0:
        return BootstrapResult(point, None, np.empty(0))
    from scipy.stats import bootstrap as scipy_bootstrap

    methods = {"percentile": ("percentile", "bootstrap"), "bca": ("BCa", "bca")}
    if method not in methods:
        raise ValueError(f"bootstrap method must be one of {', '.join(methods)}, got {method!r}")
    scipy_method, kind = methods[method]
    res = scipy_bootstrap(
        tuple(arrays), statistic, n_resamples=n_resamples, vectorized=vectorized, paired=True,
        confidence_level=level, method=scipy_method, rng=rng_for(seed),
    )
    reps = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):  # degenerate data (all equal): BCa gives NaN
        low = high = point if np.all(reps == reps[0]) else math.nan
    return BootstrapResult(point, Interval(low, high, kind, level), reps)


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> Interval | None:
    """The percentile interval of precomputed replicates (e.g. of a statistic of several suites' replicates)."""
    reps = np.asarray(replicates, dtype=np.float64)
    reps = reps[np.isfinite(reps)]
    if reps.size < 2:
        return None
    q = (1.0 - level) / 2.0
    low, high = np.quantile(reps, [q, 1.0 - q])
    return Interval(float(low), float(high), "bootstrap", level)


def resample_indices(n: int, n_resamples: int, seed: int | Sequence[int] | np.random.Generator = 0) -> np.ndarray:
    """``[n_resamples, n]`` item indices drawn with replacement: for statistics that need whole refits per
    resample (Bradley-Terry ratings, a fine-tuned head's metric) and share one set of draws across outputs."""
    return rng_for(seed).integers(0, n, size=(n_resamples, n))


def weighted_mean(values: np.ndarray, weights: np.ndarray, axis: int = -1) -> np.ndarray:
    """``sum(values * weights) / sum(weights)`` along ``axis`` (the per-item statistic of every metric whose
    items carry weights, e.g. per-document mean NLL weighted by tokens)."""
    return np.sum(values * weights, axis=axis) / np.sum(weights, axis=axis)


def cluster_bootstrap(
    data: Sequence[np.ndarray],
    clusters: Sequence[Any],
    statistic: Callable[..., float],
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int | Sequence[int] | np.random.Generator = 0,
) -> BootstrapResult:
    """Percentile bootstrap that resamples *clusters* of items, each drawn cluster bringing all its items.

    For items that are not independent: duplicated pairs (the ProtoT paper's perturbation file repeats one
    pair up to 24 times), windows of one document, prompts judged several times. The effective sample size is
    the number of clusters, not of items. ``statistic(*arrays)`` is evaluated on the items of each resample
    (not vectorized: cluster resamples differ in size).
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in data]
    labels = np.asarray([str(c) for c in clusters])
    if any(len(a) != len(labels) for a in arrays):
        raise ValueError("cluster_bootstrap: every data array and the cluster labels need one entry per item")
    point = float(statistic(*arrays))
    _, inverse = np.unique(labels, return_inverse=True)
    members = [np.flatnonzero(inverse == c) for c in range(int(inverse.max()) + 1)] if len(labels) else []
    k = len(members)
    if k < 2 or n_resamples <= 0:
        return BootstrapResult(point, None, np.empty(0))
    draws = rng_for(seed).integers(0, k, size=(n_resamples, k))
    reps = np.empty(n_resamples)
    for b, chosen in enumerate(draws):
        idx = np.concatenate([members[c] for c in chosen])
        reps[b] = statistic(*(a[idx] for a in arrays))
    interval = percentile_interval(reps, level)
    return BootstrapResult(point, None if interval is None else _as_kind(interval, "cluster-bootstrap"), reps)


def _as_kind(interval: Interval, kind: str) -> Interval:
    return Interval(interval.low, interval.high, kind, interval.level)


def n_clusters(clusters: Sequence[Any]) -> int:
    return len({str(c) for c in clusters})


@dataclass(frozen=True)
class PairedComparison:
    """``a - b`` on shared items: the difference, its percentile interval and a two-sided bootstrap p-value."""

    difference: float
    interval: Interval | None
    p_value: float
    n_items: int


def paired_difference(
    a: np.ndarray,
    b: np.ndarray,
    weights_a: np.ndarray | None = None,
    weights_b: np.ndarray | None = None,
    *,
    n_resamples: int = 2000,
    level: float = 0.95,
    seed: int | Sequence[int] | np.random.Generator = 0,
) -> PairedComparison:
    """Paired bootstrap of ``stat(a) - stat(b)`` over items both sides share (rows of ``a`` and ``b`` are the
    same items), where ``stat`` is the (weighted) mean: resampling an item moves both sides at once.

    The p-value is the bootstrap's own: twice the smaller tail share of replicates on either side of 0 (with
    the +1 correction, so it is never 0), i.e. the smallest level at which the percentile interval of that
    level excludes 0.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError("paired_difference: both sides need the same items")
    wa = np.ones_like(a) if weights_a is None else np.asarray(weights_a, dtype=np.float64)
    wb = np.ones_like(b) if weights_b is None else np.asarray(weights_b, dtype=np.float64)

    def diff(xa, xwa, xb, xwb, axis=-1):
        return weighted_mean(xa, xwa, axis) - weighted_mean(xb, xwb, axis)

    res = bootstrap((a, wa, b, wb), diff, n_resamples=n_resamples, level=level, seed=seed)
    reps = res.replicates
    if reps.size == 0:
        return PairedComparison(res.point, None, 1.0, len(a))
    below, above = np.sum(reps <= 0.0), np.sum(reps >= 0.0)
    p = min(1.0, 2.0 * (min(below, above) + 1) / (reps.size + 1))
    return PairedComparison(res.point, res.interval, float(p), len(a))


# ---------------------------------------------------------------------------------------------- parametric


def t_interval(values: Sequence[float], level: float = 0.95) -> Interval | None:
    """Student-t interval of the mean of ``values`` (e.g. over seeds); ``None`` with fewer than two."""
    v = np.asarray([x for x in values], dtype=np.float64)
    if v.size < 2 or not np.all(np.isfinite(v)):
        return None
    from scipy.stats import t

    mean = float(v.mean())
    half = float(t.ppf(0.5 + level / 2.0, v.size - 1)) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return Interval(mean - half, mean + half, "t", level)


def normal_interval(estimate: float, stderr: float, level: float = 0.95) -> Interval | None:
    """``estimate +- z * stderr`` (e.g. from lm-eval's standard errors); ``None`` when stderr is unknown."""
    if stderr is None or not math.isfinite(stderr) or not math.isfinite(estimate):
        return None
    from scipy.stats import norm

    half = float(norm.ppf(0.5 + level / 2.0)) * stderr
    return Interval(estimate - half, estimate + half, "normal", level)


def wilson_interval(successes: int, n: int, level: float = 0.95) -> Interval | None:
    """Wilson score interval of a proportion (accuracies, agreement rates); ``None`` when ``n`` is 0."""
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: successes {successes} must be in [0, {n}]")
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(successes, n, alpha=1.0 - level, method="wilson")
    return Interval(float(low), float(high), "wilson", level)


def range_interval(values: Sequence[float]) -> Interval | None:
    """Min-max of repeats (timings): a spread, not a confidence interval, and labelled so."""
    v = [float(x) for x in values if math.isfinite(float(x))]
    return Interval(min(v), max(v), "range", None) if v else None


# ---------------------------------------------------------------------------------------------- multiplicity


def holm(p_values: Sequence[float], alpha: float = 0.05) -> tuple[list[bool], list[float]]:
    """Holm's step-down correction: which hypotheses are rejected at family-wise level ``alpha``, and the
    adjusted p-values, in the input order.

    Written here rather than called from statsmodels (``multipletests(method="holm")``, against which the tests
    check it): statsmodels' Holm branch runs ``gc.collect()`` on every call, ~0.4 s in a process that holds a
    model and a store, and the board makes one call per tie group.
    """
    p = np.asarray(list(p_values), dtype=np.float64)
    if p.size == 0:
        return [], []
    order = np.argsort(p, kind="stable")
    m = p.size
    stepped = np.maximum.accumulate(p[order] * (m - np.arange(m)))
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return [bool(a <= alpha) for a in adjusted], [float(a) for a in adjusted]


def tie_groups(order: Sequence[str], p_value: Callable[[str, str], float], alpha: float = 0.05) -> dict[str, int]:
    """Tie groups of ``order`` (keys, best first), numbered from 0: the best and every key whose test against it
    (``p_value(best, other)``, Holm at ``alpha`` over the rest) is not rejected form a group; repeat on the rest.
    The board's groups and the scaling suite's per-rung orderings (docs/scaling.md) both come from here."""
    left = list(order)
    groups: dict[str, int] = {}
    g = 0
    while left:
        best, rest = left[0], left[1:]
        reject, _ = holm([p_value(best, k) for k in rest], alpha)
        members = [best] + [k for k, r in zip(rest, reject) if not r]
        groups.update({k: g for k in members})
        left = [k for k in left if k not in members]
        g += 1
    return groups


def with_seed_variance(comparison: PairedComparison, seed_var: float, level: float = 0.95) -> PairedComparison:
    """A paired comparison on shared items with training-seed variance ``seed_var`` added to its item variance
    (read from its interval as a normal standard error): a normal interval and a two-sided normal p-value."""
    item_se = comparison.interval.normal_stderr() if comparison.interval is not None else 0.0
    interval, p_value = normal_test(comparison.difference, math.sqrt((item_se or 0.0) ** 2 + seed_var), level)
    return PairedComparison(comparison.difference, interval, p_value, comparison.n_items)


def normal_test(difference: float, stderr: float, level: float = 0.95) -> tuple[Interval, float]:
    """The normal interval of ``difference`` (standard error ``stderr``) and its two-sided p-value against 0; an
    error of 0 gives a point interval, p = 0 for a nonzero difference and 1 for none."""
    if stderr == 0:
        return Interval(difference, difference, "normal", level), 0.0 if difference else 1.0
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + level / 2.0))
    return (Interval(difference - z * stderr, difference + z * stderr, "normal", level),
            float(2 * norm.sf(abs(difference) / stderr)))


@dataclass(frozen=True)
class PooledSD:
    """A standard deviation pooled over groups (variances weighted by their degrees of freedom): ``estimate``,
    ``df`` and ``upper``, its one-sided confidence bound (``estimate * sqrt(df / chi2_{1-level}(df))``), what a
    test that must not understate the noise uses."""

    estimate: float
    df: int
    upper: float


def pooled_sd(groups: Sequence[Sequence[float]], level: float = 0.95) -> PooledSD | None:
    """The within-group standard deviation of ``groups`` (each the values of one thing measured several times:
    one model's seeds), pooled; groups of fewer than two finite values are skipped; None when none is left."""
    kept = [np.asarray(g, dtype=float) for g in groups if len(g) >= 2 and np.all(np.isfinite(np.asarray(g, float)))]
    df = sum(len(g) - 1 for g in kept)
    if df == 0:
        return None
    estimate = math.sqrt(sum(float(np.var(g, ddof=1)) * (len(g) - 1) for g in kept) / df)
    return pool_sds([(estimate, df)], level)


def pool_sds(parts: Sequence[tuple[float, int]], level: float = 0.95) -> PooledSD:
    """Standard deviations ``(estimate, df)`` of one variance, pooled, with the upper bound of the result."""
    from scipy.stats import chi2

    df = sum(d for _, d in parts)
    estimate = math.sqrt(sum(d * s**2 for s, d in parts) / df)
    return PooledSD(estimate, df, estimate * math.sqrt(df / chi2.ppf(1 - level, df)))


# ---------------------------------------------------------------------------------------------- ranks


def borda(values: dict[str, list[float]], higher: list[bool], weights: list[float]) -> dict[str, float]:
    """Weighted Borda points on raw values (a rank interval's bootstrap draws): per column, a point per row beaten
    and half per tie, times the column's weight."""
    points = {k: 0.0 for k in values}
    keys = list(values)
    for j, (up, w) in enumerate(zip(higher, weights)):
        sign = 1.0 if up else -1.0
        for k in keys:
            mine = sign * values[k][j]
            others = [sign * values[o][j] for o in keys if o != k]
            points[k] += w * (sum(mine > x for x in others) + 0.5 * sum(mine == x for x in others))
    return points


def competition_ranks(points: dict[str, float]) -> dict[str, int]:
    """1, 2, 2, 4: a row's rank is one plus the number of rows with more points."""
    return {k: 1 + sum(points[o] > points[k] + 1e-12 for o in points) for k in points}


def group_points(groups: dict[str, int]) -> dict[str, float]:
    """Borda points from tie groups (0 is the best group): a point per row in a worse group and half a point per
    other row of its own; a column whose rows all share one group gives none."""
    if len(set(groups.values())) <= 1:
        return {k: 0.0 for k in groups}
    return {k: sum(o > g for o in groups.values()) + 0.5 * (sum(o == g for o in groups.values()) - 1)
            for k, g in groups.items()}


def rank_intervals(draws: np.ndarray, keys: Sequence[str], level: float = 0.95) -> dict[str, tuple[int, int]]:
    """Each key's rank interval from bootstrap draws of the ranks (``draws[b, i]``: key ``i``'s rank in draw
    ``b``): the central ``level`` quantiles, widened to whole ranks."""
    q = (1 - level) / 2
    out = {}
    for i, k in enumerate(keys):
        lo, hi = np.quantile(draws[:, i], [q, 1 - q])
        out[k] = (int(math.floor(lo)), int(math.ceil(hi)))
    return out
