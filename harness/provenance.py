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


def provenance() -> dict[str, Any]:
    """The full record, meant for each run manifest (JSON-ready)."""
    from harness import __version__

    return {
        "mixbench": __version__,
        "git": git_revision(),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "packages": package_versions(),
        "hardware": hardware(),
    }


def device_descriptor(device: Any) -> dict[str, Any]:
    """What a speed number depends on besides the code: device type and name, and CPU threads.

    Part of the run identity of device-dependent suites (throughput), so the same checkpoint measured on
    another device is another run rather than a cache hit.
    """
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = _cpu_model() or "cpu"
    return {"type": device.type, "name": name, "threads": torch.get_num_threads()}
