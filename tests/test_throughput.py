"""Throughput: derived metrics on synthetic timing tables with known answers, OOM handling, the suite end to end."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.model.backbone import build_model
from harness.config import BackboneConfig, ModelSpec
from harness.suite import SuiteContext
from suites.throughput import Throughput, ThroughputConfig, analysis
from suites.throughput.measure import TimingPlan, measure_point, measure_points

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
    """The cap is the address space mapped now plus a margin. glibc serves an allocation below its mmap
    threshold (at most 32 MB) from heap memory that earlier tests freed, which is already mapped, so a point
    only reliably exceeds the cap when one of its tensors is larger: batch 256 x 4096 tokens x d_model 16 is a
    64 MB activation. (With batch 4, 1 MB tensors, this test passed alone and failed after the rest of the
    suite once the fused head and norms made the step's tensors fewer and smaller.)"""
    model = tiny_model("protot")
    plan = TimingPlan(repeats=2)
    oom = measure_point(model, "train", 4096, 256, torch.device("cpu"), plan, 4, memory_cap=1 << 20)
    assert oom.status == "oom" and oom.seconds is None and oom.detail
    ok = measure_point(model, "train", 16, 1, torch.device("cpu"), plan, 4, memory_cap=None)
    assert ok.status == "ok" and ok.seconds > 0  # the address-space cap was lifted again
    # the capped sweep runs in a child process: after a capped failure, oneDNN in that process could not create a
    # convolution for later tests once the shorter points' timed rounds came after it (all lengths in one round)
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from tests.test_throughput import tiny_model
        from harness.suite import SuiteContext
        from suites.throughput import Throughput, ThroughputConfig
        model, ctx = tiny_model("protot"), SuiteContext(None, {str(tmp_path)!r}, progress=False)
        warm = ThroughputConfig(lengths=(16, 32), batch_sizes=(256,), repeats=1, reference="")
        Throughput(warm).run(model, ctx)  # OpenMP's threads start uncapped, as in a process that has run anything
        # no time bound: 4096 is predicted far over 30 s from 16, and not even tried, which is not what this tests
        cfg = ThroughputConfig(lengths=(16, 4096), batch_sizes=(256,), repeats=1, reference="", memory_cap_mb=2,
                               max_point_seconds=1e9)
        result = Throughput(cfg).run(model, SuiteContext(None, {str(tmp_path)!r}, progress=False))
        print(json.dumps(result.samples))
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    samples = json.loads(child.stdout.strip().splitlines()[-1])
    statuses = {(s["mode"], s["length"]): s["status"] for s in samples}
    assert len(statuses) == 6  # every point of the grid is accounted for
    assert {statuses[(mode, 4096)] for mode in ("train", "prefill", "decode")} == {"oom"}
    assert {statuses[(mode, 16)] for mode in ("train", "prefill", "decode")} == {"ok"}  # the sweep went on
    assert all(s["seconds"] is None for s in samples if s["status"] == "oom")


def test_suite_measures_the_grid_and_derives_metrics(tmp_path):
    model = tiny_model("protot")
    cfg = ThroughputConfig(lengths=(16, 32, 64, 128), repeats=3, decode_tokens=2)
    result = Throughput(cfg).run(model, SuiteContext(None, tmp_path, progress=False))
    metrics = {m.name: m for m in result.metrics}
    for name in ("train_tok_s", "prefill_tok_s", "decode_ms", "prefill_exponent", "train_exponent", "decode_ratio",
                 "crossover_prefill", "crossover_decode", "crossover_train", "state_floats_max",
                 "train_time_ratio", "prefill_time_ratio", "decode_time_ratio"):
        assert name in metrics, name
    for name in ("train_tok_s", "prefill_tok_s", "decode_ms"):
        m = metrics[name]
        assert m.role == "speed" and m.interval.kind == "range" and m.interval.low <= m.value <= m.interval.high
    assert metrics["state_floats_max"].value == model.state_size(128)
    models = {s["model"] for s in result.samples}
    assert models == {"measured", "reference", "floor"} and len(result.samples) == 3 * 3 * 4
    assert result.info["floor"] == "none"  # the registered context-free control, found by its flag
    assert all(p.exists() and p.stat().st_size > 1000 for p in result.plots)
    # every point of both models was timed in the same rounds: as many rounds each, at least 3 warm-up rounds
    by_key = {(s["model"], s["mode"], s["length"]): s for s in result.samples}
    for (tag, mode, length), sample in by_key.items():
        assert len(sample["rounds"]) == 3 and sample["warmup_rounds"] >= 3, (tag, mode, length)
    # the reported ratio is the median of the per-round ratios of the two models' rounds, with a bootstrap interval
    for mode in ("train", "prefill", "decode"):
        mine, ref = by_key[("measured", mode, 16)], by_key[("reference", mode, 16)]
        per_round = [a / b for a, b in zip(mine["rounds"], ref["rounds"])]
        assert mine["ratio"] == pytest.approx(float(np.median(per_round)))
        ratio = metrics[f"{mode}_time_ratio"]
        assert ratio.role == "speed" and ratio.interval.kind == "bootstrap" and ratio.interval.level == 0.95
        assert min(per_round) <= ratio.interval.low <= ratio.interval.high <= max(per_round)
        # the mixing cost is the median of the per-round differences from the floor timed in the same rounds
        floor = by_key[("floor", mode, 16)]  # at the model's context
        cost = [(a - b) * 1e3 for a, b in zip(by_key[("measured", mode, 16)]["rounds"], floor["rounds"])]
        mixing = metrics[f"{mode}_mixing_ms"]
        assert mixing.value == pytest.approx(float(np.median(cost))) and mixing.interval.kind == "bootstrap"
        assert min(cost) <= mixing.interval.low <= mixing.interval.high <= max(cost)
        # the board's speed: the floor's time over the mixer's, per round, in the same rounds
        speed = [b / a for a, b in zip(by_key[("measured", mode, 16)]["rounds"], floor["rounds"])]
        vs_floor = metrics[f"{mode}_vs_floor"]
        assert vs_floor.higher_is_better and vs_floor.role == "speed"
        assert vs_floor.value == pytest.approx(float(np.median(speed))) and vs_floor.interval.kind == "bootstrap"
        assert min(speed) <= vs_floor.interval.low <= vs_floor.interval.high <= max(speed)
        # the crossover is the one the per-length paired ratios give
        ratios = {t: by_key[("measured", mode, t)]["ratio"] for t in (16, 32, 64, 128)}
        expected = analysis.crossover_from_ratios(ratios)
        crossover = metrics[f"crossover_{mode}"].value
        assert (math.isnan(crossover) and expected is None) or crossover == pytest.approx(expected)
    assert result.info["load_average_start"] is not None and len(result.info["load_average_start"]) == 3
    assert {"omp_wait_policy", "gomp_spincount", "threads", "interop_threads"} <= set(result.info["device"])
    declared = model.mixers[0].kernel_benchmark(1, 128, torch.device("cpu")) is not None
    assert ("kernel_peak_fraction" in metrics) == declared  # only for a mixer that declares its kernel


def test_kernel_peak_fraction_of_a_declared_kernel(tmp_path, monkeypatch):
    """A mixer whose kernel benchmark is a dense matmul of the peak's own size reaches a fraction near 1: the
    fraction is (kernel FLOPs / kernel time) / (matmul FLOPs / matmul time), paired per round."""
    from harness.mixer import KernelBenchmark
    from suites.throughput import PEAK_MATMUL, kernel_efficiency

    model = tiny_model("attention")
    n = PEAK_MATMUL
    a, b = torch.randn(n, n), torch.randn(n, n)
    bench = KernelBenchmark(run=lambda: torch.mm(a, b), flops=2.0 * n**3, label="matmul stand-in")
    monkeypatch.setattr(type(model.mixers[0]), "kernel_benchmark", lambda self, batch, seq_len, device: bench)
    metrics = {m.name: m for m in kernel_efficiency(model, 1, 64, torch.device("cpu"), repeats=5)}
    fraction = metrics["kernel_peak_fraction"]
    assert 0.5 < fraction.value < 2.0 and fraction.interval.kind == "bootstrap"
    assert metrics["kernel_gflops"].value > 0 and metrics["matmul_gflops"].interval.kind == "range"
    assert "matmul stand-in" in fraction.unit


def test_two_models_are_timed_in_alternating_rounds():
    """measure_points times both models in one interleaved schedule: their calls alternate after the first calls."""
    calls = []
    models = {name: tiny_model("protot") for name in ("a", "b")}
    for name, m in models.items():
        m.register_forward_pre_hook(lambda module, args, _n=name: calls.append(_n))
    points, _ = measure_points(models, "prefill", (16,), 1, torch.device("cpu"), TimingPlan(repeats=4), 2, None)
    assert calls[:2] == ["a", "b"]  # the lone first calls (peak memory, OOM probe)
    rounds = calls[2:]
    assert sorted(set(rounds)) == ["a", "b"] and rounds.count("a") == rounds.count("b")
    assert all(rounds[i] != rounds[i + 1] or i % 2 == 1 for i in range(len(rounds) - 1))  # A B | B A | A B ...
    assert points["a"][16].ratio is not None and points["b"][16].ratio is None and len(points["a"][16].rounds) == 4


def test_every_length_is_timed_in_the_same_rounds():
    """All (model, length) pairs of a mode share each round, first calls shortest length first; ratios pair a
    model with the other at the same length."""
    calls = []
    models = {name: tiny_model("protot") for name in ("a", "b")}
    for name, m in models.items():
        m.register_forward_pre_hook(lambda module, args, _n=name: calls.append((_n, args[0].shape[1])))
    plan = TimingPlan(repeats=3, min_warmup=3, max_warmup=3)
    points, blocked = measure_points(models, "prefill", (8, 16, 32), 1, torch.device("cpu"), plan, 2, None)
    assert calls[:6] == [("a", 8), ("b", 8), ("a", 16), ("b", 16), ("a", 32), ("b", 32)] and blocked == {}
    timed = calls[6:]
    per_round = len(timed) // (2 + 3)  # two more warm-up rounds after the first calls, then three timed rounds
    assert per_round == 6 and all(sorted(timed[i:i + 6]) == sorted(calls[:6]) for i in range(0, len(timed), 6))
    assert all(len(points[n][t].rounds) == 3 for n in "ab" for t in (8, 16, 32))
    assert all(points["a"][t].ratio is not None and len(points["a"][t].ratio.per_round) == 3 for t in (8, 16, 32))
    # a model already blocked (a shorter context ran out of memory in an earlier call) is not tried again
    points, blocked = measure_points(models, "prefill", (64,), 1, torch.device("cpu"), plan, 2, None,
                                     blocked={"b": "oom: not attempted"})
    assert points["b"][64].status == "oom" and points["a"][64].status == "ok" and blocked == {"b": "oom: not attempted"}
    assert points["a"][64].ratio is None  # no partner at that length: no ratio, and never one over a third model


def test_a_slow_first_call_skips_the_longer_lengths():
    models = {"a": tiny_model("protot")}
    points, blocked = measure_points(models, "prefill", (8, 16), 1, torch.device("cpu"), TimingPlan(repeats=2), 2,
                                     None, max_call_seconds=0.0)
    assert points["a"][8].status == "ok" and points["a"][16].status == "skipped" and blocked["a"].startswith("skipped")


def test_default_lengths_scale_with_the_models_context(tmp_path):
    """The default grid is the context and a few multiples (preset tiny: 128-1,024 tokens, not 256-8,192), and the
    suite times it when no lengths are given."""
    from harness.config import get_preset
    from suites.throughput import default_lengths

    assert default_lengths(get_preset("tiny").backbone["context"], "cpu") == (128, 256, 512, 1024)
    assert default_lengths(256, "cpu") == (256, 512, 1024, 2048)
    assert default_lengths(4096, "cpu") == (4096, 8192)
    assert default_lengths(131072, "cpu") == (1024, 2048, 4096, 8192)  # an external model's long context
    assert default_lengths(128, "cuda") == (128, 256, 512, 1024, 2048, 4096)
    cfg = ThroughputConfig(modes=("prefill",), repeats=1, reference="", floor="")
    result = Throughput(cfg).run(tiny_model("none"), SuiteContext(None, tmp_path, progress=False))
    assert result.info["lengths"] == [16, 32, 64, 128] and result.info["sweep_cut"] == []


def test_max_point_seconds_bounds_each_point_and_cuts_the_sweep(tmp_path):
    """A planted bound: the model's forward sleeps 20 ms per token, so a prefill point's least work (its first call
    and four more) is about 0.8 s at T=8, 1.6 s at 16 and 6.4 s at 64. Under max_point_seconds=3.5, 8 and 16 are
    timed; 64 is predicted over the bound from 16 and never called, nor 128, and the run's info says where and why.
    The model is warmed at 8 and 16 first: T=16 is predicted from T=8's first call and then bounded by its own,
    and a cold call once carried 0.1-0.4 s of the model's own cost on a busy CPU (counted five times). (The bound
    used to be checked only per round, after every first call of the sweep.)"""
    slept: list[int] = []

    def slow(module, args):
        slept.append(args[0].shape[1])
        time.sleep(0.02 * args[0].shape[1])

    model = tiny_model("none")
    with torch.no_grad():  # warm the timed shapes: a cold first call cost up to 0.4 s more on a busy CPU
        for length in (8, 16):
            model(torch.zeros(1, length, dtype=torch.long))
    model.register_forward_pre_hook(slow)
    cfg = ThroughputConfig(lengths=(8, 16, 64, 128), modes=("prefill",), repeats=2, reference="", floor="",
                           max_point_seconds=3.5)
    result = Throughput(cfg).run(model, SuiteContext(None, tmp_path, progress=False))
    assert {s["length"]: s["status"] for s in result.samples} == {8: "ok", 16: "ok", 64: "skipped", 128: "skipped"}
    assert set(slept) == {8, 16}  # the longer lengths were never called
    assert sum(0.02 * t for t in slept) <= 2 * 3.5  # each timed point kept within its bound
    [cut] = result.info["sweep_cut"]
    assert (cut["model"], cut["mode"], cut["from_length"]) == ("measured", "prefill", 64)
    assert "stopped at T=64" in cut["reason"] and "max_point_seconds=3.5" in cut["reason"], cut
    assert result.info["max_point_seconds"] == 3.5


def test_an_over_budget_point_drops_its_costliest_model_and_the_sweep_stops_with_the_measured_one():
    from suites.throughput.measure import _over_budget

    assert _over_budget({"measured": 0.1, "reference": 0.2}, "measured", 0.5, 64, "measured") == {}
    dropped = _over_budget({"measured": 0.1, "reference": 0.3, "floor": 0.05}, "measured", 0.25, 64, "measured")
    assert list(dropped) == ["reference"] and "T=64" in dropped["reference"]  # the mixer goes on without it
    stopped = _over_budget({"measured": 0.3, "reference": 0.1}, "measured", 0.25, 64, "predicted")
    assert set(stopped) == {"measured", "reference"} and "the sweep stopped at T=64" in stopped["measured"]


def test_the_exponent_of_interleaved_lengths_is_bootstrapped_paired():
    """Load that drifts during the sweep scales every length of a round alike: paired over rounds the exponent's
    interval stays at the true exponent; resampled independently (lengths timed at different times) it is wide."""
    rng = np.random.default_rng(0)
    load = np.exp(rng.normal(0.0, 0.4, size=15))  # one factor per round, shared by every length
    rounds = {t: list(load * (t / 2048) ** 2) for t in (2048, 4096, 8192)}
    paired = analysis.bootstrap_statistic(rounds, analysis.scaling_exponent, paired=True)
    independent = analysis.bootstrap_statistic(rounds, analysis.scaling_exponent)
    assert paired.low == pytest.approx(2.0) and paired.high == pytest.approx(2.0)
    assert independent.low < 1.8 and independent.high > 2.2


def test_crossover_from_paired_ratios():
    assert analysis.crossover_from_ratios({256: 2.0, 1024: 0.5}) == pytest.approx(512.0)  # log-log midpoint
    assert analysis.crossover_from_ratios({256: 2.0, 1024: None}) is None  # the mixer ran out of memory
    assert analysis.crossover_from_ratios({256: 2.0, 1024: 0.0}) == 1024.0  # only the reference did
    assert analysis.crossover_from_ratios({256: 0.9, 1024: 0.5}) == 256.0


def test_bootstrap_of_a_multi_point_statistic():
    """Each point's median is resampled from its rounds: identical rounds give a zero-width interval at the
    point value; a statistic undefined in some replicate gives no interval."""
    rounds = {256: [1.0] * 5, 1024: [4.0] * 5}
    iv = analysis.bootstrap_statistic(rounds, analysis.scaling_exponent)
    assert iv.kind == "bootstrap" and iv.low == pytest.approx(1.0) and iv.high == pytest.approx(1.0)
    noisy = {256: [2.0, 2.1, 1.9, 0.5, 2.0], 1024: [0.5, 0.6, 0.4, 2.5, 0.5]}
    assert analysis.bootstrap_statistic(noisy, analysis.crossover_from_ratios) is None  # some replicate: no crossing


def test_reference_is_skipped_for_itself(tmp_path):
    cfg = ThroughputConfig(lengths=(16, 32), repeats=1, modes=("prefill",))
    result = Throughput(cfg).run(tiny_model("attention"), SuiteContext(None, tmp_path, progress=False))
    assert not [m for m in result.metrics if m.name.startswith("crossover")]
    assert {s["model"] for s in result.samples} == {"measured", "floor"}  # no reference; the floor still
    floor = Throughput(cfg).run(tiny_model("none"), SuiteContext(None, tmp_path, progress=False))  # nor the floor
    assert {s["model"] for s in floor.samples} == {"measured", "reference"} and floor.info["floor"] is None
    own = {m.name: m for m in floor.metrics}["prefill_vs_floor"]  # 1 by definition, on the mixers' scale
    assert own.value == 1.0 and (own.interval.low, own.interval.high) == (1.0, 1.0)


def test_headline_speed_is_only_measured_against_another_model_in_the_same_rounds():
    """No absolute rate (tokens/s, ms) is a headline: those of separate runs are not comparable."""
    assert Throughput.headline[0] == "train_vs_floor"
    assert not [h for h in Throughput.headline if h.endswith(("tok_s", "_ms"))]


def test_peak_memory_is_the_exact_tensor_peak(tmp_path):
    """A point's peak is what its tensors need, the same in every run: attention's training step at T holds
    T x T score matrices, so its peak grows with T and repeats to the byte (the resident set read 9 MiB at
    T=128 and 1.5 MiB at T=256)."""
    cfg = ThroughputConfig(lengths=(32, 64, 128), repeats=1, modes=("train",), reference="", floor="")
    peaks = []
    for _ in range(2):
        result = Throughput(cfg).run(tiny_model("attention"), SuiteContext(None, tmp_path, progress=False))
        peaks.append({s["length"]: s["peak_bytes"] for s in result.samples})
    assert peaks[0] == peaks[1]
    assert peaks[0][32] < peaks[0][64] < peaks[0][128]


@pytest.mark.parametrize(("low", "step"), [(2e-3, 0.3), (3.1e-3, 0.3), (0.5, 0.3), (1.1e-4, 0.05), (1e-3, 100.0)])
def test_time_plot_labels_its_axis_over_a_short_range(low, step):
    """A curve inside one power of 2 or 10 (attention's prefill at 256-1024 tokens) still has numbers on its
    y axis; a mode with no measured point has no legend warning."""
    from suites.throughput.measure import Point
    from suites.throughput.plots import time_figure

    table = {t: Point("prefill", t, 1, "ok", seconds=low * (1 + step * i)) for i, t in enumerate((256, 512, 1024))}
    fig = time_figure([("attention", {"prefill": table, "decode": {}}, "-o")])
    fig.savefig(io.BytesIO(), format="png")  # draws it: tick labels are set while drawing
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    shown = [t for t in ax.yaxis.get_major_ticks() + ax.yaxis.get_minor_ticks()
             if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi]
    labels = [t.label1.get_text() for t in shown]
    assert len(set(labels)) >= 2 and len(set(labels)) == len(labels), labels


def test_cuda_graph_state_copies_take_every_state_the_contract_allows():
    """The CUDA-graph decode path clones a state into static buffers and copies each new state into them: a
    dataclass state (attention's KV cache, mean's running sum) is a state like any other; a shape or a Python
    value that changes from step to step cannot be replayed and says so (the point is then timed without a graph)."""
    from dataclasses import dataclass

    from suites.throughput.measure import _clone_tree, _copy_tree

    @dataclass
    class State:
        total: torch.Tensor
        parts: tuple
        length: int

    state = State(torch.ones(2, 3), (torch.zeros(2), {"h": torch.full((1,), 5.0)}), 7)
    static = _clone_tree(state)
    assert static.total is not state.total and torch.equal(static.total, state.total) and static.length == 7
    new = State(torch.full((2, 3), 2.0), (torch.ones(2), {"h": torch.zeros(1)}), 7)
    _copy_tree(new, static)
    assert torch.equal(static.total, new.total) and torch.equal(static.parts[1]["h"], torch.zeros(1))
    with pytest.raises(ValueError, match="not a tensor"):
        _copy_tree(State(new.total, new.parts, 8), static)
    with pytest.raises(ValueError, match="changes shape"):
        _copy_tree(State(torch.ones(2, 4), new.parts, 7), static)
