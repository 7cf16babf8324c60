"""The state-tracking reproduction targets (reproductions/state_tracking.py, docs/state_tracking.md): their steps
name mixers and configs, and their checks read the right run of each mixer config. On planted stores a subject that
breaks the claim gives "not reproduced", a failed precondition "inconclusive", and a negative that passes (the
protocol cannot fail) is caught. Their whole pipeline at scale tiny, negatives included, is tests/test_reproduce.py's
run of every built-in target."""

from __future__ import annotations

from harness.registry import TARGETS
from harness.reproduction import CANNOT_FAIL, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, RunIndex, final_verdict, overall
from harness.running.reproduce import planned_steps
from harness.stats import Interval
from harness.store.results import ResultsStore
from harness.suite import Metric
from reproductions.state_tracking import DELTAPRODUCT, householders
from tests.planted import manifest, put, subject

NAMES = ("parity-negative-eigenvalues", "parity-attention-length", "deltaproduct-s3")


def _target(name: str):
    entry = TARGETS.get(name)
    return entry.cls(entry.make_config())


def test_the_targets_are_registered_with_their_claims_plans_and_negatives():
    for name in NAMES:
        t = _target(name)
        assert t.source and t.published and t.checked and t.departures and t.cost and t.kind == "reproduction"
        for scale in ("tiny", "cpu"):
            assert t.negatives(scale) and all(n.why and n.swaps for n in t.negatives(scale))
    target = _target("parity-negative-eigenvalues")
    steps = planned_steps(target, "cpu")
    configs = [(s.mixers, dict(s.mixer_configs)) for s in steps]
    assert configs == [(("deltanet",), {"deltanet": {"allow_neg_eigval": True}}),
                       (("deltanet",), {"deltanet": {"allow_neg_eigval": False}}),
                       (("mamba",), {"mamba": {"allow_neg_eigval": True}}),
                       (("mamba",), {"mamba": {"allow_neg_eigval": False}}), (("none",), {})]
    cfg = steps[0].suite_config  # Grazzi et al.'s protocol
    assert cfg["tasks"] == "parity" and cfg["n_layers"] == 1 and cfg["extrapolate_all"] is True
    assert (cfg["min_len"], cfg["settings"].split(",")[0], cfg["labels"], cfg["test_lengths"], cfg["seeds"]) == \
        (3, "parity:seq_len=40", "end", "40-256", 1)
    attention = planned_steps(_target("parity-attention-length"), "cpu")
    assert attention[1] == steps[-1]  # one `none` run serves both parity targets
    # the negatives add no training: they exchange runs the target has, or take parity-attention-length's attention
    with_negatives = planned_steps(target, "cpu", negatives=True)
    assert all(s in steps or s == attention[0] for s in with_negatives) and len(with_negatives) == 4 * 5
    exchanged = target.negative_target(target.negatives("cpu")[0])
    assert [exchanged.subject(r).config for r in ("deltanet_neg", "deltanet_pos")] == [dict(POS), dict(NEG)]


def _planted(tmp_path, task: str, runs: dict[tuple[str, tuple], tuple[float, float]]) -> RunIndex:
    """Synthetic runs planted with their scaled accuracy (at the training lengths, on 40-256) per (mixer, mixer
    config items); Wilson-like half-width 0.03. The recorded config holds a field the target does not name."""
    store = ResultsStore(tmp_path)
    ids = []
    for (mixer, items), (train, test) in runs.items():
        metrics = [Metric(f"{task}/seq40_train20000/{name}", value, True, role="diagnostic",
                          interval=Interval(value - 0.03, value + 0.03, "wilson", 0.95))
                   for name, value in (("final_scaled", train), ("len40to256_final_scaled", test))]
        ids.append(put(store, manifest("synthetic", subject(mixer, config={**dict(items), "num_heads": 4})),
                       metrics))
    return RunIndex(store, ids)


NEG, POS = (("allow_neg_eigval", True),), (("allow_neg_eigval", False),)


def _verdicts(target, index: RunIndex) -> tuple[str, list[str]]:
    """The target's own verdict and each negative's on the same runs."""
    return overall(target.checks(index, "cpu")), [overall(target.negative_target(n).checks(index, "cpu"))
                                                   for n in target.negatives("cpu")]


def _final(target, index: RunIndex) -> str:
    own, negatives = _verdicts(target, index)
    return final_verdict(own, negatives)


PARITY_GOOD = {("deltanet", NEG): (1.0, 0.95), ("deltanet", POS): (0.3, 0.0), ("mamba", NEG): (1.0, 0.9),
               ("mamba", POS): (0.2, 0.01), ("none", ()): (0.0, 0.0), ("attention", ()): (0.95, 0.02)}


def test_parity_negative_eigenvalues_fails_on_a_planted_subject_that_breaks_the_claim(tmp_path):
    target = _target("parity-negative-eigenvalues")
    assert _verdicts(target, _planted(tmp_path / "good", "parity", PARITY_GOOD)) == \
        (REPRODUCED, [NOT_REPRODUCED, NOT_REPRODUCED, NOT_REPRODUCED])  # its negatives fail: the verdict stands
    for i, (key, value) in enumerate([(("deltanet", POS), (0.99, 0.97)),  # [0, 1] learns parity
                                      (("mamba", NEG), (1.0, 0.1)),  # [-1, 1] does not extrapolate
                                      (("deltanet", NEG), (0.2, 0.0))]):  # [-1, 1] does not learn
        index = _planted(tmp_path / str(i), "parity", {**PARITY_GOOD, key: value})
        assert overall(target.checks(index, "cpu")) == NOT_REPRODUCED, key
    leaky = _planted(tmp_path / "leak", "parity", {**PARITY_GOOD, ("none", ()): (0.8, 0.0)})
    assert overall(target.checks(leaky, "cpu")) == INCONCLUSIVE
    # test lengths that do not test extrapolation (attention carries parity to "40-256" too): cannot fail
    short = _planted(tmp_path / "short", "parity", {**PARITY_GOOD, ("attention", ()): (0.95, 0.93)})
    assert _verdicts(target, short) == (REPRODUCED, [NOT_REPRODUCED, NOT_REPRODUCED, REPRODUCED])
    assert _final(target, short) == CANNOT_FAIL
    # the exchange can pass: a flag that did the opposite of what it says
    flipped = _planted(tmp_path / "flip", "parity", {**PARITY_GOOD, ("deltanet", NEG): (0.3, 0.0),
                                                     ("deltanet", POS): (1.0, 0.95)})
    assert _verdicts(target, flipped) == (NOT_REPRODUCED, [REPRODUCED, NOT_REPRODUCED, NOT_REPRODUCED])


def test_parity_attention_length_needs_attention_to_learn_parity_first(tmp_path):
    target = _target("parity-attention-length")
    learned = _planted(tmp_path / "a", "parity", PARITY_GOOD)
    assert _verdicts(target, learned) == (REPRODUCED, [NOT_REPRODUCED])
    never = _planted(tmp_path / "b", "parity", {**PARITY_GOOD, ("attention", ()): (0.01, 0.0)})
    assert overall(target.checks(never, "cpu")) == INCONCLUSIVE  # it never learned: says nothing
    extrapolates = _planted(tmp_path / "c", "parity", {**PARITY_GOOD, ("attention", ()): (0.97, 0.9)})
    assert overall(target.checks(extrapolates, "cpu")) == NOT_REPRODUCED
    # a protocol that cut every model off past the training lengths passes its negative: the verdict is void
    cut = _planted(tmp_path / "d", "parity", {**PARITY_GOOD, ("deltanet", NEG): (1.0, 0.0)})
    assert _verdicts(target, cut) == (REPRODUCED, [REPRODUCED]) and _final(target, cut) == CANNOT_FAIL


def test_deltaproduct_s3_tells_cannot_represent_from_did_not_train_and_flags_extrapolation(tmp_path):
    target = _target("deltaproduct-s3")
    two, one = tuple(householders(2).items()), tuple(householders(1).items())
    good = {(DELTAPRODUCT, two): (0.98, 0.9), (DELTAPRODUCT, one): (0.22, 0.05), ("none", ()): (0.0, 0.0)}
    assert _verdicts(target, _planted(tmp_path / "good", "s3", good)) == (REPRODUCED, [NOT_REPRODUCED])
    at_chance = _planted(tmp_path / "chance", "s3", {**good, (DELTAPRODUCT, one): (0.01, 0.0)})
    assert overall(target.checks(at_chance, "cpu")) == INCONCLUSIVE  # n_h = 1 did not train
    no_extrapolation = _planted(tmp_path / "short", "s3", {**good, (DELTAPRODUCT, two): (0.98, 0.3)})
    assert overall(target.checks(no_extrapolation, "cpu")) == NOT_REPRODUCED
    one_solves = _planted(tmp_path / "one", "s3", {**good, (DELTAPRODUCT, one): (0.95, 0.9)})
    assert overall(target.checks(one_solves, "cpu")) == NOT_REPRODUCED
    # the exchange passes where the two configs' runs are the other way round (n_h = 1 tracks S3, n_h = 2 does not)
    swapped = _planted(tmp_path / "swap", "s3", {**good, (DELTAPRODUCT, two): (0.22, 0.05),
                                                 (DELTAPRODUCT, one): (0.98, 0.9)})
    assert _verdicts(target, swapped) == (NOT_REPRODUCED, [REPRODUCED])
