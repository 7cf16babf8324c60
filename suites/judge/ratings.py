"""Bradley–Terry ratings on the Elo scale, bootstrap intervals over prompts, win-rate matrices.

The model (as in Chatbot Arena's ``fit_bt``): P(i beats j) = σ(β_i − β_j [+ γ·x]), fitted by minimising the
logistic loss. Decisions fixed here:

* A tie counts as half a win for each side: the comparison contributes ``s·log σ(d) + (1 − s)·log σ(−d)`` with
  ``s = 0.5``. That is the maximum-likelihood reading of ties as two half-weighted games, so a mixer that only
  ever ties sits at the centre.
* Every pair of players that met gets ``prior_ties`` virtual ties (default 1). Without them a clean sweep (likely
  with a handful of prompts) sends the maximum-likelihood rating to infinity; one virtual tie is add-one
  smoothing, e.g. a 16–0 sweep becomes a gap of ln(16.5/0.5)·400/ln 10 ≈ 609 Elo. ``prior_ties=0`` gives the
  plain MLE.
* Elo = 1000 + 400·log10(e)·β with Σβ = 0: ratings are centred at 1000 (four mixers sum to 4000, as the ProtoT
  paper reports), and 400 points of difference mean 10:1 odds.
* Length control (alpaca_eval's LC idea): an extra covariate x = tanh(Δlen / sd(Δlen)) with Δlen the left
  output's length minus the right's; the LC rating is β, i.e. the prediction at equal lengths.
* Intervals: percentile bootstrap that resamples *prompts* (all comparisons on one prompt share it), refitting
  each time; the point estimate is always inside its interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ELO_CENTRE = 1000.0
ELO_SCALE = 400.0 / math.log(10.0)  # rating points per unit of β (natural-log odds)
_MAX_NEWTON = 100
_TOL = 1e-10


@dataclass(frozen=True)
class Games:
    """Complete comparisons: ``left``/``right`` player indices, ``score`` of left (1, 0.5 or 0), the prompt each
    came from (the bootstrap unit) and an optional covariate (left minus right)."""

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
    """Minimise the (weighted) logistic loss by damped Newton steps under Σβ = 0."""
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
    """``M[i, j]`` = mean score of i against j (ties count 0.5); NaN where they never met."""
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
    """Each player's mean score over all its games (ties 0.5); NaN for a player without games."""
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
class Interval:
    value: np.ndarray
    low: np.ndarray
    high: np.ndarray


@dataclass(frozen=True)
class Ratings:
    """Everything the suite reports about one set of games."""

    players: tuple[str, ...]
    elo: Interval
    elo_lc: Interval
    win_rate: Interval
    matrix: np.ndarray
    length_coef: float  # γ of the length-controlled fit (> 0: the judge favours the longer output)
    converged: bool
    n_games: int
    n_prompts: int


def rate(games: Games, bootstrap: int = 1000, confidence: float = 0.95, prior_ties: float = 1.0,
         seed: int = 0) -> Ratings:
    """Point fits plus percentile bootstrap intervals over prompts (``bootstrap=0``: intervals = point)."""
    plain = fit_bradley_terry(games, prior_ties=prior_ties)
    lc = fit_bradley_terry(games, prior_ties=prior_ties, use_covariate=True)
    wr = win_rates(games)
    prompts, inverse = np.unique(games.prompt, return_inverse=True)
    samples: dict[str, list[np.ndarray]] = {"elo": [], "elo_lc": [], "win_rate": []}
    rng = np.random.default_rng(seed)
    for _ in range(bootstrap):
        counts = rng.multinomial(len(prompts), np.full(len(prompts), 1.0 / len(prompts)))
        weights = counts[inverse].astype(float)
        samples["elo"].append(fit_bradley_terry(games, weights, prior_ties).elo)
        samples["elo_lc"].append(fit_bradley_terry(games, weights, prior_ties, use_covariate=True).elo)
        samples["win_rate"].append(win_rates(games, weights))

    def interval(point: np.ndarray, draws: list[np.ndarray]) -> Interval:
        if not draws:
            return Interval(point, point.copy(), point.copy())
        stack = np.array(draws)
        lo_q, hi_q = (1 - confidence) / 2, (1 + confidence) / 2
        with np.errstate(invalid="ignore"):
            lo = np.nanquantile(stack, lo_q, axis=0) if np.isfinite(stack).any() else np.full_like(point, np.nan)
            hi = np.nanquantile(stack, hi_q, axis=0) if np.isfinite(stack).any() else np.full_like(point, np.nan)
        return Interval(point, np.fmin(lo, point), np.fmax(hi, point))

    return Ratings(
        players=games.players,
        elo=interval(plain.elo, samples["elo"]),
        elo_lc=interval(lc.elo, samples["elo_lc"]),
        win_rate=interval(wr, samples["win_rate"]),
        matrix=win_matrix(games),
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
