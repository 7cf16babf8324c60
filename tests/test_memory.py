"""Memory checks before long work (harness/model/memory.py) and a child job killed by signal 9 (harness/running/executors.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from harness.model import memory
from harness.model.backbone import build_model
from harness.config import BackboneConfig, ModelSpec
from harness.errors import MixbenchError

CPU = torch.device("cpu")


def test_fit_growth_recovers_a_hand_made_linear_plus_quadratic_curve():
    def m(t):
        return 3.0 * t + 0.5 * t * t

    a, b = memory.fit_growth(512, m(512), 1024, m(1024))
    assert a == pytest.approx(3.0) and b == pytest.approx(0.5)
    # a quadratic share below 10% of the longer probe is noise, not attention: linear through the longer probe
    a, b = memory.fit_growth(512, 1000.0, 1024, 2000.0 + 50.0)
    assert b == 0.0 and a == pytest.approx(2050.0 / 1024)


def test_replay_grows_each_allocation_by_its_own_exponent():
    # hand-made traces: A grows linearly, B quadratically, C (weights-like) not at all; B is freed before C
    short = SimpleNamespace(events=[(0, 100, "a"), (1, 25, "b"), (1, 0, ""), (3, 7, "c")])
    long = SimpleNamespace(events=[(0, 200, "a"), (1, 100, "b"), (1, 0, ""), (3, 7, "c")])
    # at 40 tokens: A 400, B 400 -> peak 800 while both live; then B freed and C (7) allocated: 407
    assert memory.replay_peak(short, long, 10, 20, 40) == 800
    other = SimpleNamespace(events=[(0, 100, "a"), (1, 25, "x")])
    assert memory.replay_peak(other, long, 10, 20, 40) is None  # different operations cannot be matched


def model(mixer: str, kernel: str | None = None):
    spec = ModelSpec(mixer, {}, BackboneConfig(d_model=64, n_layers=2, context=4096, vocab_size=512))
    m = build_model(spec).eval()
    m.set_kernel(kernel, CPU)
    return m


def measured(m, batch: int, length: int) -> int:
    """The peak of the real workload, measured on the real thing (the reference the estimate is judged by)."""
    ids = torch.randint(0, 512, (batch, length + 1), generator=torch.Generator().manual_seed(1))

    def run():
        with torch.no_grad():
            logits, _ = m(ids[:, :-1])
            F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")

    return memory.peak_bytes(run, CPU)


@pytest.mark.parametrize("mixer, kernel", [("attention", "naive"), ("protot", None)])
def test_estimate_from_short_probes_matches_the_measured_peak(mixer, kernel):
    m = model(mixer, kernel)
    estimate = memory.probe_forward(m, 2, 2048)  # extrapolated from one sequence at 512 and 1,024 tokens
    actual = measured(m, 2, 2048)
    assert "replayed at 2,048" in estimate.how
    assert estimate.bytes == pytest.approx(actual, rel=0.1), (memory.gib(estimate.bytes), memory.gib(actual))
    if mixer == "attention":  # score matrices grow with T^2: twice a measured length needs far more than twice
        assert actual > 1.5 * 2 * memory.probe_forward(m, 2, 1024).bytes


def test_the_check_names_estimate_and_limit_and_passes_small_work():
    limit = memory.available("cpu")
    meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()}
    # never more than the kernel says (a cgroup may say less); the two reads are moments apart, and other processes
    # free and take memory between them: 64 MiB of slack
    assert 0 < limit.bytes <= meminfo["MemAvailable"] + (64 << 20)
    memory.check_fits(memory.Estimate(1 << 20, "a test"), "cpu", "small work", "never")  # 1 MiB fits anywhere
    with pytest.raises(MixbenchError) as info:
        memory.check_fits(memory.Estimate(limit.bytes * 10, "a test"), "cpu", "huge work", "make it smaller")
    text = str(info.value)
    assert text.startswith("huge work needs about ") and "at its peak (a test), more than the " in text
    assert text.endswith("; make it smaller.") and memory.gib(limit.bytes).split()[0][:2] in text


def test_decode_estimate_is_the_mixers_state_size():
    m = model("attention")
    est = memory.decode_estimate(m, 4, 1000)
    kv = 2 * 1000 * 4 * 16 * 2  # keys + values: length x heads x head_dim, two layers
    assert est.bytes == 4 * kv * 4 + 4 * 512 * 4  # float32 states for 4 sequences + one step's logits


def kill_self_or_wait(job: str) -> str:
    """A pool job: the victim dies from SIGKILL (as under the kernel's OOM killer); the bystander waits."""
    if job == "victim":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(2)
    return job


def test_a_worker_killed_by_signal_9_is_reported_as_out_of_memory():
    from harness.running.executors import ProcessExecutor

    results = dict(ProcessExecutor(workers=1).map(kill_self_or_wait, ["victim", "bystander"]))
    assert isinstance(results["victim"], MixbenchError)
    assert str(results["victim"]).startswith(
        "job victim was killed by the kernel, most likely out of memory (signal 9, SIGKILL); give it more memory"
    )
    assert str(results["bystander"]) == (
        "job bystander was stopped because the worker running job victim was killed by the kernel, most likely "
        "out of memory (signal 9, SIGKILL); rerun to resume both."
    )
