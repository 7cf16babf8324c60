"""Scaling-law fits over a compute ladder: ``L_m(C) = E_g + A_m C^-alpha_m`` with one irreducible loss per group of
series, and bootstrap intervals over documents and training seeds (docs/scaling.md, "The fit"). Pure numerics: it
knows no mixer by name.

Decisions, each for a reason:

* **One E for the mixers of a ladder.** Every mixer of a ladder is trained and scored on the same data, so the
  irreducible loss (the entropy of the text) is one number: fitting it per mixer gave each series three parameters
  on five points and put E on its bound for two of four mixers. The mixers are fitted *jointly*, one shared ``e``
  and per series ``(a_m, alpha_m)``; a context-free control (which cannot reach the data's entropy) keeps its own
  E. Fitting differences from a reference mixer would remove E too, but makes every claim relative to one mixer's
  noise and leaves that mixer's own curve unfitted.
* **The loss** is the Huber loss of ``log L_i - LSE(e_g, a_m - alpha_m log C_i)`` (Besiroglu et al. 2024), its
  threshold ``delta`` set by the measured noise: :data:`HUBER_K` seed standard deviations on the log scale
  (``HUBER_K * sd / median L``), so residuals the size of seed noise are fitted by least squares and only a rung
  several times further off is down-weighted. The old fixed 1e-3 was ~1/4 of the seed noise: L1 on five points.
* **The solver** is Levenberg-Marquardt on the iteratively reweighted (Huber) least squares, vectorised over a
  batch of starts or bootstrap replicates: the point fit descends from a grid of starts at once, the replicates
  from the point fit, all in one numpy pass (a ladder's 400 replicates in well under a second).
* **Intervals** are percentile intervals of a bootstrap that draws (a) the documents with replacement, the same
  draw for every series (document difficulty, shared by all mixers, cancels in their comparison), and (b) the
  training seeds: at a rung with ``k >= 2`` seeds, ``k`` of its seeds with replacement, their deviations from the
  rung's mean scaled by ``sqrt(k / (k - 1))`` (the residual bootstrap's correction: two seeds resampled as they are
  would give half the variance of their mean); at a rung with one seed, a normal draw with the seed spread measured
  elsewhere (the ladder's other rungs, else the preset's, :class:`SeedNoise`). Rungs are not resampled: they are
  the design of the ladder, not a sample of it.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from harness import stats
from harness.errors import MixbenchError
from harness.stats import Interval, percentile_interval

#: Huber's 95%-efficiency constant: delta is this many noise standard deviations (of a point's log loss)
HUBER_K = 1.345
#: delta on the log scale when no seed spread is known (1.345 x 0.0163 nats over a loss of ~4.4: preset quick's)
DEFAULT_DELTA = 5e-3
#: a series needs at least this many distinct computes
MIN_POINTS = 3
#: E may shrink to exp(-_E_FLOOR) of the smallest loss (its bound, named when reached)
_E_FLOOR = 20.0
_ALPHA_BOUNDS = (1e-6, 10.0)
_GRID_E_SHARE = (0.0, 0.3, 0.6, 0.8, 0.9, 0.97)
_GRID_ALPHA = (0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5)
_MAX_ITER = 300


class ScalingLawError(MixbenchError, ValueError):
    """Inputs a scaling-law fit cannot use (too few points, a non-positive compute or loss, misaligned documents);
    the message is one sentence saying which and what is needed."""


def one_blas_thread(fn):
    """Run ``fn`` with one BLAS thread: once torch has run in the process, OpenBLAS's workers spin against torch's
    OpenMP pool and each small batched solve took milliseconds instead of microseconds."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapped


# ---------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True, eq=False)
class LadderPoint:
    """One trained model of a series: training ``compute`` (FLOPs), its per-document losses (mean NLL per document)
    with token-count ``weights``, ``documents`` (ids that align documents across points; None: by position) and
    its training ``seed`` (points of one series at one compute are its seeds)."""

    compute: float
    values: np.ndarray
    weights: np.ndarray
    documents: tuple[str, ...] | None = None
    seed: int | None = None

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

    @property
    def loss(self) -> float:
        """The token-weighted mean of the per-document losses."""
        return float(stats.weighted_mean(self.values, self.weights))


def aligned(points: Sequence[LadderPoint], reference: tuple[str, ...] | None, n: int) -> tuple[np.ndarray, np.ndarray]:
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


def _check(compute, loss) -> tuple[np.ndarray, np.ndarray]:
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
    return c, L


def _check_distinct(name: str, c: np.ndarray) -> None:
    distinct = np.unique(c).size
    if distinct < MIN_POINTS:
        raise ScalingLawError(f"{name}: a power law L(C) = E + A * C^-alpha has 3 parameters, so it needs ladder "
                              f"points at {MIN_POINTS} or more distinct computes; got {distinct}.")


# ---------------------------------------------------------------------------------------------- seed noise


@dataclass(frozen=True)
class SeedNoise:
    """The training-seed standard deviation of a point's loss (nats/token): ``sd`` its estimate, ``df`` its degrees
    of freedom, ``upper`` its one-sided 95% upper bound (what a test that must not understate the noise uses, as the
    board does), ``source`` where it was measured."""

    sd: float
    df: int
    upper: float
    source: str


def ladder_seed_noise(series: Mapping[str, Sequence[LadderPoint]], fallback: SeedNoise | None) -> SeedNoise | None:
    """The pooled within-rung seed spread of the ladder's own points (series x compute with two or more seeds),
    pooled with ``fallback`` (the preset's measured spread) while the ladder has fewer degrees of freedom than it,
    as the board pools (docs/protocol.md, "Seeds"); the fallback alone for a ladder of one seed per rung."""
    groups = [[p.loss for p in pts if p.compute == c] for pts in series.values() for c in {p.compute for p in pts}]
    own = stats.pooled_sd(groups)
    if own is None:
        return fallback
    mine = SeedNoise(own.estimate, own.df, own.upper, f"the ladder's own seeds ({own.df} df)")
    if fallback is None or own.df >= fallback.df:
        return mine
    both = stats.pool_sds([(own.estimate, own.df), (fallback.sd, fallback.df)])
    return SeedNoise(both.estimate, both.df, both.upper, f"{mine.source}, pooled with {fallback.source}")


def huber_delta(noise: SeedNoise | None, losses: np.ndarray) -> float:
    """The Huber threshold on log-loss residuals: :data:`HUBER_K` seed standard deviations on the log scale."""
    if noise is None or not noise.sd > 0:
        return DEFAULT_DELTA
    return HUBER_K * noise.sd / float(np.median(losses))


# ---------------------------------------------------------------------------------------------- the solver


@dataclass(frozen=True)
class _Design:
    """Which parameters each point uses: ``eidx`` its E group, ``sidx`` its series; ``x`` its log(C / C_ref)."""

    x: np.ndarray
    eidx: np.ndarray
    sidx: np.ndarray
    n_e: int
    n_s: int

    @property
    def n_params(self) -> int:
        return self.n_e + 2 * self.n_s

    def split(self, theta: np.ndarray):
        return theta[:, :self.n_e], theta[:, self.n_e:self.n_e + self.n_s], theta[:, self.n_e + self.n_s:]


def _log_predict(e, a_ref, alpha, x):
    return np.logaddexp(e, a_ref - alpha * x)


def _huber(r: np.ndarray, delta: float) -> np.ndarray:
    c = np.clip(r, -delta, delta)
    return np.sum(c * (r - 0.5 * c), axis=-1) / delta


def _residuals(theta: np.ndarray, d: _Design, y: np.ndarray):
    e, a, al = d.split(theta)
    ep = e[:, d.eidx]
    p = np.logaddexp(ep, a[:, d.sidx] - al[:, d.sidx] * d.x)
    return p - y, np.exp(ep - p)


def _jacobian(w_e: np.ndarray, d: _Design) -> np.ndarray:
    B, N = w_e.shape
    J = np.zeros((B, N, d.n_params))
    rows = np.arange(N)
    J[:, rows, d.eidx] = w_e
    J[:, rows, d.n_e + d.sidx] = 1.0 - w_e
    J[:, rows, d.n_e + d.n_s + d.sidx] = -(1.0 - w_e) * d.x
    return J


def _solve(theta: np.ndarray, d: _Design, y: np.ndarray, delta: float, lo: np.ndarray, hi: np.ndarray):
    """Levenberg-Marquardt on Huber-reweighted least squares, one problem per row of ``theta`` / ``y``, each step
    kept only where it lowers that row's Huber loss; parameters projected onto ``[lo, hi]``. Returns the
    parameters, the objective and whether each row converged."""
    theta = np.clip(theta, lo, hi)
    r, w_e = _residuals(theta, d, y)
    obj = _huber(r, delta)
    lam = np.full(theta.shape[0], 1e-3)
    done = np.zeros(theta.shape[0], dtype=bool)
    eye = np.eye(d.n_params)
    for _ in range(_MAX_ITER):
        act = ~done
        if not act.any():
            break
        J = _jacobian(w_e[act], d)
        ra = r[act]
        omega = np.where(np.abs(ra) <= delta, 1.0, delta / np.maximum(np.abs(ra), 1e-300))
        Jw = J * omega[:, :, None]
        Jt = Jw.transpose(0, 2, 1)
        H = Jt @ J
        g = (Jt @ ra[:, :, None])[:, :, 0]
        diag = np.diagonal(H, axis1=1, axis2=2)
        A = H + lam[act, None, None] * (diag[:, :, None] * eye + 1e-12 * eye)
        step = -np.linalg.solve(A, g[:, :, None])[:, :, 0]
        cand = np.clip(theta[act] + step, lo, hi)
        r_new, w_new = _residuals(cand, d, y[act])
        obj_new = _huber(r_new, delta)
        better = obj_new < obj[act]
        idx = np.flatnonzero(act)
        moved = np.max(np.abs(cand - theta[act]), axis=1)
        ok = idx[better]
        theta[ok], r[ok], w_e[ok], obj[ok] = cand[better], r_new[better], w_new[better], obj_new[better]
        lam[idx] = np.where(better, np.maximum(lam[idx] / 3.0, 1e-12), lam[idx] * 4.0)
        done[idx[(better & (moved < 1e-8)) | (~better & (lam[idx] > 1e8))]] = True
    return theta, obj, done


def _bounds(d: _Design, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per E group: E between exp(-20) of its smallest loss and its largest loss; a_ref within 20 of the losses;
    alpha in (1e-6, 10)."""
    lo = np.empty(d.n_params)
    hi = np.empty(d.n_params)
    for g in range(d.n_e):
        yg = y[d.eidx == g]
        lo[g], hi[g] = yg.min() - _E_FLOOR, yg.max()
    lo[d.n_e:d.n_e + d.n_s], hi[d.n_e:d.n_e + d.n_s] = y.min() - _E_FLOOR, y.max() + _E_FLOOR
    lo[d.n_e + d.n_s:], hi[d.n_e + d.n_s:] = _ALPHA_BOUNDS
    return lo, hi


def _grid(d: _Design, y: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Starts: E as a share of its group's smallest loss (0 for the floor) and one alpha for every series, each
    ``a_ref`` the least-squares intercept of ``log(L - E) + alpha x`` (what it would be were E and alpha right)."""
    loss = np.exp(y)
    starts = []
    for share in _GRID_E_SHARE:
        e = np.array([lo[g] + 1.0 if share == 0.0 else math.log(share * loss[d.eidx == g].min())
                      for g in range(d.n_e)])
        reducible = np.log(np.maximum(loss - np.exp(e[d.eidx]), 1e-3 * loss.min()))
        for alpha in _GRID_ALPHA:
            a = np.array([np.mean(reducible[d.sidx == s] + alpha * d.x[d.sidx == s]) for s in range(d.n_s)])
            starts.append(np.concatenate([e, a, np.full(d.n_s, alpha)]))
    return np.array(starts)


def _at_bounds(theta: np.ndarray, d: _Design, lo: np.ndarray, s: int) -> tuple[str, ...]:
    out = []
    if theta[d.eidx[d.sidx == s][0]] <= lo[d.eidx[d.sidx == s][0]] + 1e-6:
        out.append("E")
    alpha = theta[d.n_e + d.n_s + s]
    if alpha <= _ALPHA_BOUNDS[0] * 1.001 or alpha >= _ALPHA_BOUNDS[1] - 1e-6:
        out.append("alpha")
    return tuple(out)


# ---------------------------------------------------------------------------------------------- the point fit


@dataclass(frozen=True)
class PowerLawFit:
    """One series' ``L(C) = E + A * C^-alpha`` (``E = exp(e)``, ``A = exp(a)`` in FLOPs units).

    ``a_ref = a - alpha log(reference_compute)`` is the log of the reducible loss at the reference (``A_ref``),
    the number to read when ``A`` is awkwardly large. ``shared_with`` names the series whose E is this one's (a
    joint fit); ``at_bounds`` the parameters that ended on a bound (E at ~0, alpha at ~0 or 10): the law is then
    degenerate on this ladder and its parameters should not be read one by one."""

    e: float
    a: float
    alpha: float
    reference_compute: float
    objective: float  # the Huber loss of the whole joint fit at its optimum (in units of delta)
    n_points: int
    converged: bool
    at_bounds: tuple[str, ...] = ()
    shared_with: tuple[str, ...] = ()
    delta: float = DEFAULT_DELTA

    @property
    def E(self) -> float:
        return math.exp(self.e)

    @property
    def A(self) -> float:
        """In FLOPs units (inf on overflow: use ``a`` or ``A_ref`` then)."""
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

    def predict(self, compute):
        """``L(C)`` as ``exp(LSE(e, a_ref - alpha log(C / C_ref)))`` (no overflow for large C)."""
        c = np.asarray(compute, dtype=np.float64)
        out = np.exp(_log_predict(self.e, self.a_ref, self.alpha, np.log(c / self.reference_compute)))
        return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class _Problem:
    names: tuple[str, ...]
    design: _Design
    c_ref: float
    lo: np.ndarray
    hi: np.ndarray


def _problem(names: Sequence[str], computes: np.ndarray, sidx: np.ndarray, y: np.ndarray,
             groups: Mapping[str, str], c_ref: float | None) -> _Problem:
    c_ref = float(np.exp(np.mean(np.log(computes)))) if c_ref is None else float(c_ref)
    if not (math.isfinite(c_ref) and c_ref > 0):
        raise ScalingLawError(f"the reference compute must be positive and finite; got {c_ref!r}.")
    labels = list(dict.fromkeys(groups.get(n, n) for n in names))
    series_group = np.array([labels.index(groups.get(n, n)) for n in names])
    d = _Design(np.log(computes / c_ref), series_group[sidx], sidx, len(labels), len(names))
    lo, hi = _bounds(d, y)
    return _Problem(tuple(names), d, c_ref, lo, hi)


def _point_fit(prob: _Problem, y: np.ndarray, delta: float) -> tuple[np.ndarray, float, bool]:
    starts = _grid(prob.design, y, prob.lo)
    theta, obj, done = _solve(starts, prob.design, np.broadcast_to(y, (len(starts), y.size)).copy(), delta,
                              prob.lo, prob.hi)
    best = int(np.nanargmin(obj))
    return theta[best], float(obj[best]), bool(done[best])


def _fits_of(prob: _Problem, theta: np.ndarray, obj: float, converged: bool, delta: float) -> dict[str, PowerLawFit]:
    d = prob.design
    out = {}
    log_ref = math.log(prob.c_ref)
    for s, name in enumerate(prob.names):
        g = int(d.eidx[d.sidx == s][0])
        mates = tuple(n for t, n in enumerate(prob.names) if int(d.eidx[d.sidx == t][0]) == g and n != name)
        a_ref, alpha = float(theta[d.n_e + s]), float(theta[d.n_e + d.n_s + s])
        out[name] = PowerLawFit(float(theta[g]), a_ref + alpha * log_ref, alpha, prob.c_ref, obj,
                                int(np.sum(d.sidx == s)), converged, _at_bounds(theta, d, prob.lo, s), mates, delta)
    return out


@one_blas_thread
def fit_power_law(compute, loss, *, reference_compute: float | None = None,
                  delta: float = DEFAULT_DELTA) -> PowerLawFit:
    """One series' ``L(C) = E + A * C^-alpha`` (its own E), from a grid of starts; ``reference_compute`` (default
    the geometric mean of ``compute``) is what C is divided by inside the fit."""
    c, L = _check(compute, loss)
    _check_distinct("fit_power_law", c)
    prob = _problem(["s"], c, np.zeros(c.size, dtype=int), np.log(L), {}, reference_compute)
    theta, obj, ok = _point_fit(prob, np.log(L), delta)
    return _fits_of(prob, theta, obj, ok, delta)["s"]


# ---------------------------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class Prediction:
    """The fitted loss at one compute and its percentile bootstrap interval."""

    compute: float
    loss: float
    interval: Interval | None


@dataclass(frozen=True, eq=False)
class FitWithIntervals:
    """A series' point fit with percentile bootstrap intervals of its parameters.

    ``replicates`` holds each replicate's ``(e, a_ref, alpha)`` (reference units; NaN where a fit failed); row ``i``
    of every series of one :func:`bootstrap_fits` call comes from the same document draw and the same joint refit
    (``pairing`` says which call): that is what crossovers pair."""

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
    pairing: tuple
    noise: SeedNoise | None = None
    seeds_per_rung: tuple[int, ...] = ()

    @property
    def c_min(self) -> float:
        return min(self.computes)

    @property
    def c_max(self) -> float:
        return max(self.computes)


def _seed_draws(boot: np.ndarray, rung_of: np.ndarray, rng: np.random.Generator, noise: SeedNoise | None):
    """Replace each point's loss ``boot[:, i]`` by a seed draw of its rung (module docstring)."""
    out = boot.copy()
    B = boot.shape[0]
    for r in np.unique(rung_of):
        idx = np.flatnonzero(rung_of == r)
        k = idx.size
        if k >= 2:
            mean = boot[:, idx].mean(axis=1, keepdims=True)
            pick = idx[rng.integers(0, k, size=(B, k))]
            out[:, idx] = mean + math.sqrt(k / (k - 1)) * (np.take_along_axis(boot, pick, axis=1) - mean)
        elif noise is not None and noise.sd > 0:
            out[:, idx] = boot[:, idx] + rng.normal(0.0, noise.sd, size=(B, 1))
    return out


def _doc_counts(n_docs: int, n_boot: int, seed: int) -> np.ndarray:
    """``[n_boot, n_docs]``: how often each document is drawn in each replicate (shared by every series)."""
    draws = stats.resample_indices(n_docs, n_boot, np.random.default_rng([int(seed), 0]))
    counts = np.zeros((n_boot, n_docs))
    np.add.at(counts, (np.repeat(np.arange(n_boot), n_docs), draws.reshape(-1)), 1.0)
    return counts


@one_blas_thread
def bootstrap_fits(
    series: Mapping[str, Sequence[LadderPoint]],
    n_boot: int = 400,
    seed: int = 0,
    level: float = 0.95,
    *,
    predict_at: Sequence[float] = (),
    shared: Sequence[str] | None = None,
    noise: SeedNoise | None = None,
) -> dict[str, FitWithIntervals]:
    """Per series: the joint point fit and percentile bootstrap intervals of E, A, A_ref, alpha and
    ``L(predict_at)`` (module docstring).

    ``shared`` names the series fitted with one E (default: all of them); every other series has its own.
    ``noise`` is the seed spread measured outside this ladder (the preset's): :func:`ladder_seed_noise` pools it
    with the ladder's own seeds, and it sets the Huber delta and the seed draw at one-seed rungs. Without any, the
    delta is :data:`DEFAULT_DELTA` and one-seed rungs vary by their documents alone."""
    if not series:
        raise ScalingLawError("bootstrap_fits needs at least one series.")
    if n_boot < 0 or not 0.0 < level < 1.0:
        raise ScalingLawError(f"bootstrap_fits needs n_boot >= 0 and a level in (0, 1); got {n_boot} and {level}.")
    names = list(series)
    points = [p for n in names for p in series[n]]
    if not points:
        raise ScalingLawError("bootstrap_fits: every series needs ladder points.")
    reference = None if points[0].documents is None else tuple(sorted(points[0].documents))
    values, weights = aligned(points, reference, points[0].values.size)
    sidx = np.array([i for i, n in enumerate(names) for _ in series[n]])
    computes, losses = _check([p.compute for p in points], np.sum(values * weights, axis=1) / weights.sum(axis=1))
    for i, n in enumerate(names):
        _check_distinct(n, computes[sidx == i])
    joint = set(names if shared is None else shared)
    groups = {n: ("shared" if n in joint else n) for n in names}
    prob = _problem(names, computes, sidx, np.log(losses), groups, None)
    noise = ladder_seed_noise(series, noise)
    delta = huber_delta(noise, losses)
    theta, obj, ok = _point_fit(prob, np.log(losses), delta)
    fits = _fits_of(prob, theta, obj, ok, delta)

    rung_of = np.unique(np.stack([sidx, np.searchsorted(np.unique(computes), computes)], axis=1), axis=0,
                        return_inverse=True)[1].reshape(-1)
    n_docs = values.shape[1]
    reps = np.full((n_boot, prob.design.n_params), np.nan)
    if n_boot:
        counts = _doc_counts(n_docs, n_boot, seed)
        boot = (counts @ (values * weights).T) / (counts @ weights.T)
        rng = np.random.default_rng([int(seed), 1, zlib.crc32(",".join(names).encode())])
        boot = _seed_draws(boot, rung_of, rng, noise)
        with np.errstate(invalid="ignore", divide="ignore"):
            yb = np.log(boot)
        good = np.all(np.isfinite(yb), axis=1)
        if good.any():
            th, _, _ = _solve(np.tile(theta, (int(good.sum()), 1)), prob.design, yb[good], delta, prob.lo, prob.hi)
            reps[good] = th
    pairing = (int(seed), int(n_boot), n_docs, tuple(sorted(names)))
    out = {}
    d = prob.design
    for s, name in enumerate(names):
        g = int(d.eidx[d.sidx == s][0])
        r = np.stack([reps[:, g], reps[:, d.n_e + s], reps[:, d.n_e + d.n_s + s]], axis=1)
        mine = sidx == s
        per_rung = tuple(int(np.sum(computes[mine] == c)) for c in np.unique(computes[mine]))
        out[name] = _with_intervals(name, fits[name], r, level, predict_at, computes[mine], losses[mine], pairing,
                                    noise, per_rung)
    return out


def _with_intervals(name, fit, reps, level, predict_at, c, L, pairing, noise, per_rung) -> FitWithIntervals:
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
        losses=tuple(float(v) for v in L), replicates=reps, pairing=pairing, noise=noise, seeds_per_rung=per_rung,
    )
