"""Throughput suite: speed, memory and decode state versus context length (DESIGN §5).

For the model under test and, side by side in the same run, a reference model (attention at the same backbone;
its weights do not matter for speed), every point of a (mode x context x batch) grid is measured:

* ``train``   - forward + backward of the LM loss (tokens/s),
* ``prefill`` - a forward that builds the decode state (tokens/s),
* ``decode``  - per-token latency of ``step()`` with the state already holding T tokens (ms/token).

Derived per model: the scaling exponent (least-squares slope of log time vs log T over the upper half of the
grid) for prefill and training; the crossover length from which it is faster than the reference, per mode
(interpolated in log-log between grid points; NaN = "none in grid"); the decode latency ratio longest/shortest
context; peak memory; decode state floats. For ProtoT, the chunked kernel's achieved FLOP/s as a fraction of
this machine's dense-matmul rate measured in the same run. Timing spreads are the [min, max] over repeats.

Throughput depends on hardware, so the device (type, name, threads) is part of the run's identity: the same
checkpoint measured on a GPU is a different run from the CPU one. Speed is measured on random token ids and
the attention model is timed past its training context (cost does not depend on what the positions mean).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import ClassVar

import torch

from harness.backbone import build_model
from harness.config import ModelSpec, as_tuple, to_dict
from harness.errors import ConfigError
from harness.provenance import device_descriptor
from harness.registry import register_suite
from harness.stats import Interval
from harness.suite import Metric, Suite, SuiteContext, SuiteResult
from suites.throughput import analysis
from suites.throughput.measure import MODES, Point, measure_point, timed
from suites.throughput.plots import plot_tables

CPU_LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
GPU_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)


@dataclass(frozen=True)
class ThroughputConfig:
    lengths: tuple[int, ...] = ()  # () = the device default: 256..8192 on CPU, 1k..64k on GPU
    batch_sizes: tuple[int, ...] = (1,)
    modes: tuple[str, ...] = MODES
    repeats: int = 5
    warmup: int = 1
    decode_tokens: int = 8  # decode steps per timed call
    reference: str = "attention"  # "" = no reference (no crossovers)
    max_point_seconds: float = 30.0  # a warm-up slower than this skips the longer contexts of that mode
    memory_cap_mb: int = 0  # CPU only: cap the address space per point (forces OOM in tests); 0 = none

    def __post_init__(self) -> None:
        for name, cast in (("lengths", int), ("batch_sizes", int), ("modes", str)):
            object.__setattr__(self, name, as_tuple(getattr(self, name), cast, f"throughput: {name}"))
        if any(int(t) < 2 for t in self.lengths) or any(int(b) < 1 for b in self.batch_sizes) or not self.batch_sizes:
            raise ConfigError("throughput: lengths must be >= 2 and batch_sizes >= 1.")
        object.__setattr__(self, "lengths", tuple(sorted({int(t) for t in self.lengths})))
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            raise ConfigError(f"throughput: modes must be among {', '.join(MODES)}, got {list(self.modes)}.")
        if self.repeats < 1 or self.warmup < 0 or self.decode_tokens < 1 or self.max_point_seconds <= 0:
            raise ConfigError("throughput: repeats and decode_tokens must be >= 1, warmup >= 0, max_point_seconds > 0.")
        if self.memory_cap_mb < 0:
            raise ConfigError("throughput: memory_cap_mb must be >= 0.")


Tables = dict[str, dict[int, Point]]  # mode -> length -> point (first batch size)
_REFERENCE_CACHE: dict[str, tuple[Tables, list[Point]]] = {}


@register_suite("throughput", config=ThroughputConfig)
class Throughput(Suite):
    headline: ClassVar[tuple[str, ...]] = (
        "train_tok_s", "prefill_tok_s", "prefill_exponent", "crossover_prefill", "decode_ratio",
    )  # fmt: skip
    device_dependent: ClassVar[bool] = True

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        cfg = self.cfg
        device = next(model.parameters()).device
        lengths = cfg.lengths or (GPU_LENGTHS if device.type == "cuda" else CPU_LENGTHS)
        points = self._sweep(model, lengths, device, ctx, label=model.spec.mixer)
        tables = _tables(points, cfg.batch_sizes[0])
        reference_tables = None
        if cfg.reference and cfg.reference != model.spec.mixer:
            reference_tables, ref_points = self._reference(model, lengths, device, ctx)
            points = points + [_tagged(p, "reference") for p in ref_points]
        metrics = self._metrics(model, tables, reference_tables, lengths, device)
        plots = plot_tables(ctx.work_dir, model.spec.mixer, tables, cfg.reference, reference_tables)
        info = {
            "device": device_descriptor(device),
            "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
            "kernel": model.kernel,
            "packages": model.mixers[0].package_versions(),
            "lengths": list(lengths),
            "batch_sizes": list(cfg.batch_sizes),
            "reference": cfg.reference or None,
            "crossovers_outside_grid": [
                m.name for m in metrics if m.name.startswith("crossover") and math.isnan(m.value)
            ],
        }
        samples = [{"model": getattr(p, "tag", "measured"), **p.to_json()} for p in points]
        return SuiteResult(metrics=metrics, samples=samples, plots=plots, info=info)

    # ------------------------------------------------------------------ sweeping
    def _sweep(self, model, lengths, device, ctx: SuiteContext, label: str) -> list[Point]:
        cfg = self.cfg
        cap = cfg.memory_cap_mb * 2**20 if cfg.memory_cap_mb else None
        points: list[Point] = []
        total = len(cfg.modes) * len(lengths) * len(cfg.batch_sizes)
        done = 0
        for mode in cfg.modes:
            for batch in cfg.batch_sizes:
                blocked = ""
                for length in lengths:
                    done += 1
                    if blocked:
                        points.append(Point(mode, length, batch, blocked.split(":")[0], detail=blocked))
                        continue
                    point = measure_point(model, mode, length, batch, device, cfg.repeats, cfg.warmup,
                                          cfg.decode_tokens, cap)
                    points.append(point)
                    if ctx.progress:
                        shown = f"{point.seconds * 1e3:.2f} ms" if point.seconds else point.status
                        print(f"[throughput {label}] {done}/{total} {mode} T={length} B={batch}: {shown}", flush=True)
                    if point.status == "oom":
                        blocked = "oom: not attempted, a shorter context already ran out of memory"
                    elif point.seconds * (cfg.decode_tokens if mode == "decode" else 1) > cfg.max_point_seconds:
                        blocked = f"skipped: T={length} already took more than {cfg.max_point_seconds} s per call"
        return points

    def _reference(self, model, lengths, device, ctx) -> tuple[Tables, list[Point]]:
        """The reference model's tables, measured once per process for a given backbone, grid and device."""
        spec = ModelSpec(self.cfg.reference, {}, model.config)
        key = repr((to_dict(spec.backbone), self.cfg.reference, lengths, to_dict(self.cfg), device_descriptor(device)))
        if key not in _REFERENCE_CACHE:
            reference = build_model(spec, seed=0).to(device)
            reference.set_kernel(None, device)
            points = self._sweep(reference, lengths, device, ctx, label=f"reference {self.cfg.reference}")
            _REFERENCE_CACHE[key] = (_tables(points, self.cfg.batch_sizes[0]), points)
        return _REFERENCE_CACHE[key]

    # ------------------------------------------------------------------ metrics
    def _metrics(self, model, tables: Tables, reference: Tables | None, lengths, device) -> list[Metric]:
        context = min(lengths, key=lambda t: (abs(t - model.config.context), t))
        out: list[Metric] = []

        def speed(mode: str, name: str) -> None:
            p = tables.get(mode, {}).get(context)
            if p is None or p.status != "ok":
                return
            n_tokens = p.tokens_per_s * p.seconds
            spread = Interval(n_tokens / p.seconds_max, n_tokens / p.seconds_min, "range", None)
            out.append(Metric(name, p.tokens_per_s, True, role="speed", interval=spread, n=p.batch, unit="tokens/s"))

        speed("train", "train_tok_s")
        speed("prefill", "prefill_tok_s")
        dec = tables.get("decode", {}).get(context)
        if dec is not None and dec.status == "ok":
            spread = Interval(dec.seconds_min * 1e3, dec.seconds_max * 1e3, "range", None)
            out.append(Metric("decode_ms", dec.seconds * 1e3, False, role="speed", interval=spread, n=dec.batch,
                              unit="ms/token"))
        seconds = {mode: {t: p.seconds for t, p in table.items()} for mode, table in tables.items()}
        for mode in ("prefill", "train"):
            if mode in seconds and (e := analysis.scaling_exponent(seconds[mode])) is not None:
                out.append(Metric(f"{mode}_exponent", e, False, role="speed", unit="d log time / d log T"))
        if "decode" in seconds and (r := analysis.ratio_longest_shortest(seconds["decode"])) is not None:
            out.append(Metric("decode_ratio", r, False, role="speed", unit="latency longest / shortest context"))
        if reference is not None:
            for mode in seconds:
                ref = {t: p.seconds for t, p in reference.get(mode, {}).items()}
                cross = analysis.crossover(seconds[mode], ref)
                out.append(Metric(f"crossover_{mode}", math.nan if cross is None else cross, False, role="speed",
                                  unit="tokens"))
        train = tables.get("train", {}).get(context)
        if train is not None and train.peak_bytes is not None:
            out.append(Metric("train_peak_mb", train.peak_bytes / 2**20, False, unit="MiB"))
        out.append(Metric("state_floats_max", float(model.state_size(max(lengths))), False, unit="floats/sequence"))
        out += kernel_efficiency(model, max(lengths), device)
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


def matmul_gflops(device: torch.device, n: int = 1024, repeats: int = 5) -> float:
    """This machine's dense fp32 matmul rate, measured now: the physical limit kernels are compared with."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    return 2 * n**3 / statistics.median(timed(lambda: a @ b, device, repeats, 2)) / 1e9


def kernel_efficiency(model, length: int, device: torch.device) -> list[Metric]:
    """ProtoT only: achieved FLOP/s of the chunked prefix-mean kernel at ``length`` / the measured matmul rate."""
    from mixers.protot import ProtoT
    from mixers.protot_kernels import chunk_size, chunked_flops, prefix_mean_chunked

    layer = next((m for m in model.mixers if isinstance(m, ProtoT)), None)
    if layer is None or layer.kernel != "chunked":
        return []
    R, m = layer.cfg.n_prototypes, layer.value_dim
    log_beta = torch.nn.functional.logsigmoid(layer.beta_logit.detach())
    w = torch.rand(1, length, R, device=device).softmax(-1) * 0.1
    v, rho = torch.randn(1, length, m, device=device), torch.rand(1, length, R, device=device).softmax(-1)
    state = (torch.zeros(1, R, m, device=device), torch.zeros(1, R, device=device))
    with torch.no_grad():
        seconds = statistics.median(
            timed(lambda: prefix_mean_chunked(w, v, rho, log_beta, *state, layer.cfg.mass_floor, layer.cfg.chunk_size),
                  device, 5, 1)
        )
    chunk = chunk_size(log_beta, layer.cfg.chunk_size, length, layer.cfg.mass_floor)
    achieved = chunked_flops(1, length, R, m, chunk) / seconds / 1e9
    peak = matmul_gflops(device)
    return [
        Metric("kernel_gflops", achieved, True, unit="GFLOP/s"),
        Metric("matmul_gflops", peak, True, unit="GFLOP/s"),
        Metric("kernel_peak_fraction", achieved / peak, True, unit="fraction of dense matmul"),
    ]
