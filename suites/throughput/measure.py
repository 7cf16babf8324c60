"""Timing, peak memory and out-of-memory handling for one model at one (mode, context, batch) point.

Method (after flash-linear-attention's and mamba-ssm's benchmarks): warm-up calls first (autotuning, lazy
initialisation, allocator growth), inputs and decode states built before the clock starts, several timed
repeats, median and spread reported. CPU: ``time.perf_counter``. CUDA: CUDA events around each call, and decode
additionally replayed from a CUDA graph when the mixer's step can be captured (fixed-shape state).

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` after a reset; on Linux CPUs the process's peak
resident set (VmHWM, reset through /proc/self/clear_refs) minus the resident set before the point, so it is the
extra memory the point needed (freed heap pages are handed back first, see :func:`_release_free_memory`). An allocation failure (CPU or CUDA) is caught and the point recorded as
``oom``; ``MemoryCap`` lowers the address-space limit so tests can force that on purpose.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import resource
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

MODES = ("prefill", "train", "decode")


@dataclass
class Point:
    """One measured grid point. ``seconds`` is per call (per generated token for decode)."""

    mode: str
    length: int
    batch: int
    status: str  # ok | oom | skipped
    seconds: float | None = None
    seconds_min: float | None = None
    seconds_max: float | None = None
    peak_bytes: int | None = None
    graph_seconds: float | None = None  # decode replayed from a CUDA graph
    detail: str = ""

    @property
    def tokens_per_s(self) -> float | None:
        if self.seconds is None:
            return None
        tokens = self.batch if self.mode == "decode" else self.batch * self.length
        return tokens / self.seconds

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "length": self.length,
            "batch": self.batch,
            "status": self.status,
            "seconds": self.seconds,
            "seconds_min": self.seconds_min,
            "seconds_max": self.seconds_max,
            "tokens_per_s": self.tokens_per_s,
            "peak_bytes": self.peak_bytes,
            "graph_seconds": self.graph_seconds,
            "detail": self.detail,
        }


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(
        s in text for s in ("can't allocate memory", "out of memory", "not enough memory", "failed to allocate", "bad_alloc")
    )


def _proc_status(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@contextlib.contextmanager
def MemoryCap(extra_bytes: int | None) -> Iterator[None]:
    """Limit the address space to what is mapped now plus ``extra_bytes`` (CPU; None or 0 = no cap)."""
    if not extra_bytes:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = _proc_status("VmSize")
    if mapped is None:
        yield
        return
    cap = mapped + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _release_free_memory() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``) so the resident set before a point holds only
    live data. Without it, memory an earlier point (or the warm-up) freed is reused without raising the resident
    set, and a point's peak reads as 0."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the peak is then a lower bound
        pass


class PeakMemory:
    """Extra memory a block of work needed at its peak (bytes), or None where it cannot be measured."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak: int | None = None

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            _release_free_memory()
            try:
                Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
                self._base = _proc_status("VmRSS")
            except OSError:
                self._base = None
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self._base
        elif self._base is not None:
            hwm = _proc_status("VmHWM")
            self.peak = None if hwm is None else max(0, hwm - self._base)


def timed(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int) -> list[float]:
    """Seconds per call of ``fn`` over ``repeats`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1000.0)
    else:
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return times


@dataclass(frozen=True)
class Workload:
    """What to time for one mode: ``setup()`` builds inputs (untimed), ``call(inputs)`` is timed."""

    setup: Callable[[], object]
    call: Callable[[object], object]
    per_call: int = 1  # decode: tokens generated per call


def workload(model, mode: str, length: int, batch: int, device: torch.device, decode_tokens: int) -> Workload:
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(length * 31 + batch)

    def ids(n: int) -> torch.Tensor:
        return torch.randint(0, vocab, (batch, n), generator=gen).to(device)

    if mode == "prefill":
        def prefill(x):
            with torch.no_grad():
                return model(x, model.init_states(batch, device))

        return Workload(lambda: ids(length), prefill)
    if mode == "train":
        def train_step(x):
            model.zero_grad(set_to_none=True)
            logits, _ = model(x[:, :-1])
            F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten()).backward()

        return Workload(lambda: ids(length + 1), train_step)
    if mode == "decode":
        def prefilled():
            with torch.no_grad():
                _, states = model(ids(length), model.init_states(batch, device))
            return states, ids(decode_tokens)

        def decode(inputs):
            states, tokens = inputs
            with torch.no_grad():
                for i in range(decode_tokens):
                    _, states = model.step(tokens[:, i], states)

        return Workload(prefilled, decode, per_call=decode_tokens)
    raise ValueError(f"unknown mode {mode!r}")


def measure_point(model, mode: str, length: int, batch: int, device: torch.device, repeats: int, warmup: int,
                  decode_tokens: int, memory_cap: int | None) -> Point:
    """Time one point; an allocation failure becomes an ``oom`` point instead of an exception."""
    work = workload(model, mode, length, batch, device, decode_tokens)
    was_training = model.training
    model.train(mode == "train")
    try:
        with MemoryCap(memory_cap if device.type == "cpu" else None):
            inputs = work.setup()
            with PeakMemory(device) as mem:
                times = timed(lambda: work.call(inputs), device, repeats, warmup)
        per = [t / work.per_call for t in times]
        point = Point(mode, length, batch, "ok", statistics.median(per), min(per), max(per), mem.peak)
        if mode == "decode" and device.type == "cuda":
            point.graph_seconds, point.detail = decode_with_cuda_graph(model, inputs, repeats)
        return point
    except Exception as exc:
        # under a cap, oneDNN reports a failed allocation as a primitive it "could not create"
        capped_failure = bool(memory_cap) and "could not create a primitive" in str(exc)
        if not (is_oom(exc) or capped_failure):
            raise
        first_line = (str(exc).splitlines() or [""])[0][:160]
        return Point(mode, length, batch, "oom", detail=f"{type(exc).__name__}: {first_line}".rstrip(": "))
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def decode_with_cuda_graph(model, inputs, repeats: int) -> tuple[float | None, str]:
    """Per-token decode seconds replaying one captured step() (static token and state buffers).

    Only mixers whose decode state keeps its shapes can be captured: a growing KV cache cannot, and is
    reported as such. Not exercised on CPU machines.
    """
    states, tokens = inputs
    token = tokens[:, 0].clone()
    try:
        static_states = [_clone_tree(s) for s in states]
        with torch.no_grad():
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    model.step(token, static_states)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                _, new_states = model.step(token, static_states)
                _copy_tree(new_states, static_states)
        times = timed(graph.replay, token.device, repeats, 1)
        return statistics.median(times), "cuda graph"
    except Exception as exc:  # capture is best effort: report why it was not possible
        return None, f"no cuda graph: {type(exc).__name__}"


def _clone_tree(state):
    if isinstance(state, torch.Tensor):
        return state.clone()
    if isinstance(state, dict):
        return {k: _clone_tree(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_clone_tree(v) for v in state)
    raise TypeError(f"state of type {type(state).__name__} cannot be captured")


def _copy_tree(src, dst) -> None:
    if isinstance(src, torch.Tensor):
        if src.shape != dst.shape:
            raise ValueError("the decode state changes shape")
        dst.copy_(src)
    elif isinstance(src, dict):
        for k in src:
            _copy_tree(src[k], dst[k])
    elif isinstance(src, (list, tuple)):
        for a, b in zip(src, dst):
            _copy_tree(a, b)
    else:
        raise TypeError(f"state of type {type(src).__name__} cannot be captured")
