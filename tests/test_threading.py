"""The threading policy: chosen before torch loads, recorded in the device descriptor (a run's identity), and
per-worker thread counts with PASSIVE waiting in the process pool and Ray executors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.running.executors import ProcessExecutor, RayExecutor
from harness.running.runner import Resources

REPO = Path(__file__).resolve().parents[1]
_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MIXBENCH_SET_GOMP_SPINCOUNT")


def descriptor_in_fresh_process(first: str = "harness, torch", **env: str) -> dict:
    """``device_descriptor('cpu')`` and the environment as a new process sees them, importing ``first`` first."""
    code = (
        f"import json, os, {first}\n"
        "from harness.store.provenance import device_descriptor\n"
        "print(json.dumps({'descriptor': device_descriptor('cpu'), 'env': {k: os.environ.get(k) for k in %r}}))\n"
    ) % (_VARS,)
    clean = {k: v for k, v in os.environ.items() if k not in _VARS}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**clean, **env}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_single_process_spins_briefly_and_records_it():
    seen = descriptor_in_fresh_process()
    assert seen["env"]["GOMP_SPINCOUNT"] == "30000" and seen["env"]["OMP_WAIT_POLICY"] is None
    d = seen["descriptor"]
    assert d["omp_wait_policy"] == "default" and d["gomp_spincount"] == "30000"
    assert d["threads"] >= 1 and d["interop_threads"] >= 1 and len(json.dumps(d)) < 300  # small: part of a run key


def test_torch_loaded_first_keeps_its_default_and_the_record_says_so():
    # OpenMP read its settings when torch loaded: a spin count set afterwards would be recorded but never used
    seen = descriptor_in_fresh_process(first="torch, harness")
    assert seen["env"]["GOMP_SPINCOUNT"] is None
    d = seen["descriptor"]
    assert d["omp_wait_policy"] == "default" and d["gomp_spincount"] == "default"
    assert d != descriptor_in_fresh_process()["descriptor"]


def test_a_users_policy_wins_and_is_part_of_the_identity():
    passive = descriptor_in_fresh_process(OMP_WAIT_POLICY="passive", OMP_NUM_THREADS="1")
    assert passive["env"]["GOMP_SPINCOUNT"] is None  # mixbench added nothing to the user's choice
    d = passive["descriptor"]
    assert d["omp_wait_policy"] == "PASSIVE" and d["gomp_spincount"] == "default" and d["threads"] == 1
    assert d != descriptor_in_fresh_process()["descriptor"]  # another policy, another run of a speed suite


@dataclass(frozen=True)
class Job:
    label: str
    resources: Resources


def report_threads(job: Job) -> dict:
    """Runs in a worker: what its OpenMP runtime and torch were started with."""
    import torch

    return {"threads": torch.get_num_threads(), "pid": os.getpid(), **{k: os.environ.get(k) for k in _VARS}}


@pytest.fixture
def mixbench_policy(monkeypatch):
    """The environment of a mixbench process whose policy mixbench chose (tests/conftest.py sets PASSIVE itself)."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    monkeypatch.setenv("MIXBENCH_SET_GOMP_SPINCOUNT", "1")


def test_process_pool_workers_get_their_threads_and_passive_waiting(mixbench_policy):
    before = dict(os.environ)
    jobs = [Job(f"j{i}", Resources(cpus=1)) for i in range(2)]
    with ProcessExecutor(workers=2) as pool:
        results = dict(pool.map(report_threads, jobs))
        started = set(pool._pool._processes)  # the pool outlives a map: the grid's jobs reuse the gates' workers
        again = dict(pool.map(report_threads, jobs))
        assert {seen["pid"] for seen in again.values()} <= started
    assert pool._pool is None  # closed with the block
    for seen in [*results.values(), *again.values()]:
        assert not isinstance(seen, BaseException), seen
        assert seen["threads"] == 1 and seen["OMP_NUM_THREADS"] == "1" and seen["MKL_NUM_THREADS"] == "1"
        assert seen["OMP_WAIT_POLICY"] == "PASSIVE" and seen["GOMP_SPINCOUNT"] == "0"
    assert dict(os.environ) == before  # the parent's own environment is as it was


def test_a_users_policy_reaches_the_workers(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("MIXBENCH_SET_GOMP_SPINCOUNT", raising=False)
    with ProcessExecutor(workers=1) as pool:
        (seen,) = dict(pool.map(report_threads, [Job("j", Resources(cpus=1))])).values()
    assert seen["OMP_WAIT_POLICY"] == "ACTIVE" and seen["GOMP_SPINCOUNT"] is None and seen["OMP_NUM_THREADS"] == "1"


def test_worker_threads_never_oversubscribe_the_cores():
    pool = ProcessExecutor()
    wide = [Job("w", Resources(cpus=64))]
    assert pool.worker_threads(wide, pool.pool_size(wide)) == (os.cpu_count() or 1)
    many = [Job(f"j{i}", Resources(cpus=2)) for i in range(8)]
    assert pool.worker_threads(many, 4) * 4 <= max(os.cpu_count() or 1, 4)


@pytest.mark.slow
def test_ray_tasks_get_their_threads_and_passive_waiting(mixbench_policy):
    pytest.importorskip("ray")
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import this test module
    with RayExecutor(num_cpus=2, object_store_memory=100 * 1024**2, log_to_driver=False) as ray_exec:
        results = dict(ray_exec.map(report_threads, [Job("r", Resources(cpus=1))]))
    seen = next(iter(results.values()))
    assert not isinstance(seen, BaseException), seen
    assert seen["threads"] == 1 and seen["OMP_NUM_THREADS"] == "1"
    assert seen["OMP_WAIT_POLICY"] == "PASSIVE" and seen["GOMP_SPINCOUNT"] == "0"
