"""Timing, peak memory and out-of-memory handling for one (mode, context, batch) point of a model and its reference.

Method: the mixer and the reference model are timed at the same point in alternating rounds (A B, then B A) by
:func:`harness.timing.interleaved`, after a warm-up that lasts until the timings settle, so a change of machine
load hits both alike and their time ratio is taken per round (paired) before it is summarised (median and a
bootstrap interval over rounds). Inputs and decode states are built before the clock starts. CPU:
``time.perf_counter``; CUDA: CUDA events, and decode additionally replayed from a CUDA graph when the mixer's step
can be captured (fixed-shape state).

Each model's first call at a point runs alone, before the rounds: it is the first warm-up call, and it is where
the point's peak memory and an out-of-memory failure are measured, one model at a time. Peak memory is
:func:`harness.model.memory.peak_bytes`: on CUDA the allocator's peak; on CPU the exact peak of the tensors the call
allocates (every storage traced with its free; docs/memory.md). The process's resident set, used before, moved
by several MiB with allocator caching and the first call's one-time set-up (attention read 9 MiB at T=128 and
1.5 MiB at T=256, and 2.3 MiB for the same point in another run). An allocation failure (CPU or CUDA)
is caught and that model's point recorded as ``oom``; ``MemoryCap`` lowers the address-space limit so tests can
force that on purpose.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import resource
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.model.memory import peak_bytes
from harness.timing import Candidate, Ratio, interleaved
from harness.running.training import lm_loss

MODES = ("prefill", "train", "decode")


@dataclass
class Point:
    """One measured grid point of one model. ``seconds`` is the median per call (per generated token for decode)
    over the timed rounds, ``rounds`` every round's; for the model under test, ``ratio`` is its time over the
    reference's at the same point, paired by round."""

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
    rounds: list[float] = field(default_factory=list)
    warmup_rounds: int = 0
    settled: bool | None = None
    ratio: Ratio | None = None

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
            "rounds": self.rounds,
            "warmup_rounds": self.warmup_rounds,
            "settled": self.settled,
            "ratio": None if self.ratio is None else self.ratio.median,
            "ratio_low": None if self.ratio is None or self.ratio.interval is None else self.ratio.interval.low,
            "ratio_high": None if self.ratio is None or self.ratio.interval is None else self.ratio.interval.high,
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
        def train_step(x):  # what one step of `mixbench train` computes, less the optimizer
            model.zero_grad(set_to_none=True)
            lm_loss(model, x[:, :-1], x[:, 1:]).backward()

        return Workload(lambda: ids(length + 1), train_step)
    if mode == "decode":
        def prefilled():
            with torch.no_grad():
                _, states = model(ids(length), model.init_states(batch, device))
            return states, ids(decode_tokens)

        fork = getattr(model, "fork_states", None)  # an external model's cache changes in place (docs/huggingface.md)

        def decode(inputs):
            states, tokens = inputs
            if fork is not None:
                states = fork(states)
            with torch.no_grad():
                for i in range(decode_tokens):
                    _, states = model.step(tokens[:, i], states)

        return Workload(prefilled, decode, per_call=decode_tokens)
    raise ValueError(f"unknown mode {mode!r}")


@dataclass(frozen=True)
class TimingPlan:
    """How long one point may be timed: ``repeats`` rounds after at least ``min_warmup`` warm-up rounds (the
    first, lone call included) and at most ``max_warmup``; ``budget_s`` caps the warm-up and the timed rounds each."""

    repeats: int
    min_warmup: int = 3
    max_warmup: int = 8
    budget_s: float | None = None


@dataclass
class _Run:
    """A model's part of one point while it is measured."""

    name: str
    model: object
    work: Workload
    length: int
    inputs: object = None
    first_call_s: float = 0.0  # seconds of the lone first call (inputs built before the clock)
    point: Point | None = None


def measure_points(models: dict[str, object], mode: str, lengths: Sequence[int], batch: int, device: torch.device,
                   plan: TimingPlan, decode_tokens: int, memory_cap: int | None, max_call_seconds: float = math.inf,
                   blocked: Mapping[str, str] | None = None) -> tuple[dict[str, dict[int, Point]], dict[str, str]]:
    """Time every model in ``models`` (name -> model) at every length of ``lengths`` in the same interleaved rounds.

    Each (model, length) makes its first call alone, shortest length first: a model that runs out of memory, or
    whose first call takes longer than ``max_call_seconds``, is not tried at its longer lengths (nor, through the
    returned ``blocked`` reasons, at the next call's). Then every remaining (model, length) is timed round by
    round, so load that drifts during the sweep hits every length alike and a statistic of several lengths (a
    scaling exponent) can be bootstrapped over rounds, paired. The first name's points get ``ratio``: their time
    over the second name's at the same length, per round. Returns name -> length -> point, and the block reasons.
    """
    blocked = dict(blocked or {})
    points: dict[str, dict[int, Point]] = {name: {} for name in models}
    runs: list[_Run] = []
    modes = {name: model.training for name, model in models.items()}
    try:
        for model in models.values():
            model.train(mode == "train")
        with MemoryCap(memory_cap if device.type == "cpu" else None):
            for length in sorted(lengths):
                for name, model in models.items():
                    if blocked.get(name):
                        points[name][length] = Point(mode, length, batch, blocked[name].split(":")[0],
                                                     detail=blocked[name])
                        continue
                    run = _Run(name, model, workload(model, mode, length, batch, device, decode_tokens), length)
                    run.point = _first_call(run, mode, length, batch, device, memory_cap)
                    points[name][length] = run.point
                    if run.point.status == "oom":
                        blocked[name] = "oom: not attempted, a shorter context already ran out of memory"
                        continue
                    runs.append(run)
                    if run.first_call_s > max_call_seconds:  # the call only: building a decode state is not timed
                        blocked[name] = (f"skipped: T={length} already took more than {max_call_seconds:g} s per "
                                         "call")
        if runs:  # outside the cap, which only probes each first call: timing a short point under the cap after
            # a longer one had failed under it left oneDNN unable to create a convolution later in the process
            _time_rounds(runs, list(models)[:2], device, length_count=len(lengths), plan=plan)
        if mode == "decode" and device.type == "cuda":
            for run in runs:
                if run.point.status == "ok":
                    run.point.graph_seconds, graph = decode_with_cuda_graph(run.model, run.inputs, plan.repeats)
                    run.point.detail = "; ".join(d for d in (run.point.detail, graph) if d)
        return points, blocked
    finally:
        for run in runs:
            run.inputs = None
        for name, model in models.items():
            model.zero_grad(set_to_none=True)
            model.train(modes[name])
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _time_rounds(runs: list[_Run], pair: list[str], device: torch.device, length_count: int,
                 plan: TimingPlan) -> None:
    """Interleaved rounds of every run (``name@length``); fills their points, and ``pair[0]``'s ratios over
    ``pair[1]``'s at each length where both were timed (never another pair's when one of them failed). Memory that runs out only once every run's buffers are alive marks them all ``oom``."""
    key = {id(run): f"{run.name}@{run.length}" for run in runs}
    budget = None if plan.budget_s is None else plan.budget_s * length_count
    try:
        timings = interleaved(
            [Candidate(key[id(run)], _call_with(run), device=str(device)) for run in runs], plan.repeats,
            min_warmup=max(plan.min_warmup - 1, 1), max_warmup=max(plan.max_warmup - 1, 1),
            budget_s=budget, warmup_budget_s=budget,
        )
    except Exception as exc:
        if not is_oom(exc):
            raise
        for run in runs:
            run.point.status = "oom"
            run.point.detail = "ran out of memory in the timed rounds, every timed point's inputs alive"
        return
    for run in runs:
        per = [t / run.work.per_call for t in timings.seconds[key[id(run)]]]
        p = run.point
        p.seconds, p.seconds_min, p.seconds_max = statistics.median(per), min(per), max(per)
        p.rounds, p.warmup_rounds, p.settled = per, timings.warmup_rounds + 1, timings.settled
        p.detail = "; ".join(timings.notes)
    if len(pair) == 2:
        timed = set(key.values())
        for run in runs:
            if run.name == pair[0] and f"{pair[1]}@{run.length}" in timed:
                run.point.ratio = timings.ratio(key[id(run)], f"{pair[1]}@{run.length}")


def _call_with(run: _Run) -> Callable[[object], object]:
    return lambda _: run.work.call(run.inputs)


def _first_call(run: _Run, mode: str, length: int, batch: int, device: torch.device,
                memory_cap: int | None) -> Point:
    """Build the inputs and make the model's first call, alone: its peak memory, or ``oom``."""
    try:
        run.inputs = run.work.setup()
        t0 = time.perf_counter()
        peak = peak_bytes(lambda: run.work.call(run.inputs), device, collect=False)  # 27 calls a run: no 65 ms gc
        run.first_call_s = time.perf_counter() - t0
        return Point(mode, length, batch, "ok", peak_bytes=peak)
    except Exception as exc:
        # under a cap, oneDNN reports a failed allocation as a primitive it "could not create"
        capped_failure = bool(memory_cap) and "could not create a primitive" in str(exc)
        if not (is_oom(exc) or capped_failure):
            raise
        run.inputs = None
        run.model.zero_grad(set_to_none=True)
        first_line = (str(exc).splitlines() or [""])[0][:160]
        return Point(mode, length, batch, "oom", detail=f"{type(exc).__name__}: {first_line}".rstrip(": "))


def measure_point(model, mode: str, length: int, batch: int, device: torch.device, plan: TimingPlan,
                  decode_tokens: int, memory_cap: int | None) -> Point:
    """One model alone at one point (no reference): :func:`measure_points` with one model and one length."""
    points, _ = measure_points({"measured": model}, mode, (length,), batch, device, plan, decode_tokens, memory_cap)
    return points["measured"][length]


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
        timings = interleaved([Candidate("graph", lambda _: graph.replay(), device=str(token.device))], repeats)
        return timings.median("graph"), "cuda graph"
    except Exception as exc:  # capture is best effort: report why it was not possible
        return None, f"no cuda graph: {type(exc).__name__}"


#: state leaves a captured graph keeps as they are (they must not change from step to step)
_FIXED_LEAVES = (type(None), bool, int, float, str)


def _clone_tree(state):
    """A copy of a decode state (any pytree the mixer contract allows: tensors in dicts, lists, tuples and
    dataclasses; docs/state_contract.md) whose tensors are new buffers."""
    if isinstance(state, torch.Tensor):
        return state.clone()
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return dataclasses.replace(state, **{f.name: _clone_tree(getattr(state, f.name))
                                             for f in dataclasses.fields(state) if f.init})
    if isinstance(state, dict):
        return {k: _clone_tree(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_clone_tree(v) for v in state)
    if isinstance(state, _FIXED_LEAVES):
        return state
    raise TypeError(f"state of type {type(state).__name__} cannot be captured")


def _copy_tree(src, dst) -> None:
    """Copy ``src``'s tensors into ``dst``'s (the graph's static buffers); a state whose shapes or non-tensor
    values change from step to step (a KV cache that grows, a Python length counter) cannot be replayed."""
    if isinstance(src, torch.Tensor):
        if src.shape != dst.shape:
            raise ValueError("the decode state changes shape")
        dst.copy_(src)
    elif dataclasses.is_dataclass(src) and not isinstance(src, type):
        for f in dataclasses.fields(src):
            _copy_tree(getattr(src, f.name), getattr(dst, f.name))
    elif isinstance(src, dict):
        for k in src:
            _copy_tree(src[k], dst[k])
    elif isinstance(src, (list, tuple)):
        for a, b in zip(src, dst):
            _copy_tree(a, b)
    elif isinstance(src, _FIXED_LEAVES):
        if src != dst:
            raise ValueError("the decode state changes a value that is not a tensor")
    else:
        raise TypeError(f"state of type {type(src).__name__} cannot be captured")
