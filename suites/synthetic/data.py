"""Generated examples and the random streams behind them (docs/synthetic.md, "Seeding").

Every split of every task setting draws from its own ``numpy.random.Generator``, seeded from a SHA-256 of
(task name, the setting's full config, data seed, split name): the data are a function of those alone, identical
across processes and machines, and nothing reads or advances global RNG state. Both upstream generators got
this wrong (zoology fills non-query positions from torch's global generator; MAD-lab's selective copying draws
insert positions from numpy's global one and its Ray workers share one pickled generator), so two runs of
"the same" data could differ.

Targets are *aligned*: ``targets[i, t]`` is the token the model must emit at position ``t`` (the logits computed
at ``t``), ``IGNORE`` where nothing is scored. ``loss_targets`` are what training fits when they differ from the
scored targets (MAD's recall tasks train on every next token and score only the recalled values).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.kit import IGNORE_INDEX
from harness.config import to_dict
from harness.errors import ConfigError

IGNORE = IGNORE_INDEX
SPLITS = ("train", "valid", "test")

#: the largest sizes a task setting may ask for, checked when its config is built, before any data or model:
#: past them a size drives memory before the suite's memory checks can run (a mod-add modulus of 10^9 spent 168 s
#: listing its group and ended in a MemoryError). The sources' largest are far below: vocabulary 8,192 (zoology,
#: MAD), length 1,024 (MAD), 100,000 training examples (zoology)
MAX_VOCAB = 65_536
MAX_SEQ_LEN = 16_384
MAX_EXAMPLES = 10_000_000
#: examples x length of one generated split: 2 GiB of int64 inputs and targets
MAX_SPLIT_TOKENS = 2**27
SIZE_REASONS = {
    "vocab_size": "it sizes the trained model's embedding and output head (the sources use at most 8,192)",
    "seq_len": "every example is generated and trained at this length (the sources use at most 1,024)",
    "num_train_examples": "the split is generated in memory at once (the sources use at most 100,000)",
}


def check_size(task: str, name: str, value: int, limit: int, why: str) -> None:
    """Refuse ``value`` above ``limit`` in one sentence naming the limit and ``why`` it exists."""
    if value > limit:
        raise ConfigError(f"{task}: {name} must be at most {limit:,}, got {value:,}: {why}.")


def check_task_sizes(task: str, cfg: Any) -> None:
    """A task config's vocabulary, length and training examples against :data:`MAX_VOCAB`, :data:`MAX_SEQ_LEN`,
    :data:`MAX_EXAMPLES` and their product against :data:`MAX_SPLIT_TOKENS` (call after the fields are checked
    to be integers)."""
    for name, limit in (("vocab_size", MAX_VOCAB), ("seq_len", MAX_SEQ_LEN), ("num_train_examples", MAX_EXAMPLES)):
        if hasattr(cfg, name):
            check_size(task, name, getattr(cfg, name), limit, SIZE_REASONS[name])
    examples = getattr(cfg, "train_examples", getattr(cfg, "num_train_examples", 0))
    check_split_tokens(task, "training", examples, cfg.seq_len)


def check_split_tokens(task: str, split: str, examples: int, length: int) -> None:
    check_size(task, f"the {split} split's tokens ({examples:,} examples x {length:,})", examples * length,
               MAX_SPLIT_TOKENS, "a split is generated in memory at once as int64 inputs and targets (2 GiB at the "
                                 "limit)")


@dataclass(frozen=True)
class TaskData:
    """One split of one task setting: ``inputs`` and aligned ``targets``, int64 arrays of shape [N, T]."""

    inputs: np.ndarray
    targets: np.ndarray
    loss_targets: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.inputs.ndim != 2 or self.inputs.shape != self.targets.shape:
            raise ValueError(f"task data: inputs {self.inputs.shape} and targets {self.targets.shape} must be [N, T]")
        if self.loss_targets is not None and self.loss_targets.shape != self.inputs.shape:
            raise ValueError("task data: loss_targets must have the shape of inputs")

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.inputs.shape[1])

    @property
    def train_targets(self) -> np.ndarray:
        return self.targets if self.loss_targets is None else self.loss_targets

    def fingerprint(self) -> str:
        """SHA-256 of the arrays' shapes and bytes: equal iff the examples are equal."""
        h = hashlib.sha256()
        for arr in (self.inputs, self.targets, self.train_targets):
            a = np.ascontiguousarray(arr, dtype=np.int64)
            h.update(repr(a.shape).encode())
            h.update(a.tobytes())
        return h.hexdigest()


def split_seed_words(task: str, config: Any, seed: int, split: str) -> list[int]:
    """32-bit words of SHA-256(task, config, seed, split), the entropy of that split's generator."""
    payload = json.dumps({"task": task, "config": to_dict(config), "seed": int(seed), "split": split},
                         sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(payload.encode()).digest()
    return [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 32, 4)]


def split_rng(task: str, config: Any, seed: int, split: str) -> np.random.Generator:
    """The one generator of a (task setting, seed, split); see the module docstring."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(split_seed_words(task, config, seed, split))))


def torch_seed(*parts: Any) -> int:
    """A 63-bit seed for a ``torch.Generator`` (model init, batch order) from any JSON-able parts."""
    payload = json.dumps(to_dict(list(parts)), sort_keys=True, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.sha256(payload.encode()).digest()[:8], "little") >> 1


def distinct_integers(rng: np.random.Generator, low: int, high: int, shape: tuple[int, int]) -> np.ndarray:
    """``shape[0]`` rows of ``shape[1]`` distinct integers drawn uniformly from [low, high).

    Rows with a repeat are redrawn as a whole until none has one, which leaves every row uniform over the
    ordered draws without replacement (rejection sampling); cheap when ``shape[1]**2 << high - low``, and exact
    (a row-wise permutation) when it is not.
    """
    n, k = shape
    span = high - low
    if k > span:
        raise ValueError(f"cannot draw {k} distinct integers from a range of {span}")
    if k * k > span:  # collisions would be frequent: permute each row's range instead
        return np.stack([rng.permutation(span)[:k] + low for _ in range(n)]) if n else np.empty((0, k), np.int64)
    out = rng.integers(low, high, size=(n, k))
    bad = _rows_with_repeats(out)
    while bad.any():
        out[bad] = rng.integers(low, high, size=(int(bad.sum()), k))
        bad = _rows_with_repeats(out)
    return out.astype(np.int64)


def _rows_with_repeats(a: np.ndarray) -> np.ndarray:
    s = np.sort(a, axis=1)
    return (s[:, 1:] == s[:, :-1]).any(axis=1)


def weighted_sample_without_replacement(rng: np.random.Generator, weights: np.ndarray, n: int, k: int) -> np.ndarray:
    """``n`` rows of ``k`` distinct indices of ``weights``, drawn one after another with probability
    proportional to the weights of the indices not yet drawn (numpy's ``choice(replace=False, p=...)`` law),
    in draw order. Vectorised with the Gumbel-top-k trick: the k largest of log(w) + Gumbel noise."""
    w = np.asarray(weights, dtype=np.float64)
    if k > int((w > 0).sum()):
        raise ValueError(f"cannot draw {k} distinct indices from {int((w > 0).sum())} with positive weight")
    scores = np.log(w)[None, :] + rng.gumbel(size=(n, len(w)))
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k < len(w) else np.tile(np.arange(len(w)), (n, 1))
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1).astype(np.int64)
