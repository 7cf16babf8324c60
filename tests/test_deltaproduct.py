"""The Gated DeltaProduct mixer (fla's layer, sequence ops routed per call to fla's naive op or our chunked kernel)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from layer_checks import check_every_unit_masked_is_zero, check_kernels_per_device, check_parity, rel

from harness.errors import ConfigError
from harness.registry import MIXERS
from harness.values import build_config
from mixers.common import routing
from mixers.deltaproduct import kernel as product_kernel, routing as product_routing
from mixers.deltaproduct.layer import GatedDeltaProductConfig, GatedDeltaProductMixer

NAME = "gated-deltaproduct"
KERNELS = ("recurrent", "chunk")
# fla warns whenever use_short_conv=False, which some cases here ask for on purpose
pytestmark = pytest.mark.filterwarnings("ignore:ShortConvolution is crucial")


def make(d_model: int = 64, **cfg) -> GatedDeltaProductMixer:
    entry = MIXERS.get(NAME)
    return entry.cls(entry.make_config(cfg), d_model, 1, 2)


def l2(x: torch.Tensor) -> torch.Tensor:
    """fla's in-kernel l2 norm, written out: x / sqrt(|x|^2 + 1e-6)."""
    return x / torch.sqrt(x.square().sum(-1, keepdim=True) + 1e-6)


def _op_inputs(n: int, T: int = 37, B: int = 2, H: int = 3, K: int = 8, V: int = 16, gate: bool = True):
    gen = torch.Generator().manual_seed(n)
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T * n, H, K, generator=gen)
    v = torch.randn(B, T * n, H, V, generator=gen)
    beta = 2 * torch.rand(B, T * n, H, generator=gen)  # negative eigenvalues included
    g = -F.softplus(torch.randn(B, T, H, generator=gen)) if gate else None
    h0 = torch.randn(B, H, K, V, generator=gen)
    return [t.requires_grad_(True) if t is not None else None for t in (q, k, v, g, beta, h0)]


def _results(o, ht, leaves):
    gen = torch.Generator().manual_seed(99)
    ((o * torch.randn(o.shape, generator=gen)).sum() + (ht * torch.randn(ht.shape, generator=gen)).sum()).backward()
    out = [o.detach(), ht.detach()] + [t.grad.clone() for t in leaves if t is not None]
    for t in leaves:
        if t is not None:
            t.grad = None
    return out


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("gate", [True, False])
def test_routed_ops_equal_flas_naive_op(n, gate):
    """The layer's two routed ops, under each kernel, against fla's naive_recurrent_gated_delta_product called
    directly (with the in-kernel l2 norm applied first): outputs, final state, and gradients of every input."""
    import fla.layers.gated_deltaproduct as module
    from fla.ops.gated_delta_product.naive import naive_recurrent_gated_delta_product

    product_routing.install()
    q, k, v, g, beta, h0 = leaves = _op_inputs(n, gate=gate)
    K = q.shape[-1]
    o, ht = naive_recurrent_gated_delta_product(l2(q), l2(k), v, g, beta, K**-0.5, initial_state=h0,
                                                output_final_state=True, num_householder=n)
    expected = _results(o, ht, leaves)
    for kernel in KERNELS:
        with routing.selected(kernel):
            o, ht = module.chunk_gated_delta_product(q=q, k=k, v=v, g=g, beta=beta, initial_state=h0,
                                                     output_final_state=True, num_householder=n,
                                                     use_qk_l2norm_in_kernel=True)
            got = _results(o, ht, leaves)
            assert all(rel(a, b) <= 1e-5 for a, b in zip(got, expected)), ("chunk op", kernel)
            # the decode op, called as the layer calls it: query and log-decay interleaved, every n-th output
            q_steps, g_steps = product_kernel.interleave(q, g, n)
            o, ht = module.fused_recurrent_gated_delta_rule(q=q_steps, k=k, v=v, g=g_steps, beta=beta,
                                                            initial_state=h0, output_final_state=True,
                                                            use_qk_l2norm_in_kernel=True)
            got = _results(o.unflatten(1, (q.shape[1], n))[:, :, -1], ht, leaves)
            assert all(rel(a, b) <= 1e-5 for a, b in zip(got, expected)), ("fused_recurrent op", kernel)


def test_one_householder_step_is_the_gated_delta_rule():
    """num_householder = 1: the routed op equals fla's naive gated delta rule recurrence."""
    import fla.layers.gated_deltaproduct as module
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

    product_routing.install()
    q, k, v, g, beta, h0 = leaves = _op_inputs(1, T=50)
    o, ht = naive_recurrent_gated_delta_rule(l2(q), l2(k), v, beta, g, initial_state=h0, output_final_state=True)
    expected = _results(o, ht, leaves)
    for kernel in KERNELS:
        with routing.selected(kernel):
            o, ht = module.chunk_gated_delta_product(q, k, v, g, beta, 1, initial_state=h0, output_final_state=True,
                                                     use_qk_l2norm_in_kernel=True)
        got = _results(o, ht, leaves)
        assert all(rel(a, b) <= 1e-5 for a, b in zip(got, expected)), kernel


def test_decode_op_applies_flas_in_kernel_options():
    """fused_recurrent_gated_delta_rule's beta sigmoid (with negative eigenvalues), in-kernel gate and
    value-first state, as fla documents them, against the naive op on the inputs those options produce."""
    import fla.layers.gated_deltaproduct as module
    from fla.ops.gated_delta_product.naive import naive_recurrent_gated_delta_product

    product_routing.install()
    q, k, v, _, _, h0 = _op_inputs(1, T=20)
    raw_beta, raw_g = torch.randn(2, 20, 3), torch.randn(2, 20, 3)
    A_log, dt_bias = torch.randn(3), torch.randn(3)
    g = -A_log.exp() * F.softplus(raw_g + dt_bias)
    o, ht = naive_recurrent_gated_delta_product(q, k, v, g, 2 * raw_beta.sigmoid(), 0.3, initial_state=h0,
                                                output_final_state=True)
    for kernel in KERNELS:
        with routing.selected(kernel), torch.no_grad():
            o2, ht2 = module.fused_recurrent_gated_delta_rule(
                q, k, v, g=raw_g, beta=raw_beta, scale=0.3, initial_state=h0.transpose(-1, -2),
                output_final_state=True, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, state_v_first=True)
        assert rel(o2, o) <= 1e-5 and rel(ht2.transpose(-1, -2), ht) <= 1e-5, kernel


def test_torch_paths_refuse_what_they_do_not_support():
    import fla.layers.gated_deltaproduct as module

    product_routing.install()
    q, k, v, g, beta, _ = (t.detach() if t is not None else None for t in _op_inputs(2, B=1))
    with routing.selected("chunk"), pytest.raises(NotImplementedError, match="cu_seqlens"):
        module.chunk_gated_delta_product(q, k, v, g, beta, 2, cu_seqlens=torch.tensor([0, 20, 37]))
    with routing.selected("recurrent"), pytest.raises(NotImplementedError, match="gk"):
        module.fused_recurrent_gated_delta_rule(q, k[:, :37], v[:, :37], gk=torch.zeros_like(q))


#: shapes for tests/test_flops.py's SHAPES (width, context and config values varied)
FLOP_SHAPES = [(32, 24, {}, 0), (64, 40, {"num_heads": 2, "head_dim": 16, "num_householder": 3}, 0),
               (48, 32, {"use_output_gate": False, "use_forget_gate": False, "expand_v": 1.0}, 0)]


def test_declared_flops_match_measured(monkeypatch):
    """tests/test_flops.py's measurement (products, and the arithmetic of fla's naive op, the reference's
    kernel) at three shapes and for a three-layer model."""
    import test_flops

    import fla.ops.gated_delta_product.naive as naive

    original = test_flops._kernel_sites
    monkeypatch.setattr(test_flops, "_kernel_sites", lambda name: [(naive, "naive_recurrent_gated_delta_product")]
                        if name == NAME else original(name))
    for d, T, cfg, layer_idx in FLOP_SHAPES:
        mixer = test_flops.build_mixer(NAME, d, cfg, layer_idx)
        test_flops._check(mixer.flops_per_token(T), test_flops.measure_mixer(NAME, mixer, T), f"{NAME} d{d} {cfg}")
    model = test_flops.MixerLM(test_flops._tiny_spec(NAME, 40))
    test_flops._check(test_flops.model_flops_per_token(model, 40), test_flops.measure_model(NAME, model, 40),
                      f"MixerLM({NAME}, d32 L3 T40)")


def test_state_layout_and_size():
    layer = make()  # 6 heads of 64 / 8 = 8 key dims, 16 value dims; k and v convs n = 2 times wider
    state = layer.init_state(3, torch.device("cpu"), torch.float32)
    assert state["recurrent_state"].shape == (3, 6, 8, 16)
    assert [c.shape for c in state["conv_state"]] == [(3, 48, 4), (3, 96, 4), (3, 192, 4)]
    assert layer.state_size(10) == 6 * 8 * 16 + (48 + 96 + 192) * 4
    no_conv = make(use_short_conv=False, num_householder=3)
    assert set(no_conv.init_state(1, torch.device("cpu"), torch.float32)) == {"recurrent_state"}
    assert no_conv.state_size(7) == 6 * 8 * 16


def test_step_does_not_modify_the_callers_state():
    layer = make()
    state = layer.init_state(1, torch.device("cpu"), torch.float32)
    state["recurrent_state"] += 1.0
    before = [t.clone() for t in [state["recurrent_state"], *state["conv_state"]]]
    with torch.no_grad():
        layer.step(torch.randn(1, 64), state)
    assert all(torch.equal(a, b) for a, b in zip([state["recurrent_state"], *state["conv_state"]], before))


def test_kernels_per_device_and_routing_follows_set_kernel(monkeypatch):
    layer = make()
    check_kernels_per_device(layer, ("recurrent", "chunk"), "chunk", "triton")
    seen = []
    for fn in ("recurrent_gated_delta_product", "chunk_gated_delta_product"):
        original = getattr(product_kernel, fn)
        monkeypatch.setattr(product_kernel, fn, lambda *a, _f=original, _n=fn, **k: seen.append(_n) or _f(*a, **k))
    x = torch.randn(1, 40, 64)
    for kernel in KERNELS:
        layer.set_kernel(kernel)
        layer(x)
    _, state = layer(x, layer.init_state(1, x.device, x.dtype))
    layer.step(x[:, 0], state)  # one token under chunk: the recurrence
    assert seen == ["recurrent_gated_delta_product", "chunk_gated_delta_product", "chunk_gated_delta_product",
                    "recurrent_gated_delta_product"]


def test_routing_is_installed_once():
    import fla.layers.gated_deltaproduct as module

    product_routing.install()
    dispatchers = module.chunk_gated_delta_product, module.fused_recurrent_gated_delta_rule
    product_routing.install()
    make()
    assert (module.chunk_gated_delta_product, module.fused_recurrent_gated_delta_rule) == dispatchers


def test_units_and_masking():
    layer = make()
    units = layer.units()
    assert len(units) == 6 and units[0].kind == "head" and 0 < units[0].attrs["decay"] < 1
    assert len(make(use_forget_gate=False).units()) == 6
    check_every_unit_masked_is_zero(layer, torch.randn(2, 9, 64))


def test_configs_validate_and_defaults():
    cfg = GatedDeltaProductConfig()
    assert (cfg.num_householder, cfg.allow_neg_eigval, cfg.use_forget_gate, cfg.num_heads) == (2, True, True, 6)
    assert "arXiv:2502.10297" in GatedDeltaProductMixer.paper
    with pytest.raises(ConfigError, match="num_householder"):
        build_config(GatedDeltaProductConfig, {"num_householder": 0}, NAME)
    with pytest.raises(ConfigError, match="set head_dim"):
        GatedDeltaProductMixer(cfg, 20, 0, 1)
    layer = GatedDeltaProductMixer(GatedDeltaProductConfig(head_dim=4, num_householder=3), 20, 0, 1)
    assert layer.layer.head_k_dim == 4 and layer.layer.k_proj.out_features == 3 * 6 * 4
    assert make(d_model=128).layer.head_k_dim == 16  # preset quick
    assert {"flash-linear-attention", "fla-core", "triton"} <= set(layer.package_versions())


def test_parity_machinery_on_cpu():
    check_parity(NAME, kernel="chunk", device="cpu", seq_len=40)
