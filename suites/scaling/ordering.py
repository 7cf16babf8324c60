"""The mixers of a ladder ordered at one rung, with tie groups (docs/scaling.md, "Orderings at every rung").

Each series' loss at the rung is the mean over its seeds there; two series are compared by a paired bootstrap on
the documents they share, with the training-seed variance added (``sd^2 (1/n_a + 1/n_b)`` for ``n`` seeds, at the
seed spread's upper bound, as the board does): the rung-1 gaps of the CPU ladder were the size of the seed noise.
Groups are :func:`harness.stats.tie_groups` (Holm), the board's procedure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness import stats
from suites.scaling.fit import LadderPoint, ScalingLawError, SeedNoise, aligned

GROUP_NAMES = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class Ordering:
    """Series ranked by loss at one rung, best (lowest) first; ``groups`` maps a series to its tie-group letter."""

    order: tuple[str, ...]
    losses: dict[str, float]
    groups: dict[str, str]
    alpha: float
    seeds: dict[str, int]

    @property
    def tie_groups(self) -> tuple[tuple[str, ...], ...]:
        """The groups, best first, each in loss order."""
        letters = list(dict.fromkeys(self.groups[k] for k in self.order))
        return tuple(tuple(k for k in self.order if self.groups[k] == g) for g in letters)


def ordering_at(points: Mapping[str, Sequence[LadderPoint]], *, noise: SeedNoise | None = None, alpha: float = 0.05,
                n_resamples: int = 1000, seed: int = 0) -> Ordering:
    """Rank series by their loss at one rung (``points``: each series' seeds there), with tie groups."""
    if not points or any(not pts for pts in points.values()):
        raise ScalingLawError("ordering_at needs at least one series, each with a point.")
    names = [str(k) for k in points]
    flat = [p for k in points for p in points[k]]
    reference = None if flat[0].documents is None else tuple(sorted(flat[0].documents))
    values, weights = aligned(flat, reference, flat[0].values.size)
    per, losses, seeds, start = {}, {}, {}, 0
    for k, pts in zip(names, points.values()):
        v = values[start:start + len(pts)].mean(axis=0)
        w = weights[start]
        start += len(pts)
        per[k], seeds[k] = (v, w), len(pts)
        losses[k] = float(stats.weighted_mean(v, w))

    def p_value(best: str, other: str) -> float:
        (va, wa), (vb, wb) = per[best], per[other]
        r = stats.paired_difference(va, vb, wa, wb, n_resamples=n_resamples, seed=seed)
        if noise is not None:
            r = stats.with_seed_variance(r, noise.upper ** 2 * (1 / seeds[best] + 1 / seeds[other]))
        return r.p_value

    order = tuple(sorted(names, key=lambda k: (losses[k], k)))
    groups = stats.tie_groups(order, p_value, alpha)
    letters = {k: GROUP_NAMES[g] if g < len(GROUP_NAMES) else str(g + 1) for k, g in groups.items()}
    return Ordering(order, losses, letters, alpha, seeds)
