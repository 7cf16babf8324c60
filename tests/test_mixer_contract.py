"""One contract test over every built-in mixer (docs/ARCHITECTURE.md "Tests"): the families' own test files keep
only what is particular to them (kernels against their package's reference op, routing, initialisation).

* The conformance gate's thorough default at preset tiny, for every built-in discovered in the registry (a new
  family is covered the day it registers). The gate checks causality, decode and prefill with the default kernel,
  every kernel against the reference, gradients and the state count.
* Every kernel against the reference (the first kernel), outputs and the gradients of the input and of every
  parameter, over several chunks and a length no chunk divides (75), for the config variants (the gate does this
  for each default config).
* Continuation with every kernel, which the gate does not run: a prefill from a non-zero state and decode steps
  equal one forward, in inference (no gradients: some layers take a fused recurrent op for short calls) and in
  training (gradients on: the chunked op with a state in and out), for each built-in's default config and the
  config variants that change which code runs (``VARIANTS``).
* On a CUDA device: each package's CUDA kernels against the CPU reference (``mixers.common.parity``, what
  benchmarks/gpu_parity.py reports), in every parity mode.
"""

from __future__ import annotations

import pytest
import torch
from layer_checks import check_parity, rel

from harness.model.conformance import run_checks
from harness.registry import MIXERS
from mixers.common import parity

ALL_CHECKS = {
    "contract", "determinism", "causality", "decode", "prefill", "kernels", "batch_independence",
    "batch_size_invariance", "gradients", "state_size", "interventions", "context_free", "stack",
}
BUILT_IN = sorted(name for name in MIXERS.names() if MIXERS.get(name).source.startswith("mixers."))

#: configs whose code path differs from the default's: another op, gate, convolution or head layout
VARIANTS: list[tuple[str, dict]] = [
    ("deltanet", {"use_gate": True, "allow_neg_eigval": True}),
    ("deltanet", {"use_short_conv": False}),
    ("gated-deltanet", {"allow_neg_eigval": True, "use_gate": False}),
    ("gated-deltaproduct", {"allow_neg_eigval": False, "use_forget_gate": False}),
    ("gated-deltaproduct", {"num_householder": 3, "use_output_gate": False}),
    ("gated-deltaproduct", {"num_householder": 1, "use_short_conv": False}),
    ("gla", {"use_short_conv": True, "use_output_gate": False}),
    ("retnet", {"use_short_conv": True, "expand_v": 1.0}),
    ("mamba", {"allow_neg_eigval": True}),
    ("mamba2", {"headdim": 16, "ngroups": 2}),
    ("rwkv7", {"head_dim": 16}),
    ("baseconv", {"filter_len": 5}),
]

# fla warns whenever use_short_conv=False, which some variants ask for on purpose
pytestmark = pytest.mark.filterwarnings("ignore:ShortConvolution is crucial")


def build(name: str, cfg: dict, d_model: int = 64) -> torch.nn.Module:
    """The layer as the second of two (fla layers differ at index 0: RWKV-7 has no value residual there)."""
    entry = MIXERS.get(name)
    return entry.cls(entry.make_config(cfg), d_model, 1, 2)


def continuation_errors(layer: torch.nn.Module, x: torch.Tensor, cuts: tuple[int, int]) -> dict[str, float]:
    """For every kernel, in inference and in training: the relative error of a prefill continued from the state
    after ``x[:, :cuts[0]]`` and of decode steps from ``cuts[1]`` on, against one forward over ``x``."""
    first, second = cuts
    errors: dict[str, float] = {}
    for kernel in layer.kernels:
        layer.set_kernel(kernel)
        for training in (False, True):
            layer.train(training)
            with torch.set_grad_enabled(training):
                full, _ = layer(x)
                _, state = layer(x[:, :first], layer.init_state(x.shape[0], x.device, x.dtype))
                middle, state = layer(x[:, first:second], state)  # a continuation: the state is not zero here
                steps = []
                with torch.no_grad():
                    for t in range(second, x.shape[1]):
                        y_t, state = layer.step(x[:, t], state)
                        steps.append(y_t)
            mode = "train" if training else "eval"
            errors[f"{kernel}/{mode}/prefill"] = rel(middle.detach(), full.detach()[:, first:second])
            errors[f"{kernel}/{mode}/decode"] = rel(torch.stack(steps, 1), full.detach()[:, second:])
    layer.eval()
    return errors


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_passes_the_thorough_gate(name):
    report = run_checks(name)
    assert report.passed, report.render()
    assert {r.name for r in report.results} == ALL_CHECKS
    assert next(r for r in report.results if r.name == "stack").skipped  # one mixer class: the layer checks cover it
    lengths = set(report.lengths)  # every chunk boundary straddled, 1, a prime below the smallest chunk, the context
    assert {1, 13, 15, 17, 63, 65, 128} <= lengths
    assert (256 in lengths) == MIXERS.get(name).cls.length_extrapolation  # twice the context where it extrapolates


CONFIGS = [(n, {}) for n in BUILT_IN] + VARIANTS


def config_id(value) -> str:
    return value if isinstance(value, str) else ",".join(f"{k}={x}" for k, x in value.items())


@pytest.mark.parametrize(("name", "cfg"), VARIANTS, ids=config_id)
def test_every_kernel_equals_the_reference_with_gradients(name, cfg):
    torch.manual_seed(0)
    layer = build(name, cfg, d_model=32)  # the reference kernels are loops over tokens: small widths keep it cheap
    x = torch.randn(2, 75, 32)
    results = {}
    for kernel in layer.kernels:
        layer.set_kernel(kernel)
        layer.zero_grad(set_to_none=True)
        xk = x.clone().requires_grad_(True)
        y, _ = layer(xk)
        (y * torch.linspace(-1, 1, 32)).sum().backward()
        results[kernel] = [y.detach(), xk.grad] + [p.grad for p in layer.parameters()]
    reference = results[layer.kernels[0]]
    for kernel, got in results.items():
        for i, (a, b) in enumerate(zip(got, reference)):
            assert (a is None) == (b is None), (kernel, i)
            assert a is None or rel(a, b) <= 1e-5, (kernel, i, rel(a, b))


@pytest.mark.parametrize(("name", "cfg"), CONFIGS, ids=config_id)
def test_every_kernel_continues_from_any_state(name, cfg):
    torch.manual_seed(0)
    errors = continuation_errors(build(name, cfg), torch.randn(2, 45, 64), cuts=(11, 35))
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-5, (worst, errors[worst])


def test_the_continuation_check_catches_a_state_that_is_dropped():
    """The check above can fail: a layer whose prefill forgets the state it is given (here: DeltaNet's state
    replaced by a fresh one) differs from one forward after the cut."""

    class Forgets(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.kernels = inner, inner.kernels

        def set_kernel(self, kernel):
            self.inner.set_kernel(kernel)

        def init_state(self, *args):
            return self.inner.init_state(*args)

        def forward(self, x, state=None):
            fresh = None if state is None else self.inner.init_state(x.shape[0], x.device, x.dtype)
            return self.inner(x, fresh)

        def step(self, x, state):
            return self.inner.step(x, state)

    torch.manual_seed(0)
    errors = continuation_errors(Forgets(build("deltanet", {})), torch.randn(2, 45, 64), cuts=(11, 35))
    assert min(v for k, v in errors.items() if k.endswith("prefill")) > 1e-2


#: the built-ins whose CUDA kernels (their package's Triton or CUDA code) benchmarks/gpu_parity.py compares
CUDA_KERNELS = ["deltanet", "gated-deltanet", "gated-deltaproduct", "mamba", "mamba2"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA kernels cannot be compared here")
@pytest.mark.parametrize("name", CUDA_KERNELS)
@pytest.mark.parametrize("mode", parity.MODES)
def test_cuda_matches_cpu_reference(name, mode):
    check_parity(name, [mode])
