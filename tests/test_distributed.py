"""`mixbench train` under torchrun: 2-process gloo DDP matches single-process training with the same global batch.

Why the tolerance is 2e-3 on the per-step loss (values near 5-6): both runs see the same 8 windows per step
(each rank draws the global batch from (seed, step) and keeps its half), start from the same weights and take
the same optimizer steps. What differs is only float32 summation order: the loss is the mean of two
half-batch means instead of one mean, and gloo sums the two ranks' gradients. Those reassociations move each
value by ~1e-7 relative, and 32 AdamW steps (which divide by sqrt of small second moments) amplify that to
~1e-5 in the weights; the logged loss is rounded to 1e-6 and measured here to agree to ~1e-6. The mistakes
this test exists to catch move the loss by far more: a rank training on the wrong rows, each rank taking the
whole batch, or gradients summed instead of averaged (twice the step size). The negative control trains a
single process on the half batch one rank sees and checks that it lands well outside the tolerance.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.model.checkpoint import load_checkpoint
from harness.running.distributed import DistEnv, detect
from harness.errors import ConfigError
from harness.store.identity import train_id
from tests.conftest import TINY_TRAIN, train_tiny

TOLERANCE = 2e-3
REPO = Path(__file__).resolve().parents[1]


def _torchrun(out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "-m", "harness.cli", "train", "--mixer", "protot", "--out", str(out), "--device", "cpu", *TINY_TRAIN, *extra,
    ]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def _losses(path: Path) -> list[float]:
    return [h["loss"] for h in load_checkpoint(path).meta["history"]]


def test_two_process_gloo_torchrun_matches_single_process(tmp_path):
    proc = _torchrun(tmp_path / "ddp")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("trained protot") == 1  # only rank 0 reports
    single = train_tiny(tmp_path / "single", "protot")

    ddp_ckpt, ref_ckpt = load_checkpoint(tmp_path / "ddp"), load_checkpoint(single)
    assert ddp_ckpt.meta["world_size"] == 2 and ref_ckpt.meta["world_size"] == 1
    assert train_id(ddp_ckpt.spec) == train_id(ref_ckpt.spec)  # same global batch: the same run
    assert ddp_ckpt.meta["tokens_seen"] == ref_ckpt.meta["tokens_seen"]
    ddp, ref = _losses(tmp_path / "ddp"), _losses(single)
    assert len(ddp) == len(ref) == ddp_ckpt.meta["total_steps"] == 32
    gap = max(abs(a - b) for a, b in zip(ddp, ref, strict=True))
    assert gap <= TOLERANCE, f"per-step loss differs by {gap:.2e}"
    assert abs(ddp_ckpt.meta["val_loss"] - ref_ckpt.meta["val_loss"]) <= TOLERANCE  # validation split over ranks
    weight_gap = max((ddp_ckpt.weights[k] - ref_ckpt.weights[k]).abs().max().item() for k in ref_ckpt.weights)
    assert weight_gap < 1e-3
    # rank 0 alone wrote: one snapshot, no stray tokenizer copy
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == [".lock", "LATEST", "step-0000032"]

    # negative control: one rank's half batch trained alone is far outside the tolerance
    half = train_tiny(tmp_path / "half", "protot", "--batch-size", "4", "--tokens", "16384")
    half_gap = max(abs(a - b) for a, b in zip(_losses(half), ref, strict=True))
    assert half_gap > 10 * TOLERANCE, f"control differs by only {half_gap:.2e}"
    print(f"torchrun vs single: loss gap {gap:.2e}, weight gap {weight_gap:.2e}; half-batch control gap {half_gap:.3f}")


def test_detect_reads_the_torchrun_environment(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    assert detect() is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert detect() is None  # one process: plain training
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert detect() == DistEnv(3, 4, 1)


def test_shards_tile_the_global_batch_and_uneven_batches_are_refused():
    batch = torch.arange(8 * 3).reshape(8, 3)
    parts = [DistEnv(r, 4, r).shard(batch) for r in range(4)]
    assert torch.equal(torch.cat(parts), batch)
    with pytest.raises(ConfigError, match="multiple of 3"):
        DistEnv(0, 3, 0).check_batch(8)
