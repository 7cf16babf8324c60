"""Bradley–Terry ratings on the Elo scale from soft outcomes, bootstrap intervals over prompts, win-rate matrices.

The model (as in Chatbot Arena's ``fit_bt``): P(i beats j) = σ(β_i − β_j [+ γ·x]), fitted by minimising the
logistic loss. Decisions fixed here:

* Outcomes are soft: a comparison with left's outcome ``s`` in [0, 1] (:mod:`suites.judge.protocol`: the
  preference averaged over both orders, rescaled) contributes ``s·log σ(d) + (1 − s)·log σ(−d)``, the
  likelihood of ``s`` read as a fractional win. A tie (s = 0.5) is half a win for each side, so a mixer that
  only ever ties sits at the centre.
* Every pair of players that met gets ``prior_ties`` virtual ties (default 1). Without them a clean sweep (likely
  with a handful of prompts) sends the maximum-likelihood rating to infinity; one virtual tie is add-one
  smoothing, e.g. a 16–0 sweep becomes a gap of ln(16.5/0.5)·400/ln 10 ≈ 609 Elo. ``prior_ties=0`` gives the
  plain MLE.
* Elo = 1000 + 400·log10(e)·β with Σβ = 0: ratings are centred at 1000 (four mixers sum to 4000, as the ProtoT
  paper reports), and 400 points of difference mean 10:1 odds.
* Length control (alpaca_eval's LC idea): an extra covariate x = tanh(Δlen / sd(Δlen)) with Δlen the left
  output's length minus the right's; the LC rating is β, i.e. the prediction at equal lengths.
* Intervals: percentile bootstrap over *prompts* (all comparisons on one prompt share it), refitting every
  resample; the draws come from :func:`harness.stats.resample_indices` and the intervals from
  :func:`harness.stats.percentile_interval`, which never widens an interval to contain its point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness import stats

ELO_CENTRE = 1000.0
ELO_SCALE = 400.0 / math.log(10.0)  # rating points per unit of β (natural-log odds)
_MAX_NEWTON = 100
_TOL = 1e-10


@dataclass(frozen=True)
class Games:
    """Complete comparisons: ``left``/``right`` player indices, ``score`` of left in [0, 1], the prompt each came
    from (the bootstrap unit) and an optional covariate (left minus right)."""

    players: tuple[str, ...]
    left: np.ndarray
    right: np.ndarray
    score: np.ndarray
    prompt: np.ndarray
    covariate: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.left)
        for name in ("right", "score", "prompt"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"games: {name} has {len(getattr(self, name))} entries, left has {n}")
        if self.covariate is not None and len(self.covariate) != n:
            raise ValueError("games: covariate must have one entry per game")
        if n and (np.any(self.left == self.right) or max(self.left.max(), self.right.max()) >= len(self.players)):
            raise ValueError("games: player indices must be distinct and < number of players")
        if n and (np.any(self.score < 0) or np.any(self.score > 1)):
            raise ValueError("games: scores must be in [0, 1]")


@dataclass(frozen=True)
class Fit:
    beta: np.ndarray  # Σβ = 0
    gamma: float  # covariate coefficient (0 without a covariate)
    converged: bool

    @property
    def elo(self) -> np.ndarray:
        return ELO_CENTRE + ELO_SCALE * self.beta


def fit_bradley_terry(games: Games, weights: np.ndarray | None = None, prior_ties: float = 1.0,
                      use_covariate: bool = False) -> Fit:
    """Minimise the (weighted) logistic loss on soft outcomes by damped Newton steps under Σβ = 0."""
    n = len(games.players)
    w = np.ones(len(games.left)) if weights is None else np.asarray(weights, dtype=float)
    left, right, score = games.left, games.right, games.score.astype(float)
    x = games.covariate if use_covariate and games.covariate is not None else None
    if prior_ties > 0:
        pairs = sorted({(min(a, b), max(a, b)) for a, b in zip(left.tolist(), right.tolist())})
        if pairs:
            pl, pr = np.array(pairs).T
            left, right = np.concatenate([left, pl]), np.concatenate([right, pr])
            score = np.concatenate([score, np.full(len(pairs), 0.5)])
            w = np.concatenate([w, np.full(len(pairs), float(prior_ties))])
            if x is not None:
                x = np.concatenate([x, np.zeros(len(pairs))])
    has_gamma = x is not None and np.any(x != 0)
    k = n + int(has_gamma)
    design = np.zeros((len(left), k))
    design[np.arange(len(left)), left] = 1.0
    design[np.arange(len(left)), right] = -1.0
    if has_gamma:
        design[:, n] = x
    centre = np.zeros(k)
    centre[:n] = 1.0 / math.sqrt(n)  # the direction Σβ the likelihood cannot see

    def loss(theta: np.ndarray) -> float:
        d = design @ theta
        return float(np.sum(w * (score * np.logaddexp(0, -d) + (1 - score) * np.logaddexp(0, d))))

    theta, converged = np.zeros(k), False
    current = loss(theta)
    for _ in range(_MAX_NEWTON):
        d = design @ theta
        p = 1.0 / (1.0 + np.exp(-d))
        grad = design.T @ (w * (p - score))
        hess = design.T @ (design * (w * p * (1 - p))[:, None]) + np.outer(centre, centre)
        if has_gamma:
            hess[n, n] += 1e-9  # keeps γ finite when the covariate separates the games
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:  # backtracking: the loss must not increase
            candidate = theta - t * step
            new = loss(candidate)
            if new <= current + 1e-12 or t < 1e-8:
                break
            t *= 0.5
        theta, improvement, current = candidate, current - new, new
        if float(np.max(np.abs(t * step))) < 1e-9 or improvement < _TOL:
            converged = True
            break
    beta = theta[:n] - theta[:n].mean()
    return Fit(beta, float(theta[n]) if has_gamma else 0.0, converged)


def win_matrix(games: Games, weights: np.ndarray | None = None) -> np.ndarray:
    """``M[i, j]`` = mean soft score of i against j; NaN where they never met."""
    n = len(games.players)
    w = np.ones(len(games.left)) if weights is None else weights
    won, played = np.zeros((n, n)), np.zeros((n, n))
    np.add.at(won, (games.left, games.right), w * games.score)
    np.add.at(won, (games.right, games.left), w * (1 - games.score))
    np.add.at(played, (games.left, games.right), w)
    np.add.at(played, (games.right, games.left), w)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(played > 0, won / np.where(played > 0, played, 1), np.nan)


def win_rates(games: Games, weights: np.ndarray | None = None) -> np.ndarray:
    """Each player's mean soft score over all its games; NaN for a player without games."""
    n = len(games.players)
    w = np.ones(len(games.left)) if weights is None else weights
    won, played = np.zeros(n), np.zeros(n)
    np.add.at(won, games.left, w * games.score)
    np.add.at(won, games.right, w * (1 - games.score))
    np.add.at(played, games.left, w)
    np.add.at(played, games.right, w)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(played > 0, won / np.where(played > 0, played, 1), np.nan)


@dataclass(frozen=True)
class Estimate:
    """A point value per player and its bootstrap interval per player (None: no interval could be formed)."""

    value: np.ndarray
    intervals: tuple[stats.Interval | None, ...]


@dataclass(frozen=True)
class Ratings:
    """Everything the suite reports about one set of games."""

    players: tuple[str, ...]
    elo: Estimate
    elo_lc: Estimate
    win_rate: Estimate
    matrix: np.ndarray
    matrix_intervals: dict[tuple[int, int], stats.Interval | None]
    length_coef: float  # γ of the length-controlled fit (> 0: the judge favours the longer output)
    converged: bool
    n_games: int
    n_prompts: int


def rate(games: Games, bootstrap: int = 1000, confidence: float = 0.95, prior_ties: float = 1.0,
         seed: int = 0) -> Ratings:
    """Point fits plus percentile bootstrap intervals over prompts (``bootstrap=0``: no intervals)."""
    plain = fit_bradley_terry(games, prior_ties=prior_ties)
    lc = fit_bradley_terry(games, prior_ties=prior_ties, use_covariate=True)
    wr = win_rates(games)
    matrix = win_matrix(games)
    prompts, inverse = np.unique(games.prompt, return_inverse=True)
    n = len(games.players)
    draws = stats.resample_indices(len(prompts), bootstrap, seed) if bootstrap > 0 and len(prompts) > 1 else None
    reps = {"elo": [], "elo_lc": [], "win_rate": [], "matrix": []}
    for row in [] if draws is None else draws:
        weights = np.bincount(row, minlength=len(prompts)).astype(float)[inverse]
        reps["elo"].append(fit_bradley_terry(games, weights, prior_ties).elo)
        reps["elo_lc"].append(fit_bradley_terry(games, weights, prior_ties, use_covariate=True).elo)
        reps["win_rate"].append(win_rates(games, weights))
        reps["matrix"].append(win_matrix(games, weights))

    def intervals(draws_: list[np.ndarray], i: int) -> stats.Interval | None:
        return stats.percentile_interval(np.array([d[i] for d in draws_]), confidence) if draws_ else None

    def estimate(point: np.ndarray, name: str) -> Estimate:
        return Estimate(point, tuple(intervals(reps[name], i) for i in range(n)))

    matrix_intervals = {
        (i, j): (stats.percentile_interval(np.array([m[i, j] for m in reps["matrix"]]), confidence)
                 if reps["matrix"] else None)
        for i in range(n) for j in range(n) if i != j and not math.isnan(matrix[i, j])
    }
    return Ratings(
        players=games.players,
        elo=estimate(plain.elo, "elo"),
        elo_lc=estimate(lc.elo, "elo_lc"),
        win_rate=estimate(wr, "win_rate"),
        matrix=matrix,
        matrix_intervals=matrix_intervals,
        length_coef=lc.gamma,
        converged=plain.converged and lc.converged,
        n_games=len(games.left),
        n_prompts=len(prompts),
    )


def length_covariate(left_len: np.ndarray, right_len: np.ndarray) -> np.ndarray:
    """tanh of the length difference in units of its standard deviation (zeros when lengths never differ)."""
    diff = np.asarray(left_len, dtype=float) - np.asarray(right_len, dtype=float)
    sd = float(diff.std())
    return np.tanh(diff / sd) if sd > 0 else np.zeros_like(diff)
