"""The conformance gate passes every built-in mixer and catches broken ones."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness import MIXERS, Mixer, register_mixer
from harness.conformance import run_checks
from mixers.attention import Attention, AttentionConfig

BUILTINS = ["protot", "attention", "mamba", "mamba2", "deltanet", "gated-deltanet"]


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_mixers_pass(name):
    report = run_checks(name)
    assert report.passed, report.render()
    assert {r.name for r in report.results} == {
        "determinism", "causality", "decode", "prefill", "kernels", "gradients", "state_size", "interventions",
    }


@dataclasses.dataclass(frozen=True)
class _Cfg:
    pass


@register_mixer("_test_peeking", config=_Cfg)
class PeekingMixer(Mixer):
    """Mixes in the *next* token: not causal, and its decode cannot match its forward."""

    kernels = ("reference",)

    def __init__(self, cfg, d_model, layer_idx, n_layers):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        self.proj = torch.nn.Linear(d_model, d_model)

    def forward(self, x, state=None):
        nxt = torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], 1)
        return self.proj(x + nxt), state

    def init_state(self, batch_size, device, dtype):
        return {}

    def step(self, x_t, state):
        return self.proj(x_t), state

    def state_size(self, seq_len):
        return 0


@register_mixer("_test_wrong_state", config=AttentionConfig)
class WrongStateSize(Attention):
    """Correct attention that under-reports its KV cache."""

    def state_size(self, seq_len):
        return 2 * self.n_kv_heads * self.head_dim  # claims O(1)


def test_gate_catches_a_non_causal_mixer():
    report = run_checks("_test_peeking")
    failed = {r.name for r in report.results if not r.passed}
    assert {"causality", "decode"} <= failed and not report.passed
    assert "FAIL" in report.render()


def test_gate_catches_a_wrong_state_size():
    report = run_checks("_test_wrong_state")
    failed = {r.name for r in report.results if not r.passed}
    assert failed == {"state_size"}


def teardown_module(module):
    for name in ("_test_peeking", "_test_wrong_state"):
        MIXERS._entries.pop(name, None)
