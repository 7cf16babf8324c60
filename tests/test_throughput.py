"""Throughput: derived metrics on synthetic timing tables with known answers, OOM handling, the suite end to end."""

from __future__ import annotations

import math

import pytest
import torch

from harness.backbone import build_model
from harness.config import BackboneConfig, ModelSpec
from harness.suite import SuiteContext
from suites.throughput import Throughput, ThroughputConfig, analysis
from suites.throughput.measure import measure_point

GRID = [256, 512, 1024, 2048, 4096, 8192]


def test_scaling_exponent_recovers_known_powers():
    for power in (1.0, 1.5, 2.0):
        table = {t: 3e-6 * t**power for t in GRID}
        assert analysis.scaling_exponent(table) == pytest.approx(power)
    # a constant overhead hides the power at short T; the upper half of the grid sees it
    table = {t: 0.05 + 1e-9 * t**2 for t in GRID}
    assert analysis.scaling_exponent(table) > analysis.scaling_exponent(table, hi=1024)
    assert analysis.scaling_exponent({256: 1.0}) is None
    assert analysis.scaling_exponent({t: 2e-6 * t for t in GRID}, lo=2048, hi=8192) == pytest.approx(1.0)


def test_crossover_is_interpolated_in_log_log():
    # linear mixer a*T vs quadratic reference b*T^2 cross exactly at T = a / b, here 1500
    mixer = {t: 1.5e-3 * t for t in GRID}
    reference = {t: 1e-6 * t**2 for t in GRID}
    assert analysis.crossover(mixer, reference) == pytest.approx(1500.0)
    assert analysis.crossover(reference, mixer) is None  # the reference is never faster past the crossing
    assert analysis.crossover({t: 1.0 for t in GRID}, {t: 2.0 for t in GRID}) == 256.0  # faster everywhere
    # the reference running out of memory at the longest length counts as the mixer being faster there
    ref_oom = {**{t: 1.0 for t in GRID}, 8192: None}
    assert analysis.crossover({t: 2.0 for t in GRID}, ref_oom) == 8192.0
    # a mixer that is faster somewhere in the middle but slower at the end has no crossover
    bumpy = {**{t: 0.5 for t in GRID}, 8192: 3.0}
    assert analysis.crossover(bumpy, {t: 1.0 for t in GRID}) is None


def test_decode_ratio():
    assert analysis.ratio_longest_shortest({512: 2e-3, 8192: 2.4e-3, 1024: 9.0}) == pytest.approx(1.2)
    assert analysis.ratio_longest_shortest({512: None, 8192: 1.0}) is None


def tiny_model(mixer: str):
    return build_model(ModelSpec(mixer, {}, BackboneConfig(32, 2, 16, 64)), seed=0)


def test_out_of_memory_point_is_recorded_and_the_sweep_continues(tmp_path):
    model = tiny_model("protot")
    oom = measure_point(model, "train", 4096, 4, torch.device("cpu"), 1, 0, 4, memory_cap=1 << 20)
    assert oom.status == "oom" and oom.seconds is None and oom.detail
    ok = measure_point(model, "train", 16, 1, torch.device("cpu"), 2, 1, 4, memory_cap=None)
    assert ok.status == "ok" and ok.seconds > 0  # the address-space cap was lifted again
    cfg = ThroughputConfig(lengths=(16, 4096), batch_sizes=(8,), repeats=1, warmup=0, reference="", memory_cap_mb=2)
    result = Throughput(cfg).run(model, SuiteContext(None, tmp_path, progress=False))
    statuses = {(s["mode"], s["length"]): s["status"] for s in result.samples}
    assert len(statuses) == 6  # every point of the grid is accounted for
    assert {statuses[(mode, 4096)] for mode in ("train", "prefill", "decode")} == {"oom"}
    assert all(s["seconds"] is None for s in result.samples if s["status"] == "oom")


def test_suite_measures_the_grid_and_derives_metrics(tmp_path):
    model = tiny_model("protot")
    cfg = ThroughputConfig(lengths=(16, 32, 64, 128), repeats=2, warmup=1, decode_tokens=2)
    result = Throughput(cfg).run(model, SuiteContext(None, tmp_path, progress=False))
    metrics = {m.name: m for m in result.metrics}
    for name in ("train_tok_s", "prefill_tok_s", "decode_ms", "prefill_exponent", "train_exponent", "decode_ratio",
                 "crossover_prefill", "crossover_decode", "crossover_train", "state_floats_max",
                 "kernel_gflops", "matmul_gflops", "kernel_peak_fraction"):
        assert name in metrics, name
    assert metrics["train_tok_s"].ci_low <= metrics["train_tok_s"].value <= metrics["train_tok_s"].ci_high
    assert 0 < metrics["kernel_peak_fraction"].value < 1
    assert metrics["state_floats_max"].value == model.state_size(128)
    models = {s["model"] for s in result.samples}
    assert models == {"measured", "reference"} and len(result.samples) == 2 * 3 * 4
    assert all(p.exists() and p.stat().st_size > 1000 for p in result.plots)
    crossover = metrics["crossover_prefill"].value
    assert math.isnan(crossover) or 16 <= crossover <= 128


def test_reference_is_skipped_for_itself(tmp_path):
    cfg = ThroughputConfig(lengths=(16, 32), repeats=1, warmup=0, modes=("prefill",))
    result = Throughput(cfg).run(tiny_model("attention"), SuiteContext(None, tmp_path, progress=False))
    assert not [m for m in result.metrics if m.name.startswith("crossover")]
    assert {s["model"] for s in result.samples} == {"measured"}
