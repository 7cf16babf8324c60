"""Scaling-law statistics over a compute ladder: power-law fits, paired bootstrap intervals, crossovers, and
orderings with tie groups at one budget (docs/scaling.md). Pure numerics: it knows no suite and no mixer by name.

Inputs are *series* (one per mixer) of :class:`LadderPoint` s: a training compute C (FLOPs) and the per-document
held-out losses (mean NLL per document, token-count weights) on the same documents at every point and in every
series. A point's loss is the token-weighted mean over its documents.

Decisions, each for a reason:

* **The fit** (:func:`fit_power_law`) is ``L(C) = E + A * C^-alpha`` fitted as the Chinchilla replication
  (Besiroglu et al. 2024) recommends: minimise the Huber loss (delta 1e-3) of ``log L_i - LSE(e, a - alpha log C_i)``
  with ``E = exp(e)``, ``A = exp(a)``, by L-BFGS(-B) from a grid of initialisations, keeping the best. Working on
  the log scale weighs every rung of the ladder alike; Huber keeps one odd rung from dragging the curve. Compute
  is divided by a reference (the geometric mean of the ladder's C) inside the fit, so the three parameters have
  comparable scales; :class:`PowerLawFit` reports ``A`` in FLOPs units *and* the reference with ``A_ref``, the
  reducible loss at the reference compute (better conditioned: ``A`` moves with ``alpha`` by ``C_ref^alpha``).
* **Intervals** (:func:`bootstrap_fits`) are percentile bootstrap intervals of a two-level, paired resampling:
  each replicate draws the documents with replacement *once for every series* (the same draw for every mixer,
  so document difficulty, shared by all of them, cancels in their comparison) and recomputes every point's loss
  from its per-document values; then, per series, it draws the ladder's points with replacement (the rungs are
  a sample of the compute axis too) and refits.
* **Crossovers** (:func:`crossover`, :func:`crossover_interval`) are roots of ``log L_a(C) - log L_b(C)`` in
  ``[C_min, 10 x C_max]`` (at most one decade past the largest rung: farther is extrapolation nobody measured).
  The verdict is decided by the point fit *and* the share of paired replicates that cross (see
  :data:`DECIDED_SHARE`).
* **Orderings at a budget** (:func:`ordering_at`) reuse the board's tie groups (paired bootstrap on the shared
  documents, Holm-corrected), through a thin adapter rather than a second implementation.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from harness.errors import MixbenchError
from harness.stats import Interval, percentile_interval

#: the Huber threshold on log-loss residuals (Besiroglu et al. 2024, after Hoffmann et al. 2022)
HUBER_DELTA = 1e-3
#: a fit needs at least this many distinct computes: the law has three parameters
MIN_POINTS = 3
#: crossovers are searched up to this factor past the largest compute of the ladder
EXTRAPOLATION = 10.0
#: a crossover verdict is "cross" when the point fit crosses and at least this share of the paired replicates
#: cross in range; "no crossover" when the point fit does not and at most ``1 - DECIDED_SHARE`` of them do;
#: "undetermined" otherwise (replicates disagree, or they and the point fit do)
DECIDED_SHARE = 0.8
#: the bound that keeps E >= 0 (E = exp(e)): e >= log(min L) - this, i.e. E may shrink to ~2e-9 of the loss
_E_FLOOR = 20.0
_ALPHA_BOUNDS = (1e-6, 10.0)
#: grid of initialisations: E as a share of the smallest loss (0 stands for the floor), and alpha; a (reference
#: units) starts at the least-squares intercept of log(L - E) for each pair, shifted by these offsets
_GRID_E_SHARE = (0.0, 0.3, 0.6, 0.8, 0.9, 0.97)
_GRID_ALPHA = (0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5)
_GRID_A_SHIFT = (-1.0, 0.0, 1.0)
_LBFGS_OPTIONS = {"ftol": 1e-15, "gtol": 1e-10, "maxiter": 2000}


class ScalingLawError(MixbenchError, ValueError):
    """Inputs a scaling-law fit cannot use (too few points, a non-positive compute or loss, misaligned documents);
    the message is one sentence saying which and what is needed."""


def _one_blas_thread(fn):
    """Run ``fn`` with one BLAS thread: once torch has run in the process, OpenBLAS's worker threads spin against
    torch's OpenMP pool, and each of the thousands of tiny L-BFGS steps of a bootstrap took ~2 ms instead of
    microseconds (a ladder's fits: 17 s against 1.5 s)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapped


# ---------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True, eq=False)
class LadderPoint:
    """One rung of a series: training ``compute`` (FLOPs) and its per-document losses (mean NLL per document) with
    token-count ``weights``. ``documents`` (ids) align the documents across points and series; without them,
    documents are aligned by position."""

    compute: float
    values: np.ndarray
    weights: np.ndarray
    documents: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        values = np.array(self.values, dtype=np.float64).reshape(-1)
        weights = np.array(self.weights, dtype=np.float64).reshape(-1)
        if values.shape != weights.shape:
            raise ScalingLawError(f"a ladder point needs one weight per document value (got {values.size} values and "
                                  f"{weights.size} weights).")
        if values.size == 0 or not np.all(np.isfinite(values)) or not np.all(np.isfinite(weights)):
            raise ScalingLawError("a ladder point needs at least one document, with finite values and weights.")
        if np.any(weights < 0) or weights.sum() <= 0:
            raise ScalingLawError("a ladder point's weights (token counts) must be >= 0 with a positive sum.")
        values.flags.writeable = False
        weights.flags.writeable = False
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "compute", float(self.compute))
        if self.documents is not None:
            docs = tuple(str(d) for d in self.documents)
            if len(docs) != values.size or len(set(docs)) != len(docs):
                raise ScalingLawError("a ladder point's document ids must be distinct, one per value.")
            object.__setattr__(self, "documents", docs)

    @staticmethod
    def from_items(compute: float, items: Mapping[str, tuple[float, float]]) -> "LadderPoint":
        """From ``{document id: (value, weight)}``, the per-item shape of a board cell (``Cell.items``)."""
        docs = sorted(items)
        return LadderPoint(compute, np.array([items[d][0] for d in docs]), np.array([items[d][1] for d in docs]),
                           tuple(docs))

    @property
    def loss(self) -> float:
        """The token-weighted mean of the per-document losses."""
        return float(np.dot(self.values, self.weights) / self.weights.sum())


def _aligned(points: Sequence[LadderPoint], reference: tuple[str, ...] | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``[points, documents]`` arrays of values and weights in the reference document order."""
    values, weights = [], []
    for p in points:
        if (p.documents is None) != (reference is None):
            raise ScalingLawError("either every ladder point names its documents or none does.")
        if reference is None:
            if p.values.size != n:
                raise ScalingLawError(f"every ladder point needs the same documents (got {p.values.size} and {n}).")
            values.append(p.values)
            weights.append(p.weights)
            continue
        position = {d: i for i, d in enumerate(p.documents)}
        if len(position) != len(reference) or any(d not in position for d in reference):
            raise ScalingLawError("every ladder point of every series needs the same documents (same ids); "
                                  "restrict them to the shared documents first.")
        order = np.array([position[d] for d in reference])
        values.append(p.values[order])
        weights.append(p.weights[order])
    return np.array(values), np.array(weights)


# ---------------------------------------------------------------------------------------------- the fit


@dataclass(frozen=True)
class PowerLawFit:
    """``L(C) = E + A * C^-alpha`` with ``E = exp(e)`` and ``A = exp(a)`` in FLOPs units.

    The fit works with ``C / reference_compute``: ``a_ref = a - alpha * log(reference_compute)`` is the log of the
    reducible loss at the reference (``A_ref``), the number to read when ``A`` (which carries ``C_ref^alpha``) is
    awkwardly large. ``at_bounds`` names the parameters that ended on a bound (``E`` at ~0, ``alpha`` at ~0 or
    10): the law is then degenerate on this ladder and its parameters should not be read one by one.
    """

    e: float
    a: float
    alpha: float
    reference_compute: float
    objective: float  # the Huber loss at the optimum (sum over points, in units of delta)
    n_points: int
    converged: bool
    at_bounds: tuple[str, ...] = ()

    @property
    def E(self) -> float:
        return math.exp(self.e)

    @property
    def A(self) -> float:
        """In FLOPs units (may overflow to inf for extreme exponents: use ``a`` or ``A_ref`` then)."""
        try:
            return math.exp(self.a)
        except OverflowError:
            return math.inf

    @property
    def a_ref(self) -> float:
        return self.a - self.alpha * math.log(self.reference_compute)

    @property
    def A_ref(self) -> float:
        """The reducible loss ``L - E`` at the reference compute."""
        return math.exp(self.a_ref)

    def predict(self, compute: float | Sequence[float] | np.ndarray) -> float | np.ndarray:
        """``L(C)``, computed as ``exp(LSE(e, a_ref - alpha log(C / C_ref)))`` (no overflow for large C)."""
        c = np.asarray(compute, dtype=np.float64)
        out = np.exp(_log_predict(self.e, self.a_ref, self.alpha, np.log(c / self.reference_compute)))
        return float(out) if out.ndim == 0 else out


def _log_predict(e, a_ref, alpha, x):
    return np.logaddexp(e, a_ref - alpha * x)


def _objective(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Huber(delta) of the log residuals, summed and divided by delta (the argmin is unchanged; the division keeps
    L-BFGS's absolute gradient tolerance meaningful in the quadratic zone), and its gradient in (e, a_ref, alpha)."""
    e, a, alpha = theta
    p = np.logaddexp(e, a - alpha * x)
    r = p - y
    c = np.minimum(np.maximum(r, -HUBER_DELTA), HUBER_DELTA)
    w_e = np.exp(e - p)  # d p / d e; d p / d a = 1 - w_e
    g = c * (1.0 / HUBER_DELTA)
    ga = g - g * w_e
    return float(c @ (r - 0.5 * c)) / HUBER_DELTA, np.array([g @ w_e, ga.sum(), -(ga @ x)])


def _grid_objective(starts: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The objective at every start (rows of ``starts``) at once."""
    p = np.logaddexp(starts[:, :1], starts[:, 1:2] - starts[:, 2:3] * x[None, :])
    r = p - y[None, :]
    c = np.clip(r, -HUBER_DELTA, HUBER_DELTA)
    return np.sum(c * (r - 0.5 * c), axis=1) / HUBER_DELTA


def _bounds(y: np.ndarray) -> list[tuple[float, float]]:
    lo, hi = float(y.min()), float(y.max())
    return [(lo - _E_FLOOR, hi), (lo - _E_FLOOR, hi + _E_FLOOR), _ALPHA_BOUNDS]


def _grid(x: np.ndarray, y: np.ndarray, bounds: list[tuple[float, float]]) -> np.ndarray:
    """Starts ``(e, a_ref, alpha)``: E as a share of the smallest loss, alpha from a list, and a_ref the least-squares
    intercept of ``log(L - E) + alpha x`` (what a_ref would be if E and alpha were right), shifted."""
    loss = np.exp(y)
    starts = []
    for share in _GRID_E_SHARE:
        e = bounds[0][0] + 1.0 if share == 0.0 else math.log(share * loss.min())
        reducible = np.log(np.maximum(loss - math.exp(e), 1e-3 * loss.min()))
        for alpha in _GRID_ALPHA:
            a0 = float(np.mean(reducible + alpha * x))
            starts += [(e, min(max(a0 + s, bounds[1][0]), bounds[1][1]), alpha) for s in _GRID_A_SHIFT]
    return np.array(starts)


def _minimise(x: np.ndarray, y: np.ndarray, starts: np.ndarray, bounds: list[tuple[float, float]]):
    from scipy.optimize import minimize

    best = None
    for start in starts:
        res = minimize(_objective, start, args=(x, y), jac=True, method="L-BFGS-B", bounds=bounds,
                       options=_LBFGS_OPTIONS)
        if best is None or res.fun < best.fun:
            best = res
    return best


def _at_bounds(theta: np.ndarray, bounds: list[tuple[float, float]]) -> tuple[str, ...]:
    e, _, alpha = theta
    out = []
    if e <= bounds[0][0] + 1e-6:
        out.append("E")
    if alpha <= _ALPHA_BOUNDS[0] * 1.001 or alpha >= _ALPHA_BOUNDS[1] - 1e-6:
        out.append("alpha")
    return tuple(out)


def _check_ladder(compute, loss) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(compute, dtype=np.float64).reshape(-1)
    L = np.asarray(loss, dtype=np.float64).reshape(-1)
    if c.size != L.size:
        raise ScalingLawError(f"a scaling-law fit needs one loss per compute (got {c.size} computes and {L.size} "
                              "losses).")
    for i, v in enumerate(c):
        if not (math.isfinite(v) and v > 0):
            raise ScalingLawError(f"every compute must be a positive, finite number of training FLOPs; point {i} has "
                                  f"{float(v)!r}.")
    for i, v in enumerate(L):
        if not (math.isfinite(v) and v > 0):
            raise ScalingLawError(f"every loss must be positive and finite (a mean NLL); point {i} has {float(v)!r}.")
    distinct = np.unique(c).size
    if distinct < MIN_POINTS:
        raise ScalingLawError(f"a power law L(C) = E + A * C^-alpha has 3 parameters, so it needs ladder points at "
                              f"{MIN_POINTS} or more distinct computes; got {distinct}.")
    return c, L


@_one_blas_thread
def fit_power_law(
    compute: Sequence[float] | np.ndarray,
    loss: Sequence[float] | np.ndarray,
    *,
    reference_compute: float | None = None,
    n_starts: int | None = 8,
) -> PowerLawFit:
    """Fit ``L(C) = E + A * C^-alpha`` to a ladder's (compute, loss) points (robust, log scale; module docstring).

    ``reference_compute`` (default: the geometric mean of ``compute``) is what C is divided by inside the fit.
    The grid of initialisations (E as 0 to 97% of the smallest loss, alpha from 0.05 to 2.5, and for each pair
    a's least-squares value and +-1) is scored at once, and L-BFGS runs from the ``n_starts`` best-scoring starts
    (``None``: from all of them): most starts of a grid fall to the same optimum, and the scoring is what picks
    the basins worth descending. Raises :class:`ScalingLawError` (a ``ValueError``) with fewer than 3 distinct
    computes or a non-positive compute or loss.
    """
    c, L = _check_ladder(compute, loss)
    c_ref = float(np.exp(np.mean(np.log(c)))) if reference_compute is None else float(reference_compute)
    if not (math.isfinite(c_ref) and c_ref > 0):
        raise ScalingLawError(f"the reference compute must be positive and finite; got {c_ref!r}.")
    return _fit(np.log(c / c_ref), np.log(L), c_ref, None, n_starts)


def _fit(x: np.ndarray, y: np.ndarray, c_ref: float, warm: np.ndarray | None, n_starts: int | None) -> PowerLawFit:
    bounds = _bounds(y)
    grid = _grid(x, y, bounds) if n_starts != 0 or warm is None else np.empty((0, 3))
    if n_starts is not None and n_starts < len(grid):
        scores = _grid_objective(grid, x, y)
        grid = grid[np.argsort(scores, kind="stable")[: max(n_starts, 0 if warm is not None else 1)]]
    if warm is not None:
        lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
        grid = np.vstack([np.clip(warm, lo, hi)[None, :], grid])
    res = _minimise(x, y, grid, bounds)
    e, a_ref, alpha = (float(v) for v in res.x)
    return PowerLawFit(e=e, a=a_ref + alpha * math.log(c_ref), alpha=alpha, reference_compute=c_ref,
                       objective=float(res.fun), n_points=int(x.size), converged=bool(res.success),
                       at_bounds=_at_bounds(res.x, bounds))


# ---------------------------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class Prediction:
    """The fitted loss at one compute and its percentile bootstrap interval."""

    compute: float
    loss: float
    interval: Interval | None


@dataclass(frozen=True, eq=False)
class FitWithIntervals:
    """A series' point fit with percentile bootstrap intervals (``Interval.kind`` "bootstrap") of its parameters.

    ``replicates`` holds each replicate's ``(e, a_ref, alpha)`` (reference units; NaN where a fit failed), row ``i``
    from the same document draw as row ``i`` of every other series of the same :func:`bootstrap_fits` call
    (``pairing`` says which call): that is what :func:`crossover_interval` pairs.
    """

    name: str
    fit: PowerLawFit
    E: Interval | None
    A: Interval | None
    A_ref: Interval | None
    alpha: Interval | None
    predictions: tuple[Prediction, ...]
    computes: tuple[float, ...]
    losses: tuple[float, ...]
    replicates: np.ndarray
    redraws: int  # point resamples drawn again for having fewer than 3 distinct computes
    pairing: tuple

    @property
    def c_min(self) -> float:
        return min(self.computes)

    @property
    def c_max(self) -> float:
        return max(self.computes)


@_one_blas_thread
def bootstrap_fits(
    series: Mapping[str, Sequence[LadderPoint]],
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    *,
    predict_at: Sequence[float] = (),
    resample_points: bool = True,
    replicate_starts: int = 1,
    n_starts: int | None = 8,
) -> dict[str, FitWithIntervals]:
    """Per series: the point fit and percentile bootstrap intervals of E, A, A_ref, alpha and ``L(predict_at)``.

    Each of the ``n_boot`` replicates (a) draws the documents with replacement once, the same draw for every
    series, and recomputes every point's token-weighted loss from it; (b) per series, draws the ladder's points
    with replacement (``resample_points``), drawing again, documents kept, while the draw has fewer than 3
    distinct computes; then refits, from the point fit's parameters and the ``replicate_starts`` best grid starts
    of the replicate's own data. The document draw comes from ``seed`` and each series' point draws from
    ``(seed, name)``, so a series' intervals do not depend on which other series are fitted alongside it.

    Resampling the rungs makes the intervals conservative when the law holds exactly: on planted 6-rung ladders
    (64 documents) alpha's interval covered the truth in 200 of 200 draws and was ~4x wider than with documents
    alone (``resample_points=False``: 96%, the nominal rate). What it buys is honesty when the law does not hold
    (a rung off the curve moves the fit in the replicates that draw it twice or not at all).
    """
    if not series:
        raise ScalingLawError("bootstrap_fits needs at least one series.")
    if n_boot < 0 or not 0.0 < level < 1.0:
        raise ScalingLawError(f"bootstrap_fits needs n_boot >= 0 and a level in (0, 1); got {n_boot} and {level}.")
    first = next((p for pts in series.values() for p in pts), None)
    if first is None:
        raise ScalingLawError("bootstrap_fits: every series needs ladder points.")
    reference = None if first.documents is None else tuple(sorted(first.documents))
    n_docs = first.values.size
    doc_counts = _doc_counts(n_docs, n_boot, seed)
    pairing = (int(seed), int(n_boot), n_docs, bool(resample_points))
    out = {}
    for name, points in series.items():
        values, weights = _aligned(list(points), reference, n_docs)
        computes = np.array([p.compute for p in points])
        losses = np.sum(values * weights, axis=1) / weights.sum(axis=1)
        c, L = _check_ladder(computes, losses)
        c_ref = float(np.exp(np.mean(np.log(c))))
        x, y = np.log(c / c_ref), np.log(L)
        fit = _fit(x, y, c_ref, None, n_starts)
        # [n_boot, points]: every point's loss under every document draw (weighted counts, no index copies)
        boot_losses = (doc_counts @ (values * weights).T) / (doc_counts @ weights.T)
        rng = np.random.default_rng([int(seed), 1, zlib.crc32(str(name).encode())])
        warm = np.array([fit.e, fit.a_ref, fit.alpha])
        reps = np.full((n_boot, 3), np.nan)
        redraws = 0
        for b in range(n_boot):
            idx = np.arange(x.size)
            if resample_points:
                while True:
                    idx = rng.integers(0, x.size, size=x.size)
                    if np.unique(x[idx]).size >= MIN_POINTS:
                        break
                    redraws += 1
            yb = np.log(boot_losses[b, idx])
            if not np.all(np.isfinite(yb)):
                continue
            rep = _fit(x[idx], yb, c_ref, warm, replicate_starts)
            reps[b] = (rep.e, rep.a_ref, rep.alpha)
        out[name] = _with_intervals(str(name), fit, reps, level, predict_at, c, L, redraws, pairing)
    return out


def _doc_counts(n_docs: int, n_boot: int, seed: int) -> np.ndarray:
    """``[n_boot, n_docs]``: how often each document is drawn in each replicate (shared by every series)."""
    from harness.stats import resample_indices

    draws = resample_indices(n_docs, n_boot, np.random.default_rng([int(seed), 0]))
    counts = np.zeros((n_boot, n_docs))
    np.add.at(counts, (np.repeat(np.arange(n_boot), n_docs), draws.reshape(-1)), 1.0)
    return counts


def _with_intervals(name, fit, reps, level, predict_at, c, L, redraws, pairing) -> FitWithIntervals:
    log_c_ref = math.log(fit.reference_compute)
    e, a_ref, alpha = reps[:, 0], reps[:, 1], reps[:, 2]

    def exp_interval(log_reps):  # exp of the log's interval: the same order statistics, no overflow of A
        iv = percentile_interval(log_reps, level)
        if iv is None:
            return None
        with np.errstate(over="ignore"):
            return Interval(float(np.exp(iv.low)), float(np.exp(iv.high)), iv.kind, iv.level)

    predictions = []
    for comp in predict_at:
        log_l = _log_predict(e, a_ref, alpha, math.log(float(comp)) - log_c_ref)
        predictions.append(Prediction(float(comp), float(fit.predict(float(comp))), exp_interval(log_l)))
    return FitWithIntervals(
        name=name, fit=fit, E=exp_interval(e), A=exp_interval(a_ref + alpha * log_c_ref), A_ref=exp_interval(a_ref),
        alpha=percentile_interval(alpha, level), predictions=tuple(predictions), computes=tuple(float(v) for v in c),
        losses=tuple(float(v) for v in L), replicates=reps, redraws=redraws, pairing=pairing,
    )


# ---------------------------------------------------------------------------------------------- crossovers


@dataclass(frozen=True)
class Crossover:
    """Where two fitted curves cross in ``[low, high]`` (FLOPs): ``compute`` is the first crossing (None: none in
    range), ``roots`` every one found; ``better_below`` has the lower loss from ``low`` to the first crossing,
    ``better_above`` from there to the next (without a crossing both name the one better throughout; None for
    identical curves)."""

    names: tuple[str, str]
    compute: float | None
    roots: tuple[float, ...]
    better_below: str | None
    better_above: str | None
    low: float
    high: float
    note: str = ""


#: log-spaced points per searched range where the sign of the gap is read before each root is refined
_SCAN = 1024


def _log_gap(params_a, params_b, log_c) -> np.ndarray:
    """``log L_a - log L_b`` at ``log_c``; params are ``(e, a_ref, alpha, log C_ref)`` arrays (broadcast)."""
    ea, aa, la, ra = params_a
    eb, ab, lb, rb = params_b
    return _log_predict(ea, aa, la, log_c - ra) - _log_predict(eb, ab, lb, log_c - rb)


def _params(fit: PowerLawFit):
    return (fit.e, fit.a_ref, fit.alpha, math.log(fit.reference_compute))


def _roots(gap, lo: float, hi: float) -> list[float]:
    """Log-compute roots of ``gap`` (a function of log C) in [lo, hi]: sign changes on a scan, refined by brentq."""
    from scipy.optimize import brentq

    grid = np.linspace(lo, hi, _SCAN)
    d = gap(grid)
    roots = []
    for i in range(grid.size - 1):
        if d[i] == 0.0:
            if not roots or roots[-1] != grid[i]:
                roots.append(float(grid[i]))
        elif d[i] * d[i + 1] < 0:
            roots.append(float(brentq(gap, grid[i], grid[i + 1], xtol=1e-12)))
    if d[-1] == 0.0:
        roots.append(float(grid[-1]))
    return roots


def _search_range(c_min: float, c_max: float) -> tuple[float, float]:
    if not (math.isfinite(c_min) and math.isfinite(c_max) and 0 < c_min <= c_max):
        raise ScalingLawError(f"a crossover search needs 0 < c_min <= c_max; got {c_min!r} and {c_max!r}.")
    return c_min, EXTRAPOLATION * c_max


def crossover(fit_a: PowerLawFit, fit_b: PowerLawFit, c_min: float, c_max: float, *,
              names: tuple[str, str] = ("a", "b")) -> Crossover:
    """Where ``fit_a`` and ``fit_b`` cross in ``[c_min, 10 * c_max]``: roots of the log-loss gap, found on a
    log-spaced scan and refined by Brent's method (two crossings closer than the scan's step, ~0.1% of the range
    in log C, are missed: a tangency, which no ladder could tell from none). With several, the first is reported
    and ``note`` says how many."""
    low, high = _search_range(c_min, c_max)
    pa, pb = _params(fit_a), _params(fit_b)

    def gap(log_c):
        return _log_gap(pa, pb, log_c)

    lo, hi = math.log(low), math.log(high)
    roots = [math.exp(r) for r in _roots(gap, lo, hi)]
    probe = np.linspace(lo, hi, _SCAN)
    d = gap(probe)
    if np.all(np.abs(d) <= 1e-12):
        return Crossover(tuple(names), None, (), None, None, low, high, "the two curves are identical in range")

    def better(value: float) -> str | None:
        return None if value == 0 else (names[0] if value < 0 else names[1])

    if not roots:
        return Crossover(tuple(names), None, (), better(float(np.median(d))), better(float(np.median(d))), low, high)
    first = math.log(roots[0])
    below = gap(lo) if first > lo else gap(lo - 1e-9)
    nxt = math.log(roots[1]) if len(roots) > 1 else hi
    above = gap((first + nxt) / 2.0) if nxt > first else gap(first + 1e-6)
    note = f"first of {len(roots)} crossings" if len(roots) > 1 else ""
    return Crossover(tuple(names), roots[0], tuple(roots), better(float(below)), better(float(above)), low, high, note)


@dataclass(frozen=True)
class CrossoverInterval:
    """A crossover with its paired bootstrap: ``share`` of replicates crossing in range, the percentile interval
    of the crossing compute among them (conditional on crossing), and the verdict (``cross``, ``no crossover``
    or ``undetermined``, rule at :data:`DECIDED_SHARE`) with its sentence."""

    point: Crossover
    share: float
    n_replicates: int
    interval: Interval | None
    verdict: str
    sentence: str


def _first_crossings(params_a, params_b, lo: float, hi: float) -> np.ndarray:
    """Per replicate, the first crossing's compute in range, NaN where none (vectorized scan, then brentq)."""
    from scipy.optimize import brentq

    grid = np.linspace(lo, hi, _SCAN)
    d = _log_gap([p[:, None] for p in params_a], [p[:, None] for p in params_b], grid[None, :])
    change = (d[:, :-1] * d[:, 1:] < 0) | (d[:, :-1] == 0)
    out = np.full(d.shape[0], np.nan)
    for i in np.flatnonzero(change.any(axis=1)):
        j = int(np.argmax(change[i]))
        if d[i, j] == 0:
            out[i] = math.exp(grid[j])
            continue
        pa = [float(p[i]) for p in params_a]
        pb = [float(p[i]) for p in params_b]
        out[i] = math.exp(brentq(lambda t: float(_log_gap(pa, pb, t)), grid[j], grid[j + 1], xtol=1e-12))
    return out


def _flops(x: float) -> str:
    return f"{x:.2g}"


def crossover_interval(
    a: FitWithIntervals,
    b: FitWithIntervals,
    c_min: float | None = None,
    c_max: float | None = None,
    *,
    level: float = 0.95,
    decided: float = DECIDED_SHARE,
) -> CrossoverInterval:
    """The crossover of two series from one :func:`bootstrap_fits` call, with its paired bootstrap.

    Replicate ``i`` of ``a`` is paired with replicate ``i`` of ``b`` (same document draw). The range defaults to
    ``[min of both ladders, 10 x max of both]``. Verdict: ``cross`` when the point fit crosses and a share
    ``>= decided`` of the replicates crosses in range; ``no crossover`` when the point fit does not and a share
    ``<= 1 - decided`` does; ``undetermined`` otherwise. The interval is that of the replicates that cross (a
    crossing near the end of the range is pulled inward: replicates crossing just past it count as none).
    """
    if a.pairing != b.pairing:
        raise ScalingLawError("crossover_interval needs two series from the same bootstrap_fits call (paired "
                              f"replicates); got pairings {a.pairing} and {b.pairing}.")
    if not 0.5 < decided <= 1.0:
        raise ScalingLawError(f"crossover_interval: decided must be in (0.5, 1]; got {decided}.")
    c_min = min(a.c_min, b.c_min) if c_min is None else float(c_min)
    c_max = max(a.c_max, b.c_max) if c_max is None else float(c_max)
    point = crossover(a.fit, b.fit, c_min, c_max, names=(a.name, b.name))
    lo, hi = math.log(point.low), math.log(point.high)
    ok = np.all(np.isfinite(a.replicates), axis=1) & np.all(np.isfinite(b.replicates), axis=1)
    ra, rb = a.replicates[ok], b.replicates[ok]
    pa = (ra[:, 0], ra[:, 1], ra[:, 2], np.full(len(ra), math.log(a.fit.reference_compute)))
    pb = (rb[:, 0], rb[:, 1], rb[:, 2], np.full(len(rb), math.log(b.fit.reference_compute)))
    crossings = _first_crossings(pa, pb, lo, hi) if len(ra) else np.empty(0)
    n = int(crossings.size)
    share = float(np.mean(np.isfinite(crossings))) if n else math.nan
    log_iv = percentile_interval(np.log(crossings[np.isfinite(crossings)]), level) if n else None
    interval = None if log_iv is None else Interval(math.exp(log_iv.low), math.exp(log_iv.high), "bootstrap", level)
    pct = "no" if not n else f"{100 * share:.0f}% of {n}"
    span = f"[{_flops(point.low)}, {_flops(point.high)}] FLOPs"
    names = f"{a.name} and {b.name}"
    if n and point.compute is not None and share >= decided:
        verdict = "cross"
        where = f" [{_flops(interval.low)}, {_flops(interval.high)}]" if interval is not None else ""
        sentence = (f"{names} cross at {_flops(point.compute)} FLOPs{where} (crossing in {pct} replicates); "
                    f"{point.better_below} is better below, {point.better_above} above")
        if point.note:
            sentence += f" ({point.note})"
    elif n and point.compute is None and share <= 1.0 - decided:
        verdict = "no crossover"
        best = f"; {point.better_below} is better throughout" if point.better_below else ""
        sentence = f"no crossover of {names} in [C_min, 10 x C_max] = {span} (crossing in {pct} replicates){best}"
    else:
        verdict = "undetermined"
        fit_says = (f"the point fit crosses at {_flops(point.compute)} FLOPs" if point.compute is not None
                    else "the point fit does not cross")
        sentence = f"crossover of {names} in {span} undetermined: {fit_says}, crossing in {pct} replicates"
    return CrossoverInterval(point, share, n, interval, verdict, sentence + ".")


# ---------------------------------------------------------------------------------------------- orderings


@dataclass(frozen=True)
class Ordering:
    """Series ranked by loss at one budget, best (lowest) first, with the board's tie groups: ``groups`` maps a
    series to its group letter (``a`` holds the best and all a Holm-corrected paired test cannot tell from it)."""

    order: tuple[str, ...]
    losses: dict[str, float]
    groups: dict[str, str]
    alpha: float

    @property
    def tie_groups(self) -> tuple[tuple[str, ...], ...]:
        """The groups, best first, each in loss order."""
        letters = list(dict.fromkeys(self.groups[k] for k in self.order))
        return tuple(tuple(k for k in self.order if self.groups[k] == g) for g in letters)


def ordering_at(
    points: Mapping[str, LadderPoint],
    *,
    alpha: float = 0.05,
    n_resamples: int = 1000,
    seed: int = 0,
) -> Ordering:
    """Rank series by their loss at one ladder budget (``points``: each series' point there), with tie groups.

    The groups are the board's (:mod:`harness.reporting.board`, best first; the best and every series a
    two-sided paired bootstrap on the shared documents cannot tell from it, Holm at ``alpha``, form a group; repeat
    on the rest): this is a thin adapter that puts each series in a one-column table of per-document cells. The
    board is imported here, not at the top: it belongs to a later layer of the core.
    """
    from harness.reporting.board import BoardConfig, _tie_groups
    from harness.reporting.table import Cell, Column, Row, Table

    if not points:
        raise ScalingLawError("ordering_at needs at least one series.")
    first = next(iter(points.values()))
    reference = None if first.documents is None else tuple(sorted(first.documents))
    names = [str(k) for k in points]
    values, weights = _aligned(list(points.values()), reference, first.values.size)
    docs = reference if reference is not None else tuple(str(i) for i in range(first.values.size))
    column = Column(suite="budget", metric="loss", role="score", higher_is_better=False)
    rows = [Row(key=k, label=k, mixer=k, mixer_id=k, preset="") for k in names]
    cells, losses = {}, {}
    for k, v, w in zip(names, values, weights):
        losses[k] = float(np.dot(v, w) / w.sum())
        items = {d: (float(vi), float(wi)) for d, vi, wi in zip(docs, v, w)}
        cells[(k, column.name)] = Cell(value=losses[k], interval=None, n_seeds=1, higher_is_better=False, items=items)
    config = BoardConfig(alpha=alpha, bootstrap=n_resamples, seed=seed)
    groups = _tie_groups(Table(rows, [column], cells), rows, column, config)
    order = tuple(sorted(names, key=lambda k: (losses[k], k)))
    return Ordering(order, losses, groups, alpha)
