"""``mixbench check MIXER``: the conformance gate every mixer passes before it is scored (docs/DESIGN.md §2,
docs/ARCHITECTURE.md "The conformance gate").

The gate assumes the mixer may be wrong in any way, by accident or on purpose. Each check runs on a real model
built at the preset's width (every layer: mixers may differ by layer), at several lengths and batch sizes:

* contract        - forward/step/init_state return the documented types, shapes and dtypes (checked first; the
                    other checks are not run on a mixer that breaks the contract)
* determinism     - two builds with one seed have identical weights and outputs
* causality       - at every length, (a) the outputs of a prefix equal the outputs of the whole sequence on that
                    prefix, (b) changing the tokens from position t0 on leaves every earlier output unchanged,
                    for t0 at every chunk boundary and at random positions, and (c) in training mode, gradients
                    of an output never reach later inputs
* decode          - step-by-step decode from ``init_state`` equals the parallel forward at every length
* prefill         - forward(x[:t], s0) then forward(x[t:], s) equals forward(x), cut at chunk boundaries
* kernels         - every kernel's outputs and gradients equal the reference kernel's at every length up to the
                    context
* batch_independence   - each row of a batch gives the outputs it gives alone, also under a row permutation
* batch_size_invariance - per-sequence log-likelihoods of the whole model do not depend on the batch size or on
                    right padding (the classic source of "a different batch size gives different results")
* gradients       - a language-model loss gives every parameter a finite, correctly shaped, non-zero gradient
* state_size      - the floats in the decode state equal batch * state_size(T): empty, and after T = the shortest
                    length, the context and the longest, each also one step later
* interventions   - each intervention mode changes the output and is undone exactly on exit
* stack           - a stack of several mixers (a hybrid, docs/hybrids.md) as one model: causal, its decode
                    (prefill, then one step per token) equals its forward, its states hold the layers' summed sizes

Every comparison fails on a NaN or infinity on either side and names where: the layer, batch row, position and
channel of the worst error, the observed error and the tolerance, and what usually causes it. Errors are
relative (max |a - b| / max |b|) against ``tolerance`` (fp32 arithmetic in a different order); the causality
checks on a changed suffix (same length, same arithmetic up to the cut) allow 1% of it.

The default lengths are: 1, a prime below the smallest chunk, lengths that straddle every chunk boundary of every
kernel the mixer declares (and of the usual power-of-two chunks 16, 32, 64), the preset's context and, for mixers
that declare length extrapolation, twice the context.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from harness.model.backbone import MixerLM, build_model
from harness.config import BackboneConfig, ModelSpec, as_tuple, get_preset
from harness.errors import ConfigError
from harness.mixer import Mixer, state_floats, state_tensors

#: bump when a check is added or changed: cached verdicts of older gates are not reused
# 3: the context_free check; 4: states passed in stay unchanged, state_size at T=0 and the context; 5: a prefix
# (another length) held to the tolerance, a changed suffix to 1% of it
# 6: layers named with their mixer, interventions of every mixer class, the stack check (hybrids, docs/hybrids.md)
GATE_VERSION = 6
#: chunk lengths every mixer is tested across, besides the ones its kernels declare
GENERIC_CHUNKS = (16, 32, 64)
#: positions t0 from which the causality check perturbs the suffix, besides every chunk boundary
RANDOM_CUTS = 3
#: a gradient is compared relative to at least this fraction of its layer's largest gradient
GRADIENT_FLOOR = 1e-3
#: the longest sequence x batch the gate builds (floats per layer input): keeps twice the context bounded
MAX_GATE_TOKENS = 65_536

HINTS = {
    "contract": "forward(x, state) must return (y, state) with y shaped and typed like x, step(x_t, state) must "
    "return (y_t, state) with y_t shaped [batch, d_model], and init_state must build a state",
    "determinism": "the mixer draws random numbers outside the seeded constructor, or keeps hidden state between calls",
    "causality": "an output changed when only later tokens changed: the mixer reads the future (a missing causal "
    "mask, a non-causal convolution or normalisation, a chunked kernel that mixes across a chunk boundary, or "
    "behaviour that depends on the sequence length)",
    "decode": "step() disagrees with forward(): the decode state misses a term, is updated in another order, or "
    "step uses another formula than the parallel kernel",
    "prefill": "forward with a carried state does not continue the sequence: the returned state is not the state "
    "after the last token, or a passed-in state is ignored",
    "kernels": "a fast kernel does not compute the reference kernel's numbers (outputs or gradients)",
    "batch_independence": "one sequence's outputs depend on the other sequences of its batch (a statistic over "
    "the batch dimension, such as a batch mean or batch norm)",
    "batch_size_invariance": "per-sequence results change with the batch size or with right padding, so scores "
    "would depend on the evaluation batch size",
    "gradients": "a parameter is unused, detached, or its gradient overflows",
    "state_size": "state_size() does not report the floats the decode state actually keeps",
    "interventions": "an intervention has no effect or is not undone on exit",
    "stack": "the layers pass alone but not together: a layer's step or state depends on another's, or a part's "
    "state_size misses what the stack keeps",
}


@dataclass(frozen=True)
class GateConfig:
    """What the gate runs: lengths (empty: the thorough default for the preset and mixer), batch sizes, and the
    relative tolerance of the numeric comparisons."""

    lengths: tuple[int, ...] = ()
    batch_sizes: tuple[int, ...] = (1, 3)
    tolerance: float = 1e-4
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "lengths", as_tuple(self.lengths, int, "lengths"))
        object.__setattr__(self, "batch_sizes", as_tuple(self.batch_sizes, int, "batch sizes"))
        if any(n < 1 for n in self.lengths):
            raise ConfigError(f"check: lengths must be positive integers, got {list(self.lengths)}.")
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ConfigError(f"check: batch sizes must be positive integers, got {list(self.batch_sizes)}.")
        if isinstance(self.tolerance, bool) or not (isinstance(self.tolerance, (int, float)) and 0 < self.tolerance < 1):
            raise ConfigError(f"check: tolerance must be a number in (0, 1), got {self.tolerance!r}.")


@dataclass(frozen=True)
class Location:
    """Where the worst disagreement of a comparison is."""

    layer: int | None
    row: int | None = None
    position: int | None = None
    channel: int | None = None
    length: int | None = None
    batch: int | None = None
    #: the layer's own mixer (filled in by :func:`run_checks`): which part of a hybrid failed (docs/hybrids.md)
    mixer: str | None = None

    def text(self) -> str:
        parts = [
            f"{name} {value}"
            for name, value in (("layer", self.layer), ("length", self.length), ("batch", self.batch),
                                ("row", self.row), ("position", self.position), ("channel", self.channel))
            if value is not None
        ]  # fmt: skip
        if self.mixer and self.layer is not None:
            parts[0] += f" ({self.mixer})"
        return ", ".join(parts)


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str
    error: float | None = None
    tolerance: float | None = None
    location: Location | None = None
    skipped: bool = False
    seconds: float = 0.0

    def line(self) -> str:
        status = "SKIP" if self.skipped else ("PASS" if self.passed else "FAIL")
        text = f"  [{status}] {self.name}: {self.detail}"
        if self.error is not None:
            text += f" (max rel. error {self.error:.2e}, tolerance {self.tolerance:.0e})"
        if not self.passed and not self.skipped:
            if self.location is not None:
                text += f"\n         at {self.location.text()}"
            text += f"\n         usually: {HINTS.get(self.name, '')}"
        return text


@dataclass
class CheckReport:
    mixer: str
    preset: str
    kernels: tuple[str, ...]
    lengths: tuple[int, ...] = ()
    batch_sizes: tuple[int, ...] = ()
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.results if not r.passed]

    def failures(self) -> list[str]:
        """Each failed check with where it failed (the layer and its mixer, when known): ``causality at layer 1
        (leaky), ...``, so a hybrid's broken part is named without running ``mixbench check``."""
        out = []
        for r in self.results:
            if r.passed or r.skipped:
                continue
            where = r.location.text() if r.location is not None and r.location.layer is not None else ""
            if not where and r.detail.startswith("layer ") and ":" in r.detail:
                where = r.detail.split(":", 1)[0]
            out.append(f"{r.name} at {where}" if where else r.name)
        return out

    def render(self) -> str:
        lines = [
            f"conformance of '{self.mixer}' (preset {self.preset}, kernels {', '.join(self.kernels)}; lengths "
            f"{', '.join(map(str, self.lengths))}; batch sizes {', '.join(map(str, self.batch_sizes))}):"
        ]
        lines += [r.line() for r in self.results]
        verdict = "all checks passed" if self.passed else f"conformance FAILED ({', '.join(self.failed)})"
        lines.append(f"{verdict} in {self.seconds:.1f} s")
        return "\n".join(lines)


class ContractError(Exception):
    """A mixer broke the calling contract; the message says how."""


class Mismatch(Exception):
    """A comparison failed; carries the error and where."""

    def __init__(self, detail: str, error: float, location: Location):
        super().__init__(detail)
        self.detail, self.error, self.location = detail, error, location


# ---------------------------------------------------------------------------------------------- comparisons


@dataclass
class Worst:
    """The worst relative error seen by a check, and where."""

    error: float = 0.0
    location: Location | None = None
    what: str = ""

    def update(self, actual: torch.Tensor, expected: torch.Tensor, where: Location, what: str,
               floor: float = 0.0) -> None:
        error, location = compare(actual, expected, where, what, floor)
        if error > self.error or self.location is None:
            self.error, self.location, self.what = error, location, what


def compare(actual: torch.Tensor, expected: torch.Tensor, where: Location, what: str,
            floor: float = 0.0) -> tuple[float, Location]:
    """Relative max error of ``actual`` against ``expected`` and the position of the worst element.

    The scale is ``max |expected|``, at least ``floor``: a gradient that is zero by construction (a query's at
    length 1) is rounding noise on both sides and is compared against the scale of its layer's other gradients.
    A non-finite value on either side raises :class:`Mismatch` at its first position: NaN compares as nothing,
    so a NaN-producing mixer must never pass a fold of maxima.
    """
    a, b = actual.detach().float(), expected.detach().float()
    if a.shape != b.shape:
        raise Mismatch(f"{what}: shape {tuple(a.shape)} instead of {tuple(b.shape)}", math.inf, where)
    for side, t in (("output", a), ("reference", b)):
        bad = ~torch.isfinite(t)
        if bad.any():
            index = [int(i) for i in bad.nonzero()[0]]
            raise Mismatch(f"{what}: non-finite value ({t[tuple(index)].item()}) in the {side}", math.inf,
                           _locate(where, index, t.dim()))
    if a.numel() == 0:
        return 0.0, where
    diff = (a - b).abs()
    scale = max(b.abs().max().item(), floor, 1e-12)
    flat = int(diff.argmax())
    index = list(torch.unravel_index(torch.tensor(flat), diff.shape))
    return diff.max().item() / scale, _locate(where, [int(i) for i in index], diff.dim())


def _locate(where: Location, index: list[int], dim: int) -> Location:
    """Map an index into a [B, T, D] (row, position, channel), [B, D] (row, channel) or [B] tensor onto a place."""
    if dim == 3:
        return dataclasses.replace(where, row=index[0], position=index[1], channel=index[2])
    if dim == 2:
        return dataclasses.replace(where, row=index[0], channel=index[1])
    return dataclasses.replace(where, row=index[0] if dim == 1 else None)


# ---------------------------------------------------------------------------------------------- plan


def default_lengths(model: MixerLM, max_tokens: int = MAX_GATE_TOKENS, batch: int = 1) -> tuple[int, ...]:
    """1, a prime below the smallest chunk, each chunk boundary -1/+1 and 2C+1, the context and (for mixers that
    extrapolate) twice the context, capped so that ``batch * length`` stays within ``max_tokens``."""
    context = model.config.context
    extrapolates = all(m.length_extrapolation for m in model.mixers)
    longest = 2 * context if extrapolates else context
    longest = max(1, min(longest, max_tokens // max(batch, 1)))
    chunks = sorted({c for m in model.mixers for c in m.chunk_lengths()} | set(GENERIC_CHUNKS))
    chunks = [c for c in chunks if 2 <= c <= longest]
    lengths = {1, context, longest}
    if chunks:
        lengths.add(_prime_below(chunks[0]))
    for c in chunks:
        lengths.update({c - 1, c, c + 1, 2 * c + 1})
    return tuple(sorted(n for n in lengths if 1 <= n <= longest))


def _prime_below(n: int) -> int:
    for k in range(n - 1, 1, -1):
        if all(k % d for d in range(2, int(k**0.5) + 1)):
            return k
    return 1


def _cut_points(length: int, chunks: Sequence[int], gen: torch.Generator) -> list[int]:
    """Positions where a suffix starts: chunk boundaries inside the sequence, 1, the middle, the last position
    and a few random ones (far from the start included)."""
    cuts = {1, length - 1, length // 2}
    for c in chunks:  # the first two boundaries of each chunk length and the last one inside the sequence
        boundaries = list(range(c, length, c))
        cuts.update(boundaries[:2] + boundaries[-1:])
    if length > 2:
        cuts.update(int(v) for v in torch.randint(1, length, (RANDOM_CUTS,), generator=gen))
    return sorted(c for c in cuts if 0 < c < length)


# ---------------------------------------------------------------------------------------------- the gate


@dataclass
class _Setup:
    model: MixerLM
    spec: ModelSpec
    lengths: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    tol: float
    seed: int
    x: torch.Tensor  # [B, Lmax, D] layer inputs
    ids: torch.Tensor  # [B, Lmax + 1] token ids
    chunks: tuple[int, ...]
    outputs: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)  # (layer, length) -> y

    @property
    def batch(self) -> int:
        return self.x.shape[0]

    def forward(self, layer: int, length: int) -> torch.Tensor:
        """The layer's no-grad output on the first ``length`` positions of the shared batch (memoised)."""
        key = (layer, length)
        if key not in self.outputs:
            with torch.no_grad():
                self.outputs[key] = _call(self.model.mixers[layer], self.x[:, :length])
        return self.outputs[key]


def _call(m: Mixer, x: torch.Tensor, state: Any = None) -> torch.Tensor:
    y, _ = _forward(m, x, state)
    return y


def _forward(m: Mixer, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
    return _contracted(m, "forward", m(x, state), x, "(y, state)", "y")


def _step(m: Mixer, x_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
    return _contracted(m, "step", m.step(x_t, state), x_t, "(y_t, state)", "y_t")


def _contracted(m: Mixer, method: str, out: Any, x: torch.Tensor, form: str, y: str) -> tuple[torch.Tensor, Any]:
    """``out`` if it is a pair whose first item is a tensor shaped like the input ``x``, else a ContractError."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor)):
        raise ContractError(f"{_label(m)}: {method} returned {_describe(out)}, not a {form} tuple")
    if out[0].shape != x.shape:
        raise ContractError(f"{_label(m)}: {method} returned {y} of shape {tuple(out[0].shape)} for input "
                            f"{tuple(x.shape)} (must be equal)")
    return out


def _require_unchanged(state: Any, before: list[torch.Tensor], where: str) -> None:
    """A state passed to ``forward``/``step`` is never modified (docs/state_contract.md): callers keep and reuse
    states (the throughput suite times every round from one prefilled state; a beam or a branch resumes from a
    saved one), and an in-place update passes every output check, since the call's own result is right."""
    after = state_tensors(state)
    if len(after) != len(before) or any(not torch.equal(a, b) for a, b in zip(after, before)):
        raise ContractError(f"{where} modified the state it was given in place; return a new state instead "
                            "(e.g. torch.cat or out-of-place ops on a copy)")


def _label(m: Mixer) -> str:
    """``layer 3 (attention)``: the layer and its own mixer, which in a hybrid differs from layer to layer."""
    return f"layer {m.layer_idx} ({m.name})"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a bare tensor of shape {tuple(value.shape)}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"a {type(value).__name__}"


def run_checks(
    mixer: str,
    preset: str = "tiny",
    mixer_config: dict | None = None,
    config: GateConfig | None = None,
    backbone: BackboneConfig | None = None,
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Run every check on ``mixer`` (built at ``backbone``, default the preset's) and report each verdict."""
    config = config or GateConfig()
    t_start = time.perf_counter()
    if backbone is None:
        p = get_preset(preset)
        backbone = BackboneConfig(vocab_size=p.vocab_size, **p.backbone)
    # a residual gate that starts small would hide the mixer from the model-level checks
    backbone = dataclasses.replace(backbone, residual_gates="none")
    spec = ModelSpec(mixer, dict(mixer_config or {}), backbone)
    from harness.model.specs import validate_model

    validate_model(spec)  # the mixer's own checks and a size check, before any memory is allocated
    model = build_model(spec, seed=config.seed).to(device).eval()
    model.set_kernel(None, torch.device(device))
    batch = max(config.batch_sizes)
    lengths = config.lengths or default_lengths(model, batch=batch)
    kernels = tuple(dict.fromkeys(k for m in model.mixers for k in m.kernels))
    report = CheckReport(mixer, preset, kernels, tuple(lengths), tuple(config.batch_sizes))
    gen = torch.Generator().manual_seed(config.seed)
    longest = max(lengths)
    x = torch.randn(batch, longest, backbone.d_model, generator=gen).to(device)
    ids = torch.randint(0, backbone.vocab_size, (batch, longest + 1), generator=gen).to(device)
    chunks = tuple(sorted({c for m in model.mixers for c in m.chunk_lengths()} | set(GENERIC_CHUNKS)))
    s = _Setup(model, spec, tuple(lengths), tuple(config.batch_sizes), config.tolerance, config.seed, x, ids, chunks)
    checks: list[tuple[str, Callable[[_Setup], CheckResult]]] = [
        ("contract", _contract),
        ("determinism", _determinism),
        ("causality", _causality),
        ("decode", _decode),
        ("prefill", _prefill),
        ("kernels", _kernels),
        ("batch_independence", _batch_independence),
        ("batch_size_invariance", _batch_size_invariance),
        ("gradients", _gradients),
        ("state_size", _state_size),
        ("interventions", _interventions),
        ("context_free", _context_free),
        ("stack", _stack),
    ]
    for name, check in checks:
        if progress is not None:
            progress(name)
        if report.results and report.results[0].name == "contract" and not report.results[0].passed:
            report.results.append(CheckResult(name, False, "not run: the mixer breaks the contract", skipped=True))
            continue
        t0 = time.perf_counter()
        try:
            result = check(s)
        except Mismatch as exc:
            result = CheckResult(name, False, exc.detail, exc.error, s.tol, exc.location)
        except ContractError as exc:
            result = CheckResult(name, False, f"contract violation: {exc}")
        except Exception as exc:  # a crash is a failed check with its reason, never a traceback
            result = CheckResult(name, False, f"raised {type(exc).__name__}: {exc}")
        finally:
            model.eval()
            model.zero_grad(set_to_none=True)
        result.seconds = time.perf_counter() - t0
        if result.location is not None and result.location.layer is not None:
            result.location = dataclasses.replace(result.location, mixer=model.mixers[result.location.layer].name)
        report.results.append(result)
    report.seconds = time.perf_counter() - t_start
    return report


def _verdict(name: str, worst: Worst, limit: float, ok_text: str) -> CheckResult:
    passed = worst.error <= limit
    detail = ok_text if passed else f"{worst.what} differs from the expected output"
    return CheckResult(name, passed, detail, worst.error, limit, worst.location)


# ---------------------------------------------------------------------------------------------- checks


def _contract(s: _Setup) -> CheckResult:
    x = s.x[:, : min(5, s.x.shape[1])]
    for m in s.model.mixers:
        with torch.no_grad():
            y, _ = _forward(m, x)
            if y.dtype != x.dtype:
                raise ContractError(f"{_label(m)}: forward returned dtype {y.dtype} for input {x.dtype}")
            if y.device != x.device:
                raise ContractError(f"{_label(m)}: forward returned a tensor on {y.device}, input on {x.device}")
            try:
                state = m.init_state(x.shape[0], x.device, x.dtype)
            except NotImplementedError:
                raise ContractError(f"{_label(m)}: init_state is not implemented") from None
            y_s, new_state = _forward(m, x, state)
            if new_state is None:
                raise ContractError(f"{_label(m)}: forward(x, state) returned no state (prefill needs it)")
            y_t, _ = _step(m, x[:, 0], m.init_state(x.shape[0], x.device, x.dtype))
            if y_t.dtype != x.dtype:
                raise ContractError(f"{_label(m)}: step returned dtype {y_t.dtype} for input {x.dtype}")
        try:
            size = m.state_size(x.shape[1])
        except NotImplementedError:
            raise ContractError(f"{_label(m)}: state_size is not implemented") from None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ContractError(f"{_label(m)}: state_size returned {size!r}, not a count of floats")
    return CheckResult("contract", True, "forward, step, init_state and state_size return what the contract says")


def _determinism(s: _Setup) -> CheckResult:
    twin = build_model(s.spec, seed=s.seed).to(s.x.device).eval()
    for mine, theirs in zip(twin.mixers, s.model.mixers):  # each layer's own (a hybrid's layers differ)
        mine.set_kernel(theirs.kernel)
    for (n1, p1), (_, p2) in zip(s.model.named_parameters(), twin.named_parameters()):
        if not torch.equal(p1, p2):
            return CheckResult("determinism", False, f"parameter {n1} differs between two builds with seed {s.seed}")
    ids = s.ids[:, : min(s.ids.shape[1], s.model.config.context)]
    with torch.no_grad():
        a, b, c = s.model(ids)[0], twin(ids)[0], s.model(ids)[0]
    for other, what in ((b, "a second build"), (c, "a second call")):
        if not torch.equal(a, other):
            error, where = compare(other, a, Location(None), "determinism")
            return CheckResult("determinism", False, f"outputs differ between one build and {what}", error, 0.0, where)
    return CheckResult("determinism", True, "same seed -> same weights and identical outputs, call after call")


def _causality(s: _Setup) -> CheckResult:
    """Prefix consistency and suffix perturbations (no grad, eval mode), then gradients (train mode).

    A prefix runs at another length, so a chunked kernel pads and sums in another order: it is held to the
    tolerance of the other different-order checks. A suffix change keeps the length and hence the arithmetic
    up to the cut, so any difference there is information from the future: it is held to 1% of the tolerance.
    """
    prefix, suffix = Worst(), Worst()
    prefix_limit, limit = s.tol, s.tol * 1e-2
    gen = torch.Generator().manual_seed(s.seed + 1)
    for layer, m in enumerate(s.model.mixers):
        for length in s.lengths:
            full = s.forward(layer, length)
            for cut in _cut_points(length, s.chunks, gen):
                where = Location(layer, length=length, batch=s.batch)
                prefix.update(s.forward(layer, cut), full[:, :cut], where, f"prefix of {cut} tokens")
                x2 = s.x[:, :length].clone()
                x2[:, cut:] = torch.randn(x2[:, cut:].shape, generator=gen).to(x2) * 3
                with torch.no_grad():
                    y2 = _call(m, x2)
                suffix.update(y2[:, :cut], full[:, :cut], where, f"suffix changed from position {cut}")
    if prefix.error > prefix_limit:
        return _verdict("causality", prefix, prefix_limit, "")
    if suffix.error > limit:
        return _verdict("causality", suffix, limit, "")
    # gradients in training mode: d y[t0] / d x[s] must be 0 for every s > t0
    s.model.train()
    for layer, m in enumerate(s.model.mixers):
        length = max(s.lengths)
        xg = s.x[:, :length].clone().requires_grad_(True)
        y = _call(m, xg)
        for t0 in _cut_points(length, s.chunks, gen)[:6]:
            (grad,) = torch.autograd.grad(y[:, t0 - 1].sum(), xg, retain_graph=True, allow_unused=True)
            if grad is None:
                continue
            leak = grad[:, t0:].abs().max().item() if t0 < length else 0.0
            if not math.isfinite(leak) or leak > 0:
                ref = max(grad[:, :t0].abs().max().item(), 1e-12)
                error = leak / ref if math.isfinite(leak) else math.inf
                if error > limit:
                    pos = int(grad[:, t0:].abs().amax(dim=(0, 2)).argmax()) + t0
                    raise Mismatch(f"in training mode the gradient of position {t0 - 1} reaches position {pos}",
                                   error, Location(layer, length=length, batch=s.batch, position=pos))
    s.model.eval()
    return _verdict("causality", suffix, limit,
                    "no output depends on a later token (prefixes, suffix changes, gradients)")


def _context_free(s: _Setup) -> CheckResult:
    """A mixer that declares ``context_free`` (a control, docs/controls.md): each output depends on its own
    position's input alone. Half the positions (drawn at random) keep their input, the others get new values;
    the kept positions' outputs must not move."""
    declared = [m for m in s.model.mixers if m.context_free]
    if not declared:
        return CheckResult("context_free", True, "the mixer does not declare context_free", skipped=True)
    worst, limit = Worst(), s.tol * 1e-2
    gen = torch.Generator().manual_seed(s.seed + 7)
    for m in declared:
        for length in s.lengths:
            keep = (torch.rand(length, generator=gen) < 0.5).to(s.x.device)[None, :, None]
            other = torch.randn(s.x[:, :length].shape, generator=gen).to(s.x) * 3
            with torch.no_grad():
                y = _call(m, torch.where(keep, s.x[:, :length], other))
            full = s.forward(m.layer_idx, length)
            worst.update(y * keep, full * keep, Location(m.layer_idx, length=length, batch=s.batch),
                         "the output of a position whose own input was kept, after the other positions changed")
    return _verdict("context_free", worst, limit, "each output depends on its own position's input alone, as "
                    "declared")


def _decode(s: _Setup) -> CheckResult:
    worst = Worst()
    longest = max(s.lengths)
    for layer, m in enumerate(s.model.mixers):
        with torch.no_grad():
            state = m.init_state(s.batch, s.x.device, s.x.dtype)
            steps = []
            for t in range(longest):  # every step: a mixer may modify its input only now and then
                before, passed = [t_.clone() for t_ in state_tensors(state)], state
                y_t, state = _step(m, s.x[:, t], state)
                _require_unchanged(passed, before, f"{_label(m)}: step at position {t}")
                steps.append(y_t)
            decoded = torch.stack(steps, 1)
        for length in s.lengths:
            worst.update(decoded[:, :length], s.forward(layer, length), Location(layer, length=length, batch=s.batch),
                         "step-by-step decode")
    return _verdict("decode", worst, s.tol, "step-by-step decode == forward at every length")


def _prefill(s: _Setup) -> CheckResult:
    worst = Worst()
    gen = torch.Generator().manual_seed(s.seed + 2)
    for layer, m in enumerate(s.model.mixers):
        for length in s.lengths:
            full = s.forward(layer, length)
            x = s.x[:, :length]
            where = Location(layer, length=length, batch=s.batch)
            with torch.no_grad():
                y_all, _ = _forward(m, x, m.init_state(s.batch, x.device, x.dtype))
                worst.update(y_all, full, where, "forward from an empty state")
                for cut in _cut_points(length, s.chunks, gen)[:4]:
                    y_a, state = _forward(m, x[:, :cut], m.init_state(s.batch, x.device, x.dtype))
                    before = [t.clone() for t in state_tensors(state)]
                    y_b, _ = _forward(m, x[:, cut:], state)
                    _require_unchanged(state, before, f"{_label(m)}: forward(x, state) after a prefill of {cut}")
                    worst.update(torch.cat([y_a, y_b], 1), full, where, f"prefill of {cut} tokens, then the rest")
    return _verdict("prefill", worst, s.tol, "prefill + continuation == one forward, cut at chunk boundaries")


def _kernels(s: _Setup) -> CheckResult:
    """Every kernel against the reference, outputs and gradients, on one sequence at every length up to the
    context: chunked kernels differ from their definition at chunk boundaries, which those lengths straddle;
    the reference is often a slow loop, so neither a batch (the batch checks cover rows) nor twice the context
    (the causality and decode checks cover it with the default kernel) is run through it."""
    worst = Worst()
    compared: dict[str, set[str]] = {}  # reference -> the kernels compared with it (a hybrid's parts differ)
    weight = torch.linspace(-1, 1, s.x.shape[-1], device=s.x.device)
    lengths = [n for n in s.lengths if n <= s.model.config.context] or [min(s.lengths)]
    for layer, m in enumerate(s.model.mixers):
        kernel = m.kernel
        if len(m.kernels) < 2:
            continue
        try:
            for length in lengths:
                x = s.x[:1, :length]
                outs = {}
                for k in m.kernels:
                    m.set_kernel(k)
                    xk = x.clone().requires_grad_(True)
                    m.zero_grad(set_to_none=True)
                    y = _call(m, xk)
                    (y * weight).sum().backward()
                    grads = [("input", xk.grad)] + [(n, p.grad) for n, p in m.named_parameters() if p.grad is not None]
                    outs[k] = (y.detach(), grads)
                ref_y, ref_g = outs[m.reference_kernel]
                for k, (y, grads) in outs.items():
                    if k == m.reference_kernel:
                        continue
                    compared.setdefault(m.reference_kernel, set()).add(k)
                    where = Location(layer, length=length, batch=1)
                    worst.update(y, ref_y, where, f"kernel '{k}' output")
                    ref_grads = dict(ref_g)
                    floor = GRADIENT_FLOOR * max(g.abs().max().item() for _, g in ref_g)
                    for name, g in grads:
                        if name in ref_grads:
                            worst.update(g, ref_grads[name], where, f"kernel '{k}' gradient of {name}", floor)
        finally:
            m.set_kernel(kernel)
            m.zero_grad(set_to_none=True)
    if not compared:
        return CheckResult("kernels", True, "one kernel only (the reference)")
    said = "; ".join(f"{', '.join(sorted(ks))} == reference '{ref}'" for ref, ks in compared.items())
    return _verdict("kernels", worst, s.tol, f"{said} (outputs and gradients)")


def _batch_independence(s: _Setup) -> CheckResult:
    worst = Worst()
    if s.batch < 2:
        return CheckResult("batch_independence", True, "one batch size of 1: nothing to couple", skipped=False)
    perm = torch.randperm(s.batch, generator=torch.Generator().manual_seed(s.seed + 3)).to(s.x.device)
    if torch.equal(perm, torch.arange(s.batch, device=s.x.device)):
        perm = perm.flip(0)
    for layer, m in enumerate(s.model.mixers):
        for length in sorted({min(s.lengths, key=lambda n: abs(n - max(s.lengths) // 2)), max(s.lengths)}):
            full = s.forward(layer, length)
            where = Location(layer, length=length, batch=s.batch)
            with torch.no_grad():
                for row in range(s.batch):
                    alone = _call(m, s.x[row : row + 1, :length])
                    worst.update(alone, full[row : row + 1], dataclasses.replace(where, row=row), "a row alone")
                permuted = _call(m, s.x[perm, :length])
            worst.update(permuted, full[perm], where, "rows permuted")
    return _verdict("batch_independence", worst, s.tol, "each sequence's outputs are its own (alone, permuted)")


def _sequence_nll(model: MixerLM, ids: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Summed next-token NLL of each right-padded sequence over its own valid targets."""
    logits, _ = model(ids[:, :-1])
    nll = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none").view(ids.shape[0], -1)
    mask = torch.arange(ids.shape[1] - 1, device=ids.device)[None, :] < (torch.tensor(lengths, device=ids.device)[:, None] - 1)
    return (nll * mask).sum(1)


def _batch_size_invariance(s: _Setup) -> CheckResult:
    """The whole model: each sequence's NLL alone equals its NLL in batches of every size, right-padded."""
    worst = Worst()
    context = s.model.config.context
    n_seq = max(4, max(s.batch_sizes))
    gen = torch.Generator().manual_seed(s.seed + 4)
    lengths = [int(v) for v in torch.randint(2, context + 2, (n_seq,), generator=gen)]
    lengths[0] = context + 1
    ids = torch.randint(0, s.model.config.vocab_size, (n_seq, context + 1), generator=gen).to(s.x.device)
    with torch.no_grad():
        alone = torch.stack([_sequence_nll(s.model, ids[i : i + 1, : lengths[i]], [lengths[i]])[0] for i in range(n_seq)])
        for size in sorted(set(s.batch_sizes) | {n_seq}):
            got = []
            for start in range(0, n_seq, size):
                chunk = list(range(start, min(start + size, n_seq)))
                padded = ids[chunk].clone()
                for j, i in enumerate(chunk):
                    padded[j, lengths[i]:] = 0  # right padding
                got.append(_sequence_nll(s.model, padded, [lengths[i] for i in chunk]))
            worst.update(torch.cat(got)[:, None], alone[:, None], Location(None, batch=size), f"batches of {size}")
    return _verdict("batch_size_invariance", worst, s.tol,
                    f"per-sequence NLL is the same alone and in padded batches of {', '.join(map(str, sorted(set(s.batch_sizes) | {n_seq})))}")


def _gradients(s: _Setup) -> CheckResult:
    model = s.model
    model.train()
    ids = s.ids[: max(2, min(s.batch, s.ids.shape[0])), : min(s.ids.shape[1], model.config.context + 1)]
    logits, _ = model(ids[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    missing, nonfinite, misshaped = [], [], []
    for n, p in model.named_parameters():
        if p.grad is None or not p.grad.abs().sum() > 0:
            missing.append(n)
        elif p.grad.shape != p.shape:
            misshaped.append(f"{n} {tuple(p.grad.shape)} vs {tuple(p.shape)}")
        elif not torch.isfinite(p.grad).all():
            nonfinite.append(n)
    problems = [f"no gradient: {', '.join(missing[:5])}" if missing else "",
                f"non-finite gradient: {', '.join(nonfinite[:5])}" if nonfinite else "",
                f"wrong shape: {', '.join(misshaped[:3])}" if misshaped else ""]
    problems = [p for p in problems if p]
    if problems:
        return CheckResult("gradients", False, "; ".join(problems))
    n = sum(1 for _ in model.parameters())
    return CheckResult("gradients", True, f"all {n} parameters get finite, correctly shaped, non-zero gradients")


def _state_size(s: _Setup) -> CheckResult:
    """The floats a state holds equal ``batch * state_size(T)``: for the empty state, and after a prefill of the
    shortest length, the model's context (the board's ``state`` column reads ``state_size(context)``) and the
    longest, each also one step later."""
    B = s.batch
    context = s.model.config.context
    lengths = {min(s.lengths), max(s.lengths)} | ({context} if context <= max(s.lengths) else set())
    for m in s.model.mixers:
        with torch.no_grad():
            empty = state_floats(m.init_state(B, s.x.device, s.x.dtype))
        if empty != B * m.state_size(0):
            return CheckResult("state_size", False, f"{_label(m)}: init_state holds {empty / B:g} floats per "
                                                    f"sequence but state_size(0) says {m.state_size(0)}")
        for length in sorted(lengths):
            x = s.x[:, :length]
            with torch.no_grad():
                _, state = _forward(m, x, m.init_state(B, x.device, x.dtype))
                kept_prefill = state_floats(state)
                _, state = _step(m, s.x[:, 0], state)
                kept_step = state_floats(state)
            if kept_prefill != B * m.state_size(length) or kept_step != B * m.state_size(length + 1):
                return CheckResult(
                    "state_size", False,
                    f"{_label(m)}: state holds {kept_prefill / B:g} / {kept_step / B:g} floats per sequence "
                    f"after {length} / {length + 1} tokens but state_size says {m.state_size(length)} / "
                    f"{m.state_size(length + 1)}",
                )
    T = max(s.lengths)
    return CheckResult("state_size", True, f"state_size matches the state kept ({s.model.state_size(T)} floats per "
                                           f"sequence, all {len(s.model.mixers)} layers, at T={T})")


def _interventions(s: _Setup) -> CheckResult:
    """The last layer of each mixer class in the stack (one class but in a hybrid, docs/hybrids.md)."""
    last = {type(m): m for m in s.model.mixers}
    checked = [m for m in last.values() if m.intervention_modes]
    if not checked:
        return CheckResult("interventions", True, "none declared")
    x = s.x[:, : min(s.x.shape[1], 37)]
    for m in checked:
        with torch.no_grad():
            base = _call(m, x)
            for mode in m.intervention_modes:
                with m.intervene([0], mode):
                    changed = _call(m, x)
                after = _call(m, x)
                if torch.equal(changed, base):
                    return CheckResult("interventions", False, f"{_label(m)}: '{mode}' of unit 0 did not change the "
                                                               "output")
                if not torch.equal(after, base):
                    return CheckResult("interventions", False, f"{_label(m)}: '{mode}' was not undone on exit")
    modes = ", ".join(dict.fromkeys(mode for m in checked for mode in m.intervention_modes))
    return CheckResult("interventions", True, f"{modes} change the output and restore exactly")


def _stack(s: _Setup) -> CheckResult:
    """A stack of several mixer classes (a hybrid, docs/hybrids.md) as one model: a changed suffix leaves earlier
    logits unchanged, a prefill then one ``step`` per token gives the full forward's logits, and the states hold
    ``batch * model.state_size(T)`` floats, the sum of the layers' (every layer's own checks ran above; this
    checks that the parts compose). A stack of one class is what the layer checks already cover."""
    if len({type(m) for m in s.model.mixers}) < 2:
        return CheckResult("stack", True, "one mixer in every layer: the layer checks cover the stack", skipped=True)
    model, B = s.model, s.batch
    length = min(model.config.context, max(s.lengths))
    ids = s.ids[:, :length]
    where = Location(None, length=length, batch=B)
    with torch.no_grad():
        full, _ = model(ids)
        cut = max(1, length // 2)
        changed = ids.clone()
        changed[:, cut:] = torch.randint(0, model.config.vocab_size, changed[:, cut:].shape,
                                         generator=torch.Generator().manual_seed(s.seed + 5)).to(ids)
        suffix = Worst()
        suffix.update(model(changed)[0][:, :cut], full[:, :cut], where,
                      f"the logits before a suffix changed from {cut}")
        if suffix.error > s.tol * 1e-2:
            return _verdict("stack", suffix, s.tol * 1e-2, "")
        prefill = max(1, length // 3)
        logits, states = model(ids[:, :prefill], model.init_states(B, ids.device))
        steps = [logits]
        counts = [(prefill, state_floats(states))]
        for t in range(prefill, length):
            step_logits, states = model.step(ids[:, t], states)
            steps.append(step_logits[:, None])
            counts.append((t + 1, state_floats(states)))
    worst = Worst()
    worst.update(torch.cat(steps, 1), full, where, f"a prefill of {prefill} tokens, then one step per token")
    if worst.error > s.tol:
        return _verdict("stack", worst, s.tol, "")
    for tokens, kept in (counts[0], counts[-1]):
        if kept != B * model.state_size(tokens):
            return CheckResult("stack", False, f"the stack's states hold {kept / B:g} floats per sequence after "
                                               f"{tokens} tokens, but the layers' state_size sums to "
                                               f"{model.state_size(tokens)}")
    return CheckResult("stack", True, f"the whole stack is causal, decodes as it runs forward, and keeps the sum of "
                                      f"its layers' states ({model.state_size(length)} floats at T={length})",
                       worst.error, s.tol)
