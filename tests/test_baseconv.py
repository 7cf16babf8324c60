"""BaseConv (mixers/baseconv): both long-convolution kernels against a plain loop over positions and taps, the
layer against the same loop written out, decode and prefill against one forward with a filter shorter than the
input (the history stops growing), and the conformance gate at preset tiny."""

from __future__ import annotations

import pytest
import torch

from harness.mixer import state_floats
from harness.model.conformance import GateConfig, run_checks
from harness.registry import MIXERS
from mixers.baseconv import kernel as baseconv_kernel, reference


def loop_conv(s: torch.Tensor, h: torch.Tensor, start: int) -> torch.Tensor:
    """``z_t = sum_{j < min(t + 1, L)} h[:, j] s_{t - j}`` for t >= start, one position and one tap at a time."""
    out = []
    for t in range(start, s.shape[1]):
        z = torch.zeros(s.shape[0], s.shape[2], dtype=s.dtype)
        for j in range(min(t + 1, h.shape[1])):
            z = z + h[:, j] * s[:, t - j]
        out.append(z)
    return torch.stack(out, 1)


def make(d_model: int = 8, **cfg):
    entry = MIXERS.get("baseconv")
    return entry.cls(entry.make_config(cfg), d_model, 0, 2)


@pytest.mark.parametrize("kernel", [reference.causal_long_conv, baseconv_kernel.causal_long_conv])
@pytest.mark.parametrize("N, L, start", [(1, 4, 0), (23, 7, 0), (23, 40, 0), (30, 9, 11)])
def test_kernels_equal_a_plain_loop_with_gradients(kernel, N, L, start):
    """Filters longer and shorter than the input, a history of ``start`` positions; outputs and both gradients."""
    gen = torch.Generator().manual_seed(N + L)
    s = torch.randn(2, N, 5, generator=gen, dtype=torch.float64).requires_grad_(True)
    h = torch.randn(5, L, generator=gen, dtype=torch.float64).requires_grad_(True)
    want = loop_conv(s, h, start)
    got = kernel(s, h, start)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    w = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    g_want = torch.autograd.grad((want * w).sum(), (s, h))
    g_got = torch.autograd.grad((got * w).sum(), (s, h))
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_the_layer_is_its_formula_and_decode_and_prefill_equal_one_forward():
    """y = W_o((W_g u + b) * (long(short(W_v u)) + short(W_v u))) by hand; then step by step and cut in two,
    with filter_len 5 < T so the history is capped, and the state counted against state_size on both sides of
    the cap."""
    torch.manual_seed(0)
    mixer = make(filter_len=5, short_conv=3).double()
    torch.nn.init.normal_(mixer.o_proj.weight)
    x = torch.randn(2, 12, 8, dtype=torch.float64)
    v = mixer.value(x)
    w, b = mixer.short.weight[:, 0], mixer.short.bias
    s = torch.stack([b + sum(w[:, 2 - j] * v[:, t - j] for j in range(min(t + 1, 3))) for t in range(12)], 1)
    want = mixer.o_proj(mixer.gate(x) * (loop_conv(s, mixer.filter, 0) + s))
    for kernel in ("direct", "fft"):
        mixer.set_kernel(kernel)
        torch.testing.assert_close(mixer(x)[0], want, rtol=1e-10, atol=1e-12)
        state, steps = mixer.init_state(2, x.device, x.dtype), []
        for t in range(12):
            y, state = mixer.step(x[:, t], state)
            steps.append(y)
            assert state_floats(state) == 2 * mixer.state_size(t + 1) == 2 * 8 * (min(t + 1, 2) + min(t + 1, 4))
        torch.testing.assert_close(torch.stack(steps, 1), want, rtol=1e-10, atol=1e-12)
        for cut in (1, 2, 7):
            head, state = mixer(x[:, :cut], mixer.init_state(2, x.device, x.dtype))
            tail, state = mixer(x[:, cut:], state)
            torch.testing.assert_close(torch.cat([head, tail], 1), want, rtol=1e-10, atol=1e-12)
            assert state_floats(state) == 2 * mixer.state_size(12)


def test_the_gate_passes_it():
    """At preset tiny with a 64-tap filter, so that decode, prefill and the state count run past the filter."""
    report = run_checks("baseconv", mixer_config={"filter_len": 64}, config=GateConfig(lengths=(1, 13, 65, 129)))
    assert report.passed, report.render()
    assert {r.name for r in report.results if r.passed} >= {"decode", "prefill", "kernels", "state_size"}
