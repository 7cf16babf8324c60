"""The conformance gate's checks, one function each (what each asserts: :mod:`harness.model.conformance`).

They live apart from the driver (:mod:`harness.model.conformance`) and the result types
(:mod:`harness.model.conformance_results`) so that each file keeps one job: this one says how a mixer is probed,
and in which order (:data:`CHECKS`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from harness.config import ModelSpec
from harness.mixer import Mixer, state_floats, state_tensors
from harness.model.backbone import MixerLM, build_model
from harness.model.conformance_results import CheckResult, ContractError, Location, Mismatch, Worst, compare, verdict

#: positions t0 from which the causality check perturbs the suffix, besides every chunk boundary
RANDOM_CUTS = 3
#: a gradient is compared relative to at least this fraction of its layer's largest gradient
GRADIENT_FLOOR = 1e-3


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


@dataclass
class Setup:
    """What every check shares: the model, the plan (lengths, batch sizes, tolerance, seed) and one batch of
    layer inputs and token ids, with each layer's outputs memoised."""

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



# ---------------------------------------------------------------------------------------------- checks


def _contract(s: Setup) -> CheckResult:
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


def _determinism(s: Setup) -> CheckResult:
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


def _causality(s: Setup) -> CheckResult:
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
        return verdict("causality", prefix, prefix_limit, "")
    if suffix.error > limit:
        return verdict("causality", suffix, limit, "")
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
    return verdict("causality", suffix, limit,
                    "no output depends on a later token (prefixes, suffix changes, gradients)")


def _context_free(s: Setup) -> CheckResult:
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
    return verdict("context_free", worst, limit, "each output depends on its own position's input alone, as "
                    "declared")


def _decode(s: Setup) -> CheckResult:
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
    return verdict("decode", worst, s.tol, "step-by-step decode == forward at every length")


def _prefill(s: Setup) -> CheckResult:
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
    return verdict("prefill", worst, s.tol, "prefill + continuation == one forward, cut at chunk boundaries")


def _kernels(s: Setup) -> CheckResult:
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
    return verdict("kernels", worst, s.tol, f"{said} (outputs and gradients)")


def _batch_independence(s: Setup) -> CheckResult:
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
    return verdict("batch_independence", worst, s.tol, "each sequence's outputs are its own (alone, permuted)")


def _sequence_nll(model: MixerLM, ids: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Summed next-token NLL of each right-padded sequence over its own valid targets."""
    logits, _ = model(ids[:, :-1])
    nll = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none").view(ids.shape[0], -1)
    mask = torch.arange(ids.shape[1] - 1, device=ids.device)[None, :] < (torch.tensor(lengths, device=ids.device)[:, None] - 1)
    return (nll * mask).sum(1)


def _batch_size_invariance(s: Setup) -> CheckResult:
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
    return verdict("batch_size_invariance", worst, s.tol,
                    f"per-sequence NLL is the same alone and in padded batches of {', '.join(map(str, sorted(set(s.batch_sizes) | {n_seq})))}")


def _gradients(s: Setup) -> CheckResult:
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


def _state_size(s: Setup) -> CheckResult:
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


def _interventions(s: Setup) -> CheckResult:
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


def _stack(s: Setup) -> CheckResult:
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
            return verdict("stack", suffix, s.tol * 1e-2, "")
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
        return verdict("stack", worst, s.tol, "")
    for tokens, kept in (counts[0], counts[-1]):
        if kept != B * model.state_size(tokens):
            return CheckResult("stack", False, f"the stack's states hold {kept / B:g} floats per sequence after "
                                               f"{tokens} tokens, but the layers' state_size sums to "
                                               f"{model.state_size(tokens)}")
    return CheckResult("stack", True, f"the whole stack is causal, decodes as it runs forward, and keeps the sum of "
                                      f"its layers' states ({model.state_size(length)} floats at T={length})",
                       worst.error, s.tol)


#: every check in the order the gate runs them: the contract first (the others are not run on a mixer that
#: breaks it)
CHECKS: tuple[tuple[str, Callable[[Setup], CheckResult]], ...] = (
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
)
