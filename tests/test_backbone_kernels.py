"""The backbone's compiled RMSNorm and SwiGLU activation (harness.model.backbone_kernels) against float64 references
written out here, on both paths (compiled C loops and their torch fallback)."""

import pytest
import torch
import torch.nn.functional as F

from harness.model import backbone_kernels as bk

PATHS = [True, False]


def rms_reference(x, w, eps):
    x, w = x.double(), w.double()
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("shape", [(1, 1, 4), (3, 7, 37), (2, 64, 128), (5, 300)])
def test_rms_norm_and_its_gradients_equal_the_definition(shape, compiled):
    gen = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(*shape, generator=gen) * 3).requires_grad_(True)
    w = (1 + 0.3 * torch.randn(shape[-1], generator=gen)).requires_grad_(True)
    dy = torch.randn(*shape, generator=gen)
    y = bk.rms_norm(x, w, 1e-5, compiled=compiled)
    gx, gw = torch.autograd.grad(y, [x, w], dy)
    x64, w64 = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    ref = rms_reference(x64, w64, 1e-5)
    rx, rw = torch.autograd.grad(ref, [x64, w64], dy.double())
    assert y.dtype == torch.float32 and y.shape == x.shape
    for got, want in [(y, ref), (gx, rx), (gw, rw)]:
        assert (got.double() - want).abs().max() <= 2e-6 * want.abs().max()


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("shape", [(1, 2), (4, 9, 2 * 37), (2, 128, 672)])
def test_silu_mul_and_its_gradient_equal_the_definition(shape, compiled):
    """Gates from -100 to 100, past the exponential's clamp on the negative side and where a naive
    ``1 / (1 + exp(-a))`` overflows on the other."""
    gen = torch.Generator().manual_seed(sum(shape))
    ab = torch.randn(*shape, generator=gen) * 4
    ab.view(-1)[:4] = torch.tensor([-100.0, 100.0, -88.5, 0.0])[: ab.numel()]
    ab.requires_grad_(True)
    dh = torch.randn(*shape[:-1], shape[-1] // 2, generator=gen)
    h = bk.silu_mul(*ab.chunk(2, dim=-1), compiled=compiled)
    (g,) = torch.autograd.grad(h, [ab], dh)
    ab64 = ab.detach().double().requires_grad_(True)
    a, b = ab64.chunk(2, dim=-1)
    ref = a * torch.sigmoid(a) * b
    (rg,) = torch.autograd.grad(ref, [ab64], dh.double())
    for got, want in [(h, ref), (g, rg)]:
        assert (got.double() - want).abs().max() <= 2e-6 * want.abs().max().clamp(min=1e-6)


@pytest.mark.parametrize("compiled", PATHS)
def test_a_nan_reaches_only_its_own_row_and_position(compiled):
    x = torch.randn(4, 16)
    x[2, 5] = float("nan")
    y = bk.rms_norm(x, torch.ones(16), 1e-5, compiled=compiled)
    assert y[2].isnan().all() and not y[[0, 1, 3]].isnan().any()
    ab = torch.randn(4, 16)
    ab[1, 3], ab[3, 8 + 6] = float("nan"), float("nan")  # a gate, an up value
    h = bk.silu_mul(*ab.chunk(2, dim=-1), compiled=compiled)
    assert h.isnan().nonzero().tolist() == [[1, 3], [3, 6]]


def test_bad_inputs_are_errors():
    with pytest.raises(ValueError, match="weight of shape"):
        bk.rms_norm(torch.randn(3, 4), torch.ones(8), 1e-5)
    with pytest.raises(ValueError, match="of one shape"):
        bk.silu_mul(torch.randn(3, 5), torch.randn(3, 4))
    with pytest.raises(ValueError, match="compiled backbone layers"):
        bk.rms_norm(torch.randn(3, 4, dtype=torch.float64), torch.ones(4, dtype=torch.float64), 1e-5, compiled=True)


def test_the_swiglu_block_equals_its_two_projection_definition():
    """The backbone's SwiGLU (the fused activation) against
    ``down(silu(gate(x)) * up(x))`` with the same weights, gradients included."""
    from harness.model.backbone import SwiGLU

    torch.manual_seed(0)
    ffn = SwiGLU(32, 48, 0.0)
    x = torch.randn(3, 10, 32, requires_grad=True)
    y = ffn(x)
    got = torch.autograd.grad(y.square().sum(), [x, *ffn.parameters()])
    ref = ffn.down(F.silu(ffn.gate(x)) * ffn.up(x))
    want = torch.autograd.grad(ref.square().sum(), [x, *ffn.parameters()])
    assert (y - ref).abs().max() <= 1e-6 * ref.abs().max()
    for a, b in zip(got, want):
        assert (a - b).abs().max() <= 1e-5 * b.abs().max()


def test_without_a_compiler_the_torch_paths_take_over(without_a_compiler):
    """No C compiler: the norm, the activation and the head loss run as torch operations and still equal their
    definitions."""
    code = (
        "import torch, torch.nn.functional as F\n"
        "from harness.model import backbone_kernels as bk, lm_head\n"
        "assert bk._LIBRARY.get() is None and lm_head._LIBRARY.get() is None\n"
        "x = torch.randn(6, 20, requires_grad=True); w = torch.rand(20) + 0.5\n"
        "ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w\n"
        "assert (bk.rms_norm(x, w, 1e-5) - ref).abs().max() < 1e-5\n"
        "a, b = x.chunk(2, -1)\n"
        "assert (bk.silu_mul(a, b) - a * torch.sigmoid(a) * b).abs().max() < 1e-5\n"
        "wt = torch.randn(30, 20, requires_grad=True); t = torch.randint(0, 30, (6,))\n"
        "loss = lm_head.cross_entropy(x, wt, t, -100)\n"
        "assert abs(loss.item() - F.cross_entropy(x @ wt.T, t).item()) < 1e-5\n"
        "print(bk._LIBRARY.unavailable_reason())\n"
    )
    assert "no C compiler" in without_a_compiler(code).stdout
