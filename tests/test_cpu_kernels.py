"""mixbench's own CPU kernels against the packages' reference code: the chunked delta rule (fla's naive
recurrences) and the compiled Mamba-1 scan and conv (mamba-ssm's ``selective_scan_ref``, torch's conv1d)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mixers.common import short_conv
from mixers.mamba import fused as mamba_fused, kernel_c as mamba_kernel_c, routing as mamba_routing
from mixers.deltanet.kernel import chunk_delta_rule


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


# ---------------------------------------------------------------- delta rule
def delta_inputs(T: int, gated: bool, with_state: bool, B=2, H=3, K=16, V=24, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = {
        "q": torch.randn(B, T, H, K, generator=gen),
        "k": F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1),  # the layers l2-normalise k
        "v": torch.randn(B, T, H, V, generator=gen),
        "beta": torch.rand(B, T, H, generator=gen) * 2,  # up to 2: allow_neg_eigval's range
        "g": -torch.rand(B, T, H, generator=gen) * 2 if gated else None,
        "h0": torch.randn(B, H, K, V, generator=gen) if with_state else None,
    }
    return {k: (v.requires_grad_(True) if v is not None else None) for k, v in t.items()}


def fla_reference(x, scale):
    """fla's naive recurrences: the delta rule head-first, the gated one in [B, T, H, K]."""
    from fla.ops.delta_rule.naive import delta_rule_recurrence
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

    if x["g"] is not None:
        return naive_recurrent_gated_delta_rule(x["q"], x["k"], x["v"], x["beta"], x["g"], scale=scale,
                                                initial_state=x["h0"], output_final_state=True)
    q = x["q"] * (scale * x["q"].shape[-1] ** 0.5)  # the naive op scales by K^-0.5 itself
    o, S = delta_rule_recurrence(*(t.transpose(1, 2) for t in (q, x["k"], x["v"], x["beta"])),
                                 initial_state=x["h0"], output_final_state=True)
    return o.transpose(1, 2), S


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize(("T", "chunk"), [(75, 16), (75, 32), (40, 64), (1, 32)])
def test_chunked_delta_rule_equals_fla_recurrence(gated, with_state, T, chunk):
    """Outputs, the final state and the gradient of every input (q, k, v, beta, the log-decay, the initial
    state) equal fla's naive recurrence to 1e-5, for lengths that are not a multiple of the chunk and T = 1."""
    x = delta_inputs(T, gated, with_state)
    scale = 0.3
    leaves = [t for t in x.values() if t is not None]
    results = []
    for fn in (lambda: fla_reference(x, scale),
               lambda: chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"], x["g"], scale=scale,
                                        initial_state=x["h0"], output_final_state=True, chunk_size=chunk)):
        o, S = fn()
        grads = torch.autograd.grad(o.sin().sum() + S.square().sum(), leaves)
        results.append([o.detach(), S.detach(), *grads])
    for name, a, b in zip(["o", "S", *[k for k, v in x.items() if v is not None]], results[1], results[0]):
        assert rel(a, b) <= 1e-5, name


@pytest.mark.parametrize("gated", [False, True])
def test_chunked_delta_rule_in_blocks_of_one_chunk_equals_fla_recurrence(gated, monkeypatch):
    """Blocks of one chunk each (6 matrices per chunk here): the block loop's seams, in fp32, against fla's
    recurrence, outputs, final state and every gradient, over five chunks and a ragged last one."""
    from mixers.deltanet import kernel as delta_kernel

    monkeypatch.setattr(delta_kernel, "MATRICES_PER_BLOCK", 6)
    x = delta_inputs(75, gated, with_state=True)
    leaves = [t for t in x.values() if t is not None]
    results = []
    for fn in (lambda: fla_reference(x, 0.3),
               lambda: chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"], x["g"], scale=0.3,
                                        initial_state=x["h0"], output_final_state=True, chunk_size=16)):
        o, S = fn()
        grads = torch.autograd.grad(o.sin().sum() + S.square().sum(), leaves)
        results.append([o.detach(), S.detach(), *grads])
    assert len(delta_kernel._blocks(5, 6)) == 5
    for a, b in zip(results[1], results[0]):
        assert rel(a, b) <= 1e-5


def test_chunked_delta_rule_stays_finite_under_steep_decay():
    """Log-decays of -200 per step: exp(-G) would overflow; the kernel only ever exponentiates G_t - G_s <= 0."""
    x = delta_inputs(50, gated=True, with_state=False)
    g = torch.full_like(x["g"], -200.0).requires_grad_(True)
    o, _ = chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"], g, scale=0.25, chunk_size=32)
    o.square().sum().backward()
    assert torch.isfinite(o).all() and torch.isfinite(x["q"].grad).all() and torch.isfinite(g.grad).all()
    ref, _ = fla_reference({**x, "g": g}, 0.25)
    assert rel(o.detach(), ref.detach()) <= 1e-5


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("used", ["all", "final state only", "outputs only"])
@pytest.mark.parametrize("per_block", [2, 4, 64])
def test_written_out_backward_passes_gradcheck(gated, used, per_block, monkeypatch):
    """The kernel's own backward (``_DeltaChunks``: the UT inverse's gradient as two products, the gradient of
    every use of k summed by hand, the log-decays' share of every decayed factor) against finite differences in
    float64 (the kernel itself computes in fp32, so the function is called directly): three chunks of two
    matrices each, in blocks of one chunk, of two and one, or all three; keys not normalised, beta up to 2,
    log-decays in [-1.5, 0], an initial state, and every output used or only some (autograd then passes None
    for the others)."""
    from mixers.deltanet import kernel as delta_kernel
    from mixers.deltanet.kernel import _DeltaChunks

    monkeypatch.setattr(delta_kernel, "MATRICES_PER_BLOCK", per_block)

    gen = torch.Generator().manual_seed(5)
    N, B, H, C, K, V = 3, 1, 2, 4, 3, 5

    def make(*shape, scale=0.5):
        return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).requires_grad_(True)

    q, k, v, S0 = make(N, B, H, C, K), make(N, B, H, C, K), make(N, B, H, C, V), make(B, H, K, V)
    beta = (2 * torch.rand(N, B, H, C, 1, generator=gen, dtype=torch.float64)).requires_grad_(True)
    g = (-1.5 * torch.rand(N, B, H, C, generator=gen, dtype=torch.float64)).requires_grad_(True)

    def kernel(q, k, v, beta, S0, *g):
        o, final = _DeltaChunks.apply(q, k, v, beta, g[0] if g else None, S0)
        return {"all": (o, final), "final state only": (final,), "outputs only": (o,)}[used]

    inputs = (q, k, v, beta, S0) + ((g,) if gated else ())
    assert torch.autograd.gradcheck(kernel, inputs, eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("C", [1, 7, 16, 32, 64])
def test_compiled_unit_lower_inverse_equals_the_triangular_solve(C):
    from mixers.deltanet import kernel_c as delta_kernel_c

    if not delta_kernel_c.usable(torch.zeros(1)):
        pytest.skip("no compiled inverse here")
    a = torch.randn(37, C, C, generator=torch.Generator().manual_seed(C)) * 0.3
    want = torch.linalg.solve_triangular(a, torch.eye(C).expand(37, C, C), upper=False, unitriangular=True)
    got = delta_kernel_c.unit_lower_inverse(a)
    assert (got - want).abs().max() <= 1e-6 * want.abs().max()
    assert (got.triu(1) == 0).all() and (got.diagonal(dim1=-2, dim2=-1) == 1).all()


# ---------------------------------------------------------------- Mamba-1 scan and conv
pytestmark_c = pytest.mark.skipif(not mamba_kernel_c.available(),
                                  reason=f"no compiled scan here: {mamba_kernel_c.unavailable_reason()}")


def scan_inputs(T, batch=2, D=24, N=8, dt=0.05, seed=0):
    """As the Mamba layer makes them: S4D-real A, step sizes around ``dt`` (Mamba's init spans 0.001-0.1)."""
    gen = torch.Generator().manual_seed(seed)
    t = {
        "u": torch.randn(T, batch, D, generator=gen),
        "delta": torch.randn(T, batch, D, generator=gen) * 0.3,
        "bias": torch.full((D,), math.log(math.expm1(dt))) + torch.randn(D, generator=gen) * 0.1,
        "A": -torch.arange(1, N + 1, dtype=torch.float32).repeat(D, 1) * (1 + torch.rand(D, N, generator=gen)),
        "B": torch.randn(T, batch, N, generator=gen),
        "C": torch.randn(T, batch, N, generator=gen),
        "D": torch.randn(D, generator=gen),
        "z": torch.randn(T, batch, D, generator=gen),
        "h0": torch.randn(batch, D, N, generator=gen),
    }
    return {k: v.requires_grad_(True) for k, v in t.items()}


def reference_scan(x):
    """mamba-ssm's selective_scan_ref ([batch, D, T] layout) plus the initial state's response by linearity."""
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref

    def cl(t):
        return t.permute(1, 2, 0)

    y, last = selective_scan_ref(cl(x["u"]), cl(x["delta"]), x["A"], cl(x["B"]), cl(x["C"]), x["D"], z=None,
                                 delta_bias=x["bias"], delta_softplus=True, return_last_state=True)
    dt = F.softplus(cl(x["delta"]) + x["bias"][:, None])
    decay = torch.exp(x["A"][None, :, :, None] * dt.cumsum(-1)[:, :, None, :])  # [batch, D, N, T]
    y = y + torch.einsum("bdnt,bdn,bnt->bdt", decay, x["h0"], cl(x["C"]))
    last = last + decay[..., -1] * x["h0"]
    return (y * F.silu(cl(x["z"]))).permute(2, 0, 1), last


def float64_recurrence(x):
    """The scan step by step in float64: ground truth where fp32 references themselves drift (steep decays)."""
    x = {k: v.double() for k, v in x.items()}
    dt = F.softplus(x["delta"] + x["bias"])
    h, ys = x["h0"], []
    for t in range(dt.shape[0]):
        h = torch.exp(dt[t].unsqueeze(-1) * x["A"]) * h + (dt[t] * x["u"][t]).unsqueeze(-1) * x["B"][t].unsqueeze(-2)
        ys.append((h * x["C"][t].unsqueeze(-2)).sum(-1))
    return (torch.stack(ys) + x["u"] * x["D"]) * F.silu(x["z"]), h


# (T, dt, reference, tolerance): several checkpoint segments; at dt = 3 (log-decays down to -100 per step) fp32
# selective_scan_ref is itself 1e-5 off float64, so both are held to float64 there
SCAN_CASES = [(70, 0.05, reference_scan, 1e-5), (130, 0.5, reference_scan, 1e-5), (33, 3.0, float64_recurrence, 2e-5)]


@pytestmark_c
@pytest.mark.parametrize(("T", "dt", "reference", "tol"), SCAN_CASES)
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_scan_equals_selective_scan_ref(T, dt, reference, tol, threads, monkeypatch):
    """Output, last state and the gradient of every input, one worker thread or two (channel blocks)."""
    mamba_routing.install()
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    x = scan_inputs(T, batch=1 if threads == 2 else 3, dt=dt)
    results = []
    for fn in (lambda: reference(x),
               lambda: mamba_fused.scan(x["u"], x["delta"], x["bias"], x["A"], x["B"], x["C"], x["D"], x["z"], x["h0"],
                                      with_state=True)):
        out, last = fn()
        grads = torch.autograd.grad(out.sin().sum() + last.square().sum(), list(x.values()))
        results.append([out.detach().double(), last.detach().double(), *(g.double() for g in grads)])
    for name, a, b in zip(["out", "last", *x], results[1], results[0]):
        assert rel(a, b) <= tol, name


@pytestmark_c
def test_compiled_scan_reads_z_from_a_wider_tensor():
    """z may be the second half of the input projection's output (rows of 2D floats): same result as a copy."""
    x = scan_inputs(20)
    wide = torch.cat([torch.randn_like(x["z"]), x["z"].detach()], dim=-1)
    args = [x[k].detach() for k in ("u", "delta", "bias", "A", "B", "C", "D")]
    strided, _ = mamba_fused.scan(*args, wide.split(x["z"].shape[-1], dim=-1)[1])
    copied, _ = mamba_fused.scan(*args, x["z"].detach().contiguous())
    assert torch.equal(strided, copied)


@pytestmark_c
@pytest.mark.parametrize("with_history", [False, True])
def test_compiled_conv_equals_conv1d(with_history):
    """The depthwise causal conv + SiLU against F.conv1d: output and the gradients of the input, weight, bias and
    the carried history, with a time-major and a batch-major output."""
    gen = torch.Generator().manual_seed(3)
    T, batch, D, W = 19, 3, 10, 4
    x = torch.randn(T, batch, D, generator=gen, requires_grad=True)
    weight = torch.randn(D, 1, W, generator=gen, requires_grad=True)
    bias = torch.randn(D, generator=gen, requires_grad=True)
    hist = torch.randn(batch, D, W, generator=gen, requires_grad=True) if with_history else None
    leaves = [x, weight, bias] + ([hist] if with_history else [])

    def reference():
        inputs = x.permute(1, 2, 0)
        window = torch.cat([hist, inputs], -1)[..., 1:] if with_history else F.pad(inputs, (W - 1, 0))
        return F.silu(F.conv1d(window, weight, bias, groups=D)).permute(2, 0, 1)

    results = []
    for fn in (reference, lambda: short_conv.ConvSiLU.apply(x, weight, bias, hist),
               lambda: short_conv.ConvSiLU.apply(x, weight, bias, hist, True)):
        y = fn()
        results.append([y.detach(), *torch.autograd.grad((y * y.detach().cos()).sum(), leaves)])
    for mine in results[1:]:  # time-major and batch-major outputs
        for a, b in zip(mine, results[0]):
            assert rel(a, b) <= 1e-5


def test_without_a_compiler_the_torch_scan_takes_over(without_a_compiler):
    """No C compiler (CC points nowhere, an empty kernel cache): the mamba mixer's fused kernel still runs, in
    PyTorch, and equals the reference kernel."""
    code = (
        "import torch\n"
        "from mixers.mamba import kernel_c as mamba_kernel_c\n"
        "assert not mamba_kernel_c.available(), 'built without a compiler?'\n"
        "from harness.registry import MIXERS\n"
        "e = MIXERS.get('mamba'); layer = e.cls(e.make_config({}), 16, 0, 1)\n"
        "x = torch.randn(2, 9, 16, requires_grad=True)\n"
        "outs = []\n"
        "for k in ('reference', 'fused'):\n"
        "    layer.set_kernel(k); x.grad = None\n"
        "    y = layer(x)[0]; y.square().sum().backward(); outs.append((y.detach(), x.grad.clone()))\n"
        "for a, b in zip(*outs):\n"
        "    assert ((a - b).abs().max() / b.abs().max()).item() < 1e-5\n"
        "print(mamba_kernel_c.unavailable_reason())\n"
    )
    assert "no C compiler" in without_a_compiler(code).stdout


# ---------------------------------------------------------------- Mamba-2 SSD
@pytest.mark.parametrize(("T", "groups", "chunk", "with_state"), [(130, 2, 32, True), (64, 1, 64, False), (33, 1, 16, True)])
def test_chunked_ssd_equals_ssd_minimal_discrete(T, groups, chunk, with_state):
    """Outputs, the final state and every gradient equal mamba-ssm's ssd_minimal_discrete (which takes per-head B
    and C and a length that is a multiple of its block) to 1e-5."""
    mamba_routing.install()
    from mamba_ssm.modules.ssd_minimal import ssd_minimal_discrete

    from mixers.mamba.kernel import ssd_chunked

    gen = torch.Generator().manual_seed(5)
    b, h, p, n = 2, 4, 8, 6
    X = torch.randn(b, T, h, p, generator=gen, requires_grad=True)
    A = (-torch.rand(b, T, h, generator=gen) * 2).requires_grad_(True)
    B = torch.randn(b, T, groups, n, generator=gen, requires_grad=True)
    C = torch.randn(b, T, groups, n, generator=gen, requires_grad=True)
    h0 = torch.randn(b, h, p, n, generator=gen, requires_grad=True) if with_state else None
    leaves = [X, A, B, C] + ([h0] if with_state else [])

    def reference():
        pad = (-T) % 64
        Bh, Ch = (t.repeat_interleave(h // groups, dim=2) for t in (B, C))
        Xp, Bp, Cp = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (X, Bh, Ch))
        y, final = ssd_minimal_discrete(Xp, F.pad(A, (0, 0, 0, pad)), Bp, Cp, 64,
                                        initial_states=h0[:, None] if with_state else None)
        return y[:, :T], final

    results = []
    for fn in (reference, lambda: ssd_chunked(X, A, B, C, h0, chunk)):
        y, final = fn()
        results.append([y.detach(), final.detach(), *torch.autograd.grad(y.sin().sum() + final.square().sum(), leaves)])
    for a, ref in zip(results[1], results[0]):
        assert rel(a, ref) <= 1e-5
