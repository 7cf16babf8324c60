"""What a conformance check reports: where it failed (:class:`Location`), its verdict (:class:`CheckResult`,
:class:`CheckReport`), the exceptions a check raises, and the comparison every numeric check uses.

Its own module so that the checks (:mod:`harness.model.conformance_checks`) and the driver that runs them
(:mod:`harness.model.conformance`) share these types without importing each other.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

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


def verdict(name: str, worst: Worst, limit: float, ok_text: str) -> CheckResult:
    """A check's result from its worst error: passed within ``limit``, else what differed and where."""
    passed = worst.error <= limit
    detail = ok_text if passed else f"{worst.what} differs from the expected output"
    return CheckResult(name, passed, detail, worst.error, limit, worst.location)
