"""``mixbench check MIXER``: the conformance gate every mixer passes before it is scored (DESIGN §2).

Checks, each on a real model built at the preset's width (every layer, because mixers may differ by layer:
ProtoT's layer 0 shares routing and layers 0-1 smooth values):

* determinism  - two builds with one seed have identical weights and outputs
* causality    - changing tokens from position t0 on leaves outputs before t0 unchanged (exactly)
* decode       - step-by-step decode from ``init_state`` equals the parallel forward
* prefill      - forward(x[:t], s0) then forward(x[t:], s) equals forward(x)
* kernels      - every kernel's outputs and gradients equal the reference kernel's
* gradients    - a language-model loss gives every parameter a finite, non-zero gradient
* state_size   - the floats in the decode state after T tokens equal batch * state_size(T)
* interventions- each intervention mode changes the output and is undone exactly on exit

Errors are relative: max |a - b| / max |b|, against ``tolerance`` (fp32 arithmetic in a different order).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.backbone import MixerLM, build_model
from harness.config import BackboneConfig, ModelSpec, get_preset
from harness.mixer import Mixer, state_floats


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str
    error: float | None = None


@dataclass
class CheckReport:
    mixer: str
    preset: str
    kernels: tuple[str, ...]
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def render(self) -> str:
        lines = [f"conformance of '{self.mixer}' (preset {self.preset}, kernels {', '.join(self.kernels)}):"]
        for r in self.results:
            err = f" (max rel. error {r.error:.2e})" if r.error is not None else ""
            lines.append(f"  [{'PASS' if r.passed else 'FAIL'}] {r.name}: {r.detail}{err}")
        lines.append("all checks passed" if self.passed else "conformance FAILED")
        return "\n".join(lines)


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = b.detach().abs().max().item()
    return (a.detach() - b.detach()).abs().max().item() / max(scale, 1e-12)


def run_checks(
    mixer: str,
    preset: str = "tiny",
    mixer_config: dict | None = None,
    seq_len: int = 37,
    batch: int = 2,
    tolerance: float = 1e-4,
    seed: int = 0,
) -> CheckReport:
    p = get_preset(preset)
    backbone = BackboneConfig(vocab_size=p.vocab_size, **p.backbone)
    spec = ModelSpec(mixer, dict(mixer_config or {}), backbone)
    model = build_model(spec, seed=seed).eval()
    report = CheckReport(mixer, preset, model.mixers[0].kernels)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq_len, backbone.d_model, generator=gen)
    ids = torch.randint(0, backbone.vocab_size, (batch, seq_len), generator=gen)
    checks: list[tuple[str, Callable[[], CheckResult]]] = [
        ("determinism", lambda: _determinism(spec, model, ids, seed)),
        ("causality", lambda: _causality(model, x, tolerance)),
        ("decode", lambda: _decode(model, x, tolerance)),
        ("prefill", lambda: _prefill(model, x, tolerance)),
        ("kernels", lambda: _kernels(model, x, tolerance)),
        ("gradients", lambda: _gradients(model, ids)),
        ("state_size", lambda: _state_size(model, x)),
        ("interventions", lambda: _interventions(model, x)),
    ]
    for name, check in checks:
        try:
            result = check()
        except Exception as exc:  # a crash is a failed check with its reason, not a traceback
            result = CheckResult(name, False, f"raised {type(exc).__name__}: {exc}")
        report.results.append(result)
    return report


def _each_layer(model: MixerLM) -> list[Mixer]:
    return model.mixers


def _determinism(spec: ModelSpec, model: MixerLM, ids: torch.Tensor, seed: int) -> CheckResult:
    twin = build_model(spec, seed=seed).eval()
    for (n1, p1), (_, p2) in zip(model.named_parameters(), twin.named_parameters()):
        if not torch.equal(p1, p2):
            return CheckResult("determinism", False, f"parameter {n1} differs between two builds with seed {seed}")
    with torch.no_grad():
        a, b = model(ids)[0], twin(ids)[0]
        c = model(ids)[0]
    same = torch.equal(a, b) and torch.equal(a, c)
    return CheckResult("determinism", same, "same seed -> same weights and outputs" if same else "outputs differ")


def _causality(model: MixerLM, x: torch.Tensor, tol: float) -> CheckResult:
    T = x.shape[1]
    worst = 0.0
    for cut in (1, T // 2, T - 1):
        x2 = x.clone()
        x2[:, cut:] = torch.randn_like(x2[:, cut:]) * 3
        for m in _each_layer(model):
            with torch.no_grad():
                y1, _ = m(x)
                y2, _ = m(x2)
            worst = max(worst, rel_error(y2[:, :cut], y1[:, :cut]))
    ok = worst <= tol * 1e-2
    return CheckResult("causality", ok, "future tokens never change past outputs", worst)


def _decode(model: MixerLM, x: torch.Tensor, tol: float) -> CheckResult:
    worst = 0.0
    for m in _each_layer(model):
        with torch.no_grad():
            y_full, _ = m(x)
            state = m.init_state(x.shape[0], x.device, x.dtype)
            steps = []
            for t in range(x.shape[1]):
                y_t, state = m.step(x[:, t], state)
                steps.append(y_t)
        worst = max(worst, rel_error(torch.stack(steps, 1), y_full))
    return CheckResult("decode", worst <= tol, "step-by-step decode == forward", worst)


def _prefill(model: MixerLM, x: torch.Tensor, tol: float) -> CheckResult:
    worst = 0.0
    cut = x.shape[1] // 3
    for m in _each_layer(model):
        with torch.no_grad():
            y_full, _ = m(x)
            s0 = m.init_state(x.shape[0], x.device, x.dtype)
            y_all, _ = m(x, s0)
            y_a, s = m(x[:, :cut], m.init_state(x.shape[0], x.device, x.dtype))
            y_b, _ = m(x[:, cut:], s)
        worst = max(worst, rel_error(torch.cat([y_a, y_b], 1), y_full), rel_error(y_all, y_full))
    return CheckResult("prefill", worst <= tol, "prefill + continuation == one forward", worst)


def _kernels(model: MixerLM, x: torch.Tensor, tol: float) -> CheckResult:
    worst = 0.0
    compared: list[str] = []
    for m in _each_layer(model):
        kernel = m.kernel
        try:
            outs = {}
            for k in m.kernels:
                m.set_kernel(k)
                xk = x.clone().requires_grad_(True)
                m.zero_grad(set_to_none=True)
                y, _ = m(xk)
                (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
                grads = [xk.grad] + [p.grad for p in m.parameters() if p.grad is not None]
                outs[k] = (y.detach(), grads)
        finally:
            m.set_kernel(kernel)
            m.zero_grad(set_to_none=True)
        ref_y, ref_g = outs[m.reference_kernel]
        for k, (y, g) in outs.items():
            if k == m.reference_kernel:
                continue
            compared.append(k)
            worst = max(worst, rel_error(y, ref_y), *(rel_error(a, b) for a, b in zip(g, ref_g)))
    if not compared:
        return CheckResult("kernels", True, "one kernel only (the reference)")
    ks = ", ".join(sorted(set(compared)))
    return CheckResult("kernels", worst <= tol, f"{ks} == reference '{model.mixers[0].reference_kernel}' (outputs and gradients)", worst)


def _gradients(model: MixerLM, ids: torch.Tensor) -> CheckResult:
    model.train()
    model.zero_grad(set_to_none=True)
    try:
        logits, _ = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
        nonfinite = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
    if missing or nonfinite:
        bad = ", ".join((missing + nonfinite)[:6])
        return CheckResult("gradients", False, f"no or non-finite gradient for: {bad}")
    n = sum(1 for _ in model.parameters())
    return CheckResult("gradients", True, f"all {n} parameters get finite non-zero gradients")


def _state_size(model: MixerLM, x: torch.Tensor) -> CheckResult:
    B, T, _ = x.shape
    for m in _each_layer(model):
        with torch.no_grad():
            _, state = m(x, m.init_state(B, x.device, x.dtype))
            kept_prefill = state_floats(state)
            _, state = m.step(x[:, 0], state)
            kept_step = state_floats(state)
        if kept_prefill != B * m.state_size(T) or kept_step != B * m.state_size(T + 1):
            return CheckResult(
                "state_size",
                False,
                f"layer {m.layer_idx}: state holds {kept_prefill // B} / {kept_step // B} floats per sequence after "
                f"{T} / {T + 1} tokens but state_size says {m.state_size(T)} / {m.state_size(T + 1)}",
            )
    sizes = f"{model.mixers[0].state_size(T)} floats per sequence and layer at T={T}"
    return CheckResult("state_size", True, f"state_size matches the state kept ({sizes})")


def _interventions(model: MixerLM, x: torch.Tensor) -> CheckResult:
    m = model.mixers[-1]
    if not m.intervention_modes:
        return CheckResult("interventions", True, "none declared")
    with torch.no_grad():
        base, _ = m(x)
        for mode in m.intervention_modes:
            with m.intervene([0], mode):
                changed, _ = m(x)
            after, _ = m(x)
            if torch.equal(changed, base):
                return CheckResult("interventions", False, f"'{mode}' of unit 0 did not change the output")
            if not torch.equal(after, base):
                return CheckResult("interventions", False, f"'{mode}' was not undone on exit")
    return CheckResult("interventions", True, f"{', '.join(m.intervention_modes)} change the output and restore exactly")
