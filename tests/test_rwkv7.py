"""The RWKV-7 mixer (fla's RWKV7Attention, its Triton calls routed per call; mixbench's chunked DPLR kernel)."""

from __future__ import annotations

import math

import pytest
import torch
from layer_checks import check_every_unit_masked_is_zero, check_kernels_per_device

from harness.errors import ConfigError
from harness.model.conformance import run_checks
from harness.registry import MIXERS
from harness.values import build_config
from mixers.common import routing
from mixers.rwkv7 import kernel as rwkv7_kernel, routing as rwkv7_routing
from mixers.rwkv7.layer import W_SCALE, RWKV7Config, RWKV7Mixer


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


def make(d_model: int = 64, layer_idx: int = 1, n_layers: int = 2, **cfg) -> RWKV7Mixer:
    """4 heads of 16 at the default width (head_dim 0 would give one head of 64)."""
    cfg.setdefault("head_dim", 16)
    entry = MIXERS.get("rwkv7")
    return entry.cls(entry.make_config(cfg), d_model, layer_idx, n_layers)


def naive_op(q, k, v, a, b, w, scale, initial_state=None, output_final_state=False):
    """fla's naive DPLR recurrence on fla's [B, T, H, K] layout, with the query scale of the Triton ops."""
    from fla.ops.generalized_delta_rule.dplr.naive import dplr_recurrence

    K = q.shape[-1]
    o, S = dplr_recurrence(*(x.transpose(1, 2) for x in (q * (scale * K**0.5), k, v, a, b, w)),
                           initial_state=initial_state, output_final_state=output_final_state)
    return o.transpose(1, 2), S


def op_inputs(B=2, T=45, H=3, K=8, V=6, steep=False, seed=0):
    """Inputs shaped as the layer makes them: a = -kk, b = kk * sigmoid, kk unit-norm, w in (-exp(-0.5), 0)
    (or steeper); K != V so that a transposed state cannot pass."""
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
    v = torch.randn(B, T, H, V, generator=gen)
    kk = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    gate = torch.rand(B, T, H, K, generator=gen)
    w = -(8.0 if steep else W_SCALE) * torch.rand(B, T, H, K, generator=gen)
    S0 = 0.5 * torch.randn(B, H, K, V, generator=gen)
    return [t.requires_grad_(True) for t in (q, k, v, -kk, kk * gate, w, S0)]


def grads_of(outputs, inputs, seed=1):
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(o.shape, generator=gen) for o in outputs]
    return torch.autograd.grad(sum((o * g).sum() for o, g in zip(outputs, weights)), inputs)


# ---------------------------------------------------------------------------------------------- the mixer


def test_conformance_at_quick():
    """At quick, the preset mixers are scored at (tiny's gate passes whenever quick's does here): at its width
    (2 heads of 64) rounding that tiny's width hides broke the prefix check before short calls were padded
    (layer.MIN_STATELESS_TOKENS)."""
    report = run_checks("rwkv7", preset="quick")
    assert report.passed, report.render()


@pytest.mark.parametrize("kernel", ["recurrent", "chunk"])
def test_routed_layer_path_equals_flas_naive_op(kernel, monkeypatch):
    """The routed CPU op the layer calls (``chunk_rwkv7``) against fla's naive recurrence called directly on the
    same r, k, v, w, a, b: outputs and gradients (those flowing back into the op's inputs)."""
    import fla.layers.rwkv7 as rwkv7

    seen = {}
    dispatcher = rwkv7.chunk_rwkv7

    def spy(**kwargs):
        names = ("r", "w", "k", "v", "a", "b")
        leaves = {n: kwargs[n].detach().requires_grad_(True) for n in names}
        o, state = dispatcher(**{**kwargs, **leaves})
        seen.update(inputs=leaves, kwargs=kwargs, o=o)
        o.register_hook(lambda g: seen.__setitem__("d_o", g))
        return o, state

    monkeypatch.setattr(rwkv7, "chunk_rwkv7", spy)
    layer = make()
    layer.set_kernel(kernel)
    x = torch.randn(2, 75, 64)
    layer(x)[0].square().mean().backward()
    kw, inputs = seen["kwargs"], seen["inputs"]
    assert kw["scale"] == 1.0 and kw["initial_state"] is None and kw["cu_seqlens"] is None
    assert (inputs["w"] < 0).all() and (inputs["w"] >= -W_SCALE).all()
    fresh = {n: t.detach().clone().requires_grad_(True) for n, t in inputs.items()}
    o, _ = naive_op(fresh["r"], fresh["k"], fresh["v"], fresh["a"], fresh["b"], fresh["w"], scale=1.0)
    assert rel(seen["o"].detach(), o.detach()) <= 1e-5
    o.backward(seen["d_o"])
    for name in fresh:
        assert rel(inputs[name].grad, fresh[name].grad) <= 1e-5, name


@pytest.mark.parametrize("kernel", ["recurrent", "chunk"])
def test_a_prefix_equals_the_longer_call_to_the_bit(kernel):
    """At preset quick's width (2 heads of 64): stateless calls of any length, the short ones padded, and the chunk
    kernel's fixed chunks after a first recurrent token, give each position the same operations."""
    layer = make(d_model=128, head_dim=0)
    layer.set_kernel(kernel)
    x = torch.randn(3, 75, 128)
    with torch.no_grad():
        full, _ = layer(x)
        for cut in (1, 2, 5, 16, 17, 33, 34, 66):
            y, state = layer(x[:, :cut])
            assert state is None and y.shape == (3, cut, 128)
            assert torch.equal(y, full[:, :cut]), cut


# ---------------------------------------------------------------------------------------------- the kernel


@pytest.mark.parametrize("chunk_size", [8, 16, rwkv7_kernel.CHUNK])
def test_chunk_dplr_equals_naive_recurrence_with_states(chunk_size):
    """Op level, with a state in and out: outputs, final state and the gradients of every input (the state
    included), K != V, a length no chunk divides."""
    q, k, v, a, b, w, S0 = inputs = op_inputs()
    want = naive_op(q, k, v, a, b, w, 0.7, initial_state=S0, output_final_state=True)
    got = rwkv7_kernel.chunk_dplr(q, k, v, a, b, w, scale=0.7, initial_state=S0, output_final_state=True,
                          chunk_size=chunk_size)
    for g, ref in zip(got, want):
        assert rel(g, ref) <= 1e-5
    for g, ref in zip(grads_of(got, inputs), grads_of(want, inputs)):
        assert rel(g, ref) <= 1e-5


def test_chunk_dplr_prefixes_are_exact_and_one_token_is_the_reference():
    """K = 16: the naive op's query scaling by sqrt(K) then 1 / sqrt(K) is exact (as at RWKV-7's 64)."""
    q, k, v, a, b, w, S0 = (t.detach() for t in op_inputs(T=75, K=16))
    full, _ = rwkv7_kernel.chunk_dplr(q, k, v, a, b, w, scale=1.0, initial_state=S0)
    for cut in (1, 2, 31, 32, 33, 34, 65):
        o, _ = rwkv7_kernel.chunk_dplr(*(t[:, :cut] for t in (q, k, v, a, b, w)), scale=1.0, initial_state=S0)
        assert torch.equal(o, full[:, :cut]), cut
    first = [t[:, :1] for t in (q, k, v, a, b, w)]
    for state in (None, S0):
        one = rwkv7_kernel.chunk_dplr(*first, scale=1.0, initial_state=state, output_final_state=True)
        ref = naive_op(*first, 1.0, initial_state=state, output_final_state=True)
        assert torch.equal(one[0], ref[0]) and torch.equal(one[1], ref[1])


def test_step_by_step_equals_the_recurrence():
    q, k, v, a, b, w, S0 = op_inputs(T=12)
    want, S_want = naive_op(q, k, v, a, b, w, 1.0, initial_state=S0, output_final_state=True)
    S, outs = S0, []
    for t in range(12):
        o_t, S = rwkv7_kernel.chunk_dplr(*(x[:, t:t + 1] for x in (q, k, v, a, b, w)), scale=1.0, initial_state=S,
                                 output_final_state=True)
        outs.append(o_t)
    assert rel(torch.cat(outs, 1), want) <= 1e-5 and rel(S, S_want) <= 1e-5
    o_loop, S_loop = rwkv7_kernel.dplr_step(q, k, v, a, b, w, scale=1.0, initial_state=S0)
    assert rel(o_loop, want) <= 1e-5 and rel(S_loop, S_want) <= 1e-5


def test_steep_decays_shorten_the_chunk_and_stay_exact():
    """Log-decays far below the layer's bound: the chunk is shortened so no factored decay overflows."""
    q, k, v, a, b, w, S0 = inputs = op_inputs(T=40, steep=True)
    assert rwkv7_kernel.chunk_for(w, None, 32) == 4 and rwkv7_kernel.chunk_for(w, -W_SCALE, 32) == 32
    got = rwkv7_kernel.chunk_dplr(q, k, v, a, b, w, scale=1.0, initial_state=S0, output_final_state=True)
    want = naive_op(q, k, v, a, b, w, 1.0, initial_state=S0, output_final_state=True)
    for g, ref in zip(got, want):
        assert torch.isfinite(g).all() and rel(g, ref) <= 1e-5
    for g, ref in zip(grads_of(got, inputs), grads_of(want, inputs)):
        assert torch.isfinite(g).all() and rel(g, ref) <= 1e-5


def test_bf16_inputs_compute_in_fp32():
    q, k, v, a, b, w, S0 = (t.detach() for t in op_inputs(T=20))
    o, S = rwkv7_kernel.chunk_dplr(*(t.bfloat16() for t in (q, k, v, a, b, w)), scale=1.0, initial_state=S0,
                           output_final_state=True)
    assert o.dtype == torch.bfloat16 and S.dtype == torch.float32
    ref, _ = naive_op(*(t.bfloat16().float() for t in (q, k, v, a, b, w)), 1.0, initial_state=S0)
    assert rel(o.float(), ref) <= 1e-2


# ---------------------------------------------------------------------------------------------- routing


def test_kernels_per_device_and_routing_follows_set_kernel(monkeypatch):
    layer = make()
    check_kernels_per_device(layer, ("recurrent", "chunk"), "chunk", "triton")

    import fla.ops.generalized_delta_rule.dplr.naive as naive

    seen = []
    original_naive, original_chunk = naive.dplr_recurrence, rwkv7_kernel.chunk_dplr
    monkeypatch.setattr(naive, "dplr_recurrence", lambda *a, **k: seen.append("naive") or original_naive(*a, **k))
    monkeypatch.setattr(rwkv7_kernel, "chunk_dplr", lambda *a, **k: seen.append("chunk") or original_chunk(*a, **k))
    x = torch.randn(1, 20, 64)
    for kernel in ("recurrent", "chunk"):
        layer.set_kernel(kernel)
        layer(x)  # training: chunk_rwkv7
        with torch.no_grad():
            layer.eval()
            layer(x)  # inference below 64 tokens: fused_mul_recurrent_rwkv7
            layer.train()
    assert seen == ["naive", "naive", "chunk", "chunk"]


def test_routing_is_installed_once_and_refuses_what_it_cannot_do():
    import fla.layers.rwkv7 as rwkv7

    rwkv7_routing.install()
    names = ("token_shift", "fused_addcmul_rwkv7", "fused_k_rwkv7", "gate_output_correction", "l2_norm",
             "chunk_rwkv7", "fused_mul_recurrent_rwkv7")
    before = [getattr(rwkv7, n) for n in names]
    rwkv7_routing.install()
    assert [getattr(rwkv7, n) for n in names] == before
    assert all(hasattr(f, "__wrapped__") for f in before)  # every one is a dispatcher around fla's kernel
    q, k, v, a, b, w, _ = (t.detach() for t in op_inputs(T=4))
    with routing.selected("chunk"):
        with pytest.raises(NotImplementedError, match="cu_seqlens"):
            rwkv7.chunk_rwkv7(r=q, w=w, k=k, v=v, a=a, b=b, cu_seqlens=torch.tensor([0, 4]))
        with pytest.raises(NotImplementedError, match="reverse"):
            rwkv7.fused_mul_recurrent_rwkv7(r=q, w=w, k=k, v=v, kk=-a, a=b, reverse=True)
        with pytest.raises(NotImplementedError, match="cu_seqlens"):
            rwkv7.token_shift(torch.randn(1, 4, 8), torch.tensor([0, 2, 4]))


def test_token_shift_keeps_the_last_token():
    x = torch.randn(2, 5, 8)
    cache = torch.randn(2, 8)
    delta, last = rwkv7_routing.token_shift(x, cache=cache, output_cache=True)
    assert torch.equal(last, x[:, -1])
    assert torch.equal(delta[:, 0], cache - x[:, 0]) and torch.equal(delta[:, 1:], x[:, :-1] - x[:, 1:])
    assert torch.equal(rwkv7_routing.token_shift(x), torch.cat([torch.zeros(2, 1, 8), x[:, :-1]], 1) - x)


# ---------------------------------------------------------------------------------------------- state, init, cost


def test_state_layout_and_size():
    layer = make()  # 4 heads of 16
    state = layer.init_state(3, torch.device("cpu"), torch.float32)
    assert set(state) == {"recurrent_state", "conv_state"}
    assert state["recurrent_state"].shape == (3, 4, 16, 16) and state["conv_state"].shape == (3, 64)
    assert layer.state_size(10) == 4 * 16 * 16 + 64
    before = {k_: v_.clone() for k_, v_ in state.items()}
    with torch.no_grad():
        _, new = layer.step(torch.randn(3, 64), state)
    assert all(torch.equal(state[k_], before[k_]) for k_ in state)
    assert all(new[k_].shape == state[k_].shape for k_ in state)


@pytest.mark.parametrize(("layer_idx", "n_layers"), [(0, 4), (2, 4), (3, 4), (0, 1)])
def test_init_is_flas_rwkv7_recipe_at_the_mixers_depth(layer_idx, n_layers):
    """The recipe's deterministic tensors equal those of an fla layer built at that depth; the orthogonal ones
    are orthogonal with the recipe's gains; the recipe's zeros are small draws instead (documented deviation)."""
    import warnings

    from fla.layers import RWKV7Attention

    mixer = make(d_model=64, layer_idx=layer_idx, n_layers=n_layers)
    ours = mixer.layer
    if n_layers > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = RWKV7Attention(hidden_size=64, head_dim=16, layer_idx=layer_idx, num_hidden_layers=n_layers)
        for name in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "k_k", "k_a", "r_k", "w_lora.lora.2.bias",
                     "a_lora.lora.2.bias", "g_norm.weight", "g_norm.bias"):
            torch.testing.assert_close(ours.get_parameter(name), theirs.get_parameter(name), msg=name)
    else:  # one layer: fla's formula divides by n_layers - 1; the mixer takes layer 0's values
        assert torch.equal(ours.g_norm.weight, torch.ones(64))
    for proj, gain in (("r_proj", 1.0), ("k_proj", 0.1), ("v_proj", 1.0)):
        W = getattr(ours, proj).weight
        torch.testing.assert_close(W @ W.T, gain**2 * torch.eye(64), atol=1e-5, rtol=0, msg=proj)
    for name in ("o_proj.weight", "w_lora.lora.0.weight", "a_lora.lora.0.weight", "g_lora.lora.0.weight"):
        p = ours.get_parameter(name)
        assert 0.01 < p.std().item() < 0.03, name


def test_builds_on_the_meta_device():
    with torch.device("meta"):
        layer = make()
    assert layer.layer.r_proj.weight.is_meta


def _flops_sites(original):
    def sites(name):
        if name == "rwkv7":
            import fla.ops.generalized_delta_rule.dplr.naive as naive

            return [(naive, "dplr_recurrence")]
        return original(name)

    return sites


@pytest.mark.parametrize(("d_model", "T", "cfg"), [(32, 24, {}), (64, 40, {"head_dim": 16}),
                                                   (48, 70, {"head_dim": 24, "gate_low_rank_dim": 16})])
def test_declared_flops_match_measured(d_model, T, cfg, monkeypatch):
    """tests/test_flops.py's measurement (products counted by FlopCounterMode, the naive recurrence's arithmetic
    by its ElementwiseCounter), within its 10%."""
    import test_flops as flops

    monkeypatch.setattr(flops, "_kernel_sites", _flops_sites(flops._kernel_sites))
    mixer = flops.build_mixer("rwkv7", d_model, cfg, 0)
    flops._check(mixer.flops_per_token(T), flops.measure_mixer("rwkv7", mixer, T), f"rwkv7-d{d_model}-T{T}")


def test_model_flops_match_measured(monkeypatch):
    import test_flops as flops

    from harness.model.backbone import MixerLM
    from harness.model.flops import model_flops_per_token

    monkeypatch.setattr(flops, "_kernel_sites", _flops_sites(flops._kernel_sites))
    model = MixerLM(flops._tiny_spec("rwkv7", 40))
    flops._check(model_flops_per_token(model, 40), flops.measure_model("rwkv7", model, 40), "MixerLM rwkv7")


def test_config_validates_and_sizes_follow_fla():
    assert RWKV7Config().head_dim == 0 and make(d_model=128, head_dim=0).layer.head_dim == 64
    assert make(d_model=32, head_dim=0).layer.num_heads == 1
    with pytest.raises(ConfigError, match="head_dim"):
        build_config(RWKV7Config, {"head_dim": -1}, "rwkv7")
    with pytest.raises(ConfigError, match="must divide d_model"):
        make(d_model=48, head_dim=32)
    layer = make(d_model=64, decay_low_rank_dim=8, a_low_rank_dim=16, gate_low_rank_dim=24).layer
    assert (layer.decay_low_rank_dim, layer.a_low_rank_dim, layer.gate_low_rank_dim) == (8, 16, 24)
    default = make(d_model=128, head_dim=0).layer  # fla's rule: max(32, round(2.5 sqrt(d) / 32) * 32)...
    assert (default.decay_low_rank_dim, default.a_low_rank_dim, default.gate_low_rank_dim) == (32, 32, 64)
    assert "2503.14456" in RWKV7Mixer.paper
    assert {"flash-linear-attention", "fla-core", "triton"} <= set(make().package_versions())


def test_kernel_benchmark_runs_the_chunk_kernel():
    layer = make()
    assert layer.kernel_benchmark(2, 40, torch.device("cpu")) is None  # the reference has none
    layer.set_kernel("chunk")
    bench = layer.kernel_benchmark(2, 40, torch.device("cpu"))
    bench.run()
    assert bench.flops > 0 and "DPLR" in bench.label


def test_units_and_masking():
    layer = make()
    units = layer.units()
    assert [u.index for u in units] == [0, 1, 2, 3] and units[0].kind == "head"
    check_every_unit_masked_is_zero(layer, torch.randn(2, 9, 64))
    assert math.isclose(units[0].attrs["head_v_dim"], 16.0)
