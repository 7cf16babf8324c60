"""The control mixers and where grids and suites use them (docs/controls.md).

The controls against naive definitions, through the conformance gate, and an adversarial "context-free" mixer
that mixes a little; grids and plans include the controls unless told not to; the robustness score cannot be won
by ignoring the context (real tiny models); a control has no units (n/a, not zero)."""

from __future__ import annotations

import math

import pytest
import torch

from harness.config import BackboneConfig, ModelSpec
from harness.model.conformance import GateConfig, run_checks
from harness.errors import ConfigError, MixbenchError
from harness.running.planned import PlannedRun
from harness.running.evaluate import EvalOptions, evaluate
from harness.running.plan import plan_from_dict
from harness.registry import MIXERS, control_mixers, register_mixer
from harness.store.results import ResultsStore
from harness.running.runner import GridRequest
from mixers.controls.layer import ControlConfig, NoMixing
from tests.conftest import train_tiny


def _layer(name: str, d: int = 16):
    entry = MIXERS.get(name)
    return entry.cls(entry.make_config(), d, 0, 2)


def test_the_controls_are_their_definitions():
    x = torch.randn(3, 9, 16)
    none, mean = _layer("none"), _layer("mean")
    W = none.proj.weight
    assert torch.allclose(none(x)[0], x @ W.T, atol=1e-6)
    expected = torch.stack([mean.proj(x[:, : t + 1].mean(1)) for t in range(9)], dim=1)  # a naive loop
    assert torch.allclose(mean(x)[0], expected, atol=1e-6)
    # decode carries the running sum and count; prefill then step continues exactly
    state = mean.init_state(3, x.device, x.dtype)
    y, state = mean(x[:, :5], state)
    y_t, state = mean.step(x[:, 5], state)
    assert torch.allclose(y_t, expected[:, 5], atol=1e-6) and state.count.tolist() == [6, 6, 6]
    assert none.state_size(1000) == 0 and mean.state_size(1000) == 16


def test_both_controls_pass_the_gate_and_are_listed_as_controls():
    for name in ("none", "mean"):
        report = run_checks(name, "tiny", config=GateConfig(lengths=(1, 13, 64, 65, 128), batch_sizes=(1, 3)))
        assert report.passed, report.render()
    assert set(control_mixers()) >= {"none", "mean"}
    assert MIXERS.get("none").cls.context_free and not MIXERS.get("mean").cls.context_free
    assert not any(MIXERS.get(m).cls.control for m in ("attention", "protot", "mamba", "deltanet"))


class _Leaky(NoMixing):
    """Declares itself context-free but adds a trace of the previous position's input from position 64 on: short
    sequences cannot show it."""

    def forward(self, x, state=None):
        y = self.proj(x)
        leak = torch.zeros_like(x)
        if x.shape[1] > 64:
            leak[:, 64:] = 1e-3 * x[:, 63:-1]
        return y + leak, state


def test_a_context_free_mixer_that_mixes_fails_the_gate():
    register_mixer("leaky-control", config=ControlConfig, override=True)(_Leaky)
    try:
        report = run_checks("leaky-control", "tiny",
                            config=GateConfig(lengths=(1, 13, 64, 65, 128), batch_sizes=(1, 3)))
    finally:
        MIXERS._entries.pop("leaky-control")
    failed = {r.name: r for r in report.results if not r.passed}
    assert "context_free" in failed, report.render()
    assert "other positions changed" in failed["context_free"].detail
    assert failed["context_free"].location.length in (65, 128)


def test_grids_and_plans_include_the_controls_unless_told_not_to():
    req = GridRequest(preset="tiny", mixers=["attention", "none"], suites=["perplexity"])
    assert req.all_mixers() == ["attention", "none", "mean"]  # none is listed once
    assert GridRequest(preset="tiny", mixers=["attention"], suites=["perplexity"], controls=[]).all_mixers() == [
        "attention"]
    assert GridRequest(preset="tiny", mixers=["attention"], suites=["perplexity"],
                       controls=["mean"]).all_mixers() == ["attention", "mean"]
    plan = plan_from_dict({"preset": "tiny", "mixers": ["protot"], "suites": ["perplexity"], "seeds": [0, 1]})
    assert plan.all_mixers == ("protot", "mean", "none") and plan.jobs == 6
    assert plan.covers("perplexity", "none", "tiny", 1)  # nightly compares the controls' runs too
    (req,) = plan.requests("cpu")
    assert req.all_mixers() == ["protot", "mean", "none"]
    off = plan_from_dict({"preset": "tiny", "mixers": ["protot"], "suites": ["perplexity"], "controls": []})
    assert off.all_mixers == ("protot",) and off.requests("cpu")[0].all_mixers() == ["protot"]
    with pytest.raises(ConfigError, match="'attention' is a mixer, not a control"):
        plan_from_dict({"preset": "tiny", "mixers": ["protot"], "suites": ["perplexity"],
                        "controls": ["attention"]}).check()
    with pytest.raises(MixbenchError, match="Did you mean 'none'"):
        GridRequest(preset="tiny", mixers=["protot"], suites=["perplexity"], controls=["nonee"]).all_mixers()


@pytest.fixture(scope="module")
def none_checkpoint(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("ckpt") / "none", "none")


def test_ignoring_the_context_never_wins_the_robustness_score(none_checkpoint, attention_checkpoint, tmp_path):
    """Real tiny models: the context-free control's final prediction moves under no edit that leaves the final
    token alone, so its selectivity is 0, the worst possible; a model that reads its context scores above it. The
    raw change (jsd_final/mean), the old score, is a diagnostic that the control would have won."""
    store = ResultsStore(tmp_path / "results")
    config = {"pairs_per_slice": 30, "bootstrap": 200, "samples_per_slice": 0}
    metrics = {}
    for name, ckpt in (("none", none_checkpoint), ("attention", attention_checkpoint)):
        out = evaluate(ckpt, PlannedRun.make("robustness", config), store, EvalOptions(progress=False))
        record = store.read_run(out.run_id)
        metrics[name] = {m.name: m for m in record.metrics}
        assert record.manifest.suite_info["selectivity"]["matched_sentences"] >= 20
    none, attention = metrics["none"], metrics["attention"]
    assert none["selectivity"].role == "score" and none["jsd_final/mean"].role == "diagnostic"
    assert none["jsd_final/mean"].value < attention["jsd_final/mean"].value  # it would have won the old score
    assert none["selectivity"].value == 0.0 and math.isnan(none["change_ratio"].value)
    assert attention["selectivity"].value > 0.1 and attention["selectivity"].interval.low > 0
    assert attention["selectivity"].chance == 0.5 and len(attention["selectivity"].items) >= 20
    from harness.reporting.leaderboard import board_of

    board = board_of(store)
    rows = {r.mixer: r for r in board.table.rows}
    assert rows["none"].control and board.rank[rows["none"].key] is None
    column = next(c.name for c in board.table.columns if c.metric == "selectivity")
    comp = board.vs_controls[(rows["attention"].key, column)]
    assert comp[0].label.startswith("none") and comp[0].difference.difference > 0 and comp[0].better


def test_a_control_has_no_units_which_is_not_zero(none_checkpoint, tmp_path):
    store = ResultsStore(tmp_path / "results")
    config = {"parts": "units,null", "profile_tokens": 1024, "window": 64, "bootstrap": 20, "random_sets": 2}
    out = evaluate(none_checkpoint, PlannedRun.make("interpretability", config), store, EvalOptions(progress=False))
    record = store.read_run(out.run_id)
    metrics = {m.name: m for m in record.metrics}
    for name in ("coherence", "themes", "coverage", "dead_frac"):
        assert math.isnan(metrics[name].value) and metrics[name].unit.startswith("n/a"), name
    assert "exposes no units" in record.manifest.suite_info["skipped"]["units"]


def test_the_backbone_gate_starts_closed_and_opens_with_training():
    spec = ModelSpec("attention", {}, BackboneConfig(32, 2, 16, 64, residual_gates="mixer", residual_gate_init=0.0))
    from harness.model.backbone import build_model

    model = build_model(spec, seed=0)
    ids = torch.randint(0, 64, (2, 12))
    # at initialisation the mixer's branch contributes nothing: changing a mixer weight changes no logit
    before = model(ids)[0]
    with torch.no_grad():
        model.blocks[0].mixer.o_proj.weight.add_(1.0)
    assert torch.equal(model(ids)[0], before)
    assert all(b.mixer_gate is not None and float(b.mixer_gate) == 0.0 for b in model.blocks)
    # one optimizer step opens every layer's gate: its gradient is the branch's output against the loss's
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss, _ = model(ids[:, :-1], targets=ids[:, 1:])
    loss.backward()
    opt.step()
    assert all(float(b.mixer_gate) != 0.0 for b in model.blocks)
    assert not torch.equal(model(ids)[0], before)
