"""Scaling fits (suites/scaling/fit.py, crossover.py, ordering.py) on planted ladders whose true curves are known:
exact recovery without noise, a shared E, bootstrap coverage with seed and document noise, crossovers in the
data's range and extrapolated ones, tie groups at a rung, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq

from harness import stats
from suites.scaling.crossover import crossover, crossover_interval
from suites.scaling.fit import (
    FitWithIntervals, LadderPoint, PowerLawFit, ScalingLawError, SeedNoise, bootstrap_fits, fit_power_law,
    huber_delta, ladder_seed_noise,
)
from suites.scaling.ordering import ordering_at

LADDER = np.logspace(15, 19, 5)  # training FLOPs of five rungs, four decades
E_TRUE = 1.8
#: three mixers on one text: one E, their own A and alpha
MIXERS = {"a": (6.3e4, 0.3), "b": (2e3, 0.18), "c": (3e5, 0.35)}


def _law(E: float, A: float, alpha: float):
    return lambda c: E + A * np.asarray(c, dtype=np.float64) ** -alpha


def _ladder(rng, mixers=MIXERS, computes=LADDER, seeds=2, seed_sd=0.02, n_docs=48, doc_sd=0.3, noise_sd=0.05):
    """Per-document losses around each law: the document's offset (the same for every model: a hard document is
    hard for all; mean 0 in the population), a seed effect per trained model (sd ``seed_sd``, the same on every
    document) and independent noise. The population mean loss of a model at C is its law at C."""
    offset = rng.normal(0.0, doc_sd, n_docs)
    weights = rng.integers(200, 2000, n_docs).astype(float)
    ids = tuple(f"doc{i}" for i in range(n_docs))
    out = {}
    for name, (A, alpha) in mixers.items():
        law = _law(E_TRUE, A, alpha)
        out[name] = [LadderPoint(c, law(c) + offset + rng.normal(0.0, seed_sd) + rng.normal(0.0, noise_sd, n_docs),
                                 weights, ids, s) for c in computes for s in range(seeds)]
    return out


# ---------------------------------------------------------------------------------------------- the fit


@pytest.mark.parametrize("E, A, alpha", [(1.8, 6.3e4, 0.3), (2.0, 1e3, 0.1), (0.5, 1e6, 0.5), (1.7, 400.0, 0.05)])
def test_the_fit_recovers_planted_parameters_on_noiseless_data(E, A, alpha):
    fit = fit_power_law(LADDER, _law(E, A, alpha)(LADDER))
    assert fit.E == pytest.approx(E, rel=1e-3) and fit.A == pytest.approx(A, rel=1e-3)
    assert fit.alpha == pytest.approx(alpha, rel=1e-3)
    assert fit.reference_compute == pytest.approx(1e17)  # geometric mean of the ladder
    assert fit.A_ref == pytest.approx(A * 1e17 ** -alpha, rel=1e-3)
    assert fit.predict(3e20) == pytest.approx(float(_law(E, A, alpha)(3e20)), rel=1e-6)
    assert fit.converged and fit.at_bounds == ()


def test_the_joint_fit_recovers_one_E_and_each_mixers_law_and_a_control_keeps_its_own():
    """Noiseless per-document values (every document at the law): the joint fit returns the planted E for all three
    mixers (one parameter) and each mixer's A and alpha; a control with a floor of 3.5 keeps its own E."""
    series = {n: [LadderPoint(c, np.full(4, _law(E_TRUE, A, al)(c)), np.ones(4)) for c in LADDER]
              for n, (A, al) in MIXERS.items()}
    series["none"] = [LadderPoint(c, np.full(4, _law(3.5, 50.0, 0.1)(c)), np.ones(4)) for c in LADDER]
    fits = bootstrap_fits(series, n_boot=0, shared=list(MIXERS))
    for name, (A, alpha) in MIXERS.items():
        f = fits[name].fit
        assert f.E == pytest.approx(E_TRUE, rel=1e-4) and f.alpha == pytest.approx(alpha, rel=1e-4)
        assert f.A == pytest.approx(A, rel=1e-3) and sorted(f.shared_with) == sorted(set(MIXERS) - {name})
    assert fits["a"].fit.e == fits["b"].fit.e == fits["c"].fit.e  # one number, not three that agree
    assert fits["none"].fit.E == pytest.approx(3.5, rel=1e-4) and fits["none"].fit.shared_with == ()


def test_a_fit_refuses_what_cannot_determine_its_parameters():
    with pytest.raises(ValueError, match="3 parameters, so it needs ladder points at 3 or more distinct computes; got"):
        fit_power_law([1e15, 1e16], [3.0, 2.5])
    with pytest.raises(ScalingLawError, match="got 2"):  # three points, two computes
        fit_power_law([1e15, 1e16, 1e16], [3.0, 2.5, 2.6])
    with pytest.raises(ValueError, match="positive, finite number of training FLOPs; point 1 has -1e"):
        fit_power_law([1e15, -1e16, 1e17], [3.0, 2.5, 2.2])
    with pytest.raises(ValueError, match="every loss must be positive and finite"):
        fit_power_law([1e15, 1e16, 1e17], [3.0, 0.0, 2.2])
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="a: a power law"):
        bootstrap_fits(_ladder(rng, computes=LADDER[:2]), n_boot=10)
    other = _ladder(rng)
    other["b"] = [LadderPoint(p.compute, p.values, p.weights, tuple(f"x{i}" for i in range(p.values.size)))
                  for p in other["b"]]
    with pytest.raises(ValueError, match="same documents"):
        bootstrap_fits(other, n_boot=5)


def test_the_seed_spread_comes_from_the_ladders_seeds_pooled_with_the_presets_and_sets_the_huber_delta():
    """Hand-computed: two rungs of two seeds (losses 4.0/4.2 and 3.0/3.1): pooled sd sqrt((0.02 + 0.005) / 2)."""
    pts = [LadderPoint(c, [v], [1.0], None, s) for c, v, s in [(1, 4.0, 0), (1, 4.2, 1), (2, 3.0, 0), (2, 3.1, 1),
                                                                   (3, 2.5, 0)]]
    own = ladder_seed_noise({"s": pts}, None)
    assert own.sd == pytest.approx(math.sqrt(0.0125)) and own.df == 2
    preset = SeedNoise(0.0163, 12, 0.0247, "preset quick")
    pooled = ladder_seed_noise({"s": pts}, preset)  # 2 df < 12: pooled, as the board pools
    assert pooled.df == 14 and pooled.sd == pytest.approx(math.sqrt((2 * 0.0125 + 12 * 0.0163 ** 2) / 14))
    assert ladder_seed_noise({"s": pts[::2]}, preset) is preset  # one seed per rung: the preset's alone
    assert huber_delta(preset, np.array([4.0, 4.4, 5.0])) == pytest.approx(1.345 * 0.0163 / 4.4)


# ---------------------------------------------------------------------------------------------- intervals


def test_intervals_with_seed_noise_cover_the_planted_parameters_at_the_stated_rate():
    """40 planted ladders (three mixers, one E, five rungs x two seeds, seed sd 0.02, 48 documents); 95% intervals
    of the shared E and each alpha. If the intervals have their nominal coverage, the number of the 40 covering is
    Binomial(40, 0.95): P(< 32) = 1.3e-4 (at 88% true coverage still 0.04); intervals twice too narrow (~68%)
    reach 32 with probability 0.07. The width bounds catch intervals wide enough to always cover. In our runs
    (60 ladders, 60 replicates): E 90%, alphas 95-100%, median widths 0.18 (E) and 0.03 (alpha); without the seed
    draws (documents alone) the alphas covered 47-60% (widths 0.01) and E 88%. Cost: ~2-3 s (50 replicates,
    vectorised refits)."""
    covered = {"E": 0, **{m: 0 for m in MIXERS}}
    widths_e, widths_alpha = [], []
    for draw in range(40):
        rng = np.random.default_rng(1000 + draw)
        fits = bootstrap_fits(_ladder(rng), n_boot=50, seed=draw)
        e = fits["a"].E
        assert e.kind == "bootstrap" and e.level == 0.95 and fits["b"].E == e  # one E, one interval
        covered["E"] += e.contains(E_TRUE)
        widths_e.append(e.high - e.low)
        for m, (_, alpha) in MIXERS.items():
            covered[m] += fits[m].alpha.contains(alpha)
            widths_alpha.append(fits[m].alpha.high - fits[m].alpha.low)
        assert fits["a"].seeds_per_rung == (2,) * 5 and fits["a"].noise.df == 15  # 15 rungs x (2 - 1)
    assert min(covered.values()) >= 32, covered
    assert np.median(widths_e) < 0.4 and np.median(widths_alpha) < 0.08, (widths_e, widths_alpha)


def test_one_seed_rungs_take_the_given_seed_spread_and_it_widens_the_intervals():
    rng = np.random.default_rng(3)
    ladder = _ladder(rng, seeds=1, seed_sd=0.0)
    bare = bootstrap_fits(ladder, n_boot=60)
    spread = bootstrap_fits(ladder, n_boot=60, noise=SeedNoise(0.05, 12, 0.07, "planted"))
    assert bare["a"].noise is None and spread["a"].noise.source == "planted"
    for m in MIXERS:  # documents shift every point alike (mostly E); seeds move points apart (the exponents)
        assert (spread[m].alpha.high - spread[m].alpha.low) > 1.5 * (bare[m].alpha.high - bare[m].alpha.low)


def test_replicates_are_paired_across_series_and_documents_are_aligned_by_id():
    rng = np.random.default_rng(7)
    ladder = _ladder(rng)
    quick = {"n_boot": 12, "seed": 3}
    both = bootstrap_fits(ladder, predict_at=[1e20], **quick)
    assert both["a"].pairing == both["b"].pairing == (3, 12, 48, ("a", "b", "c"))
    np.testing.assert_array_equal(both["a"].replicates[:, 0], both["b"].replicates[:, 0])  # the shared e
    prediction = both["a"].predictions[0]
    assert prediction.compute == 1e20 and prediction.interval.contains(prediction.loss)
    shuffled = dict(ladder, b=[LadderPoint(p.compute, p.values[::-1], p.weights[::-1], p.documents[::-1], p.seed)
                               for p in ladder["b"]])
    again = bootstrap_fits(shuffled, **quick)
    np.testing.assert_allclose(again["b"].replicates, both["b"].replicates)


# ---------------------------------------------------------------------------------------------- crossovers


def _reducible_equal(A1, a1, A2, a2) -> float:
    """With one E, two laws cross where their reducible terms meet: A1 C^-a1 = A2 C^-a2."""
    return math.exp((math.log(A1) - math.log(A2)) / (a1 - a2))


def test_a_crossover_inside_the_data_is_found_with_an_interval_that_covers_it():
    # steep starts worse and ends better; they meet at ~1e17, the middle rung, at an angle
    steep, shallow = (2.0e5, 0.33), (0.0, 0.2)
    shallow = ((steep[0] * 1e17 ** -steep[1]) * 1e17 ** shallow[1], shallow[1])
    truth = _reducible_equal(*steep, *shallow)
    rng = np.random.default_rng(11)
    fits = bootstrap_fits(_ladder(rng, {"steep": steep, "shallow": shallow}, seed_sd=0.01), n_boot=100)
    result = crossover_interval(fits["steep"], fits["shallow"])
    assert result.verdict == "cross" and result.share >= 0.8 and result.beyond is None
    assert result.interval.kind == "bootstrap" and result.interval.contains(truth), (result.interval, truth)
    assert result.interval.high / result.interval.low < 10
    assert result.sentence.startswith("steep and shallow cross at ")
    assert "shallow is better below, steep above" in result.sentence


def test_a_crossover_past_the_largest_rung_is_extrapolated_never_a_crossover():
    """Planted to meet at 3 x C_max: the point fit finds it there, and the verdict says extrapolated with the
    reason; over 10 ladders not one calls it a crossover."""
    steep = (2.0e5, 0.33)
    meet = 3e19
    shallow = ((steep[0] * meet ** -steep[1]) * meet ** 0.2, 0.2)
    assert _reducible_equal(*steep, *shallow) == pytest.approx(meet)
    verdicts = []
    for draw in range(10):
        rng = np.random.default_rng(40 + draw)
        fits = bootstrap_fits(_ladder(rng, {"steep": steep, "shallow": shallow}, seed_sd=0.01), n_boot=40, seed=draw)
        result = crossover_interval(fits["steep"], fits["shallow"])
        verdicts.append(result.verdict)
        if draw == 0:
            assert result.verdict == "extrapolated" and result.beyond == pytest.approx(meet, rel=1.0)
            assert result.beyond > 1e19 and "extrapolated only" in result.sentence
            assert "E and the exponents are not identified by the data, so this is no crossover" in result.sentence
    assert "cross" not in verdicts and verdicts.count("extrapolated") >= 8, verdicts


def test_parallel_curves_give_no_crossover():
    rng = np.random.default_rng(12)
    fits = bootstrap_fits(_ladder(rng, {"better": (5e4, 0.3), "worse": (6.3e4, 0.3)}), n_boot=60)
    result = crossover_interval(fits["better"], fits["worse"])
    assert result.verdict == "no crossover" and result.share <= 0.2 and result.beyond is None
    assert result.sentence.startswith("no crossover of better and worse in the data's range [1e+15, 1e+19]")
    assert result.sentence.endswith("better is better throughout.")


def test_replicates_that_disagree_make_the_crossover_undetermined_and_several_roots_are_counted():
    a = fit_power_law(LADDER, _law(1.6, 3.8e5, 0.3)(LADDER))
    b = fit_power_law(LADDER, _law(2.1, 6.6e1, 0.12)(LADDER))
    truth = math.exp(brentq(lambda t: float(a.predict(math.exp(t)) - b.predict(math.exp(t))), 34.0, 44.0))
    assert 1e15 < truth < 1e19
    reps_a = np.tile([a.e, a.a_ref, a.alpha], (100, 1))
    reps_b = np.tile([b.e, b.a_ref, b.alpha], (100, 1))
    reps_b[::2, 0] = math.log(50.0)  # E = 50: b worse everywhere in these replicates
    pairing = (0, 100, 64, ("a", "b"))

    def wrap(name, fit, reps):
        return FitWithIntervals(name, fit, None, None, None, None, (), tuple(LADDER), (), reps, pairing)

    result = crossover_interval(wrap("steep", a, reps_a), wrap("shallow", b, reps_b))
    assert result.share == pytest.approx(0.5) and result.verdict == "undetermined"
    assert "undetermined: the point fit crosses at" in result.sentence and "50% of 100 replicates" in result.sentence
    with pytest.raises(ValueError, match="same bootstrap_fits call"):
        crossover_interval(wrap("steep", a, reps_a), FitWithIntervals(
            "x", b, None, None, None, None, (), tuple(LADDER), (), reps_b, (1, 100, 64, ("a", "b"))))
    # gap = 0.1 + x^-1 - 0.5 x^-0.3 with x = C / 1e17: positive, negative, positive again (roots near 1.1e17, 2e19)
    twice_a = PowerLawFit(math.log(1.3), 1.0 * math.log(1e17), 1.0, 1e17, 0.0, 6, True)
    twice_b = PowerLawFit(math.log(1.2), math.log(0.5) + 0.3 * math.log(1e17), 0.3, 1e17, 0.0, 6, True)
    both = crossover(twice_a, twice_b, 1e15, 1e20, names=("a", "b"))
    assert len(both.roots) == 2 and both.compute == both.roots[0] and both.note == "first of 2 crossings"
    assert (both.better_below, both.better_above) == ("b", "a")
    for root in both.roots:
        assert float(twice_a.predict(root)) == pytest.approx(float(twice_b.predict(root)), rel=1e-9)


# ---------------------------------------------------------------------------------------------- orderings


def test_ordering_at_a_rung_ties_the_indistinguishable_and_seed_noise_ties_a_small_gap():
    rng = np.random.default_rng(5)
    n = 200
    base = 3.0 + rng.normal(0.0, 0.5, n)
    weights = rng.integers(100, 1000, n).astype(float)
    ids = tuple(f"d{i}" for i in range(n))

    def pt(values, s=0):
        return LadderPoint(1e18, values, weights, ids, s)

    points = {
        "good": [pt(base - 0.3 + rng.normal(0.0, 0.05, n))],
        "same": [pt(base)],
        "twin": [pt(base.copy())],
        "noisy": [pt(base + rng.normal(0.0, 0.05, n))],
        "close": [pt(base + 0.03 + rng.normal(0.0, 0.01, n), 0), pt(base + 0.03 + rng.normal(0.0, 0.01, n), 1)],
    }
    ordering = ordering_at(points, n_resamples=500)
    assert ordering.tie_groups[0] == ("good",) and ordering.seeds["close"] == 2
    assert ordering.groups["same"] == ordering.groups["twin"] == ordering.groups["noisy"] == "b"
    assert ordering.groups["close"] == "c"  # 0.03 nats on 200 shared documents: told apart without seed noise
    noisy = ordering_at(points, n_resamples=500, noise=SeedNoise(0.0163, 12, 0.0247, "preset quick"))
    assert noisy.groups["close"] == "b"  # the same gap against a seed spread of 0.025: a tie
    # the groups are stats.tie_groups on the same p-values: a naive loop over Holm agrees
    assert stats.tie_groups(["x", "y", "z"], lambda b, k: {"y": 0.5, "z": 0.001}.get(k, 0.5), 0.05) == \
        {"x": 0, "y": 0, "z": 1}
    with pytest.raises(ValueError, match="same documents"):
        ordering_at({"good": points["good"], "short": [LadderPoint(1e18, base[:10], weights[:10], ids[:10])]})


def test_seed_variance_is_added_to_a_paired_comparison_as_a_normal_term():
    """Hand-computed: a difference of 0.03 with an item interval of half-width 1.96 x 0.01, plus seed variance
    0.02^2 x (1 + 1): se = sqrt(0.01^2 + 0.0008) = 0.03, so z = 1 and p = 0.3173."""
    base = stats.PairedComparison(0.03, stats.Interval(0.03 - 1.959964 * 0.01, 0.03 + 1.959964 * 0.01, "bootstrap"),
                                  1e-4, 100)
    r = stats.with_seed_variance(base, 0.02 ** 2 * 2)
    assert r.p_value == pytest.approx(0.3173, abs=1e-3) and r.interval.kind == "normal"
    assert r.interval.half_width == pytest.approx(1.959964 * 0.03, rel=1e-5)
