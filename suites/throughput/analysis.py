"""Derived throughput metrics from a timing table: scaling exponents, crossovers, decode ratios.

A timing table maps context length T -> seconds (or None for a point that ran out of memory or was skipped).
These are pure functions so they can be checked on synthetic tables with known answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from harness.stats import Interval, percentile_interval

Table = Mapping[int, float | None]


def measured(table: Table) -> list[tuple[int, float]]:
    return sorted((t, s) for t, s in table.items() if s is not None and s > 0 and math.isfinite(s))


def scaling_exponent(table: Table, lo: int | None = None, hi: int | None = None) -> float | None:
    """Least-squares slope of log(time) against log(T): 1 is linear cost, 2 quadratic.

    By default over the upper half of the grid (where fixed overheads no longer hide the asymptotics); or over
    the points with ``lo <= T <= hi``. None with fewer than two points.
    """
    points = measured(table)
    if lo is None and hi is None:
        points = points[len(points) // 2 :] if len(points) > 2 else points
    else:
        points = [(t, s) for t, s in points if (lo is None or t >= lo) and (hi is None or t <= hi)]
    if len(points) < 2:
        return None
    xs = [math.log(t) for t, _ in points]
    ys = [math.log(s) for _, s in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def quadratic_fit(table: Table) -> tuple[float, float, float] | None:
    """Least squares of time(T) = a + b T + c T^2 over every measured point: ``(a, b, c)`` in seconds, seconds per
    token and seconds per token^2, or None with fewer than three points. The cost model's claim is about ``c``
    (attention: O(T^2 d) per layer, docs/reproductions.md), which an exponent over a few points mixes with the
    linear parts of the model; the fit is made in T / T_max so the normal equations stay well conditioned."""
    points = measured(table)
    if len(points) < 3:
        return None
    longest = float(points[-1][0])
    u = np.array([t for t, _ in points], dtype=float) / longest
    y = np.array([s for _, s in points], dtype=float)
    design = np.stack([np.ones_like(u), u, u * u], axis=1)
    (a, b, c), *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(a), float(b) / longest, float(c) / longest**2


def quadratic_share(table: Table) -> float | None:
    """The quadratic term's share of the fitted time at the longest measured length, c T^2 / (a + b T + c T^2):
    near 0 for a linear cost, near 1 where the quadratic term dominates; positive exactly when c is (a positive
    fitted time). None without a fit or where the fitted time at T_max is not positive."""
    fit = quadratic_fit(table)
    if fit is None:
        return None
    a, b, c = fit
    longest = measured(table)[-1][0]
    total = a + b * longest + c * longest**2
    return c * longest**2 / total if total > 0 else None


def crossover(mixer: Table, reference: Table) -> float | None:
    """The context length from which ``mixer`` is faster than ``reference`` at every longer measured length.

    Between the last grid length where the mixer is slower and the next one, the crossing is interpolated
    linearly in log(time ratio) against log(T). Returns the first grid length when the mixer is faster
    everywhere, None when it is not faster at the longest common length ("none in grid"). A length where the
    reference ran out of memory but the mixer did not counts as the mixer being faster.
    """
    lengths = sorted(set(mixer) & set(reference))
    faster = []
    for t in lengths:
        m, r = mixer[t], reference[t]
        if m is None:
            faster.append((t, False, None))
        elif r is None:
            faster.append((t, True, None))
        else:
            faster.append((t, m < r, math.log(m / r)))
    if not faster or not faster[-1][1]:
        return None
    i = len(faster) - 1
    while i > 0 and faster[i - 1][1]:
        i -= 1
    if i == 0:
        return float(faster[0][0])
    (t0, _, r0), (t1, _, r1) = faster[i - 1], faster[i]
    if r0 is None or r1 is None or r0 == r1:
        return float(t1)
    # log ratio goes from r0 > 0 (slower) to r1 < 0 (faster): where does it cross 0?
    frac = r0 / (r0 - r1)
    return float(math.exp(math.log(t0) + frac * (math.log(t1) - math.log(t0))))


def ratio_longest_shortest(table: Table) -> float | None:
    """time at the longest measured length / time at the shortest (decode latency growth with context)."""
    points = measured(table)
    if len(points) < 2:
        return None
    return points[-1][1] / points[0][1]


def crossover_from_ratios(ratios: Mapping[int, float | None]) -> float | None:
    """:func:`crossover` from paired time ratios (mixer time / reference time, per length): ``None`` where the
    mixer was not measured (out of memory, skipped: not faster), ``0.0`` where only the reference was not."""
    mixer = {t: (None if r is None else max(r, 1e-300)) for t, r in ratios.items()}
    reference = {t: (None if r == 0.0 else 1.0) for t, r in ratios.items()}
    return crossover(mixer, reference)


def bootstrap_statistic(
    rounds: Mapping[int, Sequence[float]],
    statistic: Callable[[dict[int, float | None]], float | None],
    fixed: Mapping[int, float | None] | None = None,
    level: float = 0.95,
    paired: bool = False,
) -> Interval | None:
    """Percentile interval of a statistic of several grid points (a crossover, an exponent), each point's median
    recomputed from its rounds resampled with replacement. ``paired``: the points were timed in the same rounds
    (``interleave_lengths``), so one resample of round indices serves every point and load shared by a round
    cancels in the statistic; otherwise points are resampled independently (they were timed at different times).
    ``fixed`` points (no rounds: out of memory, not measured) enter every replicate as they are. None when some
    replicate has no value (no crossover in grid): the statistic is then undefined on part of its distribution."""
    from harness.timing import median_replicates

    usable = {t: v for t, v in rounds.items() if len(v) >= 1}
    if paired and usable:
        common = min(len(v) for v in usable.values())  # a point's rounds may stop early on its time budget
        replicates = {t: median_replicates(v[:common], seed=0) for t, v in usable.items()}
    else:
        replicates = {t: median_replicates(v, seed=t) for t, v in usable.items()}
    if not replicates:
        return None
    n = min(len(r) for r in replicates.values())
    values = []
    for i in range(n):
        table: dict[int, float | None] = dict(fixed or {})
        table.update({t: float(r[i]) for t, r in replicates.items()})
        value = statistic(table)
        if value is None or not math.isfinite(value):
            return None
        values.append(value)
    return percentile_interval(np.asarray(values), level)
