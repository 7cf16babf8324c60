"""What produced a result: code version, packages and hardware (recorded in every run manifest, DESIGN §6).

Two runs with equal configs can still differ because the code, a kernel package or the machine changed; this
record is what lets a reader (or ``mixbench nightly``) tell those apart. It must be cheap and must never fail a
run, so every probe degrades to ``None`` instead of raising, and package versions come from installed metadata
rather than importing the packages (importing triton or transformers alone can take seconds).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

PACKAGES = (
    "torch",
    "numpy",
    "tokenizers",
    "safetensors",
    "datasets",
    "pandas",
    "mamba-ssm",
    "flash-linear-attention",
    "fla-core",
    "triton",
    "transformers",
    "lm-eval",
    "openai",
)


def _git(args: list[str], cwd: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):  # git missing, cwd gone, hung on a network filesystem
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_revision(path: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """``{"commit": sha or None, "dirty": bool}`` for the repository holding ``path`` (default: the cwd).

    ``None`` outside a git repository. ``commit`` is ``None`` in a repository without commits yet. ``dirty``
    counts untracked (not ignored) files too: an uncommitted plugin module changes results as much as an edit.
    """
    cwd = str(path if path is not None else Path.cwd())
    if _git(["rev-parse", "--is-inside-work-tree"], cwd) != "true":
        return None
    status = _git(["status", "--porcelain"], cwd)
    return {"commit": _git(["rev-parse", "--verify", "--quiet", "HEAD"], cwd) or None, "dirty": bool(status)}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Versions of the installed packages among ``names`` (absent ones are left out)."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX, or the name is unknown (macOS lacks PHYS_PAGES)
        return None


def hardware() -> dict[str, Any]:
    """CPU, memory, torch threads and CUDA devices of this machine."""
    import torch  # already imported by the harness; imported here so this module stays importable alone

    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_bytes": _total_memory(),
        "cuda": None,
    }
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        info["cuda"] = {
            "device_count": count,
            "devices": [torch.cuda.get_device_name(i) for i in range(count)],
            "cuda_version": torch.version.cuda,
        }
    return info


def code_location() -> Path:
    """Where mixbench's own code lives: its git revision is the code's, wherever the command runs from (a run
    started outside the checkout used to record "no git")."""
    return Path(__file__).resolve().parent


def provenance() -> dict[str, Any]:
    """The full record, meant for each run manifest (JSON-ready). ``git`` is the revision of the checkout that
    holds the code (:func:`code_location`), ``None`` for an installed package (then ``mixbench`` is the version)."""
    from harness import __version__

    return {
        "mixbench": __version__,
        "git": git_revision(code_location()),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "packages": package_versions(),
        "hardware": hardware(),
    }


#: OpenMP wait policy recorded when the variable is not set: libgomp's own default (spin a while, then sleep)
DEFAULT_WAIT_POLICY = "default"
#: busy-wait spins of an idle OpenMP thread before it sleeps, in a single mixbench process (libgomp's
#: ``GOMP_SPINCOUNT``). libgomp's default, 300,000, is milliseconds of spinning at every barrier: on a machine that
#: also runs other work a descheduled worker then costs each small operation that long (2-7x slower at load 5-7 on
#: 2 cores). On a quiet machine 1,000 spins were 10-50% slower than the default (the threads fell asleep between
#: two eager torch operations); 30,000 measured the same as the default (0.87-1.19 of its time) while spinning a
#: tenth as long. benchmarks/omp_policy.py; docs/cpu_kernels.md has both tables.
SINGLE_PROCESS_SPINCOUNT = "30000"
#: what worker processes that share the machine's cores (process pool, Ray) use: no spinning at all
WORKER_WAIT_POLICY = "PASSIVE"
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_SPIN_SET_BY_MIXBENCH = "MIXBENCH_SET_GOMP_SPINCOUNT"


def choose_threading_policy() -> None:
    """Set this process's OpenMP wait behaviour; must run before torch is imported (``harness/__init__`` does).

    A user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` wins; otherwise a single process spins
    :data:`SINGLE_PROCESS_SPINCOUNT` times before sleeping. Worker processes get :func:`worker_environment`.
    """
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    if openmp_loaded():
        # too late: the runtime has read its settings. Setting the variable now would change nothing but the
        # record (threading_policy would report a spin count the process never used), so the default stays.
        return
    os.environ["GOMP_SPINCOUNT"] = SINGLE_PROCESS_SPINCOUNT
    os.environ[_SPIN_SET_BY_MIXBENCH] = "1"  # so workers can tell it from a user's setting


def openmp_loaded() -> bool:
    """Whether this process has already loaded an OpenMP runtime (torch's libgomp), which reads its wait policy
    once, when it loads: a script that imports torch before mixbench runs under the runtime's default."""
    if "torch" in sys.modules:
        return True
    try:
        return "libgomp" in Path("/proc/self/maps").read_text()
    except OSError:  # no /proc (not Linux): torch not imported is the best evidence there is
        return False


def worker_environment(threads: int) -> dict[str, str]:
    """Environment variables for a worker process that shares the cores with others: ``threads`` OpenMP/MKL
    threads and the wait policy that never spins (a spinning thread burns a core another worker needs), unless the
    user chose a policy. Applied before the worker starts, since OpenMP reads them when torch loads. The spin count
    is set to 0 rather than removed: a Ray worker inherits the driver's environment under the task's variables."""
    env = {name: str(int(threads)) for name in _THREAD_VARIABLES}
    if os.environ.get(_SPIN_SET_BY_MIXBENCH) == "1" or (
        "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ
    ):
        env.update({"OMP_WAIT_POLICY": WORKER_WAIT_POLICY, "GOMP_SPINCOUNT": "0"})
    return env


def threading_policy() -> dict[str, Any]:
    """How this process runs CPU kernels: OpenMP's wait policy and spin count, torch's intra-/inter-op threads.

    The policy is read from the environment, as the OpenMP runtime saw it when torch loaded it (a later change has
    no effect, and mixbench sets it only before torch loads: :func:`choose_threading_policy`).
    Speed numbers depend on all three (docs/ARCHITECTURE.md, "Speed"): they are part of
    :func:`device_descriptor`, hence of the identity of every device-dependent run.
    """
    import torch

    policy = os.environ.get("OMP_WAIT_POLICY", "").strip().upper() or DEFAULT_WAIT_POLICY
    return {
        "omp_wait_policy": policy,
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", "").strip() or DEFAULT_WAIT_POLICY,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
    }


def load_average() -> list[float] | None:
    """The 1, 5 and 15-minute load averages now (None where the OS has none): recorded with speed numbers, never
    part of an identity."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def device_descriptor(device: Any) -> dict[str, Any]:
    """What a speed number depends on besides the code: device type and name, and how CPU work is threaded.

    Part of the run identity of device-dependent suites (throughput), so the same checkpoint measured on
    another device, or under another thread count or OpenMP wait policy, is another run rather than a cache hit.
    """
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = _cpu_model() or "cpu"
    return {"type": device.type, "name": name, **threading_policy()}
