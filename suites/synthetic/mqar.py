"""Multi-query associative recall (MQAR), zoology's definition (Arora, Eyuboglu et al. 2023, "Zoology:
Measuring and improving recall in efficient language models"; docs/synthetic.md, "mqar").

An example of length ``seq_len`` starts with ``num_kv_pairs`` key-value pairs (k1 v1 k2 v2 ...), keys distinct
and drawn from the first half of the vocabulary [1, V/2), values distinct and drawn from the second [V/2, V).
Every key is then queried once in the rest of the sequence: query slots sit at even offsets 2g after the pairs,
the gaps g distinct and drawn, one after another, with probability proportional to (g + 1)^(power_a - 1) (a power
law: most queries come soon after the pairs, as repeated bigrams do in text; ``power_a = 1`` is uniform). The
model must emit the key's value at the query position; nothing else is scored or trained on. Every other
position holds a token drawn uniformly from the whole vocabulary (zoology's ``random_non_queries``).

Ours differs from zoology's code only in its random streams: one seeded generator per split, where zoology
seeds numpy's global state and draws the filler tokens from torch's unseeded global generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError
from suites.synthetic.data import (
    IGNORE, TaskData, check_task_sizes, distinct_integers, weighted_sample_without_replacement,
)


@dataclass(frozen=True)
class MQARConfig:
    """One MQAR setting. Defaults are zoology's: vocabulary 8192, ``power_a`` 0.01, (64, 4); its training sets
    hold 100,000 examples at length 64 and 20,000 at every other length (``num_train_examples = 0``)."""

    seq_len: int = 64
    num_kv_pairs: int = 4
    vocab_size: int = 8192
    power_a: float = 0.01
    num_train_examples: int = 0  # 0: zoology's size for this length

    def __post_init__(self) -> None:
        for name in ("seq_len", "num_kv_pairs", "vocab_size", "num_train_examples"):
            value = getattr(self, name)
            least = 0 if name == "num_train_examples" else 1  # 0 training examples: zoology's size
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"mqar: {name} must be an integer >= {least}, got {value!r}.")
        check_task_sizes("mqar", self)
        if self.seq_len % 2:
            raise ConfigError(f"mqar: seq_len must be even (pairs and query slots are two tokens), got {self.seq_len}.")
        if 4 * self.num_kv_pairs > self.seq_len:
            raise ConfigError(
                f"mqar: {self.num_kv_pairs} pairs and their queries need seq_len >= {4 * self.num_kv_pairs}, "
                f"got {self.seq_len}."
            )
        if self.vocab_size <= self.seq_len:
            raise ConfigError(f"mqar: vocab_size ({self.vocab_size}) must exceed seq_len ({self.seq_len}), as in zoology.")
        if self.num_kv_pairs > self.vocab_size // 2 - 1:
            raise ConfigError(f"mqar: {self.num_kv_pairs} distinct keys do not fit a key vocabulary of "
                              f"{self.vocab_size // 2 - 1}.")
        if not (isinstance(self.power_a, (int, float)) and 0 < self.power_a <= 1):
            raise ConfigError(f"mqar: power_a must be in (0, 1], got {self.power_a!r}.")

    @property
    def train_examples(self) -> int:
        return self.num_train_examples or (100_000 if self.seq_len == 64 else 20_000)

    @property
    def query_slots(self) -> int:
        """Number of places a query can go: even offsets after the pairs."""
        return (self.seq_len - 2 * self.num_kv_pairs) // 2

    @property
    def value_vocab(self) -> int:
        return self.vocab_size - self.vocab_size // 2

    def gap_weights(self) -> np.ndarray:
        """Unnormalised probability of each gap g = 0 .. query_slots - 1: (g + 1) ** (power_a - 1)."""
        return np.arange(1, self.query_slots + 1, dtype=np.float64) ** (self.power_a - 1.0)


def generate_mqar(cfg: MQARConfig, n: int, rng: np.random.Generator, training: bool) -> TaskData:
    """``n`` MQAR examples from ``rng`` (train and test examples have the same form)."""
    del training
    k, L, V = cfg.num_kv_pairs, cfg.seq_len, cfg.vocab_size
    half = V // 2
    keys = distinct_integers(rng, 1, half, (n, k))
    values = distinct_integers(rng, half, V, (n, k))
    gaps = weighted_sample_without_replacement(rng, cfg.gap_weights(), n, k)
    inputs = rng.integers(0, V, size=(n, L)).astype(np.int64)  # fillers everywhere, then the pairs and queries
    inputs[:, 0:2 * k:2] = keys
    inputs[:, 1:2 * k:2] = values
    query_pos = 2 * k + 2 * gaps
    rows = np.arange(n)[:, None]
    inputs[rows, query_pos] = keys
    targets = np.full((n, L), IGNORE, dtype=np.int64)
    targets[rows, query_pos] = values
    return TaskData(inputs, targets)
