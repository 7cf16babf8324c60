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

from harness.kit import lm_loss, peak_bytes
from harness.timing import Candidate, Ratio, interleaved

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
    first, lone call included) and at most ``max_warmup``; ``budget_s`` bounds a point's whole time (building its
    inputs, its first calls and its rounds, every model at that length together): see :func:`measure_points`."""

    repeats: int
    min_warmup: int = 3
    max_warmup: int = 8
    budget_s: float | None = None

    @property
    def least_calls(self) -> int:
        """Calls of each model after its first that a timed point cannot skip: the warm-up rounds
        :func:`harness.timing.interleaved` always runs, and the two timed rounds its budget always keeps."""
        return max(self.min_warmup - 1, 1) + min(self.repeats, 2)


@dataclass
class _Run:
    """A model's part of one point while it is measured."""

    name: str
    model: object
    work: Workload
    length: int
    inputs: object = None
    setup_s: float = 0.0  # seconds building the inputs (a decode state is a prefill)
    first_call_s: float = 0.0  # seconds of the lone first call (inputs built before the clock)
    point: Point | None = None

    def least_seconds(self, plan: TimingPlan) -> float:
        """What timing this point takes at the least: its inputs, its first call and the calls no budget skips."""
        return self.setup_s + self.first_call_s * (1 + plan.least_calls)


def measure_points(models: dict[str, object], mode: str, lengths: Sequence[int], batch: int, device: torch.device,
                   plan: TimingPlan, decode_tokens: int, memory_cap: int | None, max_call_seconds: float = math.inf,
                   blocked: Mapping[str, str] | None = None, seen: dict[str, tuple[int, float, float]] | None = None,
                   ) -> tuple[dict[str, dict[int, Point]], dict[str, str]]:
    """Time every model in ``models`` (name -> model) at every length of ``lengths`` in the same interleaved rounds.

    Each (model, length) makes its first call alone, shortest length first: a model that runs out of memory, or
    whose first call takes longer than ``max_call_seconds``, is not tried at its longer lengths (nor, through the
    returned ``blocked`` reasons, at the next call's). Then every remaining (model, length) is timed round by
    round, so load that drifts during the sweep hits every length alike and a statistic of several lengths (a
    scaling exponent) can be bootstrapped over rounds, paired. The first name's points get ``ratio``: their time
    over the second name's at the same length, per round. Returns name -> length -> point, and the block reasons.

    ``plan.budget_s`` bounds each point (a length, every model at it): before its first calls, from each model's
    shorter length (``seen``, kept across calls: name -> (length, setup s, first call s); times grow at least
    linearly with the length, a decode step's at least not at all), and after them from what they took, a point
    whose least work (:meth:`_Run.least_seconds`) would exceed the budget drops its costliest model, not tried at
    longer lengths either; when that is the first (measured) model, the sweep stops at this length for all. The
    rounds then get what the points have left. It used to bound each first call alone, then the warm-up and again
    the timed rounds by the budget times the number of lengths, checked only after whole rounds of every length
    and model: preset tiny's sweep to 8,192 tokens ran for more than 5 minutes under ``max_point_seconds=30``.
    """
    blocked = dict(blocked or {})
    seen = {} if seen is None else seen
    points: dict[str, dict[int, Point]] = {name: {} for name in models}
    runs: list[_Run] = []
    modes = {name: model.training for name, model in models.items()}
    first = next(iter(models))
    try:
        for model in models.values():
            model.train(mode == "train")
        with MemoryCap(memory_cap if device.type == "cpu" else None):
            for length in sorted(lengths):
                if plan.budget_s is not None:
                    predicted = {name: _predicted_seconds(seen[name], length, mode, plan) for name in models
                                 if not blocked.get(name) and name in seen}
                    for name, why in _over_budget(predicted, first, plan.budget_s, length, "predicted").items():
                        blocked[name] = why
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
                    seen[name] = (length, run.setup_s, run.first_call_s)
                    if run.first_call_s > max_call_seconds:  # the call only: building a decode state is not timed
                        blocked[name] = (f"skipped: T={length} already took more than {max_call_seconds:g} s per "
                                         "call")
                if plan.budget_s is not None:
                    here = {run.name: run for run in runs if run.length == length}
                    least = {name: run.least_seconds(plan) for name, run in here.items()}
                    for name, why in _over_budget(least, first, plan.budget_s, length, "measured").items():
                        blocked[name] = why
                        here[name].inputs = None
                        here[name].point.status, here[name].point.detail = "skipped", why
                        runs.remove(here[name])
        if runs:  # outside the cap, which only probes each first call: timing a short point under the cap after
            # a longer one had failed under it left oneDNN unable to create a convolution later in the process
            _time_rounds(runs, list(models)[:2], device, plan=plan)
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


def _predicted_seconds(last: tuple[int, float, float], length: int, mode: str, plan: TimingPlan) -> float:
    """A point's least seconds at ``length`` from the model's last measured first call (``(length, setup s, call
    s)``): every cost grown in proportion to the length (a lower bound for prefill and training), a decode step's
    kept as it was (a recurrent step does not grow), the state it decodes from built by a prefill that does."""
    at, setup_s, call_s = last
    grow = length / at
    return setup_s * grow + call_s * (1 if mode == "decode" else grow) * (1 + plan.least_calls)


def _over_budget(seconds: dict[str, float], first: str, budget: float, length: int, how: str) -> dict[str, str]:
    """The models to leave out at ``length`` (and longer) so that the point's least ``seconds`` fit ``budget``, each
    with its reason: the costliest first; when that is ``first`` (the model under test) every model goes, since
    the point exists for it."""
    active, out = dict(seconds), {}
    while active and sum(active.values()) > budget:
        total = sum(active.values())
        worst = max(active, key=active.get)
        if worst == first:
            why = (f"skipped: the sweep stopped at T={length}: its point would take at least {total:.3g} s "
                   f"({how}), more than max_point_seconds={budget:g}")
            return {**out, **{name: why for name in active}}
        out[worst] = (f"skipped: T={length} would take this model at least {active.pop(worst):.3g} s ({how}), "
                      f"more than the point's max_point_seconds={budget:g} allows")
    return out


def _round_budgets(runs: list[_Run], plan: TimingPlan) -> tuple[float | None, float | None]:
    """The warm-up's and the timed rounds' budgets (:func:`harness.timing.interleaved`) from what the points have
    left after their inputs and first calls, a round estimated as every run's first call: the rounds it always
    runs, plus half the rest each, less one round (its budget is checked after a round, so one may overrun it)."""
    if plan.budget_s is None:
        return None, None
    left = plan.budget_s * len({run.length for run in runs}) - sum(run.setup_s + run.first_call_s for run in runs)
    round_s = sum(run.first_call_s for run in runs)
    warm, timed = max(plan.min_warmup - 1, 1), min(plan.repeats, 2)
    spare = max(left - (warm + timed) * round_s, 0.0) / 2
    return max((warm - 1) * round_s + spare, 0.0), max((timed - 1) * round_s + spare, 0.0)


def _time_rounds(runs: list[_Run], pair: list[str], device: torch.device, plan: TimingPlan) -> None:
    """Interleaved rounds of every run (``name@length``); fills their points, and ``pair[0]``'s ratios over
    ``pair[1]``'s at each length where both were timed (never another pair's when one of them failed). Memory that
    runs out only once every run's buffers are alive marks them all ``oom``."""
    key = {id(run): f"{run.name}@{run.length}" for run in runs}
    warmup_budget, budget = _round_budgets(runs, plan)
    try:
        timings = interleaved(
            [Candidate(key[id(run)], _call_with(run), device=str(device)) for run in runs], plan.repeats,
            min_warmup=max(plan.min_warmup - 1, 1), max_warmup=max(plan.max_warmup - 1, 1),
            budget_s=budget, warmup_budget_s=warmup_budget,
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
        t_setup = time.perf_counter()
        run.inputs = run.work.setup()
        run.setup_s = time.perf_counter() - t_setup
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
