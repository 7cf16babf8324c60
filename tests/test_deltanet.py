"""The DeltaNet and Gated DeltaNet mixers (fla's layers, kernels routed per device)."""

from __future__ import annotations

import pytest
import torch
from layer_checks import (
    check_every_unit_masked_is_zero, check_kernels_per_device, check_parity, recorded_by_a_step,
)

from harness.errors import ConfigError
from harness.registry import MIXERS
from harness.values import build_config
from mixers.deltanet import routing as deltanet_routing
from mixers.common import routing
from mixers.deltanet.layer import DeltaNetConfig, DeltaNetMixer, GatedDeltaNetConfig, GatedDeltaNetMixer

# fla warns whenever use_short_conv=False, which some cases here ask for on purpose
pytestmark = pytest.mark.filterwarnings("ignore:ShortConvolution is crucial")


def make(name: str, d_model: int = 32, **cfg) -> torch.nn.Module:
    entry = MIXERS.get(name)
    return entry.cls(entry.make_config(cfg), d_model, 1, 2)


def test_gated_gradients_stay_finite_under_strong_decay():
    layer = make("gated-deltanet", d_model=64)
    with torch.no_grad():
        layer.layer.A_log.fill_(4.0)
        layer.layer.dt_bias.fill_(3.0)  # log-decay about -165 per step
    x = torch.randn(2, 70, 64, requires_grad=True)
    layer(x)[0].square().mean().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


def test_state_layout_and_size():
    delta = make("deltanet")
    state = delta.init_state(3, torch.device("cpu"), torch.float32)
    assert state["recurrent_state"].shape == (3, 4, 8, 8) and len(state["conv_state"]) == 3
    assert delta.state_size(10) == 4 * 8 * 8 + (32 + 32 + 32) * 4
    no_conv = make("deltanet", use_short_conv=False)
    assert set(no_conv.init_state(1, torch.device("cpu"), torch.float32)) == {"recurrent_state"}
    gated = make("gated-deltanet", d_model=64)  # 6 heads of 64 / 8 = 8 key dims, 16 value dims (fla: [V, K])
    assert gated.init_state(1, torch.device("cpu"), torch.float32)["recurrent_state"].shape == (1, 6, 16, 8)


def test_step_does_not_modify_the_callers_state():
    layer = make("gated-deltanet", d_model=64)
    state = layer.init_state(1, torch.device("cpu"), torch.float32)
    state["recurrent_state"] += 1.0
    before = state["recurrent_state"].clone(), [c.clone() for c in state["conv_state"]]
    with torch.no_grad():
        layer.step(torch.randn(1, 64), state)
    assert torch.equal(state["recurrent_state"], before[0])
    assert all(torch.equal(a, b) for a, b in zip(state["conv_state"], before[1]))


def test_kernels_per_device_and_routing_follows_set_kernel(monkeypatch):
    layer = make("deltanet")
    check_kernels_per_device(layer, ("recurrent", "naive-chunk", "chunk"), "chunk", "triton")

    import fla.ops.delta_rule.naive as naive

    seen = []
    for fn in ("delta_rule_recurrence", "delta_rule_chunkwise"):
        original = getattr(naive, fn)
        monkeypatch.setattr(naive, fn, lambda *a, _f=original, _n=fn, **k: seen.append(_n) or _f(*a, **k))
    import mixers.deltanet.kernel as own

    original = own.chunk_delta_rule
    monkeypatch.setattr(own, "chunk_delta_rule", lambda *a, **k: seen.append("own") or original(*a, **k))
    x = torch.randn(1, 40, 32)
    for kernel in ("naive-chunk", "recurrent", "chunk"):
        layer.set_kernel(kernel)
        layer(x)
    assert seen == ["delta_rule_chunkwise", "delta_rule_recurrence", "own"]


def test_routing_is_installed_once_and_selected_is_scoped():
    import fla.layers.delta_net as delta_net

    deltanet_routing.install()
    dispatcher = delta_net.chunk_delta_rule
    deltanet_routing.install()
    assert delta_net.chunk_delta_rule is dispatcher
    with routing.selected("chunk"):
        assert routing.current() == "chunk"
    assert routing.current() is None


def test_units_masking_and_recording():
    layer = make("deltanet")
    assert [u.index for u in layer.units()] == [0, 1, 2, 3] and layer.units()[0].kind == "head"
    gated = make("gated-deltanet", d_model=64).units()
    assert len(gated) == 6 and 0 < gated[0].attrs["decay"] < 1 and gated[0].attrs["half_life"] > 0
    x = torch.randn(2, 9, 32)
    check_every_unit_masked_is_zero(layer, x)
    assert recorded_by_a_step(layer, x, "delta_state_norm").shape == (2, 2, 4)


def test_configs_validate_and_defaults_are_flas():
    assert DeltaNetConfig().num_heads == 4 and DeltaNetConfig().expand_v == 1.0
    assert GatedDeltaNetConfig().num_heads == 6 and GatedDeltaNetConfig().expand_v == 2.0
    with pytest.raises(ConfigError, match="num_heads"):
        build_config(DeltaNetConfig, {"num_heads": 0}, "deltanet")  # limits are the parser's
    with pytest.raises(ConfigError, match="divisible by num_heads"):
        DeltaNetMixer(DeltaNetConfig(num_heads=5), 32, 0, 1)
    with pytest.raises(ConfigError, match="set head_dim"):
        GatedDeltaNetMixer(GatedDeltaNetConfig(), 20, 0, 1)
    assert GatedDeltaNetMixer(GatedDeltaNetConfig(head_dim=4), 20, 0, 1).layer.head_k_dim == 4
    assert {"flash-linear-attention", "fla-core", "triton"} <= set(make("deltanet").package_versions())


def test_parity_machinery_on_cpu():
    check_parity("gated-deltanet", kernel="chunk", device="cpu", seq_len=40)
