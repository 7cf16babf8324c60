"""Scaling-law statistics (harness/scaling_laws.py) on planted ladders whose true curves are known: exact recovery
without noise, bootstrap coverage with noise, crossovers found or not, tie groups at a budget, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq

from harness.scaling_laws import (
    FitWithIntervals,
    LadderPoint,
    PowerLawFit,
    ScalingLawError,
    bootstrap_fits,
    crossover,
    crossover_interval,
    fit_power_law,
    ordering_at,
)

LADDER = np.logspace(15, 19, 6)  # training FLOPs of six rungs, four decades


# ---------------------------------------------------------------------------------------------- planted data


def _law(E: float, A: float, alpha: float):
    return lambda c: E + A * np.asarray(c, dtype=np.float64) ** -alpha


def _documents(rng: np.random.Generator, n_docs: int = 64, doc_sd: float = 0.3):
    """Shared by every series of one draw: a difficulty offset per document (mean 0) and token counts."""
    return rng.normal(0.0, doc_sd, n_docs), rng.integers(200, 2000, n_docs).astype(float)


def _series(rng, law, documents, computes=LADDER, noise_sd: float = 0.05) -> list[LadderPoint]:
    """Per-document losses around ``law``: the document's offset (the same at every rung and in every series, as a
    hard document is hard for every model) plus independent noise. The population mean loss at C is law(C)."""
    offset, weights = documents
    ids = tuple(f"doc{i}" for i in range(offset.size))
    return [LadderPoint(c, law(c) + offset + rng.normal(0.0, noise_sd, offset.size), weights, ids) for c in computes]


# ---------------------------------------------------------------------------------------------- the fit


@pytest.mark.parametrize("E, A, alpha", [(1.8, 6.3e4, 0.3), (2.0, 1e3, 0.1), (0.5, 1e6, 0.5), (1.7, 400.0, 0.05)])
def test_the_fit_recovers_planted_parameters_on_noiseless_data(E, A, alpha):
    fit = fit_power_law(LADDER, _law(E, A, alpha)(LADDER))
    assert fit.E == pytest.approx(E, rel=1e-3)
    assert fit.A == pytest.approx(A, rel=1e-3)  # in FLOPs units, although the fit ran on C / reference
    assert fit.alpha == pytest.approx(alpha, rel=1e-3)
    assert fit.reference_compute == pytest.approx(1e17)  # geometric mean of the ladder
    assert fit.A_ref == pytest.approx(A * 1e17 ** -alpha, rel=1e-3)
    assert fit.predict(3e20) == pytest.approx(float(_law(E, A, alpha)(3e20)), rel=1e-6)
    assert fit.converged and fit.at_bounds == ()


def test_a_fit_refuses_what_cannot_determine_three_parameters():
    with pytest.raises(ValueError, match="3 parameters, so it needs ladder points at 3 or more distinct computes; got 2"):
        fit_power_law([1e15, 1e16], [3.0, 2.5])
    with pytest.raises(ScalingLawError, match="got 2"):  # three points, two computes
        fit_power_law([1e15, 1e16, 1e16], [3.0, 2.5, 2.6])
    with pytest.raises(ValueError, match="positive, finite number of training FLOPs; point 1 has -1e"):
        fit_power_law([1e15, -1e16, 1e17], [3.0, 2.5, 2.2])
    with pytest.raises(ValueError, match="every loss must be positive and finite"):
        fit_power_law([1e15, 1e16, 1e17], [3.0, 0.0, 2.2])
    with pytest.raises(ValueError, match="one loss per compute"):
        fit_power_law([1e15, 1e16, 1e17], [3.0, 2.2])
    rng = np.random.default_rng(0)
    two = _series(rng, _law(1.8, 6.3e4, 0.3), _documents(rng), computes=LADDER[:2])
    with pytest.raises(ValueError, match="3 parameters"):
        bootstrap_fits({"s": two}, n_boot=10)


# ---------------------------------------------------------------------------------------------- intervals


def test_bootstrap_intervals_cover_the_planted_parameters_at_the_stated_rate():
    """40 independent planted ladders (6 rungs, 64 documents); each gets 95% percentile intervals of alpha and E.

    Binomial argument for the threshold: if the intervals have their nominal 95% coverage, the number of the 40
    that cover the truth is Binomial(40, 0.95), and P(fewer than 32 cover, i.e. < 80%) = 1.3e-4; even at 88%
    true coverage it is 0.04. A method that covered 60% of the time would reach 32 with probability 0.006, and one
    whose intervals were twice too narrow (~68%) with probability 0.07; the width bound below catches the other
    way to pass (intervals so wide they always cover). The two-level resampling over-covers on this
    correctly-specified law (in our runs of 200 ladders: E 96%, alpha 100%; resampling rungs refits on 3-5 distinct
    ones), which is why the width is bounded too. To keep it to seconds: 50 resamples (not 1000), replicates
    warm-started from the point fit only (``replicate_starts=0``: with 8 more starts the replicates were identical
    in our runs) and point fits from the 4 best grid starts (the same optimum as all 162 in 30 random ladders).
    """
    E, A, alpha = 1.8, 6.3e4, 0.3
    covered = {"E": 0, "alpha": 0}
    widths = {"E": [], "alpha": []}
    for draw in range(40):
        rng = np.random.default_rng(1000 + draw)
        series = _series(rng, _law(E, A, alpha), _documents(rng))
        r = bootstrap_fits({"s": series}, n_boot=50, seed=draw, replicate_starts=0, n_starts=4)["s"]
        assert r.E.kind == r.alpha.kind == "bootstrap" and r.alpha.level == 0.95
        covered["E"] += r.E.contains(E)
        covered["alpha"] += r.alpha.contains(alpha)
        widths["E"].append(r.E.high - r.E.low)
        widths["alpha"].append(r.alpha.high - r.alpha.low)
    assert covered["E"] >= 32 and covered["alpha"] >= 32, covered
    # not absurdly wide: in our runs the median widths were 0.19 (E = 1.8) and 0.07 (alpha = 0.3)
    assert np.median(widths["E"]) < 0.4 and np.median(widths["alpha"]) < 0.15, widths
    assert max(widths["alpha"]) < 0.5


def test_replicates_are_paired_across_series_and_independent_of_the_company():
    """The document draw is shared by every series of a call; a series' own intervals do not change when another
    series is fitted alongside it (its point draws come from (seed, name))."""
    rng = np.random.default_rng(7)
    docs = _documents(rng)
    a = _series(rng, _law(1.8, 6.3e4, 0.3), docs)
    b = _series(rng, _law(2.0, 1e5, 0.3), docs)
    quick = {"n_boot": 12, "seed": 3, "replicate_starts": 0, "n_starts": 4}
    alone = bootstrap_fits({"a": a}, predict_at=[1e20], **quick)["a"]
    both = bootstrap_fits({"a": a, "b": b}, predict_at=[1e20], **quick)
    np.testing.assert_array_equal(alone.replicates, both["a"].replicates)
    assert both["a"].pairing == both["b"].pairing == (3, 12, 64, True)
    prediction = both["a"].predictions[0]
    assert prediction.compute == 1e20 and prediction.interval.contains(prediction.loss)
    shuffled = [LadderPoint(p.compute, p.values[::-1], p.weights[::-1], p.documents[::-1]) for p in b]
    again = bootstrap_fits({"a": a, "b": shuffled}, **quick)  # aligned by document id, not position
    np.testing.assert_allclose(again["b"].replicates, both["b"].replicates)
    other_docs = [LadderPoint(p.compute, p.values, p.weights, tuple(f"x{i}" for i in range(p.values.size))) for p in b]
    with pytest.raises(ValueError, match="same documents"):
        bootstrap_fits({"a": a, "b": other_docs}, n_boot=5)


# ---------------------------------------------------------------------------------------------- crossovers


def _law_from(E: float, loss_at_1e15: float, alpha: float):
    return _law(E, (loss_at_1e15 - E) * 1e15 ** alpha, alpha)


# shallow is better at small C, steep (lower floor) at large: they cross at ~2.9e16 FLOPs, between rungs 2 and 3,
# at an angle (the loss gap is ~0.5 nats at either end of the ladder), so a ladder can locate the crossing
STEEP, SHALLOW = _law_from(1.6, 5.0, 0.3), _law_from(2.1, 3.2, 0.12)


def _true_crossing() -> float:
    return math.exp(brentq(lambda t: float(STEEP(math.exp(t)) - SHALLOW(math.exp(t))), math.log(1e15), math.log(1e20)))


def test_the_crossover_of_two_planted_curves_is_found_and_its_interval_covers_it():
    truth = _true_crossing()
    exact = crossover(fit_power_law(LADDER, STEEP(LADDER)), fit_power_law(LADDER, SHALLOW(LADDER)), 1e15, 1e19,
                      names=("steep", "shallow"))
    assert exact.compute == pytest.approx(truth, rel=1e-4) and exact.roots == (exact.compute,)
    assert (exact.better_below, exact.better_above) == ("shallow", "steep")
    assert (exact.low, exact.high) == (1e15, 1e20)

    rng = np.random.default_rng(11)
    docs = _documents(rng)
    fits = bootstrap_fits({"steep": _series(rng, STEEP, docs), "shallow": _series(rng, SHALLOW, docs)},
                          n_boot=100, seed=0)
    result = crossover_interval(fits["steep"], fits["shallow"])
    assert result.verdict == "cross" and result.share >= 0.8
    assert result.interval.kind == "bootstrap" and result.interval.contains(truth), (result.interval, truth)
    assert result.interval.high / result.interval.low < 10  # located within a decade, not anywhere in range
    assert result.sentence.startswith("steep and shallow cross at ")
    assert "shallow is better below, steep above" in result.sentence


def test_two_curves_that_do_not_cross_in_range_give_no_crossover():
    rng = np.random.default_rng(12)
    docs = _documents(rng)
    better, worse = _law(1.8, 6.3e4, 0.3), _law(2.1, 6.3e4, 0.3)  # parallel, 0.3 nats apart everywhere
    fits = bootstrap_fits({"better": _series(rng, better, docs), "worse": _series(rng, worse, docs)},
                          n_boot=60, seed=0, replicate_starts=0)  # the crossing test above runs the defaults
    result = crossover_interval(fits["better"], fits["worse"])
    assert result.point.compute is None and result.verdict == "no crossover" and result.share <= 0.2
    assert result.interval is None or result.share > 0
    assert result.sentence.startswith("no crossover of better and worse in [C_min, 10 x C_max] = [1e+15, 1e+20]")
    assert result.sentence.endswith("better is better throughout.")


def test_replicates_that_disagree_make_the_crossover_undetermined_and_several_roots_are_noted():
    """The rule, on hand-made replicates: the point fits cross, but only half of the paired replicates do."""
    a = fit_power_law(LADDER, STEEP(LADDER))
    b = fit_power_law(LADDER, SHALLOW(LADDER))
    reps_a = np.tile([a.e, a.a_ref, a.alpha], (100, 1))
    reps_b = np.tile([b.e, b.a_ref, b.alpha], (100, 1))
    reps_b[::2, 0] = math.log(10.0)  # E = 10: b is worse everywhere in these replicates, no crossing
    pairing = (0, 100, 64, True)

    def wrap(name, fit, reps):
        return FitWithIntervals(name, fit, None, None, None, None, (), tuple(LADDER), tuple(fit.predict(LADDER)),
                                reps, 0, pairing)

    result = crossover_interval(wrap("steep", a, reps_a), wrap("shallow", b, reps_b))
    assert result.share == pytest.approx(0.5) and result.verdict == "undetermined"
    assert "undetermined: the point fit crosses at" in result.sentence and "50% of 100 replicates" in result.sentence
    with pytest.raises(ValueError, match="same bootstrap_fits call"):
        crossover_interval(wrap("steep", a, reps_a), FitWithIntervals(
            "x", b, None, None, None, None, (), tuple(LADDER), (), reps_b, 0, (1, 100, 64, True)))

    # gap = 0.1 + x^-1 - 0.5 x^-0.3 with x = C / 1e17: positive, negative, positive again (roots near 1.1e17, 2e19)
    twice_a = PowerLawFit(math.log(1.3), 0.0 + 1.0 * math.log(1e17), 1.0, 1e17, 0.0, 6, True)
    twice_b = PowerLawFit(math.log(1.2), math.log(0.5) + 0.3 * math.log(1e17), 0.3, 1e17, 0.0, 6, True)
    both = crossover(twice_a, twice_b, 1e15, 1e19, names=("a", "b"))
    assert len(both.roots) == 2 and both.compute == both.roots[0] and both.note == "first of 2 crossings"
    assert (both.better_below, both.better_above) == ("b", "a")
    for root in both.roots:
        assert float(twice_a.predict(root)) == pytest.approx(float(twice_b.predict(root)), rel=1e-9)


# ---------------------------------------------------------------------------------------------- orderings


def test_ordering_at_a_budget_ranks_the_better_series_first_and_ties_the_indistinguishable():
    rng = np.random.default_rng(5)
    n = 200
    base = 3.0 + rng.normal(0.0, 0.5, n)
    weights = rng.integers(100, 1000, n).astype(float)
    ids = tuple(f"d{i}" for i in range(n))
    points = {
        "good": LadderPoint(1e18, base - 0.3 + rng.normal(0.0, 0.05, n), weights, ids),
        "same": LadderPoint(1e18, base, weights, ids),
        "twin": LadderPoint(1e18, base.copy(), weights, ids),  # identical per-document values
        "noisy": LadderPoint(1e18, base + rng.normal(0.0, 0.05, n), weights, ids),  # differences: noise around 0
    }
    ordering = ordering_at(points, n_resamples=500)
    assert ordering.order[0] == "good"
    assert ordering.tie_groups[0] == ("good",)
    assert ordering.groups["same"] == ordering.groups["twin"] == ordering.groups["noisy"] == "b"
    assert ordering.losses["good"] < min(ordering.losses[k] for k in ("same", "twin", "noisy"))
    with pytest.raises(ValueError, match="same documents"):
        ordering_at({"good": points["good"], "short": LadderPoint(1e18, base[:10], weights[:10], ids[:10])})
