"""The one timing helper: interleaved, paired, warmed-up measurements (docs/ARCHITECTURE.md, "Speed").

Every speed number in mixbench (the throughput suite, every script under ``benchmarks/``) comes from
:func:`interleaved`. Why it is built this way, on a shared and noisy machine:

* **Interleaved.** The candidates are timed in rounds (A B A B ...), never one after the other, so a change of
  machine load hits all of them alike; a ratio is computed per round (A_i / B_i) and summarised by its median
  and a percentile interval over rounds, which is what crossovers near 1 must be judged by.
* **Warm-up until settled.** At least ``min_warmup`` untimed rounds, then more (up to ``max_warmup``) while
  the last three rounds of any candidate still spread by more than ``settle_spread`` (a cold first call can
  read half the steady rate: caches, allocator, lazy kernel compilation). ``warmup_budget_s`` and ``budget_s``
  bound the warm-up and the timed rounds of a call that turns out slow; the result says when either cut in.
* **Statistics of several points** (a crossover, a scaling exponent) are bootstrapped by recomputing them on
  :func:`median_replicates` of each point's rounds.
* **The right clock.** CUDA work is timed with CUDA events after a synchronize; CPU work with
  ``time.perf_counter``. ``setup`` builds a call's inputs outside the clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.stats import Interval, percentile_interval, range_interval

#: resamples behind every bootstrap interval of a timing statistic
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class Candidate:
    """One thing to time: ``call(setup())`` is timed; ``setup`` (optional) runs outside the clock each time."""

    name: str
    call: Callable[[Any], Any]
    setup: Callable[[], Any] | None = None
    device: str = "cpu"


@dataclass
class Timings:
    """Seconds per call of each candidate, round by round (index i of every list is the same round)."""

    seconds: dict[str, list[float]]
    warmup_rounds: int
    settled: bool = True
    notes: list[str] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(self.seconds[name])

    def spread(self, name: str) -> Interval | None:
        """Min-max over rounds (a spread, labelled ``range``)."""
        return range_interval(self.seconds[name])

    def ratio(self, numerator: str, denominator: str, level: float = 0.95) -> "Ratio":
        """Per-round ``numerator / denominator`` (paired by round): median and percentile interval over rounds."""
        n = min(len(self.seconds[numerator]), len(self.seconds[denominator]))
        a, b = np.asarray(self.seconds[numerator][:n]), np.asarray(self.seconds[denominator][:n])
        per_round = a / b
        interval = percentile_interval(median_replicates(per_round), level) if per_round.size >= 2 else None
        return Ratio(float(np.median(per_round)), interval, per_round.tolist())


@dataclass(frozen=True)
class Ratio:
    """A paired time ratio: the median over rounds, its bootstrap interval (rounds resampled) and every round's."""

    median: float
    interval: Interval | None
    per_round: list[float]


def median_replicates(per_round: Sequence[float], n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> np.ndarray:
    """Bootstrap replicates of the median over rounds (rounds resampled with replacement): what every interval of
    a timing median or ratio is the percentile interval of, and what a statistic of several points' medians (a
    crossover, a scaling exponent) is recomputed on, one replicate at a time."""
    from harness.stats import resample_indices

    values = np.asarray(per_round, dtype=np.float64)
    if values.size == 0:
        return np.empty(0)
    return np.median(values[resample_indices(values.size, n_resamples, seed=seed)], axis=1)


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def time_call(candidate: Candidate) -> float:
    """Seconds of one call of ``candidate`` (its setup untimed)."""
    inputs = candidate.setup() if candidate.setup is not None else None
    if str(candidate.device).startswith("cuda"):
        import torch

        _sync(candidate.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        candidate.call(inputs)
        end.record()
        torch.cuda.synchronize(candidate.device)
        return start.elapsed_time(end) / 1000.0
    t0 = time.perf_counter()
    candidate.call(inputs)
    return time.perf_counter() - t0


def interleaved(
    candidates: Sequence[Candidate],
    repeats: int = 5,
    *,
    min_warmup: int = 3,
    max_warmup: int = 10,
    settle_spread: float = 0.15,
    budget_s: float | None = None,
    warmup_budget_s: float | None = None,
) -> Timings:
    """Time every candidate in ``repeats`` interleaved rounds after a warm-up that lasts until timings settle.

    The order within a round alternates (A B, then B A) so neither candidate always runs right after the other.
    ``budget_s`` caps the timed rounds (at least two are kept) when a point turns out slower than planned;
    ``warmup_budget_s`` ends the warm-up after ``min_warmup`` rounds once it has taken that long, settled or not
    (``Timings.settled`` and a note say so).
    """
    if not candidates:
        raise ValueError("interleaved: nothing to time")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"interleaved: candidate names must be distinct, got {names}")
    warm: dict[str, list[float]] = {c.name: [] for c in candidates}
    rounds, settled, out_of_time = 0, False, False
    t_warm = time.perf_counter()
    while rounds < max(max_warmup, min_warmup):
        for c in _order(candidates, rounds):
            warm[c.name].append(time_call(c))
        rounds += 1
        if rounds < min_warmup:
            continue
        if all(_spread(v[-3:]) <= settle_spread for v in warm.values()):
            settled = True
            break
        if warmup_budget_s is not None and time.perf_counter() - t_warm > warmup_budget_s:
            out_of_time = True
            break
    timings = Timings({c.name: [] for c in candidates}, rounds, settled)
    if out_of_time:
        timings.notes.append(f"warm-up stopped unsettled after {rounds} rounds (time budget {warmup_budget_s:g} s)")
    elif not settled:
        timings.notes.append(f"timings had not settled within {rounds} warm-up rounds (spread > {settle_spread})")
    t0 = time.perf_counter()
    for r in range(repeats):
        for c in _order(candidates, r):
            timings.seconds[c.name].append(time_call(c))
        if budget_s is not None and r >= 1 and time.perf_counter() - t0 > budget_s:
            timings.notes.append(f"stopped after {r + 1} of {repeats} rounds (time budget {budget_s:g} s)")
            break
    return timings


def _order(candidates: Sequence[Candidate], round_index: int) -> Sequence[Candidate]:
    return candidates if round_index % 2 == 0 else list(reversed(candidates))


def _spread(values: list[float]) -> float:
    """(max - min) / median of the last few timings: how far they still wander."""
    if len(values) < 2:
        return float("inf")
    return (max(values) - min(values)) / max(statistics.median(values), 1e-12)
