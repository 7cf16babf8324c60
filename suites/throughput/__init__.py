"""Throughput suite: speed, memory and decode state versus context length (DESIGN §5).

For the model under test and, side by side in the same run, a reference model (attention at the same backbone;
its weights do not matter for speed), every point of a (mode x context x batch) grid is measured:

* ``train``   - forward + backward of the LM loss (tokens/s),
* ``prefill`` - a forward that builds the decode state (tokens/s),
* ``decode``  - per-token latency of ``step()`` with the state already holding T tokens (ms/token).

The speed floor (docs/controls.md): the registered context-free control (``floor="auto"``) at the same backbone is
timed in the same rounds too. Its time is what the backbone costs without any mixing, so ``<mode>_vs_floor``, the
per-round ratio of the floor's time to the mixer's at the model's context (median, bootstrap interval over
rounds), is the mixer's speed on one scale across runs and machines (the board's speed columns and its Pareto
axis), and ``<mode>_mixing_ms``, the per-round difference, is what the mixer's token mixing costs.

Every length of a mode is timed in the same alternating rounds for all models (``suites/throughput/measure.py``,
through :func:`harness.timing.interleaved`): a model's time ratio to another is taken per round and reported as
its median with a bootstrap interval over rounds, the crossovers come from those paired ratios, never from two
tables measured at different times, and a statistic of several lengths (an exponent) is bootstrapped with one
resample of rounds for all lengths, so load that drifts during the sweep cancels instead of bending the curve
(with lengths timed one after another, attention's prefill exponent between 2k and 8k read 1.61, 1.73 and 1.98
in three runs of the same models, each interval narrower than the spread; docs/reproductions.md).

Derived per model: the scaling exponent (least-squares slope of log time vs log T over the upper half of the grid) for
prefill and training, and the share of the quadratic term c T^2 in a least-squares fit of time = a + b T + c T^2 over
every length, at the longest (with three lengths or more); the crossover length from which it is faster than the
reference, per mode (interpolated in log-log between grid points; NaN = "none in grid"); the decode latency ratio
longest/shortest context; peak memory; decode state floats; and, for a mixer whose ``kernel_benchmark`` returns one, its
kernel's achieved FLOP/s as a fraction of this machine's dense-matmul rate, the two timed interleaved.
Intervals: ``range`` (min-max over rounds) for rates and latencies, ``bootstrap`` (rounds resampled) for ratios
and for the statistics derived from several points.

The grid: by default the model's context and 2, 4 and 8 times it (CPU, at most 8,192 tokens; GPU up to 32 times,
at most 65,536): speeds are read at the context, and a fixed 256-8,192 grid timed preset tiny for more than 5
minutes a model. ``max_point_seconds`` bounds each point as a whole (its inputs, first calls and rounds; see
:func:`suites.throughput.measure.measure_points`): a point that cannot fit is not timed, nor are the longer lengths
of its mode, and the run's info says where and why (``sweep_cut``).

Throughput depends on hardware and on how CPU work is threaded, so the device (type, name, thread counts and
OpenMP wait policy: :func:`harness.store.provenance.device_descriptor`) is part of the run's identity; the load average
at the start and end of the run is recorded in its info, not in the identity. Speed is measured on random token
ids and the attention model is timed past its training context (cost does not depend on what the positions mean).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from harness.kit import build_model, device_descriptor, load_average
from harness.config import ModelSpec, as_tuple, to_dict
from harness.errors import ConfigError
from harness.registry import register_suite
from harness.stats import Interval, percentile_interval
from harness.suite import Metric, Suite, SuiteContext, SuiteResult
from harness.timing import Candidate, interleaved, median_replicates
from harness.values import option
from suites.throughput import analysis
from suites.throughput.measure import MODES, Point, TimingPlan, measure_points
from suites.throughput.plots import plot_tables

#: the default grid: the model's context times these multiples, up to the device's longest length. A fixed
#: 256-8,192 grid timed preset tiny (context 128) for more than 5 minutes per model, 64 times past its context
CPU_MULTIPLES, CPU_LONGEST = (1, 2, 4, 8), 8192
GPU_MULTIPLES, GPU_LONGEST = (1, 2, 4, 8, 16, 32), 65536


def default_lengths(context: int, device_type: str) -> tuple[int, ...]:
    """The lengths timed when ``lengths`` is empty: the context and its multiples (CPU: up to 8x and 8,192 tokens;
    GPU: up to 32x and 65,536), so the speeds are read at the context. A context too long for two of them (an
    external model's) gets the device's longest length and the multiples below it."""
    multiples, longest = (GPU_MULTIPLES, GPU_LONGEST) if device_type == "cuda" else (CPU_MULTIPLES, CPU_LONGEST)
    lengths = tuple(context * m for m in multiples if context * m <= longest)
    return lengths if len(lengths) >= 2 else tuple(longest // m for m in reversed(multiples))


@dataclass(frozen=True)
class ThroughputConfig:
    lengths: tuple[int, ...] = option((), min=2)  # () = the model's context x 1, 2, 4, 8 (CPU, to 8k; GPU x 32, to 64k)
    batch_sizes: tuple[int, ...] = option((1,), "batch sizes measured (the first one makes the tables)", min=1)
    modes: tuple[str, ...] = option(MODES, "what is timed", choices=MODES)
    repeats: int = option(5, "timed rounds per point (the median is reported)", min=1)
    warmup: int = option(3, "least warm-up rounds per point (more until the timings settle)", min=3)
    max_warmup: int = option(8, "most warm-up rounds per point", min=3)
    decode_tokens: int = option(8, min=1)  # decode steps per timed call
    reference: str = "attention"  # "" = no reference (no crossovers)
    floor: str = "auto"  # the speed floor: "auto" = the registered context-free control, "" = none, or a mixer name
    #: seconds one point (a length, every model at it) may take, first calls and rounds included; a point that
    #: cannot fit is not timed, nor are the longer lengths of its mode (the run's info: sweep_cut)
    max_point_seconds: float = option(30.0, gt=0)
    #: time every length of a mode in the same rounds, so load that drifts during a sweep hits every length alike
    #: and the exponent's interval is paired over rounds; False: one length after another (only one length's
    #: inputs alive at a time, for contexts whose buffers do not fit together)
    interleave_lengths: bool = True
    memory_cap_mb: int = option(0, min=0)  # CPU only: cap the address space per point (forces OOM in tests); 0 = none

    def __post_init__(self) -> None:
        for name, cast in (("lengths", int), ("batch_sizes", int), ("modes", str)):
            object.__setattr__(self, name, as_tuple(getattr(self, name), cast, f"throughput: {name}"))
        if any(int(t) < 2 for t in self.lengths) or any(int(b) < 1 for b in self.batch_sizes) or not self.batch_sizes:
            raise ConfigError("throughput: lengths must be >= 2 and batch_sizes >= 1.")
        object.__setattr__(self, "lengths", tuple(sorted({int(t) for t in self.lengths})))
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            raise ConfigError(f"throughput: modes must be among {', '.join(MODES)}, got {list(self.modes)}.")
        if self.repeats < 1 or self.decode_tokens < 1 or self.max_point_seconds <= 0:
            raise ConfigError("throughput: repeats and decode_tokens must be >= 1 and max_point_seconds > 0.")
        if not 3 <= self.warmup <= self.max_warmup:
            raise ConfigError(
                f"throughput: warm-up takes 3 <= warmup <= max_warmup rounds, got warmup={self.warmup}, "
                f"max_warmup={self.max_warmup}."
            )
        if self.memory_cap_mb < 0:
            raise ConfigError("throughput: memory_cap_mb must be >= 0.")


Tables = dict[str, dict[int, Point]]  # mode -> length -> point (first batch size)
#: reference models, one per (backbone, reference mixer, device) in a process. Only the model is reused: its
#: timings never are, since every point pairs it with the model under test in the same rounds.
_REFERENCE_MODELS: dict[str, object] = {}


@register_suite("throughput", config=ThroughputConfig)
class Throughput(Suite):
    #: three lengths spanning 8x: the exponent is fitted over the upper half (512-1024); 4096 doubled the suite's
    #: time (25 s per mixer, most of it the attention reference's training step), 2048 took 11-26 s per mixer,
    #: 8192 (the full CPU grid) alone costs minutes. A crossover beyond 1024 reads "> 1024". Three warm-up rounds
    #: exactly (the least allowed) and three timed rounds, each of the mixer and the reference: the paired ratios
    #: need no more to be read against 1
    quickstart: ClassVar[dict[str, Any] | None] = {
        "lengths": (256, 512, 1024), "repeats": 3, "warmup": 3, "max_warmup": 3, "max_point_seconds": 10.0,
    }
    #: only numbers measured against another model in the same interleaved rounds, or within one sweep: tokens/s
    #: of separate runs differ with the machine and its load (a new mixer read 7141 tokens/s against attention's
    #: 1368 from another run, while attention was faster in the new mixer's own interleaved run)
    headline: ClassVar[tuple[str, ...]] = (
        "train_vs_floor", "prefill_vs_floor", "prefill_exponent", "crossover_prefill", "decode_ratio",
    )  # fmt: skip
    device_dependent: ClassVar[bool] = True
    #: an external transformers model (docs/huggingface.md) is timed alone: its prefill, training and decode
    #: through its own cache, exponents and decode ratio; no reference or floor at a backbone it does not have,
    #: no state count and no mixer kernel
    external: ClassVar[bool] = True
    #: 2: the mixer and the reference are timed interleaved per point, warm-up until settled, paired ratios;
    #: 3: the speed floor (the context-free control) in the same rounds, and the mixing cost over it;
    #: 4: speed relative to the floor (``<mode>_vs_floor``) is the headline, peak memory is the exact tensor peak;
    #: 5: every length of a mode in the same rounds, exponents and crossovers bootstrapped paired over rounds;
    #: 6: default lengths from the model's context, ``max_point_seconds`` bounds each point's whole time;
    #: 7: ``<mode>_quadratic_share``, the quadratic term of a fitted a + b T + c T^2 (the cost model's claim)
    version: ClassVar[int] = 7

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        cfg = self.cfg
        load_start = load_average()
        device = next(model.parameters()).device
        external = getattr(model, "external", False)
        lengths = cfg.lengths or default_lengths(model.config.context, device.type)
        name = _label(model)
        reference = None
        if cfg.reference and cfg.reference != name and not external:
            reference = self._reference_model(model, device, cfg.reference)
        floor_name = "" if external else self._floor_name()
        floor = None
        if floor_name and floor_name not in (name, cfg.reference):
            floor = self._reference_model(model, device, floor_name)
        points, ref_points, floor_points = self._sweep(model, reference, floor, lengths, device, ctx)
        tables = _tables(points, cfg.batch_sizes[0])
        reference_tables = _tables(ref_points, cfg.batch_sizes[0]) if reference is not None else None
        metrics = self._metrics(model, tables, reference_tables, lengths, device)
        if floor is not None:
            metrics += _floor_metrics(tables, _tables(floor_points, cfg.batch_sizes[0]), _context(model, lengths))
        elif floor_name and floor_name == name:
            metrics += _floor_itself(tables, _context(model, lengths))
        plots = plot_tables(ctx.work_dir, name, tables, cfg.reference if reference is not None else "",
                            reference_tables)
        points = points + [_tagged(p, "reference") for p in ref_points] + [_tagged(p, "floor") for p in floor_points]
        info = {
            "device": device_descriptor(device),
            "load_average_start": load_start,
            "load_average_end": load_average(),
            "timing": {"rounds": cfg.repeats, "min_warmup": cfg.warmup, "max_warmup": cfg.max_warmup,
                       "interleaved_with": cfg.reference if reference is not None else None},
            "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
            "kernel": model.kernel,
            "packages": {"transformers": model.descriptor.transformers} if external else
            model.mixers[0].package_versions(),
            "lengths": list(lengths),
            "batch_sizes": list(cfg.batch_sizes),
            "reference": cfg.reference or None,
            "floor": floor_name if floor is not None else None,
            "crossovers_outside_grid": [
                m.name for m in metrics if m.name.startswith("crossover") and math.isnan(m.value)
            ],
            "max_point_seconds": cfg.max_point_seconds,
            "sweep_cut": _sweep_cuts(points),
        }
        samples = [{"model": getattr(p, "tag", "measured"), **p.to_json()} for p in points]
        return SuiteResult(metrics=metrics, samples=samples, plots=plots, info=info)

    # ------------------------------------------------------------------ sweeping
    def _floor_name(self) -> str:
        """The speed floor's mixer: the registered context-free control for "auto" (none registered: no floor)."""
        from harness.registry import MIXERS

        if self.cfg.floor != "auto":
            return self.cfg.floor
        return next((e.name for e in MIXERS.entries() if e.cls.control and e.cls.context_free), "")

    def _sweep(self, model, reference, floor, lengths, device,
               ctx: SuiteContext) -> tuple[list[Point], list[Point], list[Point]]:
        """Every grid point of the model and, in the same interleaved rounds, of the reference and the floor (if
        any). The reference comes second: the measured point's ``ratio`` is over it."""
        cfg = self.cfg
        cap = cfg.memory_cap_mb * 2**20 if cfg.memory_cap_mb else None
        plan = TimingPlan(cfg.repeats, cfg.warmup, cfg.max_warmup, budget_s=cfg.max_point_seconds)
        models = ({"measured": model} | ({"reference": reference} if reference is not None else {})
                  | ({"floor": floor} if floor is not None else {}))
        points: dict[str, list[Point]] = {name: [] for name in models}
        groups = [tuple(lengths)] if cfg.interleave_lengths else [(t,) for t in lengths]
        total = len(cfg.modes) * len(groups) * len(cfg.batch_sizes)
        if ctx.progress:
            points_n = len(cfg.modes) * len(lengths) * len(cfg.batch_sizes)
            print(f"[throughput {_label(model)}] {points_n} points (lengths {', '.join(map(str, lengths))}), each "
                  f"bounded by max_point_seconds={cfg.max_point_seconds:g}: at most "
                  f"{points_n * cfg.max_point_seconds / 60:.1f} min", flush=True)
        done = 0
        for mode in cfg.modes:
            for batch in cfg.batch_sizes:
                blocked: dict[str, str] = {}
                seen: dict[str, tuple[int, float, float]] = {}
                for group in groups:
                    done += 1
                    measured, blocked = measure_points(models, mode, group, batch, device, plan, cfg.decode_tokens,
                                                       cap, max_call_seconds=cfg.max_point_seconds, blocked=blocked,
                                                       seen=seen)
                    for name, by_length in measured.items():
                        points[name] += [by_length[t] for t in group]
                    if ctx.progress:
                        for t in group:
                            print(f"[throughput {_label(model)}] {done}/{total} {mode} T={t} B={batch}: "
                                  f"{_progress({name: by_length[t] for name, by_length in measured.items()})}",
                                  flush=True)
        return points["measured"], points.get("reference", []), points.get("floor", [])

    def _reference_model(self, model, device, mixer: str):
        """A comparison model (the reference or the floor) at this backbone on this device, built once per process
        (weights: seed 0)."""
        spec = ModelSpec(mixer, {}, model.config)
        key = repr((to_dict(spec.backbone), mixer, str(device)))
        if key not in _REFERENCE_MODELS:
            reference = build_model(spec, seed=0).to(device)
            reference.set_kernel(None, device)
            _REFERENCE_MODELS[key] = reference
        return _REFERENCE_MODELS[key]

    # ------------------------------------------------------------------ metrics
    def _metrics(self, model, tables: Tables, reference: Tables | None, lengths, device) -> list[Metric]:
        context = _context(model, lengths)
        out: list[Metric] = []

        def speed(mode: str, name: str) -> None:
            p = tables.get(mode, {}).get(context)
            if p is None or p.status != "ok":
                return
            n_tokens = p.tokens_per_s * p.seconds
            spread = Interval(n_tokens / p.seconds_max, n_tokens / p.seconds_min, "range", None)
            out.append(Metric(name, p.tokens_per_s, True, role="speed", interval=spread, n=len(p.rounds),
                              unit="tokens/s"))

        speed("train", "train_tok_s")
        speed("prefill", "prefill_tok_s")
        dec = tables.get("decode", {}).get(context)
        if dec is not None and dec.status == "ok":
            spread = Interval(dec.seconds_min * 1e3, dec.seconds_max * 1e3, "range", None)
            out.append(Metric("decode_ms", dec.seconds * 1e3, False, role="speed", interval=spread,
                              n=len(dec.rounds), unit="ms/token"))
        seconds = {mode: {t: p.seconds for t, p in table.items()} for mode, table in tables.items()}
        rounds = {mode: {t: p.rounds for t, p in table.items() if p.status == "ok"} for mode, table in tables.items()}
        for mode in ("prefill", "train"):
            if mode in seconds and (e := analysis.scaling_exponent(seconds[mode])) is not None:
                iv = analysis.bootstrap_statistic(rounds[mode], analysis.scaling_exponent,
                                                  paired=self.cfg.interleave_lengths)
                out.append(Metric(f"{mode}_exponent", e, False, role="speed", interval=iv, n=len(rounds[mode]),
                                  unit="d log time / d log T"))
            if mode in seconds and (q := analysis.quadratic_share(seconds[mode])) is not None:
                # the cost model's own claim (a quadratic term), beside the exponent: docs/reproductions.md
                iv = analysis.bootstrap_statistic(rounds[mode], analysis.quadratic_share,
                                                  paired=self.cfg.interleave_lengths)
                out.append(Metric(f"{mode}_quadratic_share", q, False, role="speed", interval=iv,
                                  n=len(rounds[mode]), unit="c T_max^2 / fitted time at T_max (a + b T + c T^2)"))
        if "decode" in seconds and (r := analysis.ratio_longest_shortest(seconds["decode"])) is not None:
            iv = analysis.bootstrap_statistic(rounds["decode"], analysis.ratio_longest_shortest,
                                              paired=self.cfg.interleave_lengths)
            out.append(Metric("decode_ratio", r, False, role="speed", interval=iv, n=len(rounds["decode"]),
                              unit="latency longest / shortest context"))
        if reference is not None:
            for mode, table in tables.items():
                out += _paired_metrics(mode, table, reference.get(mode, {}), context, self.cfg.interleave_lengths)
        train = tables.get("train", {}).get(context)
        if train is not None and train.peak_bytes is not None:
            out.append(Metric("train_peak_mb", train.peak_bytes / 2**20, False, unit="MiB"))
        if model.mixers:  # a mixbench model: its decode state and its mixer's own kernel
            out.append(Metric("state_floats_max", float(model.state_size(max(lengths))), False,
                              unit="floats/sequence"))
            out += kernel_efficiency(model, self.cfg.batch_sizes[0], max(lengths), device, self.cfg.repeats)
        return out


def _sweep_cuts(points: list[Point]) -> list[dict[str, Any]]:
    """Where each model's sweep of a mode stopped short, and why: its first point that was not timed for lack of
    time (``skipped``: its first call or its whole point would exceed ``max_point_seconds``)."""
    cuts: dict[tuple[str, str, int], dict[str, Any]] = {}
    for p in sorted(points, key=lambda p: p.length):
        key = (getattr(p, "tag", "measured"), p.mode, p.batch)
        if p.status == "skipped" and key not in cuts:
            cuts[key] = {"model": key[0], "mode": p.mode, "batch": p.batch, "from_length": p.length,
                         "reason": p.detail}
    return list(cuts.values())


def _label(model) -> str:
    """The mixer's name, or an external model's."""
    return model.descriptor.name if getattr(model, "external", False) else model.spec.mixer


def _context(model, lengths) -> int:
    """The measured length closest to the model's training context: where single-number speeds are read."""
    return min(lengths, key=lambda t: (abs(t - model.config.context), t))


def _floor_metrics(tables: Tables, floor: Tables, context: int) -> list[Metric]:
    """Against the speed floor timed in the same rounds, at ``context``, per mode:

    * ``<mode>_vs_floor``: the floor's time / the mixer's time, per round (1 = as fast as a model that mixes
      nothing; higher is faster). The board's speed: a ratio of two models timed interleaved in one run, so it
      compares across runs and machines where tokens/s measured in separate runs do not.
    * ``<mode>_mixing_ms``: the mixer's time minus the floor's, per round: what its token mixing costs.

    Each is the median over rounds with a bootstrap interval (rounds resampled). Per call for train and prefill,
    per generated token for decode."""
    out = []
    for mode, table in tables.items():
        p, f = table.get(context), floor.get(mode, {}).get(context)
        if p is None or f is None or p.status != "ok" or f.status != "ok":
            continue
        n = min(len(p.rounds), len(f.rounds))
        pairs = list(zip(p.rounds[:n], f.rounds[:n]))
        if not pairs:
            continue
        ratios = [b / a for a, b in pairs]
        out.append(_median_metric(f"{mode}_vs_floor", ratios, True,
                                  "floor time / time, paired rounds (1 = as fast as the context-free control)"))
        unit = "ms/token over the floor" if mode == "decode" else f"ms per call ({p.batch}x{context} tokens) over the floor"
        out.append(_median_metric(f"{mode}_mixing_ms", [(a - b) * 1e3 for a, b in pairs], False, unit))
    return out


def _floor_itself(tables: Tables, context: int) -> list[Metric]:
    """The floor's own ``<mode>_vs_floor``: 1 by definition (its interval is the point), so that its row reads on
    the same scale as the mixers measured against it."""
    out = []
    for mode, table in tables.items():
        p = table.get(context)
        if p is not None and p.status == "ok":
            out.append(Metric(f"{mode}_vs_floor", 1.0, True, role="speed", interval=Interval(1.0, 1.0, "bootstrap"),
                              n=len(p.rounds), unit="floor time / time (this model is the floor)"))
    return out


def _median_metric(name: str, values: list[float], higher_is_better: bool, unit: str) -> Metric:
    interval = percentile_interval(median_replicates(values)) if len(values) >= 2 else None
    return Metric(name, float(statistics.median(values)), higher_is_better, role="speed", interval=interval,
                  n=len(values), unit=unit)


def _paired_metrics(mode: str, table: dict[int, Point], reference: dict[int, Point], context: int,
                    paired: bool) -> list[Metric]:
    """The paired time ratio against the reference at the model's context, and the crossover from those ratios
    (``paired``: the lengths were timed in the same rounds, so the crossover's bootstrap resamples rounds jointly)."""
    ratios: dict[int, float | None] = {}
    per_round: dict[int, list[float]] = {}
    for t, p in table.items():
        ref = reference.get(t)
        if p.status != "ok":
            ratios[t] = None  # the mixer ran out of memory or was skipped: not faster
        elif ref is None or ref.status != "ok":
            ratios[t] = 0.0  # only the reference failed: the mixer is faster
        elif p.ratio is not None:
            ratios[t] = p.ratio.median
            per_round[t] = p.ratio.per_round
    out = []
    at_context = table.get(context)
    if at_context is not None and at_context.ratio is not None:
        r = at_context.ratio
        out.append(Metric(f"{mode}_time_ratio", r.median, False, role="speed", interval=r.interval,
                          n=len(r.per_round), unit="time / reference time, paired rounds"))
    cross = analysis.crossover_from_ratios(ratios)
    fixed = {t: v for t, v in ratios.items() if t not in per_round}
    iv = None
    if cross is not None:
        iv = analysis.bootstrap_statistic(per_round, analysis.crossover_from_ratios, fixed, paired=paired)
    out.append(Metric(f"crossover_{mode}", math.nan if cross is None else cross, False, role="speed", interval=iv,
                      n=len(per_round), unit="tokens"))
    return out


def _tables(points: list[Point], batch: int) -> Tables:
    tables: Tables = {}
    for p in points:
        if p.batch == batch:
            tables.setdefault(p.mode, {})[p.length] = p if p.status == "ok" else Point(p.mode, p.length, p.batch, p.status)
    return tables


def _tagged(point: Point, tag: str) -> Point:
    point.tag = tag  # type: ignore[attr-defined]
    return point


def _progress(points: dict[str, Point]) -> str:
    """Each model's median time at one point (four significant digits), then how many times faster or slower the
    measured model is than the second one (the reference, else the floor), as the ratio of the two printed times
    with the division shown: the run's ``<mode>_time_ratio`` is the median of per-round ratios instead, which a
    reader could not check against the printed times."""
    from harness.kit import fmt, speed_ratio_text

    ms = {name: fmt(p.seconds * 1e3) if p.seconds else "" for name, p in points.items()}
    shown = ", ".join(("" if name == "measured" else f"{name} ") + (f"{ms[name]} ms" if ms[name] else p.status)
                      for name, p in points.items())
    names = list(points)
    if len(names) > 1 and ms[names[0]] and ms[names[1]]:
        shown += "; " + speed_ratio_text(ms[names[0]], ms[names[1]], "time", ("measured", f"the {names[1]}"))
    return shown


#: side of the square fp32 matmul whose rate is the machine's peak in :func:`kernel_efficiency`
PEAK_MATMUL = 1024


def kernel_efficiency(model, batch: int, length: int, device: torch.device, repeats: int) -> list[Metric]:
    """The mixer's own kernel (``Mixer.kernel_benchmark``) at ``length``: achieved FLOP/s, and as a fraction of the
    machine's dense fp32 matmul rate, the two timed in interleaved rounds (the fraction is paired per round).
    Nothing for a mixer without a kernel benchmark."""
    bench = model.mixers[0].kernel_benchmark(batch, length, device)
    if bench is None:
        return []
    n = PEAK_MATMUL
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    timings = interleaved(
        [Candidate("kernel", lambda _: bench.run(), device=str(device)),
         Candidate("matmul", lambda _: torch.mm(a, b), device=str(device))],
        max(repeats, 5),
    )
    matmul_flops = 2.0 * n**3

    def rate(name: str, flops: float) -> Metric:
        t = timings.seconds[name]
        spread = Interval(flops / max(t) / 1e9, flops / min(t) / 1e9, "range", None)
        return Metric(f"{name}_gflops", flops / timings.median(name) / 1e9, True, role="speed", interval=spread,
                      n=len(t), unit="GFLOP/s")

    per_pair = timings.ratio("matmul", "kernel")  # matmul time / kernel time, per round
    scale = bench.flops / matmul_flops
    iv = per_pair.interval
    fraction_iv = None if iv is None else Interval(iv.low * scale, iv.high * scale, iv.kind, iv.level)
    return [
        rate("kernel", bench.flops),
        rate("matmul", matmul_flops),
        Metric("kernel_peak_fraction", per_pair.median * scale, True, role="speed", interval=fraction_iv,
               n=len(per_pair.per_round), unit=f"fraction of dense matmul ({bench.label})"),
    ]
