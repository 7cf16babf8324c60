"""The GLA and RetNet mixers (fla's layers, ops routed per call) and mixbench's chunked GLA kernel."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from layer_checks import check_kernels_per_device, rel

from harness.errors import ConfigError
from harness.registry import MIXERS
from mixers.gla import routing
from mixers.common.ops.gla import chunk_gla

NAMES = ["gla", "retnet"]
pytestmark = pytest.mark.filterwarnings("ignore:ShortConvolution is crucial")


def make(name: str, d_model: int = 32, **cfg) -> torch.nn.Module:
    entry = MIXERS.get(name)
    return entry.cls(entry.make_config(cfg), d_model, 1, 2)


def leaves(*shapes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=gen).requires_grad_(True) for s in shapes]


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("T", [1, 16, 37])
def test_chunked_kernel_equals_flas_naive_recurrence_with_gradients(per_head, T):
    """Outputs, final state and every input's gradient against fla's ``naive_recurrent_gla`` /
    ``naive_recurrent_simple_gla``, from a non-zero state, with strong and weak decays mixed."""
    from fla.ops.gla.naive import naive_recurrent_gla
    from fla.ops.simple_gla.naive import naive_recurrent_simple_gla

    B, H, K, V = 2, 3, 8, 5
    q, k, v, h0 = leaves((B, T, H, K), (B, T, H, K), (B, T, H, V), (B, H, K, V))
    (raw,) = leaves((B, T, H) if per_head else (B, T, H, K), seed=1)
    ours = chunk_gla(q, k, v, F.logsigmoid(3 * raw), initial_state=h0, output_final_state=True)
    naive = naive_recurrent_simple_gla if per_head else naive_recurrent_gla
    ref = naive(q, k, v, F.logsigmoid(3 * raw), initial_state=h0, output_final_state=True)
    weights = [torch.randn_like(ours[0]), torch.randn_like(ours[1])]
    grads = []
    for o, s in (ours, ref):
        grads.append(torch.autograd.grad((o * weights[0]).sum() + (s * weights[1]).sum(), (q, k, v, raw, h0)))
    assert rel(ours[0], ref[0]) <= 1e-5 and rel(ours[1], ref[1]) <= 1e-5
    for a, b in zip(*grads):
        assert rel(a, b) <= 1e-5


def test_retention_route_equals_flas_parallel_retention_with_gradients():
    """The routed retention op (both CPU kernels) against fla's ``naive_retention``, the parallel form with
    RetNet's decay matrix: an independent definition, not the recurrence the kernels are checked against."""
    from fla.ops.retention.naive import naive_retention

    from mixers.common import routing as kernel_routing

    B, T, H, K, V = 2, 37, 4, 8, 6
    q, k, v = leaves((B, T, H, K), (B, T, H, K), (B, T, H, V))
    ref = naive_retention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for kernel in ("recurrent", "chunk"):
        with kernel_routing.selected(kernel):
            o, _ = routing.retention(q, k, v)
        assert rel(o, ref) <= 1e-5, kernel
        for a, b in zip(torch.autograd.grad(o.square().sum(), (q, k, v)), ref_grads):
            assert rel(a, b) <= 1e-5, kernel


def test_chunked_kernel_is_finite_under_decays_that_underflow():
    B, T, H, K, V = 1, 48, 2, 4, 4
    q, k, v = leaves((B, T, H, K), (B, T, H, K), (B, T, H, V))
    g = torch.full((B, T, H, K), -200.0)  # exp(-200 * 16) underflows; the pairwise form never forms exp(+x)
    o, _ = chunk_gla(q, k, v, g)
    o.sum().backward()
    assert torch.isfinite(o).all() and all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_state_layout_size_and_positions():
    gla = make("gla")  # fla's defaults: keys 16 wide in 4 heads of 4, values 32 in heads of 8, stored [V, K]
    state = gla.init_state(3, torch.device("cpu"), torch.float32)
    assert set(state) == {"recurrent_state"} and state["recurrent_state"].shape == (3, 4, 8, 4)
    assert gla.state_size(10) == 4 * 8 * 4
    conv = make("gla", use_short_conv=True)
    assert conv.state_size(0) == 4 * 8 * 4 + (16 + 16 + 32) * 4
    ret = make("retnet")
    state = ret.init_state(2, torch.device("cpu"), torch.float32)
    assert state["recurrent_state"].shape == (2, 4, 8, 16) and int(state["seen"]) == 0
    with torch.no_grad():
        _, state = ret(torch.randn(2, 7, 32), state)
        _, state = ret.step(torch.randn(2, 32), state)
    assert int(state["seen"]) == 8  # rotary positions continue where the prefill stopped


def test_kernels_routing_and_units():
    gla = make("gla")
    check_kernels_per_device(gla, ("recurrent", "chunk"), "chunk", "triton")
    ret = make("retnet")
    decays = [u.attrs["decay"] for u in ret.units()]
    assert decays == pytest.approx([1 - 2.0 ** (-5 - h) for h in range(4)])
    x = torch.randn(2, 9, 32)
    with torch.no_grad(), gla.intervene(range(4), "mask"):
        assert gla(x)[0].abs().max() == 0
    assert type(gla).paper and type(ret).paper


def test_configs_validate():
    with pytest.raises(ConfigError, match="divisible by num_heads"):
        make("gla", num_heads=3)
    with pytest.raises(ConfigError, match="must be even"):
        make("retnet", d_model=24, num_heads=8)
    assert {"flash-linear-attention", "fla-core", "triton"} <= set(make("gla").package_versions())
