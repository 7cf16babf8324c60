"""Shared fixtures. Tests never touch the network, and caches live in a per-session temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: see harness/__init__.py
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`'s workers share the cores: one thread each (and their CLI
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # subprocesses), rather than two per worker contending
# tokenizers and token streams are cached here (inherited by CLI subprocesses), not in the user's cache
os.environ["MIXBENCH_CACHE"] = tempfile.mkdtemp(prefix="mixbench-test-cache-")
# transformers copies an exported folder's modeling code here when it loads it (read once, at its import)
os.environ["HF_MODULES_CACHE"] = tempfile.mkdtemp(prefix="mixbench-test-hf-modules-")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from harness.cli import main  # noqa: E402

#: a small, fast training setup on the embedded corpus (40 training documents, preset tiny)
TINY_TRAIN = ["--preset", "tiny", "--tokens", "32768", "--max-train-docs", "40", "--no-progress"]


#: the files whose tests take longest (measured with --durations on this 2-core machine), collected first: `make
#: test` runs two workers that take whole files in collection order (pytest-xdist --dist loadfile), and a long file
#: started last left one worker idle for three minutes while the other finished it
LONGEST_FILES = ("test_reproduce.py", "test_plan.py", "test_external_models.py", "test_plugins.py",
                 "test_throughput.py", "test_hf_plugin.py", "test_site_sections.py", "test_cli.py",
                 "test_mixer_contract.py", "test_judge.py")


def pytest_collection_modifyitems(config, items):
    """The longest files first, the rest in their usual order (a stable sort: tests keep their order in a file)."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def without_a_compiler(tmp_path):
    """Run Python code in a fresh process where no C compiler can be found (CC points nowhere, PATH is empty)
    and the kernel cache is empty, so every compiled kernel falls back to PyTorch; returns the finished
    process, asserting it exited 0."""

    def run(code: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "CC": str(tmp_path / "no-such-compiler"), "PATH": "/nonexistent",
               "MIXBENCH_CACHE": str(tmp_path / "cache")}
        done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    return run


def train_tiny(out: Path, mixer: str, *extra: str) -> Path:
    code = main(["train", "--mixer", mixer, "--out", str(out), *TINY_TRAIN, *extra])
    assert code == 0
    return out


@pytest.fixture(scope="session")
def protot_checkpoint(tmp_path_factory) -> Path:
    return train_tiny(tmp_path_factory.mktemp("ckpt") / "protot", "protot")


@pytest.fixture(scope="session")
def attention_checkpoint(tmp_path_factory) -> Path:
    return train_tiny(tmp_path_factory.mktemp("ckpt") / "attention", "attention")
