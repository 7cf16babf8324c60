"""The state-tracking reproduction targets (reproductions/state_tracking.py, docs/state_tracking.md): their steps
name mixers and configs, their checks read the right run of each mixer config on a planted store, and a target's
whole pipeline runs at scale tiny; DeltaProduct's target says why it cannot run while its mixer is missing."""

from __future__ import annotations

import pytest

from harness.registry import TARGETS
from harness.reproduction import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, RunIndex, overall
from harness.running.reproduce import planned_steps, render_result, run_target
from harness.stats import Interval
from harness.store.results import ResultsStore
from harness.suite import Metric
from reproductions.state_tracking import DELTAPRODUCT, deltaproduct_missing
from tests.planted import manifest, put, subject

NAMES = ("parity-negative-eigenvalues", "parity-attention-length", "deltaproduct-s3")


def _target(name: str):
    entry = TARGETS.get(name)
    return entry.cls(entry.make_config())


def test_the_targets_are_registered_with_their_claims_and_plans():
    for name in NAMES:
        t = _target(name)
        assert t.source and t.published and t.checked and t.departures and t.cost
    steps = planned_steps(_target("parity-negative-eigenvalues"), "cpu")
    configs = [(s.mixers, dict(s.mixer_configs)) for s in steps]
    assert configs == [(("deltanet",), {"deltanet": {"allow_neg_eigval": True}}),
                       (("deltanet",), {"deltanet": {"allow_neg_eigval": False}}), (("mamba",), {}),
                       (("none",), {})]
    cfg = steps[0].suite_config
    assert cfg["tasks"] == "parity" and cfg["n_layers"] == 1 and cfg["extrapolate_all"] is True
    attention = planned_steps(_target("parity-attention-length"), "cpu")
    assert attention[1].suite_config == cfg  # one `none` run serves both parity targets


def _planted(tmp_path, finals: dict[tuple[str, bool | None], tuple[float, float]]) -> RunIndex:
    """Synthetic runs with a final-position accuracy (value, Wilson half-width) per (mixer, allow_neg_eigval);
    every metric also at 2L and 4L."""
    store = ResultsStore(tmp_path)
    ids = []
    for (mixer, neg), (value, half) in finals.items():
        config = {} if neg is None else {"allow_neg_eigval": neg, "num_heads": 4}
        metrics = [Metric(f"parity/seq32_train20000/{name}", value, True, role="diagnostic",
                          interval=Interval(value - half, value + half, "wilson", 0.95))
                   for name in ("final_acc", "extrap_x2_final_acc", "extrap_x4_final_acc")]
        ids.append(put(store, manifest("synthetic", subject(mixer, config=config)), metrics))
    return RunIndex(store, ids)


def test_checks_tell_the_two_deltanet_configs_apart_and_the_none_control_gates_the_claim(tmp_path):
    runs = _planted(tmp_path / "a", {("deltanet", True): (0.99, 0.01), ("deltanet", False): (0.51, 0.03),
                                     ("mamba", None): (0.50, 0.03), ("none", None): (0.50, 0.03)})
    target = _target("parity-negative-eigenvalues")
    checks = target.checks(runs, "cpu")
    by_what = {c.what: c for c in checks}
    assert by_what["deltanet (allow_neg_eigval=True), parity final-position accuracy at L"].measured.value == 0.99
    assert by_what["deltanet (allow_neg_eigval=False), parity final-position accuracy at L"].measured.value == 0.51
    assert overall(checks) == REPRODUCED and checks[0].precondition
    # the positive-eigenvalue model solving parity refutes the claim
    runs = _planted(tmp_path / "b", {("deltanet", True): (0.99, 0.01), ("deltanet", False): (0.98, 0.01),
                                     ("mamba", None): (0.50, 0.03), ("none", None): (0.50, 0.03)})
    assert overall(target.checks(runs, "cpu")) == NOT_REPRODUCED
    # a `none` control above chance means the labels leak: nothing is concluded
    runs = _planted(tmp_path / "c", {("deltanet", True): (0.99, 0.01), ("deltanet", False): (0.98, 0.01),
                                     ("mamba", None): (0.50, 0.03), ("none", None): (0.90, 0.03)})
    assert overall(target.checks(runs, "cpu")) == INCONCLUSIVE
    runs = _planted(tmp_path / "d", {("attention", None): (0.52, 0.03), ("none", None): (0.50, 0.03)})
    assert overall(_target("parity-attention-length").checks(runs, "cpu")) == REPRODUCED


def test_deltaproduct_target_says_why_it_cannot_run_without_its_mixer(tmp_path):
    if not deltaproduct_missing():
        pytest.skip(f"{DELTAPRODUCT} is registered: tests/test_reproduce.py runs its pipeline with every target's")
    target = _target("deltaproduct-s3")
    assert target.steps("tiny") == [] and target.steps("cpu") == []
    checks = target.checks(RunIndex(ResultsStore(tmp_path), []), "cpu")
    assert len(checks) == 1 and checks[0].precondition and overall(checks) == INCONCLUSIVE
    assert "not registered" in checks[0].note or "has no" in checks[0].note
    assert "missing" not in render_result(run_target(target, "tiny", ResultsStore(tmp_path), progress=False))


def test_the_parity_targets_run_their_pipeline_at_scale_tiny(tmp_path):
    """The whole pipeline (gate, suite, store, checks) at a smoke-test size, both parity targets on one store: the
    `none` run they share is made once. The verdicts at this size mean nothing."""
    store = ResultsStore(tmp_path)
    first = run_target(_target("parity-negative-eigenvalues"), "tiny", store, progress=False)
    second = run_target(_target("parity-attention-length"), "tiny", store, progress=False)
    for result, runs in ((first, 3), (second, 2)):
        text = render_result(result)
        assert "missing" not in text and len(result.run_ids) == runs, text
        assert all(c.measured is not None and c.measured.low is not None for c in result.checks)
    assert len(set(first.run_ids) | set(second.run_ids)) == 4  # the none control's run is shared
    assert len(list((tmp_path / "runs").iterdir())) == 4
