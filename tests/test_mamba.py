"""The Mamba-1 and Mamba-2 mixers (mamba-ssm's modules, kernels routed per device) and the fast CPU scan."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from layer_checks import (
    check_every_unit_masked_is_zero, check_kernels_per_device, check_parity, recorded_by_a_step, rel,
)

from harness.model.conformance import run_checks
from harness.errors import ConfigError
from harness.registry import MIXERS
from harness.values import build_config
from mixers.mamba import routing as mamba_routing
from mixers.mamba.layer import Mamba2Config, Mamba2Mixer, MambaConfig
from mixers.mamba.kernel import selective_scan_cpu

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def _importable_mamba_ssm():
    """mamba-ssm is importable once routed (on a CPU-only build it lacks its CUDA extension); mixers do this."""
    mamba_routing.install()


def make(name: str, d_model: int = 32, **cfg) -> torch.nn.Module:
    entry = MIXERS.get(name)
    config = entry.make_config(cfg or ({"headdim": 16} if name == "mamba2" else {}))
    return entry.cls(config, d_model, 1, 2)


# ---------------------------------------------------------------- the CPU scan
def scan_inputs(batch=2, dim=8, n=4, length=33, bc="per-step", extras=True):
    gen = torch.Generator().manual_seed(1)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).requires_grad_(True)

    bc_shape = {"per-step": (batch, n, length), "grouped": (batch, 2, n, length), "shared": (dim, n)}[bc]
    delta = torch.randn(batch, dim, length, generator=gen) * 0.5
    inputs = {
        "u": randn(batch, dim, length),
        # without delta_softplus the step sizes go in as they are: positive, as in Mamba
        "delta": (delta if extras else delta.abs()).requires_grad_(True),
        "A": (-torch.rand(dim, n, generator=gen) * 5).requires_grad_(True),
        "B": randn(*bc_shape),
        "C": randn(*bc_shape),
    }
    if extras:
        inputs |= {"D": randn(dim), "z": randn(batch, dim, length), "delta_bias": randn(dim, scale=0.1)}
    return inputs


@pytest.mark.parametrize("bc", ["per-step", "grouped", "shared"])
@pytest.mark.parametrize("extras", [True, False])
def test_cpu_scan_equals_selective_scan_ref(bc, extras):
    """Outputs, final state and the gradient of every input agree with the package's definition to 1e-5."""
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

    inputs = scan_inputs(bc=bc, extras=extras)
    results = {}
    for name, scan in (("ref", selective_scan_ref), ("cpu", selective_scan_cpu)):
        for t in inputs.values():
            t.grad = None
        out, last = scan(**inputs, delta_softplus=extras, return_last_state=True)
        (out.sin().sum() + last.square().sum()).backward()
        results[name] = (out.detach(), last.detach(), {k: t.grad.clone() for k, t in inputs.items()})
    (out, last, grads), (ref_out, ref_last, ref_grads) = results["cpu"], results["ref"]
    assert rel(out, ref_out) <= 1e-5
    assert rel(last, ref_last) <= 1e-5
    for k in inputs:
        assert rel(grads[k], ref_grads[k]) <= 1e-5, k


def test_cpu_scan_without_last_state_and_complex_A():
    inputs = scan_inputs(extras=False)
    threads = torch.get_num_threads()
    selective_scan_cpu(**inputs).sum().backward()
    assert torch.get_num_threads() == threads  # its loops run on one thread, then restore the setting
    with pytest.raises(NotImplementedError, match="real A"):
        selective_scan_cpu(**{**inputs, "A": torch.complex(inputs["A"], inputs["A"])})


# ---------------------------------------------------------------- mixers


@pytest.mark.parametrize(("name", "cfg"), [("mamba", {}), ("mamba2", {"headdim": 16, "ngroups": 2})])
def test_gradients_stay_finite_under_strong_decay(name, cfg):
    """Step sizes ~3 with |A| = 16: a chunk's total decay is far past e^88, where an unmasked exp overflows."""
    layer = make(name, **cfg)
    with torch.no_grad():
        bias = layer.mamba.dt_proj.bias if name == "mamba" else layer.mamba.dt_bias
        bias.fill_(3.0)
        layer.mamba.A_log.fill_(math.log(16.0))
    x = torch.randn(2, 70, 32, requires_grad=True)
    layer(x)[0].square().mean().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


def test_mamba2_with_groups_passes_conformance():
    report = run_checks("mamba2", mixer_config={"headdim": 16, "ngroups": 2})
    assert report.passed, report.render()


def test_step_does_not_modify_the_callers_state():
    layer = make("mamba")
    state = layer.init_state(1, torch.device("cpu"), torch.float32)
    before = {k: v.clone() for k, v in state.items()}
    with torch.no_grad():
        layer.step(torch.randn(1, 32), state)
    assert all(torch.equal(state[k], before[k]) for k in state)


def test_kernels_per_device_and_routing_follows_set_kernel(monkeypatch):
    layer = make("mamba")
    # CUDA's default is "cuda" only where mamba-ssm's compiled kernels are installed
    check_kernels_per_device(layer, ("reference", "cpu-scan", "fused"), "fused", "cuda", cuda_default=False)
    assert Mamba2Mixer.kernels == ("reference", "chunk", "cuda") and make("mamba2").kernels == ("reference", "chunk")
    assert make("mamba2").default_kernel(torch.device("cpu")) == "chunk"

    from mamba_ssm.ops import selective_scan_interface

    calls = []
    ref = selective_scan_interface.selective_scan_ref
    monkeypatch.setattr(selective_scan_interface, "selective_scan_ref", lambda *a, **k: calls.append(1) or ref(*a, **k))
    x = torch.randn(1, 6, 32)
    layer.set_kernel("cpu-scan")
    layer(x)
    assert not calls
    layer.set_kernel("reference")
    layer(x)
    assert calls == [1]


def test_package_forward_on_cpu_outside_a_mixer_uses_the_torch_path():
    from mamba_ssm import Mamba

    y = Mamba(16)(torch.randn(1, 5, 16))
    assert y.shape == (1, 5, 16)


def test_routing_is_installed_once():
    from mamba_ssm.modules import mamba_simple

    first = mamba_routing.install()
    dispatcher = mamba_simple.selective_scan_fn
    assert mamba_routing.install() is first and mamba_simple.selective_scan_fn is dispatcher


def test_routing_never_shadows_a_compiled_extension():
    """A selective_scan_cuda that imports is left in place; CPU tensors still take the torch path."""
    code = (
        "import sys, types, torch\n"
        "ext = types.ModuleType('selective_scan_cuda')\n"
        "sys.modules['selective_scan_cuda'] = ext\n"
        "from mixers.mamba import routing as mamba_routing\n"
        "routing = mamba_routing.install()\n"
        "assert sys.modules['selective_scan_cuda'] is ext, 'the stand-in replaced the extension'\n"
        "assert routing.selective_scan_cuda\n"
        "from mixers.mamba.layer import MambaConfig, MambaMixer\n"
        "layer = MambaMixer(MambaConfig(), 16, 0, 1)\n"
        "assert layer.kernels == ('reference', 'cpu-scan', 'fused')\n"
        "layer.set_kernel('cpu-scan')\n"
        "assert layer(torch.randn(1, 5, 16))[0].shape == (1, 5, 16)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_stand_in_only_without_the_extension():
    routing = mamba_routing.install()
    module = sys.modules["selective_scan_cuda"]
    assert routing.selective_scan_cuda != ("mixbench stand-in" in (module.__doc__ or ""))


def test_units_masking_and_recording():
    layer = make("mamba")
    units = layer.units()
    assert len(units) == 64 and units[0].kind == "channel"  # d_inner = expand * d_model channels
    assert {"dt", "decay", "half_life"} <= set(units[0].attrs) and 0 < units[0].attrs["decay"] < 1
    heads = make("mamba2").units()
    assert len(heads) == 4 and heads[0].kind == "head"  # 64 channels / headdim 16
    x = torch.randn(2, 9, 32)
    check_every_unit_masked_is_zero(layer, x)
    assert recorded_by_a_step(layer, x, "ssm_state_norm").shape == (2, 2, 64)


def test_configs_validate_and_defaults_are_the_packages():
    assert MambaConfig() == MambaConfig(d_state=16, d_conv=4, expand=2, dt_rank=0)
    assert Mamba2Config().d_state == 128 and Mamba2Config().headdim == 64
    with pytest.raises(ConfigError, match="d_state"):
        build_config(MambaConfig, {"d_state": 0}, "mamba")  # limits are the parser's
    with pytest.raises(ConfigError, match="multiple of headdim"):
        Mamba2Mixer(Mamba2Config(headdim=48), 64, 0, 1)
    layer = make("mamba")
    assert layer.no_weight_decay() == {"mamba.A_log"}  # 2-D and marked _no_weight_decay by the package
    assert {"mamba-ssm", "triton"} <= set(layer.package_versions())


def test_parity_machinery_on_cpu():
    """The same comparison the CUDA parity test makes, here between the CPU default kernel and the reference."""
    check_parity("mamba", kernel="fused", device="cpu", seq_len=40)


# ---------------------------------------------------------------- allow_neg_eigval (Grazzi et al. 2025)
def _naive_neg_scan(u, delta, A, B, C, D, z, delta_bias, h0):
    """Grazzi et al.'s Mamba written out with Python scalars per (sequence, channel, state): a_t = 2 exp(dt A) - 1,
    h_t = a_t h_{t-1} + dt u_t B_t, y_t = (C_t . h_t + D u_t) silu(z_t), dt = softplus(delta + bias)."""
    batch, dim, T = u.shape
    n = A.shape[1]
    out = torch.zeros(batch, dim, T, dtype=torch.float64)
    last = torch.zeros(batch, dim, n, dtype=torch.float64)
    for b in range(batch):
        for d in range(dim):
            h = [float(h0[b, d, k]) for k in range(n)]
            for t in range(T):
                dt = math.log1p(math.exp(float(delta[b, d, t] + delta_bias[d])))
                y = 0.0
                for k in range(n):
                    h[k] = (2 * math.exp(dt * float(A[d, k])) - 1) * h[k] + dt * float(u[b, d, t] * B[b, k, t])
                    y += float(C[b, k, t]) * h[k]
                zv = float(z[b, d, t])
                out[b, d, t] = (y + float(D[d] * u[b, d, t])) * zv / (1 + math.exp(-zv))
            last[b, d] = torch.tensor(h, dtype=torch.float64)
    return out, last


def test_negative_eigenvalue_scans_equal_a_naive_loop():
    """The compiled scan (kernel fused), the PyTorch scan (cpu-scan) and the step-by-step reference, with
    allow_neg_eigval's transition, against scalar arithmetic from a non-zero state; gradients of the fast scans
    against autograd through the reference. Step sizes ~1 and |A| up to 5 put transitions below zero."""
    from mixers.mamba import fused
    from mixers.mamba.reference import selective_scan_loop, transition

    x = scan_inputs(batch=2, dim=4, n=3, length=24)
    h0 = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(2)).requires_grad_(True)
    args = (x["u"], x["delta"], x["A"], x["B"], x["C"], x["D"], x["z"], x["delta_bias"])
    want, want_last = _naive_neg_scan(*(a.detach() for a in args), h0.detach())
    steps = torch.nn.functional.softplus(x["delta"] + x["delta_bias"][:, None]).detach()
    assert (transition(steps[:, :, :, None] * x["A"].detach()[None, :, None], True) < 0).float().mean() > 0.2
    ref, ref_last = selective_scan_loop(*args, h0, neg=True)
    assert rel(ref.double(), want) <= 1e-5 and rel(ref_last.double(), want_last) <= 1e-5
    grads = {}
    for name in ("ref", "cpu", "fused"):
        for t in [*x.values(), h0]:
            t.grad = None
        if name == "ref":
            out, last = selective_scan_loop(*args, h0, neg=True)
        elif name == "cpu":  # starts from zero: h0's response is the layer's closed form, checked below
            out, last = selective_scan_cpu(*args[:5], x["D"], z=x["z"], delta_bias=x["delta_bias"],
                                           delta_softplus=True, return_last_state=True, neg=True)
        else:
            tm = lambda t: t.permute(2, 0, 1).contiguous()  # noqa: E731  time-major
            out, last = fused.scan(tm(x["u"]), tm(x["delta"]), x["delta_bias"], x["A"], tm(x["B"]), tm(x["C"]),
                                       x["D"], tm(x["z"]), h0, with_state=True, neg=True)
            out = out.permute(1, 2, 0)
        (out.sin().sum() + last.square().sum()).backward()
        grads[name] = (out.detach(), last.detach(), {k: t.grad.clone() for k, t in x.items()})
    assert rel(grads["fused"][0].double(), want) <= 1e-5 and rel(grads["fused"][1].double(), want_last) <= 1e-5
    zero, zero_last = _naive_neg_scan(*(a.detach() for a in args), torch.zeros(2, 4, 3))
    assert rel(grads["cpu"][0].double(), zero) <= 1e-5 and rel(grads["cpu"][1].double(), zero_last) <= 1e-5
    for k in x:
        assert rel(grads["fused"][2][k], grads["ref"][2][k]) <= 1e-4, k
    # the cpu scan from zero: compare with the reference from zero
    for t in x.values():
        t.grad = None
    out, last = selective_scan_loop(*args, None, neg=True)
    (out.sin().sum() + last.square().sum()).backward()
    for k in x:
        assert rel(grads["cpu"][2][k], x[k].grad) <= 1e-4, k


def test_negative_eigenvalue_mamba_passes_the_gate_and_its_kernels_agree():
    """The portable kernels agree; the conformance gate passes; CUDA refuses the option (each kernel's decode and
    prefill: the variant in tests/test_mixer_contract.py)."""
    layer = make("mamba", allow_neg_eigval=True)
    x = torch.randn(2, 30, 32)
    outs = {}
    for kernel in layer.kernels:
        layer.set_kernel(kernel)
        with torch.no_grad():
            outs[kernel] = layer(x)[0]
    assert all(rel(v, outs["reference"]) <= 1e-5 for v in outs.values())
    plain = make("mamba")
    plain.load_state_dict(layer.state_dict())
    with torch.no_grad():
        assert rel(plain(x)[0], outs["reference"]) > 1e-3  # the option changes the layer: its transitions are
    for mine, theirs in zip(layer.units(), plain.units()):  # 2 a - 1 of the plain layer's a (the mean over N)
        assert mine.attrs["decay"] == pytest.approx(2 * theirs.attrs["decay"] - 1, abs=1e-6)
    with pytest.raises(ConfigError, match="allow_neg_eigval"):
        layer.set_kernel("cuda")
    report = run_checks("mamba", mixer_config={"allow_neg_eigval": True})
    assert report.passed, report.render()
