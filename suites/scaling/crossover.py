"""Where two fitted curves cross, and what the ladder can say about it (docs/scaling.md, "Crossovers").

A crossover is a root of ``log L_a(C) - log L_b(C)``. Only roots inside the data's compute range ``[C_min, C_max]``
are reported as crossovers, with the interval of the paired replicates that cross there. A root past ``C_max``
(searched up to :data:`EXTRAPOLATION` x ``C_max``) is reported as *extrapolated*, never as a crossover: beyond the
largest rung the curvature that makes two power laws meet (E and the exponents) is not identified by the data, so
the fitted root moves with whatever the law assumes there. For two mixers sharing E the root is where their
reducible terms meet, ``log C = (a_a - a_b) / (alpha_a - alpha_b)``: a ratio of two differences each barely
resolved, which amplifies their noise the farther it falls from the rungs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.stats import Interval, percentile_interval
from suites.scaling.fit import FitWithIntervals, PowerLawFit, ScalingLawError, _log_predict

#: roots are searched up to this factor past the largest compute (and reported there as "extrapolated" only)
EXTRAPOLATION = 10.0
#: "cross" needs the point fit to cross in range and at least this share of the paired replicates to cross there;
#: "no crossover" needs neither, with at most ``1 - DECIDED_SHARE`` of the replicates crossing in range
DECIDED_SHARE = 0.8
#: log-spaced points per searched range where the gap's sign is read before each root is refined
_SCAN = 1024
VERDICTS = ("cross", "no crossover", "undetermined", "extrapolated")


@dataclass(frozen=True)
class Crossover:
    """The roots of two fitted curves' log gap in ``[low, high]`` (FLOPs): ``compute`` the first (None: none),
    ``roots`` every one; ``better_below`` has the lower loss from ``low`` to the first root, ``better_above`` from
    there to the next (with no root both name the one better throughout; None for identical curves)."""

    names: tuple[str, str]
    compute: float | None
    roots: tuple[float, ...]
    better_below: str | None
    better_above: str | None
    low: float
    high: float
    note: str = ""


def _log_gap(params_a, params_b, log_c) -> np.ndarray:
    """``log L_a - log L_b`` at ``log_c``; params are ``(e, a_ref, alpha, log C_ref)`` (arrays broadcast)."""
    ea, aa, la, ra = params_a
    eb, ab, lb, rb = params_b
    return _log_predict(ea, aa, la, log_c - ra) - _log_predict(eb, ab, lb, log_c - rb)


def _params(fit: PowerLawFit):
    return (fit.e, fit.a_ref, fit.alpha, math.log(fit.reference_compute))


def _roots(gap, lo: float, hi: float) -> list[float]:
    """Log-compute roots of ``gap`` in [lo, hi]: sign changes on a scan, refined by Brent's method."""
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


def crossover(fit_a: PowerLawFit, fit_b: PowerLawFit, low: float, high: float, *,
              names: tuple[str, str] = ("a", "b")) -> Crossover:
    """Where ``fit_a`` and ``fit_b`` cross in ``[low, high]``: roots of the log-loss gap on a log-spaced scan,
    refined by Brent's method (two roots closer than the scan's step, ~0.1% of the range in log C, are missed: a
    tangency no ladder could tell from none). With several, the first is ``compute`` and ``note`` says how many."""
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        raise ScalingLawError(f"a crossover search needs 0 < low <= high; got {low!r} and {high!r}.")
    pa, pb = _params(fit_a), _params(fit_b)

    def gap(log_c):
        return _log_gap(pa, pb, log_c)

    lo, hi = math.log(low), math.log(high)
    roots = [math.exp(r) for r in _roots(gap, lo, hi)]
    d = gap(np.linspace(lo, hi, _SCAN))
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


def _first_crossings(params_a, params_b, lo: float, hi: float) -> np.ndarray:
    """Per replicate, the first root's compute in [lo, hi], NaN where none (vectorised scan, then Brent)."""
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


@dataclass(frozen=True)
class CrossoverInterval:
    """A crossover with its paired bootstrap. ``share``: replicates crossing in ``[C_min, C_max]``; ``interval``:
    the percentile interval of their crossing (conditional on crossing in range); ``verdict`` one of
    :data:`VERDICTS`; ``beyond`` the point fit's first root past ``C_max`` (None: none up to the search's end) with
    ``beyond_share``, the replicates whose first root falls there."""

    point: Crossover
    share: float
    n_replicates: int
    interval: Interval | None
    verdict: str
    sentence: str
    c_max: float
    beyond: float | None = None
    beyond_share: float = 0.0


def _flops(x: float) -> str:
    return f"{x:.2g}"


def crossover_interval(a: FitWithIntervals, b: FitWithIntervals, c_min: float | None = None,
                       c_max: float | None = None, *, level: float = 0.95, decided: float = DECIDED_SHARE,
                       extrapolation: float = EXTRAPOLATION) -> CrossoverInterval:
    """The crossover of two series of one :func:`suites.scaling.fit.bootstrap_fits` call (replicate ``i`` of
    both from the same draw and joint refit). ``[c_min, c_max]`` defaults to the range of both ladders.

    In range: ``cross`` when the point fit crosses there and ``>= decided`` of the replicates do; ``no crossover``
    when it does not and ``<= 1 - decided`` of them do; else ``undetermined``. A pair that does not cross in range
    but whose point fit crosses in ``(C_max, extrapolation x C_max]`` is ``extrapolated`` (module docstring)."""
    if a.pairing != b.pairing:
        raise ScalingLawError("crossover_interval needs two series from the same bootstrap_fits call (paired "
                              f"replicates); got pairings {a.pairing} and {b.pairing}.")
    if not 0.5 < decided <= 1.0:
        raise ScalingLawError(f"crossover_interval: decided must be in (0.5, 1]; got {decided}.")
    c_min = min(a.c_min, b.c_min) if c_min is None else float(c_min)
    c_max = max(a.c_max, b.c_max) if c_max is None else float(c_max)
    names = (a.name, b.name)
    point = crossover(a.fit, b.fit, c_min, extrapolation * c_max, names=names)
    inside = [r for r in point.roots if r <= c_max]
    first_in = inside[0] if inside else None
    beyond = None if inside or not point.roots else point.roots[0]
    ok = np.all(np.isfinite(a.replicates), axis=1) & np.all(np.isfinite(b.replicates), axis=1)
    ra, rb = a.replicates[ok], b.replicates[ok]
    n = int(len(ra))
    crossings = np.empty(0)
    if n:
        pa = (ra[:, 0], ra[:, 1], ra[:, 2], np.full(n, math.log(a.fit.reference_compute)))
        pb = (rb[:, 0], rb[:, 1], rb[:, 2], np.full(n, math.log(b.fit.reference_compute)))
        crossings = _first_crossings(pa, pb, math.log(c_min), math.log(extrapolation * c_max))
    in_range = np.isfinite(crossings) & (crossings <= c_max)
    share = float(np.mean(in_range)) if n else math.nan
    beyond_share = float(np.mean(np.isfinite(crossings) & (crossings > c_max))) if n else 0.0
    log_iv = percentile_interval(np.log(crossings[in_range]), level) if n else None
    interval = None if log_iv is None else Interval(math.exp(log_iv.low), math.exp(log_iv.high), "bootstrap", level)
    pct = "no" if not n else f"{100 * share:.0f}% of {n}"
    span = f"[{_flops(c_min)}, {_flops(c_max)}] FLOPs"
    both = f"{a.name} and {b.name}"
    if n and first_in is not None and share >= decided:
        verdict = "cross"
        where = f" [{_flops(interval.low)}, {_flops(interval.high)}]" if interval is not None else ""
        sentence = (f"{both} cross at {_flops(first_in)} FLOPs{where} (crossing in {pct} replicates); "
                    f"{point.better_below} is better below, {point.better_above} above")
        if len(inside) > 1:
            sentence += f" (first of {len(inside)} crossings)"
    elif n and first_in is None and share <= 1.0 - decided:
        verdict = "no crossover"
        best = f"; {point.better_below} is better throughout" if point.better_below else ""
        sentence = f"no crossover of {both} in the data's range {span} (crossing in {pct} replicates){best}"
    else:
        verdict = "undetermined"
        fit_says = (f"the point fit crosses at {_flops(first_in)} FLOPs" if first_in is not None
                    else "the point fit does not cross there")
        sentence = (f"crossover of {both} in the data's range {span} undetermined: {fit_says}, crossing in {pct} "
                    "replicates")
    if verdict != "cross" and beyond is not None:
        verdict = "extrapolated"
        sentence += (f"; extrapolated only: the fits meet at {_flops(beyond)} FLOPs, {beyond / c_max:.2g}x past the "
                     f"largest rung ({100 * beyond_share:.0f}% of replicates meet past it), where E and the exponents "
                     f"are not identified by the data, so this is no crossover; {point.better_below} is better "
                     f"before it")
    return CrossoverInterval(point, share, n, interval, verdict, sentence + ".", c_max, beyond, beyond_share)
