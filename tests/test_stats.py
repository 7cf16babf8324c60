"""harness.stats against hand computations and independent loops (not against the library it wraps)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness import stats
from harness.stats import Interval


def test_interval_says_what_it_is_and_refuses_nonsense():
    assert Interval(1.0, 2.0, "bootstrap", 0.95).contains(1.5)
    assert not Interval(1.0, 2.0, "t", 0.9).contains(2.5)  # a point outside is reported, never widened
    assert Interval(0.0, 1.0, "range", None).normal_stderr() is None  # a min-max spread has no stderr
    assert Interval(-1.96, 1.96, "normal", 0.95).normal_stderr() == pytest.approx(1.0, rel=1e-4)
    for bad in (dict(kind="guess"), dict(level=None), dict(level=1.0), dict(low=3.0)):
        args = {"low": 1.0, "high": 2.0, "kind": "bootstrap", "level": 0.95, **bad}
        with pytest.raises(ValueError):
            Interval(**args)
    with pytest.raises(ValueError):
        Interval(0.0, 1.0, "range", 0.95)
    round_trip = Interval.from_json(Interval(0.5, math.inf, "wilson", 0.9).to_json())
    assert round_trip.low == 0.5 and math.isnan(round_trip.high) and round_trip.level == 0.9


def test_t_interval_by_hand():
    # mean 2, sd 1, n 3: half-width = t_{0.975, 2} * 1 / sqrt(3), t_{0.975, 2} = 4.302653 (tables)
    iv = stats.t_interval([1.0, 2.0, 3.0])
    assert (iv.low, iv.high) == pytest.approx((2 - 4.302653 / math.sqrt(3), 2 + 4.302653 / math.sqrt(3)), abs=1e-5)
    assert iv.kind == "t" and stats.t_interval([1.0]) is None


def test_wilson_interval_by_hand():
    # Wilson (1927): (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
    k, n, z = 7, 10, 1.959964
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    iv = stats.wilson_interval(k, n)
    assert (iv.low, iv.high) == pytest.approx(((centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)),
                                              abs=1e-6)
    assert stats.wilson_interval(0, 20).low == 0.0 and stats.wilson_interval(3, 0) is None
    with pytest.raises(ValueError):
        stats.wilson_interval(11, 10)


def test_holm_by_hand():
    # sorted p 0.01, 0.03, 0.04 against 0.05/3, 0.05/2, 0.05/1: only the first is rejected (0.03 > 0.025 stops)
    reject, adjusted = stats.holm([0.04, 0.01, 0.03])
    assert reject == [False, True, False]
    assert adjusted == pytest.approx([0.06, 0.03, 0.06])
    assert stats.holm([]) == ([], [])


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(2)
    for n in (1, 2, 5, 17):
        p = np.concatenate([rng.uniform(0, 0.02, n // 2), rng.uniform(0, 1, n - n // 2)])
        for alpha in (0.01, 0.05, 0.2):
            reject, adjusted, _, _ = multipletests(p, alpha=alpha, method="holm")
            ours = stats.holm(p, alpha)
            assert ours[0] == list(reject) and ours[1] == pytest.approx(list(adjusted))


def test_percentile_bootstrap_matches_an_independent_loop():
    rng = np.random.default_rng(1)
    x = rng.exponential(2.0, 60)
    ours = stats.bootstrap((x,), np.mean, n_resamples=20000, seed=3)
    loop = np.array([x[rng.integers(0, len(x), len(x))].mean() for _ in range(20000)])
    lo, hi = np.quantile(loop, [0.025, 0.975])
    assert ours.point == pytest.approx(x.mean())
    assert ours.interval.kind == "bootstrap" and ours.interval.level == 0.95
    assert (ours.interval.low, ours.interval.high) == pytest.approx((lo, hi), rel=0.03)
    bca = stats.bootstrap((x,), np.mean, n_resamples=5000, method="bca", seed=3)
    assert bca.interval.kind == "bca" and bca.interval.contains(x.mean())
    assert stats.bootstrap((np.array([1.0]),), np.mean).interval is None  # one item: no interval


def test_weighted_ratio_bootstrap_resamples_items_jointly():
    """Perplexity's statistic: per-document NLL sums and token counts move together."""
    nll, tokens = np.array([10.0, 40.0, 5.0, 20.0]), np.array([5.0, 10.0, 5.0, 10.0])

    def ratio(a, b, axis=-1):
        return np.sum(a, axis=axis) / np.sum(b, axis=axis)

    res = stats.bootstrap((nll, tokens), ratio, n_resamples=4000, seed=0)
    assert res.point == pytest.approx(75 / 30)
    per_doc = nll / tokens
    assert per_doc.min() <= res.interval.low <= res.point <= res.interval.high <= per_doc.max()


def test_cluster_bootstrap_on_a_planted_duplicated_set_by_hand():
    """Three unique pairs, one repeated eight times: the resampling unit is the unique pair."""
    values = np.array([1.0] * 8 + [0.0, 0.5])
    clusters = ["dup"] * 8 + ["u1", "u2"]
    res = stats.cluster_bootstrap((values,), clusters, np.mean, n_resamples=300, seed=7)
    # by hand: the same draws over the 3 sorted cluster labels ("dup", "u1", "u2"), each bringing all its items
    members = {0: values[:8], 1: values[8:9], 2: values[9:]}
    draws = np.random.default_rng(7).integers(0, 3, size=(300, 3))
    by_hand = np.array([np.concatenate([members[c] for c in row]).mean() for row in draws])
    np.testing.assert_allclose(res.replicates, by_hand)
    lo, hi = np.quantile(by_hand, [0.025, 0.975])
    assert res.interval.kind == "cluster-bootstrap" and (res.interval.low, res.interval.high) == pytest.approx((lo, hi))
    assert stats.n_clusters(clusters) == 3
    # an item bootstrap would pretend there are 10 independent items: its interval is narrower
    naive = stats.bootstrap((values,), np.mean, n_resamples=3000, seed=7).interval
    assert naive.high - naive.low < res.interval.high - res.interval.low


def test_paired_difference_against_an_independent_loop():
    """The paired bootstrap resamples shared items; its interval is far narrower than an unpaired one when
    the two sides are correlated item by item, and its p-value matches a loop over the same kind of draws."""
    rng = np.random.default_rng(5)
    base = rng.normal(5.0, 2.0, 200)
    a, b = base + 0.1 + rng.normal(0, 0.05, 200), base
    res = stats.paired_difference(a, b, n_resamples=20000, seed=1)
    loop = []
    for _ in range(20000):
        i = rng.integers(0, 200, 200)
        loop.append(a[i].mean() - b[i].mean())
    loop = np.array(loop)
    assert res.difference == pytest.approx(a.mean() - b.mean())
    assert (res.interval.low, res.interval.high) == pytest.approx(tuple(np.quantile(loop, [0.025, 0.975])), rel=0.02)
    assert res.p_value < 0.001 and res.n_items == 200
    unpaired = stats.bootstrap((a,), np.mean, n_resamples=2000).interval
    assert res.interval.high - res.interval.low < 0.2 * (unpaired.high - unpaired.low)
    tie = stats.paired_difference(base + rng.normal(0, 0.05, 200), base, n_resamples=4000, seed=1)
    assert tie.p_value > 0.05 and tie.interval.contains(0.0)


def test_paired_difference_with_weights_is_a_weighted_mean_difference():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0])
    w = np.array([1.0, 1.0, 2.0])
    res = stats.paired_difference(a, b, w, w, n_resamples=100)
    assert res.difference == pytest.approx((1 + 2 + 6) / 4 - 1)


def test_normal_and_range_intervals():
    iv = stats.normal_interval(0.5, 0.1)
    assert (iv.low, iv.high) == pytest.approx((0.5 - 0.1959964, 0.5 + 0.1959964), abs=1e-6) and iv.kind == "normal"
    assert stats.normal_interval(0.5, math.nan) is None
    r = stats.range_interval([3.0, 1.0, 2.0])
    assert (r.low, r.high, r.kind, r.level) == (1.0, 3.0, "range", None)
    assert stats.percentile_interval(np.array([1.0])) is None


def test_pooled_sd_by_hand():
    """Groups (3 seeds, 2 seeds, 1 seed skipped): pooled variance = sum of squared deviations / sum of df; the
    upper bound is sqrt(df / chi2 quantile) times it (chi2_0.05(3) = 0.3518463)."""
    groups = [[1.0, 2.0, 3.0], [10.0, 12.0], [7.0]]
    found = stats.pooled_sd(groups)
    sum_sq = (1 + 0 + 1) + (1 + 1)  # deviations from 2 and from 11
    assert found.df == 3 and found.estimate == pytest.approx(math.sqrt(sum_sq / 3))
    assert found.upper == pytest.approx(found.estimate * math.sqrt(3 / 0.3518463), rel=1e-6)
    assert stats.pooled_sd([[1.0], [float("nan"), 2.0]]) is None
    both = stats.pool_sds([(found.estimate, 3), (2.0, 5)])
    assert both.df == 8 and both.estimate == pytest.approx(math.sqrt((3 * found.estimate**2 + 5 * 4.0) / 8))
