"""harness.timing on a scripted clock: round order, warm-up until settled, budgets, paired ratios."""

from __future__ import annotations

import numpy as np
import pytest

from harness import timing
from harness.timing import Candidate, Timings, interleaved, median_replicates


class Clock:
    """``perf_counter`` that advances only when a candidate runs, by that candidate's next scripted duration."""

    def __init__(self, durations: dict[str, list[float]]):
        self.now = 0.0
        self.durations = {k: list(v) for k, v in durations.items()}
        self.calls: list[str] = []

    def perf_counter(self) -> float:
        return self.now

    def candidate(self, name: str) -> Candidate:
        def call(_):
            self.calls.append(name)
            self.now += self.durations[name].pop(0) if len(self.durations[name]) > 1 else self.durations[name][0]

        return Candidate(name, call)


@pytest.fixture
def clock(monkeypatch):
    def make(durations):
        c = Clock(durations)
        monkeypatch.setattr(timing.time, "perf_counter", c.perf_counter)
        return c

    return make


def test_rounds_alternate_and_ratios_are_paired(clock):
    c = clock({"a": [1.0] * 3 + [1.0, 2.0, 3.0, 4.0], "b": [2.0] * 3 + [2.0, 2.0, 2.0, 2.0]})
    t = interleaved([c.candidate("a"), c.candidate("b")], repeats=4, min_warmup=3)
    assert t.warmup_rounds == 3 and t.settled
    assert c.calls == ["a", "b", "b", "a", "a", "b"] + ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert t.seconds == {"a": [1.0, 2.0, 3.0, 4.0], "b": [2.0, 2.0, 2.0, 2.0]}
    r = t.ratio("a", "b")
    assert r.per_round == [0.5, 1.0, 1.5, 2.0] and r.median == pytest.approx(1.25)
    assert r.interval.kind == "bootstrap" and 0.5 <= r.interval.low <= r.median <= r.interval.high <= 2.0


def test_warm_up_lasts_until_the_last_three_rounds_settle(clock):
    # a cold start (5, 3, 2) then steady 1.0: rounds 4-6 are the first three within 15% of each other
    c = clock({"a": [5.0, 3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]})
    t = interleaved([c.candidate("a")], repeats=2, min_warmup=3, max_warmup=10)
    assert t.warmup_rounds == 6 and t.settled and t.seconds["a"] == [1.0, 1.0]


def test_unsettled_and_out_of_budget_warm_ups_say_so(clock):
    noisy = [1.0, 2.0] * 20
    c = clock({"a": noisy})
    t = interleaved([c.candidate("a")], repeats=2, min_warmup=3, max_warmup=5)
    assert t.warmup_rounds == 5 and not t.settled and "had not settled" in t.notes[0]
    c = clock({"a": noisy})
    t = interleaved([c.candidate("a")], repeats=2, min_warmup=3, max_warmup=10, warmup_budget_s=3.5)
    assert t.warmup_rounds == 3 and not t.settled and "time budget" in t.notes[0]  # 1 + 2 + 1 s > 3.5 s after 3 rounds


def test_a_time_budget_keeps_at_least_two_timed_rounds(clock):
    c = clock({"a": [10.0]})
    t = interleaved([c.candidate("a")], repeats=8, min_warmup=3, budget_s=5.0)
    assert len(t.seconds["a"]) == 2 and "stopped after 2 of 8" in t.notes[-1]


def test_median_replicates_resample_rounds():
    reps = median_replicates([1.0, 2.0, 3.0], n_resamples=500)
    assert reps.shape == (500,) and set(np.unique(reps)) <= {1.0, 2.0, 3.0}
    assert median_replicates([4.0] * 5).tolist() == [4.0] * timing.BOOTSTRAP_RESAMPLES
    assert Timings({"a": [1.0], "b": [2.0]}, 3).ratio("a", "b").interval is None  # one round: no interval


def test_bad_candidates_are_refused():
    with pytest.raises(ValueError, match="nothing to time"):
        interleaved([])
    with pytest.raises(ValueError, match="distinct"):
        interleaved([Candidate("a", lambda _: None), Candidate("a", lambda _: None)])
