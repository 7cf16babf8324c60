"""The claims of throughput-physics and mad-score on planted stores: a subject that breaks a claim reads "not
reproduced", the negative's swap fails the claim, unstable timings make it inconclusive; the quadratic fit and the
MAD score against hand computations (docs/reproductions.md). No training, no timing: each test is milliseconds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.reproduction import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Measured, RunIndex, overall
from harness.stats import Interval
from harness.store.results import ResultsStore
from reproductions.physics import ThroughputPhysics
from reproductions.recall import MAD_PUBLISHED, MAD_SCALE_TASKS, MADScore, mad_score
from suites.throughput import analysis
from tests.planted import manifest, put, score, subject


# ------------------------------------------------------------------------------------------ the quadratic fit


def test_the_quadratic_fit_recovers_exact_quadratic_timings():
    a, b, c = 0.004, 2.5e-5, 3.0e-9
    table = {t: a + b * t + c * t * t for t in (1024, 2048, 4096, 8192)}
    fit = analysis.quadratic_fit(table)
    assert fit == pytest.approx((a, b, c), rel=1e-9)
    # by hand at T = 8192: c T^2 = 0.201326592, a + b T = 0.2088, share = 0.201326592 / 0.410126592
    assert analysis.quadratic_share(table) == pytest.approx(0.201326592 / 0.410126592, rel=1e-12)
    assert analysis.quadratic_share({t: a + b * t for t in (1024, 2048, 4096)}) == pytest.approx(0.0, abs=1e-9)
    assert analysis.quadratic_fit({1024: 0.1, 2048: 0.2}) is None  # three points at least
    assert analysis.quadratic_fit({1024: 0.1, 2048: None, 4096: 0.4}) is None  # an out-of-memory point drops out


def test_the_quadratic_share_bootstrap_over_rounds_is_the_point_for_noiseless_rounds():
    a, c = 0.01, 1e-9
    rounds = {t: [a + c * t * t] * 5 for t in (1024, 2048, 4096)}
    iv = analysis.bootstrap_statistic(rounds, analysis.quadratic_share, paired=True)
    share = c * 4096**2 / (a + c * 4096**2)
    assert iv.low == pytest.approx(share) and iv.high == pytest.approx(share)


# ------------------------------------------------------------------------------------------ throughput-physics


def _physics_store(tmp_path, quad_share=(0.70, 0.05), linear_share=(0.02, 0.04), exponent_half=0.01):
    """Planted throughput runs of the four paper mixers: attention with the given quadratic share (value, half-width),
    each fixed-state mixer with ``linear_share``; decode ratios as measured at scale cpu (docs/reproductions.md)."""
    store = ResultsStore(tmp_path)
    ids = []
    for mixer in ("attention", "mamba", "deltanet", "protot"):
        share = quad_share if mixer == "attention" else linear_share
        decode = (1.9, 0.05) if mixer == "attention" else (1.0, 0.03)
        exponent = 1.6 if mixer == "attention" else 1.0
        ids.append(put(store, manifest("throughput", subject(mixer, preset="quick")), [
            score("prefill_quadratic_share", share[0], False, share[1]),
            score("decode_ratio", decode[0], False, decode[1]),
            score("prefill_exponent", exponent, False, exponent_half)]))
    return RunIndex(store, ids)


def test_physics_reproduced_on_faithful_timings_and_its_negative_fails(tmp_path):
    runs, target = _physics_store(tmp_path), ThroughputPhysics()
    assert overall(target.checks(runs, "cpu")) == REPRODUCED
    (negative,) = target.negatives("cpu")
    assert negative.swaps == {"quadratic": target.subject("linear")}
    assert overall(target.with_subjects(negative.swaps).checks(runs, "cpu")) == NOT_REPRODUCED


def test_physics_not_reproduced_when_attention_has_no_quadratic_term(tmp_path):
    runs = _physics_store(tmp_path, quad_share=(0.05, 0.03))  # a planted attention whose time is linear
    checks = ThroughputPhysics().checks(runs, "cpu")
    assert overall(checks) == NOT_REPRODUCED
    assert [c.verdict for c in checks if "quadratic share" in c.what and "attention" in c.what] == [NOT_REPRODUCED]


def test_physics_not_reproduced_when_a_recurrence_grows_quadratically(tmp_path):
    runs = _physics_store(tmp_path, linear_share=(0.5, 0.05))
    assert overall(ThroughputPhysics().checks(runs, "cpu")) == NOT_REPRODUCED


def test_physics_inconclusive_on_unstable_timings(tmp_path):
    runs = _physics_store(tmp_path, quad_share=(0.05, 0.03), exponent_half=0.3)  # intervals 0.6 wide
    assert overall(ThroughputPhysics().checks(runs, "cpu")) == INCONCLUSIVE


# ------------------------------------------------------------------------------------------ mad-score


def test_the_published_rows_average_to_the_tables_average():
    for role, average in (("transformer", 0.745), ("mamba", 0.693), ("deltanet", 0.718)):
        assert round(sum(MAD_PUBLISHED[role].values()) / 6, 3) == average


def test_the_mad_score_is_the_mean_of_the_task_scores_with_errors_in_quadrature():
    z = 1.959963984540054
    parts = [score("a/avg", 0.5, half=0.1 * z), score("b/avg", 0.9, half=0.2 * z), score("c/avg", 0.4, half=0.0)]
    for p in parts:  # normal intervals: the stderrs are 0.1, 0.2 and 0
        object.__setattr__(p, "interval", Interval(p.interval.low, p.interval.high, "normal", 0.95))
    got = mad_score(parts)
    half = z * math.sqrt(0.1**2 + 0.2**2) / 3  # by hand
    assert got.value == pytest.approx(0.6) and (got.low, got.high) == pytest.approx((0.6 - half, 0.6 + half))
    assert mad_score([parts[0], None]) is None


def _mad_store(tmp_path, accuracy):
    """Planted synthetic runs with ``accuracy[mixer][task]`` on 400 shared test examples per task (each example
    right or wrong, drawn with that rate), normal intervals from the binomial standard error."""
    store, rng, ids = ResultsStore(tmp_path), np.random.default_rng(0), []
    for mixer, per_task in accuracy.items():
        metrics = []
        for task, p in per_task.items():
            hits = (rng.random(400) < p).astype(float)
            items = {f"{task}:{i}": float(v) for i, v in enumerate(hits)}
            value = float(hits.mean())
            half = 1.96 * math.sqrt(max(value * (1 - value), 1e-4) / 400)
            m = score(f"{task}/avg", value, True, half, items=items, role="diagnostic", chance=0.125)
            object.__setattr__(m, "interval", Interval(value - half, value + half, "normal", 0.95))
            metrics.append(m)
        ids.append(put(store, manifest("synthetic", subject(mixer)), metrics))
    return RunIndex(store, ids)


MIXER = {"transformer": "attention", "mamba": "mamba", "deltanet": "deltanet"}


def _published(tasks):
    return {MIXER[r]: {t: MAD_PUBLISHED[r][t] for t in tasks} for r in MIXER}


def test_mad_score_reproduced_on_the_published_numbers_and_its_negative_fails(tmp_path):
    tasks = MAD_SCALE_TASKS["cpu"]
    accuracy = _published(tasks) | {"none": {t: (1.0 if t == "memorization" else 0.125) for t in tasks}}
    runs, target = _mad_store(tmp_path, accuracy), MADScore()
    checks = target.checks(runs, "cpu")
    assert overall(checks) == REPRODUCED, [(c.what, c.verdict) for c in checks]
    assert sum("published" in c.what and " - " in c.what for c in checks) == 4  # fuzzy x2, memorization x2
    (negative,) = target.negatives("cpu")
    assert overall(target.with_subjects(negative.swaps).checks(runs, "cpu")) == NOT_REPRODUCED


def test_mad_score_not_reproduced_when_deltanet_loses_fuzzy_recall(tmp_path):
    accuracy = _published(MAD_SCALE_TASKS["cpu"])
    accuracy["deltanet"]["fuzzy-recall"] = 0.02  # below mamba's 0.067: the published order broken
    checks = MADScore().checks(_mad_store(tmp_path, accuracy), "cpu")
    assert overall(checks) == NOT_REPRODUCED
    assert [c.verdict for c in checks if c.what.startswith("fuzzy-recall: deltanet")] == [NOT_REPRODUCED]


def test_mad_score_not_reproduced_when_every_mixer_solves_everything(tmp_path):
    """The ceiling the old mad-recall could not fail on: every task at 1.0 is far above the published means."""
    accuracy = {m: {t: 0.999 for t in MAD_SCALE_TASKS["cpu"]} for m in MIXER.values()}
    assert overall(MADScore().checks(_mad_store(tmp_path, accuracy), "cpu")) == NOT_REPRODUCED


def test_mad_score_inconclusive_when_a_subject_did_not_train(tmp_path):
    accuracy = _published(MAD_SCALE_TASKS["cpu"])
    accuracy["mamba"]["memorization"] = 0.1  # below chance 0.125: the protocol did not train it
    assert overall(MADScore().checks(_mad_store(tmp_path, accuracy), "cpu")) == INCONCLUSIVE


def test_mad_score_inconclusive_when_the_budget_leaves_attention_on_its_recall_plateau(tmp_path):
    accuracy = _published(MAD_SCALE_TASKS["cpu"])
    accuracy["attention"]["in-context-recall"] = 0.31  # the plateau before the induction circuit forms
    assert overall(MADScore().checks(_mad_store(tmp_path, accuracy), "cpu")) == INCONCLUSIVE
