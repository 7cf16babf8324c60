"""The worked example (examples/fla_gla_mixer.py: fla's GLA op as the mixer ``example-fla-gla``) and the rules of
docs/state_contract.md that the gate enforces.

* fla's op computes the GLA recurrence written out here, and the mixer's forward is that recurrence;
* stepping token by token from ``init_state`` reproduces ``forward`` (and a prefilled state continues it);
* ``mixbench check example-fla-gla --preset tiny --plugin examples.fla_gla_mixer`` passes;
* what ``state_floats`` counts, and which states the gate accepts or refuses (a growing state, a misreported one,
  a float shared by the batch, no state from a prefill).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from torch import nn

import examples.fla_gla_mixer as example
from harness import Mixer, register_mixer, state_floats
from harness.model.conformance import GateConfig, run_checks
from tests.conftest import main

D = 32


@pytest.fixture(scope="module")
def layer() -> example.FlaGLAMixer:
    torch.manual_seed(0)
    m = example.FlaGLAMixer(example.FlaGLAConfig(), d_model=D, layer_idx=0, n_layers=2).eval()
    # livelier gates than at initialisation (decays near 0.96 everywhere), so a wrong decay shows
    with torch.no_grad():
        m.gk_proj[1].bias.normal_(0.0, 2.0)
    return m


def gla_loop(q, k, v, gk, h0=None):
    """GLA by its definition, in float64, one position at a time: per head, with S: [K, V],
    ``S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T`` and ``o_t = (q_t / sqrt(K))^T S_t``.
    q, k, gk: [B, T, H, K]; v: [B, T, H, V] -> (o [B, T, H, V], S_T [B, H, K, V])."""
    q, k, v, gk = (t.double() for t in (q, k, v, gk))
    B, T, H, K = q.shape
    S = torch.zeros(B, H, K, v.shape[-1], dtype=torch.float64) if h0 is None else h0.double().clone()
    out = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for t in range(T):
        for b in range(B):
            for h in range(H):
                S[b, h] = torch.diag(gk[b, t, h].exp()) @ S[b, h] + torch.outer(k[b, t, h], v[b, t, h])
                out[b, t, h] = (q[b, t, h] / math.sqrt(K)) @ S[b, h]
    return out, S


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return (a.double() - b.double()).abs().max().item() <= tol * max(b.abs().max().item(), 1e-12)


# ---------------------------------------------------------------------------------------------- (a) the op


def test_fla_op_is_the_gla_recurrence_with_its_state():
    """fla's naive op against the loop above, with an initial state: outputs and the [B, H, K, V] final state."""
    gen = torch.Generator().manual_seed(1)
    B, T, H, K, V = 2, 9, 3, 4, 5
    q, k, gk = (torch.randn(B, T, H, K, generator=gen) for _ in range(3))
    gk = torch.nn.functional.logsigmoid(gk)
    v = torch.randn(B, T, H, V, generator=gen)
    h0 = torch.randn(B, H, K, V, generator=gen)
    o, final = example.naive_recurrent_gla()(q, k, v, gk, initial_state=h0, output_final_state=True)
    o_ref, final_ref = gla_loop(q, k, v, gk, h0)
    assert o.shape == (B, T, H, V) and final.shape == (B, H, K, V) and final.dtype == torch.float32
    assert close(o, o_ref) and close(final, final_ref)


def test_forward_is_the_recurrence_through_the_projections(layer):
    x = torch.randn(2, 11, D)
    with torch.no_grad():
        y, none = layer(x)
        q, k, v, gk = layer.gla_inputs(x)
    o_ref, _ = gla_loop(q, k, v, gk)
    y_ref = o_ref.reshape(2, 11, -1) @ layer.o_proj.weight.double().T
    assert none is None and y.shape == x.shape and y.dtype == x.dtype
    assert close(y, y_ref)


# ---------------------------------------------------------------------------------------------- (b) the contract


def test_step_by_step_decode_reproduces_forward(layer):
    B, T = 3, 23
    x = torch.randn(B, T, D)
    with torch.no_grad():
        full, _ = layer(x)
        state = layer.init_state(B, x.device, x.dtype)
        assert state_floats(state) == B * layer.state_size(0)
        steps = []
        for t in range(T):
            y_t, state = layer.step(x[:, t], state)
            assert y_t.shape == (B, D) and y_t.dtype == x.dtype
            assert state_floats(state) == B * layer.state_size(t + 1)
            steps.append(y_t)
    assert close(torch.stack(steps, 1), full)
    assert set(state) == {"recurrent_state"}
    assert state["recurrent_state"].shape == (B, layer.num_heads, layer.head_k, layer.head_v)
    assert state["recurrent_state"].dtype == torch.float32


def test_prefill_then_steps_continue_the_sequence_and_leave_passed_states_alone(layer):
    B, T, cut = 2, 17, 7
    x = torch.randn(B, T, D)
    with torch.no_grad():
        full, _ = layer(x)
        s0 = layer.init_state(B, x.device, x.dtype)
        y_a, state = layer(x[:, :cut], s0)
        assert torch.equal(s0["recurrent_state"], torch.zeros_like(s0["recurrent_state"]))
        outs = [y_a]
        for t in range(cut, T):
            before = state["recurrent_state"].clone()
            y_t, new = layer.step(x[:, t], state)
            assert torch.equal(state["recurrent_state"], before) and new is not state  # a new state, the old intact
            outs.append(y_t[:, None])
            state = new
    assert close(torch.cat(outs, 1), full)


def test_forward_with_a_state_is_the_recurrence_from_that_state(layer):
    """The state passed in is fla's initial_state: the continuation equals the loop started from it."""
    x = torch.randn(1, 6, D)
    h0 = torch.randn(1, layer.num_heads, layer.head_k, layer.head_v)
    with torch.no_grad():
        y, state = layer(x, {"recurrent_state": h0})
        q, k, v, gk = layer.gla_inputs(x)
    o_ref, final_ref = gla_loop(q, k, v, gk, h0)
    assert close(y, o_ref.reshape(1, 6, -1) @ layer.o_proj.weight.double().T)
    assert close(state["recurrent_state"], final_ref)


def test_a_bad_head_count_is_a_config_error():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="num_heads"):
        example.FlaGLAMixer(example.FlaGLAConfig(num_heads=5), d_model=D, layer_idx=0, n_layers=2)


# ---------------------------------------------------------------------------------------------- (c) the gate


def test_the_example_passes_the_gate_through_the_cli(capsys):
    assert main(["check", "example-fla-gla", "--preset", "tiny", "--plugin", "examples.fla_gla_mixer"]) == 0
    out = capsys.readouterr().out
    assert "all checks passed" in out and "kernels naive" in out
    assert "state_size matches the state kept (1024 floats per sequence, all 2 layers, at T=256)" in out


# ---------------------------------------------------------------------------------------------- the state rules


def test_state_floats_counts_floating_tensors_of_any_pytree():
    @dataclass
    class Cache:
        keys: torch.Tensor
        length: int

    class Preallocated:
        def num_floats(self) -> int:
            return 7

    state = {
        "h": torch.zeros(2, 3),  # 6
        "conv": (torch.zeros(2, 2, dtype=torch.float64), [torch.zeros(2, dtype=torch.bfloat16)]),  # 4 + 2
        "count": torch.zeros(2, dtype=torch.long),  # integers: not floats
        "t": 3.0,  # a Python number: not counted
        "cache": Cache(torch.zeros(2, 5), 5),  # 10
        "spare": Preallocated(),  # its own count
    }
    assert state_floats(state) == 6 + 4 + 2 + 10 + 7
    assert state_floats(None) == 0 and state_floats(()) == 0


@dataclass(frozen=True)
class HistoryConfig:
    report: str = "exact"  # exact | constant


class History(Mixer):
    """y_t = W mean(x_1..x_t), keeping every input seen (a state that grows like a KV cache: T * D floats)."""

    def __init__(self, cfg, d_model, layer_idx, n_layers):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, state=None):
        seen = x if state is None else torch.cat([state["inputs"], x], 1)
        means = seen.cumsum(1) / torch.arange(1, seen.shape[1] + 1, dtype=x.dtype)[None, :, None]
        y = self.proj(means[:, -x.shape[1]:])
        return y, (None if state is None else self.new_state(seen))

    def new_state(self, seen):
        return {"inputs": seen}

    def init_state(self, batch_size, device, dtype):
        return self.new_state(torch.zeros(batch_size, 0, self.d_model, device=device, dtype=dtype))

    def step(self, x_t, state):
        y, state = self.forward(x_t[:, None], state)
        return y[:, 0], state

    def state_size(self, seq_len):
        return seq_len * self.d_model if self.cfg.report == "exact" else self.d_model


register_mixer("_ex_history", config=HistoryConfig)(History)


@register_mixer("_ex_shared_float", config=HistoryConfig)
class SharedFloat(History):
    """The same with a float step counter shared by the batch: B * state_size(T) cannot count it."""

    def new_state(self, seen):
        return {"inputs": seen, "t": torch.tensor(float(seen.shape[1]))}


@register_mixer("_ex_no_prefill_state", config=HistoryConfig)
class NoPrefillState(History):
    def forward(self, x, state=None):
        return super().forward(x, state)[0], None


def gate(name: str, **mixer_config):
    report = run_checks(name, "tiny", mixer_config, GateConfig(lengths=(1, 5, 17), batch_sizes=(1, 3)))
    return report, {r.name for r in report.results if not r.passed}


def test_a_state_may_grow_with_the_length_if_state_size_says_so():
    report, failed = gate("_ex_history")
    assert report.passed, report.render()
    report, failed = gate("_ex_history", report="constant")
    assert failed == {"state_size"}, report.render()


def test_every_float_in_a_state_counts_per_sequence():
    report, failed = gate("_ex_shared_float")
    assert failed == {"state_size"}, report.render()
    # batch 3: the one shared counter is a third of a float per sequence, already in the empty state
    assert "init_state holds 0.333333 floats per sequence but state_size(0) says 0" in report.render()


def test_a_prefill_must_return_a_state():
    report, failed = gate("_ex_no_prefill_state")
    contract = report.results[0]
    assert contract.name == "contract" and not contract.passed and "returned no state" in contract.detail
    assert all(r.skipped for r in report.results[1:])


# ------------------------------------------------------------------------------------ the example suite


def test_the_example_suite_scores_a_checkpoint_with_typed_paired_metrics(protot_checkpoint, tmp_path):
    """examples/next_token_suite.py through `mixbench eval --plugin`: its accuracy is the token-weighted mean of its
    per-document items, its unigram baseline equals a count made here from the corpus, the baseline never votes,
    and a bad limit is named by the parser."""
    import numpy as np

    from harness.model.checkpoint import load_checkpoint
    from harness.corpus.data import load_corpus
    from harness.store.results import ResultsStore

    store = tmp_path / "store"
    args = ["eval", "--suite", "example-next-token", "--checkpoint", str(protot_checkpoint), "--results", str(store),
            "--plugin", "examples.next_token_suite", "--no-progress", "--skip-gate"]
    assert main([*args, "--suite-config", "max_windows=-1"]) == 2
    assert main([*args, "--suite-config", "max_windows=8", "bootstrap=200"]) == 0
    (run,) = list(ResultsStore(store).iter_runs(samples=False))
    metrics = {m.name: m for m in run.metrics}
    acc, unigram = metrics["acc"], metrics["unigram_acc"]
    assert acc.role == "score" and unigram.role == "baseline" and acc.interval.kind == "bootstrap"
    values, weights = np.array(acc.items.values), np.array(acc.items.weights)
    assert acc.value == pytest.approx(float((values * weights).sum() / weights.sum()))
    assert acc.interval.low <= acc.value <= acc.interval.high and 0 <= acc.value <= 1
    corpus = load_corpus(load_checkpoint(protot_checkpoint).spec.data, progress=False)
    guess = int(np.argmax(corpus.unigram_logprobs()))
    context = load_checkpoint(protot_checkpoint).spec.model.backbone.context
    targets = np.concatenate([w.ids[1:] for w in corpus.eval_windows("test", context, 8)])
    assert unigram.value == pytest.approx(float((targets == guess).mean()))
    assert run.manifest.suite_info["tokens"] == len(targets)
