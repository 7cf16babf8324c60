"""Data-parallel training under ``torchrun`` (docs/DESIGN.md §7): one model on several processes, GPUs or nodes.

``torchrun --nproc-per-node N -m harness.cli train --mixer M --preset P --out DIR`` starts N copies of
``mixbench train``; each finds its rank in the environment torchrun sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``), joins one process group (gloo on CPU, nccl on GPU) and
trains the same model wrapped in ``DistributedDataParallel``.

The global batch is the single-process batch: every rank draws the step's batch from ``(seed, step)`` exactly
as single-process training does (``Corpus.train_batch``) and keeps its contiguous slice of
``batch_size / world_size`` rows. Training windows hold no padding, so each slice has the same number of
target tokens and the mean of the ranks' mean losses, which is what DDP's gradient averaging optimises, is the
single-process loss; the run therefore keeps its train id and resumes from (or is resumed by) a single-process
checkpoint. Only rank 0 writes checkpoints, the tokenizer copy and logs; the ranks meet at a barrier after the
final checkpoint so none of them exits before it exists.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch

from harness.errors import ConfigError, MixbenchError

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class DistEnv:
    """This process's place in a torchrun job."""

    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def backend(self, device: str) -> str:
        return "nccl" if device.startswith("cuda") else "gloo"

    def shard(self, batch: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous slice of the global batch (rows ``rank*b .. (rank+1)*b``)."""
        per = batch.shape[0] // self.world_size
        return batch[self.rank * per : (self.rank + 1) * per]

    def check_batch(self, batch_size: int) -> None:
        if batch_size % self.world_size:
            raise ConfigError(
                f"batch_size {batch_size} cannot be split evenly over {self.world_size} torchrun processes; "
                f"pass --batch-size as a multiple of {self.world_size} (the global batch stays that size)."
            )


def detect() -> DistEnv | None:
    """The torchrun environment of this process, or None when it runs alone (no torchrun, or one process)."""
    if "WORLD_SIZE" not in os.environ:
        return None
    try:
        rank, world, local = (int(os.environ.get(k, "0")) for k in _ENV)
    except ValueError:
        raise MixbenchError(
            f"RANK / WORLD_SIZE / LOCAL_RANK must be integers (got {[os.environ.get(k) for k in _ENV]}); "
            "start distributed training with torchrun."
        ) from None
    if world <= 1:
        return None
    if not 0 <= rank < world:
        raise MixbenchError(f"RANK {rank} is outside 0..{world - 1}; start distributed training with torchrun.")
    return DistEnv(rank, world, local)


def process_device(env: DistEnv, device: str) -> str:
    """One GPU per process on a node (``cuda:LOCAL_RANK``); CPU processes share the CPU."""
    if not device.startswith("cuda"):
        return device
    if env.local_rank >= torch.cuda.device_count():
        raise MixbenchError(
            f"LOCAL_RANK {env.local_rank} has no GPU (this node has {torch.cuda.device_count()}); "
            "start at most one process per GPU (--nproc-per-node)."
        )
    return f"cuda:{env.local_rank}"


@contextmanager
def session(device: str, timeout_s: float = 1800.0) -> Iterator[tuple[DistEnv | None, str]]:
    """Join the torchrun process group for the duration of the block; yields (env or None, this process's device).

    The timeout bounds how long a rank waits for the others (e.g. while rank 0 trains the tokenizer).
    """
    env = detect()
    if env is None:
        yield None, device
        return
    import torch.distributed as dist

    device = process_device(env, device)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(
        env.backend(device), rank=env.rank, world_size=env.world_size, timeout=timedelta(seconds=timeout_s),
        device_id=torch.device(device) if device.startswith("cuda") else None,
    )
    try:
        yield env, device
    finally:
        dist.destroy_process_group()


@contextmanager
def main_first(env: DistEnv | None) -> Iterator[None]:
    """Rank 0 runs the block first (filling shared caches: tokenizer, token stream), then the other ranks."""
    if env is None:
        yield
        return
    if not env.is_main:
        barrier()
    yield
    if env.is_main:
        barrier()


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_mean(value: torch.Tensor, env: DistEnv | None) -> torch.Tensor:
    """The mean of ``value`` over ranks (a copy; ``value`` itself is unchanged)."""
    if env is None:
        return value
    import torch.distributed as dist

    out = value.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / env.world_size


def all_sum(values: list[float], env: DistEnv | None, device: torch.device) -> list[float]:
    """Element-wise sums of ``values`` over ranks (float64, so token counts stay exact)."""
    if env is None:
        return values
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def wrap(model: torch.nn.Module, env: DistEnv | None, device: torch.device) -> torch.nn.Module:
    """``model`` in DistributedDataParallel (which broadcasts rank 0's weights), or as is when alone."""
    if env is None:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
