"""ProtoT's kernels (chunked CPU kernel, GLA mapping) against the recurrent definition in float64.

The reference is ``prefix_mean_recurrent`` (the definition, one position at a time) run in float64; every
comparison is max |a - b| / max |b| per tensor, outputs <= 1e-5 and gradients <= 1e-4 (fp32 kernels).
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from harness.mixer import KernelBenchmark
from mixers.common import parity
from mixers.protot import kernel as protot_kernel
from mixers.protot import kernel_c
from mixers.protot import layer as protot_layer
from mixers.protot.layer import ProtoT, ProtoTConfig
from mixers.protot.kernel import chunked_flops, exp_budget, is_gentle, prefix_mean_chunked
from mixers.common.ops.gla import gla_recurrent
from mixers.protot.routing import decayed_cumsum, gla_inputs, prefix_mean_gla
from mixers.protot.reference import prefix_mean_recurrent

FLOOR = 1e-6
BETAS = {
    "gentle": [0.9] * 4,
    "spread": [0.05, 0.3, 0.7, 0.99],
    "steep": [1e-9, 1e-4, 0.3, 0.9],
    "near-one": [0.9, 0.99, 1 - 1e-6, 0.999999],
}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (0 when both are exactly zero)."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp(min=1e-30)).item()


def make_inputs(B: int, T: int, R: int, m: int, betas, seed: int = 0, write_scale: float = 0.3):
    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(B, T, R, generator=gen).softmax(-1) * write_scale
    v = torch.randn(B, T, m, generator=gen)
    rho = torch.rand(B, T, R, generator=gen).softmax(-1)
    S0, M0 = torch.randn(B, R, m, generator=gen), torch.rand(B, R, generator=gen)
    return w, v, rho, torch.log(torch.tensor(betas, dtype=torch.float64)).float(), S0, M0


def outputs_and_grads(kernel, inputs, dtype=torch.float32, **kwargs):
    """Kernel outputs (o, S_T, M_T) and the gradients of a fixed random loss of all three w.r.t. every input."""
    leaves = [t.to(dtype).clone().requires_grad_(True) for t in inputs]
    outs = kernel(*leaves, FLOOR, **kwargs)
    gen = torch.Generator().manual_seed(99)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=torch.float64).to(dtype)).sum() for o in outs)
    loss.backward()
    return [o.detach() for o in outs], [t.grad for t in leaves]


def assert_matches_reference(kernel, inputs, decay_grad_tol: float = 1e-4, **kwargs):
    ref_out, ref_grad = outputs_and_grads(prefix_mean_recurrent, inputs, torch.float64)
    out, grad = outputs_and_grads(kernel, inputs, **kwargs)
    for name, a, b in zip(("o", "S_T", "M_T"), out, ref_out):
        assert torch.isfinite(a).all() and rel(a, b) <= 1e-5, (name, rel(a, b))
    for name, a, b in zip(("w", "v", "rho", "log_beta", "S0", "M0"), grad, ref_grad):
        tol = decay_grad_tol if name == "log_beta" else 1e-4
        assert torch.isfinite(a).all() and rel(a, b) <= tol, (name, rel(a, b))


@pytest.fixture(params=["compiled", "pytorch"])
def chunked(request):
    """The chunked kernel both ways it runs its recurrences in fp32 on a CPU: compiled C loops
    (mixers/protot/kernel_c.py) and, where no compiler is found, PyTorch."""
    if request.param == "compiled" and not kernel_c.usable(torch.zeros(1)):
        pytest.skip(f"the compiled recurrences do not build here: {kernel_c.unavailable_reason()}")
    return functools.partial(prefix_mean_chunked, compiled=request.param == "compiled")


@pytest.mark.parametrize("T", [1, 7, 63, 64, 65, 256])
@pytest.mark.parametrize("betas", BETAS.values(), ids=BETAS.keys())
def test_chunked_equals_the_definition(T, betas, chunked):
    assert_matches_reference(chunked, make_inputs(2, T, 4, 5, betas, seed=T))


@pytest.mark.parametrize("betas", [BETAS["spread"], BETAS["steep"]], ids=["spread", "steep"])
def test_chunked_equals_the_definition_at_2048_positions(betas, chunked):
    assert_matches_reference(chunked, make_inputs(1, 2048, 4, 3, betas, seed=1))


@pytest.mark.parametrize("chunk", [16, 64])
def test_chunked_at_the_layers_shape_and_other_chunks(chunk, chunked):
    """32 channels (the budget depends on R) and a chunk that is not the default."""
    betas = torch.linspace(0.05, 0.99, 32).tolist()
    assert_matches_reference(chunked, make_inputs(1, 150, 32, 8, betas, seed=3), chunk=chunk)


def test_chunked_continues_a_prefill_from_its_state(chunked):
    """Two calls, the second from the first one's final state, equal one call (outputs, states and gradients)."""
    w, v, rho, lb, S0, M0 = make_inputs(2, 130, 4, 5, BETAS["spread"], seed=5)

    def two_calls(w, v, rho, lb, S0, M0, floor):
        o1, S1, M1 = chunked(w[:, :57], v[:, :57], rho[:, :57], lb, S0, M0, floor)
        o2, S2, M2 = chunked(w[:, 57:], v[:, 57:], rho[:, 57:], lb, S1, M1, floor)
        return torch.cat([o1, o2], 1), S2, M2

    assert_matches_reference(two_calls, (w, v, rho, lb, S0, M0))


def test_without_a_compiler_the_pytorch_recurrences_take_over(without_a_compiler):
    """No C compiler (CC points nowhere, an empty kernel cache): the layer's chunked kernel still runs, with its
    recurrences in PyTorch, and equals the definition."""
    code = (
        "import torch\n"
        "from mixers.protot import kernel_c\n"
        "from mixers.protot.layer import ProtoT, ProtoTConfig\n"
        "assert not kernel_c.usable(torch.zeros(1)), 'built without a compiler?'\n"
        "layer = ProtoT(ProtoTConfig(n_prototypes=8), 32, layer_idx=2, n_layers=4)\n"
        "x = torch.randn(2, 70, 32, requires_grad=True)\n"
        "outs = []\n"
        "for k in ('recurrent', 'chunked'):\n"
        "    layer.set_kernel(k); x.grad = None\n"
        "    y = layer(x)[0]; y.square().sum().backward(); outs.append((y.detach(), x.grad.clone()))\n"
        "for a, b in zip(*outs):\n"
        "    assert ((a - b).abs().max() / b.abs().max()).item() < 1e-5\n"
        "print(kernel_c.unavailable_reason())\n"
    )
    assert "no C compiler" in without_a_compiler(code).stdout


@pytest.mark.parametrize("bad", ["short rho", "wide decay", "one initial mass", "2-d values"])
def test_mismatched_shapes_are_refused_on_both_paths(bad, chunked):
    """The compiled loops index every tensor by w's sizes: a shorter rho, a longer decay or a broadcast initial
    mass would be read past its end, so every mismatch is an error before any work, on both paths."""
    w, v, rho, lb, S0, M0 = make_inputs(2, 70, 4, 3, BETAS["gentle"])
    inputs = {"short rho": (w, v, rho[:, :10], lb, S0, M0),
              "wide decay": (w, v, rho, torch.cat([lb, lb]), S0, M0),
              "one initial mass": (w, v, rho, lb, S0, M0[:1]),
              "2-d values": (w, v[0], rho, lb, S0, M0)}[bad]
    with pytest.raises(ValueError, match="prefix_mean_chunked"):
        chunked(*inputs, FLOOR)


def test_non_finite_inputs_propagate_without_a_crash(chunked):
    """A NaN write at position 40 (a broken mixer's projection) reaches every later output and the final state
    as NaN, as in the definition: nothing crashes and nothing is silently finite. The compiled loops are exactly
    causal here too; the PyTorch path's in-chunk products (0 * NaN) also spread it back to its chunk's start, 32,
    never further."""
    w, v, rho, lb, S0, M0 = make_inputs(1, 130, 4, 3, BETAS["spread"])
    w[0, 40, 1] = float("nan")
    o, S, M = chunked(w, v, rho, lb, S0, M0, FLOOR)
    ref = prefix_mean_recurrent(w, v, rho, lb, S0, M0, FLOOR)
    assert o[0, 41:].isnan().any(-1).all() and not o[0, :32].isnan().any()
    assert M.isnan().any() and S.isnan().any()
    if chunked.keywords["compiled"]:
        assert torch.equal(o.isnan(), ref[0].isnan())


def test_compiled_recurrences_refuse_what_they_cannot_run():
    """Asking for the compiled loops on float64 tensors is an error, not a silent PyTorch run."""
    inputs = [t.double() for t in make_inputs(1, 10, 4, 3, BETAS["gentle"])]
    with pytest.raises(RuntimeError, match="compiled recurrences"):
        prefix_mean_chunked(*inputs, FLOOR, compiled=True)


def long_memory_inputs():
    """What a ProtoT layer with decays near 0.999 feeds its kernel over 2048 positions (captured)."""
    torch.manual_seed(2048)
    layer = ProtoT(ProtoTConfig(n_prototypes=8), 32, layer_idx=2, n_layers=4)
    with torch.no_grad():
        layer.beta_logit.copy_(torch.logit(torch.full((8,), 0.999)) + torch.randn(8) * 0.01)
    captured = []
    real = protot_layer.KERNELS["recurrent"]
    protot_layer.KERNELS["recurrent"] = lambda *args, **kw: captured.append(args[:6]) or real(*args, **kw)
    try:
        layer.set_kernel("recurrent")
        with torch.no_grad():
            layer(torch.randn(2, 2048, 32))
    finally:
        protot_layer.KERNELS["recurrent"] = real
    return tuple(t.detach() for t in captured[0])


def test_long_memory_keeps_the_chunked_products_accuracy(chunked):
    """Decays near 0.999 over 2048 positions: a sequential fp32 sum over ~1000 effective positions loses digits
    (the fp32 definition is off by ~1e-5 in the final masses and the decay's gradient here); the chunked products
    and the compiled loops (which carry the masses in double) stay within 4e-6."""
    inputs = long_memory_inputs()
    ref_out, ref_grad = outputs_and_grads(prefix_mean_recurrent, inputs, torch.float64)
    fp32_out, fp32_grad = outputs_and_grads(prefix_mean_recurrent, inputs)
    assert rel(fp32_out[2], ref_out[2]) > 4e-6 or rel(fp32_grad[3], ref_grad[3]) > 4e-6  # the case discriminates
    out, grad = outputs_and_grads(chunked, inputs)
    for name, a, b in zip(("o", "S_T", "M_T", "w", "v", "rho", "log_beta", "S0", "M0"), out + grad, ref_out + ref_grad):
        assert rel(a, b) <= 4e-6, (name, rel(a, b))


@pytest.mark.parametrize("used", ["output", "state"])
def test_chunked_with_only_some_outputs_used(used, chunked):
    """Backward with the output's gradient only (a training step) or the final state's only (a carried state):
    the other gradients arrive as None."""
    inputs = make_inputs(2, 100, 4, 5, BETAS["spread"], seed=11)
    ref_grads = outputs_and_grads(lambda *a, **k: kernel_of(prefix_mean_recurrent, used, *a, **k), inputs,
                                  torch.float64)[1]
    grads = outputs_and_grads(lambda *a, **k: kernel_of(chunked, used, *a, **k), inputs)[1]
    for name, a, b in zip(("w", "v", "rho", "log_beta", "S0", "M0"), grads, ref_grads):
        if b is None:  # rho does not reach the final state
            assert a is None or not a.any(), name
        else:
            assert rel(a, b) <= 1e-4, (name, rel(a, b))


def kernel_of(kernel, used, *args, **kwargs):
    """``kernel`` with only its output (``used="output"``) or only its final state differentiable."""
    o, S, M = kernel(*args, **kwargs)
    return (o, S.detach(), M.detach()) if used == "output" else (o.detach(), S, M)


def test_floored_masses_and_masked_channels(chunked):
    """Writes far below the mass floor for a stretch (reads divide by the floor there), a channel nobody writes
    (a write mask: pi = 0) and one nobody reads (a read mask: rho = 0); masks reach the kernel as zeros."""
    w, v, rho, lb, S0, M0 = make_inputs(2, 160, 4, 5, BETAS["spread"], seed=7)
    w[:, :90, 1] = 1e-9  # the mass of channel 1 stays under the floor for a while
    w[:, :, 2] = 0.0  # write-masked
    rho[:, :, 3] = 0.0  # read-masked
    rho = rho / rho.sum(-1, keepdim=True)
    zero_state = (torch.zeros_like(S0), torch.zeros_like(M0))
    for kernel in (chunked, prefix_mean_gla):
        assert_matches_reference(kernel, (w, v, rho, lb, *zero_state))


@pytest.mark.parametrize("kernel", ["chunked", "gla"])
@pytest.mark.parametrize("layer_idx", [0, 2])
def test_layer_kernels_equal_the_reference_with_interventions(kernel, layer_idx):
    torch.manual_seed(layer_idx)
    layer = ProtoT(ProtoTConfig(n_prototypes=8), 32, layer_idx, n_layers=4)
    with torch.no_grad():
        layer.beta_logit.copy_(torch.logit(torch.linspace(0.02, 0.995, 8)))
    x = torch.randn(2, 70, 32)

    def run(k):
        layer.set_kernel(k)
        layer.zero_grad(set_to_none=True)
        xk = x.clone().requires_grad_(True)
        y, _ = layer(xk)
        (y * torch.linspace(-1, 1, 32)).sum().backward()
        return [y.detach(), xk.grad] + [p.grad for p in layer.parameters() if p.grad is not None]

    for mode, ids in (("write-mask", [1, 5]), ("read-mask", [0])):
        with layer.intervene(ids, mode):
            want, got = run("recurrent"), run(kernel)
        assert rel(got[0], want[0]) <= 1e-5
        assert all(rel(a, b) <= 1e-4 for a, b in zip(got[1:], want[1:]))


def test_every_power_of_beta_stays_within_the_budget(monkeypatch, chunked):
    """No table of powers the chunked kernel builds exceeds e^budget (a power > 1 comes from a negative
    exponent), for decays from 1e-9 to 1 - 1e-6: nothing is ever divided by a power that can underflow."""
    R = 4
    largest = []
    real = protot_kernel._powers

    def recording(exponents, log_beta):
        table = real(exponents, log_beta)
        largest.append(table.max().item())
        return table

    monkeypatch.setattr(protot_kernel, "_powers", recording)
    for betas in BETAS.values():
        assert_matches_reference(chunked, make_inputs(1, 200, R, 3, betas))
    assert largest and max(largest) <= torch.exp(torch.tensor(exp_budget(torch.float32, FLOOR, 2, R))).item()


@pytest.mark.parametrize("C", [16, 64])
def test_factorised_products_stay_finite_at_the_edge_of_their_budget(C, chunked):
    """Decays just gentle enough for the factorised products, read weights near their maximum (1 / floor), and
    just too steep (the split path): both exact. With reads of 1e4 on every channel the decay's gradient is a
    sum of pair terms ~3000x larger than itself (the fp32 definition is off by 1e-5 there), so it gets 1e-3."""
    B, T, R, m = 1, 3 * C, 4, 3
    budget = exp_budget(torch.float32, FLOOR, C, R)
    for margin, gentle in ((0.999, True), (1.01, False)):
        lb = torch.full((R,), -margin * budget / (C // 2))
        assert is_gentle(float(-lb.min()), C, torch.float32, FLOOR, R) == gentle
        w = torch.zeros(B, T, R)
        w[:, ::5] = 1e-3  # sparse, tiny writes keep the mass near the floor, so read weights approach 1e6
        v, rho = torch.randn(B, T, m), torch.full((B, T, R), 1.0 / R)
        inputs = (w, v, rho, lb, torch.zeros(B, R, m), torch.zeros(B, R))
        assert_matches_reference(chunked, inputs, decay_grad_tol=1e-3, chunk=C)


def test_decayed_cumsum_over_three_levels():
    """The masses' blocked recursion (T = 300 in blocks of 4: three levels and a padded tail) against a loop."""
    x = torch.rand(2, 300, 4, dtype=torch.float64)
    lb = torch.log(torch.tensor([1e-9, 0.3, 0.9, 1 - 1e-6], dtype=torch.float64))
    want = torch.zeros_like(x)
    acc = torch.zeros(2, 4, dtype=torch.float64)
    for t in range(300):
        acc = lb.exp() * acc + x[:, t]
        want[:, t] = acc
    assert rel(decayed_cumsum(x, lb, chunk=4), want) <= 1e-12


def test_gla_equals_the_definition_through_fla_reference():
    """ProtoT mapped to GLA inputs (shifted keys and values, queries divided by floored masses, g_0 = 0), run
    through GLA's definition, equals ProtoT's definition, with state in and out."""
    for T in (1, 65):
        for betas in (BETAS["spread"], BETAS["steep"]):
            assert_matches_reference(prefix_mean_gla, make_inputs(2, T, 4, 5, betas, seed=T))


def test_gla_recurrence_is_flas_reference():
    """The CPU stand-in for fla's Triton GLA computes what fla's own pure-torch reference computes."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fla.ops.gla.naive import naive_recurrent_gla

    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 9, 1, 4, generator=gen), torch.rand(2, 9, 1, 4, generator=gen)
    v, h0 = torch.randn(2, 9, 1, 3, generator=gen), torch.randn(2, 1, 4, 3, generator=gen)
    g = -torch.rand(2, 9, 1, 4, generator=gen) * 3
    want = naive_recurrent_gla(q * 2.0, k, v, g, initial_state=h0, output_final_state=True)  # it scales q by K^-0.5
    got = gla_recurrent(q, k, v, g, h0)
    assert all(rel(a, b) <= 1e-6 for a, b in zip(got, want))


def test_gla_inputs_follow_the_mapping():
    """The mapping's pieces, checked one by one against the definition's masses."""
    w, v, rho, lb, S0, M0 = make_inputs(1, 6, 4, 3, BETAS["spread"])
    q, k, sv, g, h0, final_mass = gla_inputs(w, v, rho, lb, S0, M0, FLOOR)
    M, masses = M0.clone(), []
    for t in range(6):
        masses.append(M.clone())
        M = lb.exp() * M + w[:, t]
    assert torch.allclose(q[:, :, 0], rho / torch.stack(masses, 1).clamp(min=FLOOR), rtol=1e-6)
    assert torch.equal(k[:, 0, 0], torch.zeros(1, 4)) and torch.equal(k[:, 1:, 0], w[:, :-1])
    assert torch.equal(sv[:, 1:, 0], v[:, :-1]) and torch.equal(g[:, 0, 0], torch.zeros(1, 4))
    assert torch.equal(g[0, 1:, 0], lb.expand(5, 4)) and torch.equal(h0[:, 0], S0)
    assert torch.allclose(final_mass, M, rtol=1e-6)


def test_flop_model_counts_the_kernels_matmuls(chunked):
    """``chunked_flops`` against torch's own FLOP counter on one forward + backward (gentle decays). The PyTorch
    recurrences also run the masses inside a chunk as two C x C products, which the model leaves out."""
    B, T, R, m = 2, 256, 8, 16
    inputs = make_inputs(B, T, R, m, [0.9] * R)

    def in_place_baddbmm(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs):  # torch counts baddbmm only
        return 2 * a_shape[0] * a_shape[1] * a_shape[2] * b_shape[2]

    with FlopCounterMode(display=False, custom_mapping={torch.ops.aten.baddbmm_: in_place_baddbmm}) as counter:
        outputs_and_grads(chunked, inputs, chunk=64)
    counts = counter.get_flop_counts()["Global"]
    mass_products = 0 if chunked.keywords["compiled"] else 2 * (2 * B * T * 64 * R)
    assert counts[torch.ops.aten.bmm] + counts[torch.ops.aten.baddbmm_] == (
        chunked_flops(B, T, R, m, 64, backward=True) + mass_products)


def test_kernel_benchmark_hook():
    layer = ProtoT(ProtoTConfig(), 64, layer_idx=2, n_layers=4)
    layer.set_kernel(layer.default_kernel(torch.device("cpu")))
    bench = layer.kernel_benchmark(2, 100, torch.device("cpu"))
    assert isinstance(bench, KernelBenchmark) and "chunked" in bench.label
    assert bench.flops == chunked_flops(2, 100, 32, 32, 64, backward=True)
    bench.run()
    bench.run()  # repeatable: gradients are reset between runs


def test_default_kernels_per_device():
    layer = ProtoT(ProtoTConfig(), 16, 2, 4)
    assert layer.default_kernel(torch.device("cpu")) == "chunked"
    assert layer.kernels[0] == "recurrent" and "gla" in layer.kernels


def test_parity_machinery_on_cpu():
    for mode in parity.MODES:
        result = parity.compare("protot", mode, device="cpu", seq_len=40)
        assert result.passed and result.kernel == "chunked", result


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the Triton GLA kernel cannot be compared here")
@pytest.mark.parametrize("mode", parity.MODES)
def test_cuda_gla_matches_cpu_reference(mode):
    result = parity.compare("protot", mode)
    assert result.kernel == "gla" and result.passed, result
