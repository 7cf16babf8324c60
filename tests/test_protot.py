"""ProtoT against an independent float64 implementation of the paper's equations, and its two kernels."""

from __future__ import annotations

import math

import pytest
import torch

from harness import Recorder
from harness.errors import ConfigError
from harness.values import build_config
from mixers.protot.layer import ProtoT, ProtoTConfig
from mixers.protot.kernel import prefix_mean_chunked
from mixers.protot.reference import prefix_mean_recurrent


def direct_protot(layer: ProtoT, x: torch.Tensor) -> torch.Tensor:
    """docs/PAPERS.md §A.2 written out as explicit double sums over positions (O(T^2)), in float64."""
    p = {n: t.detach().double() for n, t in layer.named_parameters()}
    x = x.double()
    P = p["prototypes"]
    pi = ((x @ P.T) / (p["tau_write"].abs() + 2e-6)).softmax(-1)
    if layer.shared_routing:
        rho = pi
    else:
        rho = ((x @ p["read_query.weight"].T @ P.T) / (p["tau_read"].abs() + 2e-6)).softmax(-1)
    v = x @ p["value.weight"].T
    if layer.has_conv:
        w = p["conv.weight"]  # [m, 1, width]; no bias, as released
        width = w.shape[-1]
        conv = torch.zeros_like(v)
        for t in range(v.shape[1]):
            for j in range(width):  # tap j multiplies v[t - (width - 1) + j]
                src = t - (width - 1) + j
                if src >= 0:
                    conv[:, t] += w[:, 0, j] * v[:, src]
        v = 0.5 * v + 0.5 * conv
    beta = torch.sigmoid(p["beta_logit"])
    B, T, _ = x.shape
    out = torch.zeros(B, T, v.shape[-1], dtype=torch.float64)
    for i in range(T):
        mixed = torch.zeros(B, v.shape[-1], dtype=torch.float64)
        for k in range(P.shape[0]):
            num = torch.zeros(B, v.shape[-1], dtype=torch.float64)
            den = torch.zeros(B, dtype=torch.float64)
            for j in range(i):  # strictly past
                wgt = (1 - beta[k]) * beta[k] ** (i - 1 - j) * pi[:, j, k]
                num += wgt[:, None] * v[:, j]
                den += wgt
            mixed += rho[:, i, k, None] * num / den.clamp(min=1e-6)[:, None]
        out[:, i] = mixed
    return p["alpha"] * out @ p["out.weight"].T


def make_layer(layer_idx: int, d: int = 16, R: int = 4, betas=None) -> ProtoT:
    layer = ProtoT(ProtoTConfig(n_prototypes=R), d, layer_idx, n_layers=4)
    with torch.no_grad():
        for param in layer.parameters():  # make every parameter matter (alpha starts trivial)
            param.add_(torch.randn_like(param) * 0.1)
        if betas is not None:
            layer.beta_logit.copy_(torch.logit(torch.tensor(betas)))
    return layer


@pytest.mark.parametrize("layer_idx", [0, 1, 2])
@pytest.mark.parametrize("kernel", ["recurrent", "chunked"])
def test_matches_direct_equations(layer_idx, kernel):
    layer = make_layer(layer_idx, betas=[0.02, 0.5, 0.9, 0.995])
    layer.set_kernel(kernel)
    x = torch.randn(2, 23, 16)
    y, _ = layer(x)
    ref = direct_protot(layer, x)
    assert torch.allclose(y.double(), ref, rtol=1e-4, atol=1e-6), (y.double() - ref).abs().max()
    assert torch.equal(y[:, 0], torch.zeros_like(y[:, 0]))  # position 0 reads nothing


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (0 when both are exactly zero, as at T = 1 where nothing has been written)."""
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


@pytest.mark.parametrize("T", [1, 7, 256, 2048])
@pytest.mark.parametrize("beta", [0.01, 0.9, 0.999])
def test_chunked_equals_recurrent_fp32(T, beta):
    torch.manual_seed(T)
    layer = ProtoT(ProtoTConfig(n_prototypes=8), 32, layer_idx=2, n_layers=4)
    with torch.no_grad():
        layer.beta_logit.copy_(torch.logit(torch.full((8,), beta)) + torch.randn(8) * 0.01)
    x = torch.randn(2, T, 32)
    outs, grads = {}, {}
    for kernel in ("recurrent", "chunked"):
        layer.set_kernel(kernel)
        layer.zero_grad()
        xk = x.clone().requires_grad_(True)
        y, _ = layer(xk)
        (y * torch.linspace(-1, 1, 32)).sum().backward()
        outs[kernel] = y.detach()
        grads[kernel] = [xk.grad] + [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in layer.parameters()]
    assert rel(outs["chunked"], outs["recurrent"]) <= 1e-5
    for g_chunk, g_rec in zip(grads["chunked"], grads["recurrent"]):
        assert (g_chunk - g_rec).abs().max() <= 1e-4 * max(g_rec.abs().max().item(), 1e-3)


@pytest.mark.parametrize("betas", [[1e-9, 1e-4, 0.3, 0.9], [0.9, 0.99, 1 - 1e-6, 0.999999]])
def test_kernels_stable_for_extreme_decay(betas):
    """Powers of beta that underflow fp32 anywhere would give inf/nan or zeros; the reference is float64."""
    B, T, R, m = 2, 700, 4, 5
    w = torch.rand(B, T, R).softmax(-1) * 0.3
    v, rho = torch.randn(B, T, m), torch.rand(B, T, R).softmax(-1)
    lb = torch.log(torch.tensor(betas))
    zeros = (torch.zeros(B, R, m), torch.zeros(B, R))
    ref = prefix_mean_recurrent(w.double(), v.double(), rho.double(), lb.double(), *(z.double() for z in zeros), 1e-6)
    for chunk in (16, 32, 64):
        out = prefix_mean_chunked(w, v, rho, lb, *zeros, 1e-6, chunk=chunk)
        for got, want in zip(out, ref):
            assert torch.isfinite(got).all()
            assert rel(got.double(), want) <= 1e-5


def test_chunked_carries_state_and_returns_final_state():
    B, T, R, m = 2, 45, 4, 3
    w, v, rho = torch.rand(B, T, R) * 0.2, torch.randn(B, T, m), torch.rand(B, T, R).softmax(-1)
    lb = torch.log(torch.tensor([0.2, 0.6, 0.9, 0.99]))
    S0, M0 = torch.randn(B, R, m), torch.rand(B, R)
    ref = prefix_mean_recurrent(w, v, rho, lb, S0, M0, 1e-6)
    got = prefix_mean_chunked(w, v, rho, lb, S0, M0, 1e-6, chunk=16)  # 45 = 2 full chunks + 13
    for a, b in zip(got, ref):
        assert rel(a, b) <= 1e-5


def test_decode_equals_forward_and_is_causal():
    layer = make_layer(1, d=32, R=8)
    x = torch.randn(3, 40, 32)
    with torch.no_grad():
        y, _ = layer(x)
        state = layer.init_state(3, x.device, x.dtype)
        steps = []
        for t in range(40):
            y_t, state = layer.step(x[:, t], state)
            steps.append(y_t)
        assert rel(torch.stack(steps, 1), y) < 1e-5
        x2 = x.clone()
        x2[:, 20:] += 5
        assert torch.equal(layer(x2)[0][:, :20], y[:, :20])


def test_every_parameter_gets_a_gradient():
    for layer_idx in (0, 1, 2):
        layer = ProtoT(ProtoTConfig(), 32, layer_idx, n_layers=4)
        y, _ = layer(torch.randn(2, 20, 32))
        y.square().sum().backward()
        names = {n for n, p in layer.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
        expected = {n for n, _ in layer.named_parameters()}
        assert names == expected
        assert {"prototypes", "beta_logit", "tau_write", "alpha"} <= names
        assert ("tau_read" in names) == (layer_idx > 0) and ("conv.weight" in names) == (layer_idx < 2)


def test_paper_initialisation():
    layer = ProtoT(ProtoTConfig(), 64, layer_idx=3, n_layers=6)
    assert torch.allclose(layer.prototypes.norm(dim=-1), torch.ones(32))
    assert torch.allclose(torch.sigmoid(layer.beta_logit), torch.full((32,), 0.9))
    assert layer.alpha.item() == 1.0 and layer.tau_write.item() == 1.0
    assert layer.value.weight.shape == (32, 64) and layer.out.weight.shape == (64, 32)
    first = ProtoT(ProtoTConfig(), 64, layer_idx=0, n_layers=6)
    assert first.tau_write.item() == 3.0 and not hasattr(first, "read_query")
    half_life = layer.units()[0].attrs["half_life"]
    assert half_life == pytest.approx(-math.log(2) / math.log(0.9))


def test_state_is_constant_size():
    layer = ProtoT(ProtoTConfig(n_prototypes=8), 32, layer_idx=0, n_layers=2)
    assert layer.state_size(10) == layer.state_size(100_000) == 8 * 16 + 8 + 4 * 16


def test_write_and_read_masks_renormalise_the_gates():
    layer = make_layer(2, d=16, R=4)
    x = torch.randn(1, 12, 16)
    with Recorder() as rec, layer.intervene([1], "write-mask"):
        layer(x)
    pi = rec.get(2, "write_gate")
    assert torch.all(pi[..., 1] == 0) and torch.allclose(pi.sum(-1), torch.ones(1, 12))
    with Recorder() as rec, layer.intervene([0, 3], "read-mask"):
        layer(x)
    rho = rec.get(2, "read_gate")
    assert torch.all(rho[..., [0, 3]] == 0) and torch.allclose(rho.sum(-1), torch.ones(1, 12))
    with Recorder() as rec:
        layer(x)
    assert torch.all(rec.get(2, "read_gate")[..., 0] > 0)  # restored


def test_nested_masks_that_cover_every_prototype_are_refused_and_leave_the_outer_mask():
    layer = make_layer(2, d=16, R=4)
    with layer.intervene([0, 1], "write-mask"):
        with pytest.raises(ConfigError, match="every prototype"):
            with layer.intervene([2, 3], "write-mask"):
                pass
        assert layer._write_mask.tolist() == [True, True, False, False]
        y, _ = layer(torch.randn(1, 5, 16))
        assert torch.isfinite(y).all()
    assert layer._write_mask is None


def test_reinit_is_seeded_and_restored():
    layer = make_layer(2)
    before = layer.prototypes.detach().clone()
    with layer.intervene([2], "reinit"):
        first = layer.prototypes.detach().clone()
    with layer.intervene([2], "reinit"):
        second = layer.prototypes.detach().clone()
    assert torch.equal(first, second) and not torch.equal(first[2], before[2])
    assert torch.equal(first[[0, 1, 3]], before[[0, 1, 3]])
    assert torch.equal(layer.prototypes, before)


def test_bad_configs_fail_clearly():
    with pytest.raises(ConfigError, match="n_prototypes"):
        build_config(ProtoTConfig, {"n_prototypes": 0}, "protot")  # limits are the parser's
    with pytest.raises(ConfigError, match="beta_init"):
        build_config(ProtoTConfig, {"beta_init": 1.0}, "protot")
    with pytest.raises(ConfigError, match="even"):
        ProtoT(ProtoTConfig(), 15, 0, 1)
    layer = make_layer(2)
    with pytest.raises(ConfigError, match="out of range"):
        with layer.intervene([4], "write-mask"):
            pass
    with pytest.raises(ConfigError, match="every prototype"):
        with layer.intervene([0, 1, 2, 3], "write-mask"):
            pass


def test_no_weight_decay_on_prototypes():
    assert ProtoT(ProtoTConfig(), 16, 2, 4).no_weight_decay() == {"prototypes"}
