"""Memory checks before long work: estimate a workload's peak, compare it with what the machine has (docs/memory.md).

A suite calls :func:`check_forward` (or :func:`check_decode`) from ``Suite.validate(model)``, before any data is
loaded, so a context or batch that cannot fit stops with one sentence naming the estimate and the limit instead of
running for minutes and being killed by the kernel.

* **Estimate.** :func:`probe_forward` runs the workload itself (a forward pass and the loss over its logits, the
  shape of every scoring loop) on one sequence at a short length and measures its peak (:func:`peak_bytes`: on
  CUDA ``max_memory_allocated``, on CPUs every tensor allocated and freed, counted exactly). When the requested length is longer than the probe, two probes (L/2 and
  L) fix ``m(T) = a T + b T^2`` (logits and activations grow linearly, attention's score matrix quadratically; see
  :func:`fit_growth`), extrapolated to the length and multiplied by the batch. Decode (:func:`check_decode`) needs no probe: the mixer's ``state_size`` is its state.
* **Limit.** CPU: ``MemAvailable`` of ``/proc/meminfo``, or less when a cgroup (a container) caps the process.
  CUDA: the device's free memory plus what PyTorch's allocator holds but does not use.
* **Verdict.** The work is refused when the estimate exceeds :data:`HEADROOM` of the limit (the rest absorbs the
  allocator's fragmentation and the estimate's error). Where nothing can be measured the check passes silently.
"""

from __future__ import annotations

import gc
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from harness.errors import MixbenchError

#: share of the available memory a workload may plan to use
HEADROOM = 0.9
#: the longest probe (tokens, one sequence); longer requests are extrapolated from probes at half and at this
PROBE_TOKENS = 1024


@dataclass(frozen=True)
class Limit:
    """Bytes a workload may use now, and where that figure comes from (for the message)."""

    bytes: int
    source: str


@dataclass(frozen=True)
class Estimate:
    """A workload's estimated peak in bytes above what is already allocated, and how it was obtained."""

    bytes: int
    how: str


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"


# ------------------------------------------------------------------------------------------------ limits


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup limit (v2, else v1), or None without a limit."""
    v2_max, v2_now = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if v2_max is not None and v2_now is not None:
        return max(0, v2_max - v2_now)
    v1_max = _read_int("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    v1_now = _read_int("/sys/fs/cgroup/memory/memory.usage_in_bytes")
    if v1_max is not None and v1_now is not None and v1_max < 2**60:  # v1 writes ~2^63 for "no limit"
        return max(0, v1_max - v1_now)
    return None


def available(device: torch.device | str) -> Limit | None:
    """What ``device`` has free for new work, or None where that cannot be read."""
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():  # a CPU-only driver planning GPU jobs: nothing here to read
            return None
        free, _total = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return Limit(int(free + cached), f"free on {device} (torch.cuda.mem_get_info plus PyTorch's unused cache)")
    if device.type != "cpu":
        return None
    ram = _meminfo("MemAvailable")
    room = _cgroup_room()
    if room is not None and (ram is None or room < ram):
        return Limit(room, "left under this container's memory limit (cgroup memory.max)")
    return None if ram is None else Limit(ram, "available (MemAvailable in /proc/meminfo)")


# --------------------------------------------------------------------------------------------- measuring


class _AllocationTrace(TorchDispatchMode):
    """Every tensor storage created inside the mode, in order, and when each is freed: an exact, noise-free record
    of what a workload allocates (a process's resident set moves with allocator caching by 10-20%)."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device_type = device.type
        self.events: list[tuple[int, int, str]] = []  # (key, bytes, op) for an allocation, (key, 0, "") for a free
        self.live = 0
        self.peak = 0
        self._seen: weakref.WeakSet = weakref.WeakSet()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # nothing here is compiled: skip the seconds-long import of torch._dynamo
        return False

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.events.append((key, 0, ""))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == self.device_type:
                storage = t.untyped_storage()
                if storage not in self._seen:  # a view or an in-place result shares a storage counted already
                    self._seen.add(storage)
                    key, nbytes = len(self.events), storage.nbytes()
                    self.events.append((key, nbytes, str(func)))
                    self.live += nbytes
                    weakref.finalize(storage, self._freed, key, nbytes)
        self.peak = max(self.peak, self.live)
        return out


def trace_allocations(fn: Callable[[], object], device: torch.device, collect: bool = True) -> _AllocationTrace:
    """Run ``fn`` and record the tensors it allocates and frees (kernel-internal scratch, never seen by Python, is
    not in it). ``collect``: garbage-collect before and after, so that storages in reference cycles are freed and
    recorded too (the full timeline the extrapolation replays needs it; a peak alone does not, and each collection
    costs about 65 ms in a process holding torch)."""
    if collect:
        gc.collect()
    with _AllocationTrace(device) as trace:
        fn()
    if collect:
        gc.collect()  # storages in reference cycles are freed (and recorded) now
    return trace


def peak_bytes(fn: Callable[[], object], device: torch.device, collect: bool = True) -> int | None:
    """Peak memory ``fn()`` allocated above what was allocated before it, or None where it cannot be measured:
    on CUDA the caching allocator's own peak statistics, elsewhere :func:`trace_allocations`."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    return trace_allocations(fn, device, collect).peak


def replay_peak(short: _AllocationTrace, long: _AllocationTrace, t1: int, t2: int, target: int) -> int | None:
    """The peak of ``long``'s allocations replayed at length ``target``, each allocation grown with the exponent
    its size showed between the two probes (0 for weights-sized buffers, 1 for activations and logits, 2 for
    attention scores); None when the probes ran different sequences of operations (a loop whose count depends on
    the length), which cannot be matched."""
    allocs1 = [(nbytes, op) for _, nbytes, op in short.events if op]
    allocs2 = [(key, nbytes, op) for key, nbytes, op in long.events if op]
    if [op for _, op in allocs1] != [op for _, _, op in allocs2]:
        return None
    grown: dict[int, float] = {}
    for (s1, _), (key, s2, _) in zip(allocs1, allocs2, strict=True):
        exponent = 1.0 if s1 == 0 else min(2.0, max(0.0, math.log(max(s2, 1) / s1) / math.log(t2 / t1)))
        grown[key] = s2 * (target / t2) ** exponent
    live = peak = 0.0
    for key, _, op in long.events:
        live += grown[key] if op else -grown.get(key, 0.0)
        peak = max(peak, live)
    return int(peak)


def _forward_loss(model, length: int, device: torch.device, backward: bool) -> Callable[[], object]:
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, length + 1), generator=torch.Generator().manual_seed(length)).to(device)

    def run() -> None:
        with torch.set_grad_enabled(backward):
            logits, _ = model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
            if backward:
                loss.mean().backward()
        if backward:
            model.zero_grad(set_to_none=True)

    return run


def probe_forward(model, batch: int, length: int, backward: bool = False) -> Estimate | None:
    """Estimated peak of a forward pass (and the loss over its logits; with ``backward`` also the backward pass)
    of ``batch`` sequences of ``length`` tokens, from probes of one sequence (see the module docstring)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        if length <= PROBE_TOKENS:
            peak = peak_bytes(_forward_loss(model, length, device, backward), device)
            if peak is None:
                return None
            return Estimate(peak * batch, f"measured on one sequence of {length:,} tokens, times {batch}")
        t1, t2 = PROBE_TOKENS // 2, PROBE_TOKENS
        short = trace_allocations(_forward_loss(model, t1, device, backward), device)
        long = trace_allocations(_forward_loss(model, t2, device, backward), device)
    finally:
        model.train(was_training)
    replayed = replay_peak(short, long, t1, t2, length)
    if replayed is not None:
        how = f"its allocations at {t1:,} and {t2:,} tokens replayed at {length:,}, times a batch of {batch}"
        return Estimate(replayed * batch, how)
    if long.peak <= 0:
        return None
    linear, quadratic = fit_growth(t1, short.peak, t2, long.peak)
    shape = "with a T^2 term" if quadratic else "linear in T"
    how = f"peaks at {t1:,} and {t2:,} tokens extrapolated {shape}, times a batch of {batch}"
    return Estimate(int((linear * length + quadratic * length**2) * batch), how)


def fit_growth(t1: int, m1: float, t2: int, m2: float, min_share: float = 0.1) -> tuple[float, float]:
    """``(a, b)`` with ``m(T) = a T + b T^2`` through two probes (``t2 = 2 t1``), ``b >= 0``.

    The T^2 term is kept only when it makes at least ``min_share`` of the longer probe: a few percent of
    measurement noise would otherwise read as a quadratic term and, extrapolated a thousandfold, refuse work that
    fits.
    """
    quadratic = max(0.0, (m2 - m1 * t2 / t1) / (t2 * t2 - t1 * t2))
    if quadratic * t2 * t2 < min_share * m2:
        return m2 / t2, 0.0
    return max(0.0, (m2 - quadratic * t2 * t2) / t2), quadratic


def decode_estimate(model, batch: int, length: int) -> Estimate:
    """Decode state after ``length`` tokens for ``batch`` sequences (the mixers' ``state_size``) plus one step's
    logits: what generating to that length holds."""
    element = next(model.parameters()).element_size()
    state = model.state_size(length) * batch * element
    logits = batch * model.config.vocab_size * 4
    return Estimate(int(state + logits), f"the mixers' decode state after {length:,} tokens, for {batch} sequences")


# ---------------------------------------------------------------------------------------------- from the numbers


def training_floor(backbone, batch: int) -> Estimate:
    """A lower bound on one training step's memory, from the shapes alone (nothing is allocated): the token ids
    and targets, and per layer the activations backward must keep at the least (the block's input and the FFN's
    two hidden projections), in float32. Real peaks are several times higher; a step this bound already rules
    out is refused before a model, a batch or a gate run is built for it."""
    tokens = batch * (backbone.context + 1)
    per_token = 16 + backbone.n_layers * 4 * (backbone.d_model + 2 * backbone.ffn_dim)
    return Estimate(tokens * per_token, f"a lower bound: {per_token:,} bytes for each of {tokens:,} tokens of a step")


def check_training(backbone, batch: int, device: torch.device | str, what: str) -> None:
    """Refuse to train ``what`` when even :func:`training_floor` exceeds the memory ``device`` has."""
    check_fits(training_floor(backbone, batch), device, what,
               "lower the context (--context / backbone.context) or the batch size")


# ---------------------------------------------------------------------------------------------- checking


def check_fits(estimate: Estimate | None, device: torch.device | str, what: str, advice: str) -> None:
    """Refuse ``what`` when ``estimate`` exceeds :data:`HEADROOM` of the memory ``device`` has available."""
    limit = available(device)
    if estimate is None or limit is None or estimate.bytes <= HEADROOM * limit.bytes:
        return
    raise MixbenchError(
        f"{what} needs about {gib(estimate.bytes)} at its peak ({estimate.how}), more than the {gib(limit.bytes)} "
        f"{limit.source}; {advice}."
    )


def check_forward(model, batch: int, length: int, what: str, advice: str, backward: bool = False) -> Estimate | None:
    """:func:`probe_forward` then :func:`check_fits` on the model's device; returns the estimate."""
    estimate = probe_forward(model, batch, length, backward)
    check_fits(estimate, next(model.parameters()).device, what, advice)
    return estimate


def check_decode(model, batch: int, length: int, what: str, advice: str) -> Estimate:
    """:func:`decode_estimate` then :func:`check_fits` on the model's device; returns the estimate."""
    estimate = decode_estimate(model, batch, length)
    check_fits(estimate, next(model.parameters()).device, what, advice)
    return estimate
