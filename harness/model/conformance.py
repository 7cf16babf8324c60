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

This module holds the gate's configuration, its default lengths and the driver that runs the checks in order;
the checks, one function each, are in :mod:`harness.model.conformance_checks`, what they report in
:mod:`harness.model.conformance_results` (all importable from here).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.model.backbone import MixerLM, build_model
from harness.config import BackboneConfig, ModelSpec, as_tuple, get_preset
from harness.errors import ConfigError
from harness.model.conformance_checks import CHECKS, GRADIENT_FLOOR, RANDOM_CUTS, Setup
from harness.model.conformance_results import (
    HINTS, CheckReport, CheckResult, ContractError, Location, Mismatch, Worst, compare, verdict,
)

__all__ = [
    "GATE_VERSION", "GENERIC_CHUNKS", "GRADIENT_FLOOR", "HINTS", "MAX_GATE_TOKENS", "RANDOM_CUTS", "CheckReport",
    "CheckResult", "ContractError", "GateConfig", "Location", "Mismatch", "Worst", "compare", "default_lengths",
    "run_checks", "verdict",
]

#: bump when a check is added or changed: cached verdicts of older gates are not reused
# 3: the context_free check; 4: states passed in stay unchanged, state_size at T=0 and the context; 5: a prefix
# (another length) held to the tolerance, a changed suffix to 1% of it
# 6: layers named with their mixer, interventions of every mixer class, the stack check (hybrids, docs/hybrids.md)
GATE_VERSION = 6
#: chunk lengths every mixer is tested across, besides the ones its kernels declare
GENERIC_CHUNKS = (16, 32, 64)
#: the longest sequence x batch the gate builds (floats per layer input): keeps twice the context bounded
MAX_GATE_TOKENS = 65_536


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

# ---------------------------------------------------------------------------------------------- the gate


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
    s = Setup(model, spec, tuple(lengths), tuple(config.batch_sizes), config.tolerance, config.seed, x, ids, chunks)
    for name, check in CHECKS:
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
