"""A training's time, estimated before anything starts, and refused past a stated limit unless ``--yes`` is given.

A token budget (``--tokens``, a plan's ``train.token_budget``, a ladder rung's ``tokens``) or a rung's width and
depth sets how long a training runs, and nothing bounded it: a rung of 10^12 tokens started about 10^8 steps
without a word. Before any tokenizer, checkpoint folder or gate, each model that would train longer than its
preset's own setting is estimated here: its steps and tokens from the spec, its speed measured on this machine
(the median of a few optimizer steps of the model itself on random tokens, after one untimed step). An
estimate above :data:`MAX_TRAIN_HOURS` is refused in one sentence (exit 2) naming steps, tokens, speed and time.

A preset's own setting (no larger budget, width or depth) is not measured: it is the project's stated cost, and
the check then costs nothing (the quickstart and the tests train at or below their presets).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import torch

from harness.config import RunSpec
from harness.errors import ConfigError, MixbenchError

#: the longest one model's training may be estimated to take without ``--yes``
MAX_TRAIN_HOURS = 24.0
#: the timing, after one untimed step (first-call set-up): at least MEASURED_STEPS optimizer steps, more while it
#: has lasted under MEASURE_SECONDS, at most MAX_MEASURED_STEPS; their median counts (two steps of a tiny model
#: read 7k and 43k tokens/s on a loaded machine)
MEASURED_STEPS, MAX_MEASURED_STEPS, MEASURE_SECONDS = 2, 50, 0.5
#: measured (tokens/s, steps timed) per (model, batch, device): one measurement per model size in a process
_SPEEDS: dict[str, tuple[float, int]] = {}
#: training FLOPs of each (mixer, config, preset)'s own setting
_PRESET_FLOPS: dict[str, float] = {}


@dataclass(frozen=True)
class TrainingEstimate:
    """How long training ``spec`` would take: optimizer steps, tokens, and the speed that times them."""

    steps: int
    tokens: int
    tokens_per_s: float
    how: str

    @property
    def seconds(self) -> float:
        return self.tokens / self.tokens_per_s


def check_training_time(spec: RunSpec, device: str | torch.device, yes: bool, what: str) -> TrainingEstimate | None:
    """Refuse to start ``what`` when its estimated training time on this machine exceeds :data:`MAX_TRAIN_HOURS`
    (``yes``: start it anyway, unmeasured). Returns the estimate, or None when nothing was measured."""
    if yes or not larger_than_preset(spec):
        return None
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        return None  # a CPU-only Ray head planning GPU jobs: nothing can be measured here
    estimate = estimate_training(spec, device)
    if estimate.seconds <= MAX_TRAIN_HOURS * 3600:
        return estimate
    raise MixbenchError(
        f"{what} would take about {duration(estimate.seconds)} on this machine ({estimate.steps:,} steps, "
        f"{estimate.tokens:,} tokens at {estimate.tokens_per_s:,.0f} tokens/s, {estimate.how}), more than the "
        f"{MAX_TRAIN_HOURS:g}-hour limit; lower the token budget or the model's size, or pass --yes to start it anyway."
    )


def training_label(spec: RunSpec) -> str:
    """``training mamba at preset quick (width 192, 6 layers)``: which model of a grid or ladder a refusal means."""
    b = spec.model.backbone
    layers = f"{b.n_layers} layer" + ("s" if b.n_layers != 1 else "")
    return f"training {spec.model.mixer} at preset {spec.preset} (width {b.d_model}, {layers})"


def larger_than_preset(spec: RunSpec) -> bool:
    """Whether ``spec`` trains more FLOPs than its preset's own setting of the same mixer and config (a spec
    without a known preset always counts as larger)."""
    from harness.config import PRESETS
    from harness.model.flops import spec_flops_per_token
    from harness.model.specs import make_run_spec

    if spec.preset not in PRESETS:
        return True
    key = repr((spec.model.mixer, spec.model.to_json()["mixer_config"], spec.preset))
    if key not in _PRESET_FLOPS:  # a grid asks for one mixer many times (seeds, budgets): built once on meta
        try:
            own = make_run_spec(spec.model.mixer, spec.preset, dict(spec.model.mixer_config))
        except (ConfigError, MixbenchError):  # the mixer's config needs an override the preset lacks: measure
            return True
        _PRESET_FLOPS[key] = spec_flops_per_token(own.model).total * own.train.token_budget
    return spec_flops_per_token(spec.model).total * spec.train.token_budget > _PRESET_FLOPS[key]


def estimate_training(spec: RunSpec, device: str | torch.device) -> TrainingEstimate:
    """Steps and tokens of ``spec`` (as :func:`harness.running.training.train` counts them) at the speed measured
    here (:func:`measure_tokens_per_s`)."""
    context = spec.model.backbone.context
    steps = spec.train.steps(context)
    try:
        speed, timed = measure_tokens_per_s(spec, device)
    except (MemoryError, RuntimeError) as exc:  # torch's OutOfMemoryError is a RuntimeError
        text = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        if not isinstance(exc, MemoryError) and not any(
                s in text.lower() for s in ("out of memory", "can't allocate", "not enough memory", "bad_alloc")):
            raise
        raise MixbenchError(f"{training_label(spec)}: one training step of this model ran out of memory while its "
                            f"speed was measured ({text}); lower the context, the batch size or the model's size."
                            ) from None
    return TrainingEstimate(steps, steps * spec.train.batch_size * context, speed,
                            f"the median of {timed} optimizer steps of this model measured here")


def measure_tokens_per_s(spec: RunSpec, device: str | torch.device) -> tuple[float, int]:
    """Training tokens per second of ``spec``'s model on ``device`` and the steps timed: optimizer steps (the
    forward, backward and AdamW update one step of training makes, bf16 autocast on CUDA) on random tokens after
    one untimed step, as many as :data:`MEASURED_STEPS` says, their median. The global random state is kept."""
    from harness.model.backbone import build_model
    from harness.running.training import adamw, lm_loss, param_groups

    dev = torch.device(device)
    key = repr((spec.model.to_json(), spec.train.batch_size, str(dev)))
    if key in _SPEEDS:
        return _SPEEDS[key]
    cuda = dev.type == "cuda"
    context, batch = spec.model.backbone.context, spec.train.batch_size
    with torch.random.fork_rng(devices=[dev] if cuda else []):
        model = build_model(spec.model, seed=0).to(dev)
        model.set_kernel(None, dev)
        model.train()
        optimizer = adamw(param_groups(model, spec.train.weight_decay), lr=spec.train.lr, betas=spec.train.betas)
        ids = torch.randint(0, spec.model.backbone.vocab_size, (batch, context + 1),
                            generator=torch.Generator().manual_seed(0)).to(dev)

        def step() -> None:
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
                loss = lm_loss(model, ids[:, :-1], ids[:, 1:])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if cuda:
                torch.cuda.synchronize(dev)

        step()
        times: list[float] = []
        t_start = time.perf_counter()
        while len(times) < MEASURED_STEPS or (time.perf_counter() - t_start < MEASURE_SECONDS
                                               and len(times) < MAX_MEASURED_STEPS):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    _SPEEDS[key] = (batch * context / max(statistics.median(times), 1e-9), len(times))
    return _SPEEDS[key]


def duration(seconds: float) -> str:
    """``seconds`` in the largest unit that reads naturally (minutes, hours, days, years)."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.0f} s"


def grid_cost_line(specs: list[RunSpec], suite_runs: int, device: str | torch.device) -> str:
    """What a grid is about to spend, said before it starts: the models it trains, their optimizer steps and
    tokens, the time that takes at the speed measured here (a few steps of each distinct model), and the suite
    runs that follow (their time is not estimated: a suite's cost depends on its config)."""
    dev = torch.device(device)
    steps = tokens = 0
    seconds = 0.0
    for spec in specs:
        context = spec.model.backbone.context
        n = spec.train.steps(context)
        steps += n
        tokens += n * spec.train.batch_size * context
        if dev.type == "cuda" and not torch.cuda.is_available():
            seconds = math.nan  # a CPU-only head planning GPU jobs: nothing can be measured here
        elif not math.isnan(seconds):
            speed, _ = measure_tokens_per_s(spec, dev)
            seconds += n * spec.train.batch_size * context / speed
    took = f"{seconds:.1f} s" if seconds < 10 else duration(seconds)
    timed = ("" if math.isnan(seconds) else
             f", about {took} of training at the speed measured here (a few optimizer steps of each)")
    return (f"[mixbench] this grid trains {len(specs)} model(s): {steps:,} optimizer steps, {tokens:,} tokens{timed}; "
            f"then {suite_runs} suite run(s)")


def check_requests_time(reqs) -> None:
    """Refuse a grid with a model estimated to train past the time limit (unless its options say ``yes``), before
    any work: the runner checks again, from a cache, before its jobs (:mod:`harness.running.training_time`)."""
    from harness.model.specs import make_run_spec

    for req in reqs:
        for mixer in req.all_mixers():
            spec = make_run_spec(mixer, req.preset, req.mixer_configs.get(mixer), req.backbone_overrides,
                                 req.train_overrides, req.data_overrides, match=req.match)
            check_training_time(spec, req.options.device, req.options.yes, training_label(spec))
