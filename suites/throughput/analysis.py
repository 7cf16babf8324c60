"""Derived throughput metrics from a timing table: scaling exponents, crossovers, decode ratios.

A timing table maps context length T -> seconds (or None for a point that ran out of memory or was skipped).
These are pure functions so they can be checked on synthetic tables with known answers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

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
