"""MAD-lab's six tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid Architectures"; the
``mad/data/instances.py`` generators and ``configs/tasks/*.yml`` settings of athms/mad-lab; docs/synthetic.md,
"The MAD tasks").

Each config's defaults are MAD's baseline setting; :data:`DIFFICULTY` lists MAD's difficulty axes (the values
its benchmark varies one at a time from the baseline). Every generator takes one ``numpy.random.Generator`` and
nothing else random, and returns :class:`TaskData` with aligned targets (the token to emit at each position).

Where ours departs from MAD's code, on purpose (docs/synthetic.md lists each with its reason):

* the recall tasks are MAD's multi-query form (the only one its benchmark uses); the in-context recall input is
  ``seq_len - 1`` tokens as in MAD (a sequence of ``seq_len`` tokens shifted by one);
* fuzzy recall always shows the probed pair before the final query (MAD's loop can end before inserting it, so
  that query has no answer);
* selective copying spreads the tokens to copy over uniformly random distinct positions of the region before the
  copy token (MAD inserts blanks before tokens only, so the last token always sits next to the copy token, and
  draws those positions from numpy's global generator);
* compression scores the reconstruction of the ``seq_len - 1`` content tokens, not the fixed compression token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError
from suites.synthetic.data import IGNORE, TaskData, check_task_sizes


def _check_ints(task: str, cfg, names: tuple[str, ...], minimum: int = 1) -> None:
    """Each field an integer >= ``minimum``; the sizes (vocabulary, length, examples) also within their bounds."""
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{task}: {name} must be an integer >= {minimum}, got {value!r}.")
    if {"vocab_size", "seq_len", "num_train_examples"} <= set(names):
        check_task_sizes(task, cfg)


def _check_noise(task: str, frac_noise: float, noise_vocab_size: int) -> None:
    if not (isinstance(frac_noise, (int, float)) and 0.0 <= frac_noise < 1.0):
        raise ConfigError(f"{task}: frac_noise must be in [0, 1), got {frac_noise!r}.")
    if frac_noise > 0 and noise_vocab_size < 1:
        raise ConfigError(f"{task}: frac_noise > 0 needs noise_vocab_size >= 1.")


# ------------------------------------------------------------------------------------------- in-context recall


@dataclass(frozen=True)
class InContextRecallConfig:
    """Key-value pairs drawn from a per-example random map; every repeated key must be answered with its value.

    Keys are the first half of the non-noise vocabulary, values the second half, noise tokens the last
    ``noise_vocab_size`` ids. ``seq_len // 2 - 1`` pair slots (each, with probability ``frac_noise``, two noise
    tokens instead; one slot is always a pair) are followed by a final query of a key shown before.
    """

    vocab_size: int = 16
    seq_len: int = 128
    num_train_examples: int = 12_800
    noise_vocab_size: int = 0
    frac_noise: float = 0.0

    task = "in-context-recall"

    def __post_init__(self) -> None:
        _check_ints(self.task, self, ("vocab_size", "seq_len", "num_train_examples"))
        _check_ints(self.task, self, ("noise_vocab_size",), minimum=0)
        _check_noise(self.task, self.frac_noise, self.noise_vocab_size)
        if self.seq_len % 2 or self.seq_len < 4:
            raise ConfigError(f"{self.task}: seq_len must be even and >= 4, got {self.seq_len}.")
        if (self.vocab_size - self.noise_vocab_size) < 2:
            raise ConfigError(f"{self.task}: vocab_size minus noise_vocab_size must leave >= 2 key/value tokens.")

    @property
    def key_vocab(self) -> tuple[int, int]:
        return 0, (self.vocab_size - self.noise_vocab_size) // 2

    @property
    def value_vocab(self) -> tuple[int, int]:
        return (self.vocab_size - self.noise_vocab_size) // 2, self.vocab_size - self.noise_vocab_size

    @property
    def noise_vocab(self) -> tuple[int, int]:
        return self.vocab_size - self.noise_vocab_size, self.vocab_size

    @property
    def chance(self) -> float:
        lo, hi = self.value_vocab
        return 1.0 / (hi - lo)


@dataclass(frozen=True)
class NoisyRecallConfig(InContextRecallConfig):
    """In-context recall with noise: MAD's baseline adds 16 noise tokens and makes a fifth of the slots noise."""

    vocab_size: int = 32
    seq_len: int = 128
    num_train_examples: int = 12_800
    noise_vocab_size: int = 16
    frac_noise: float = 0.2

    task = "noisy-recall"


def generate_recall(cfg: InContextRecallConfig, n: int, rng: np.random.Generator, training: bool) -> TaskData:
    """In-context (and noisy) recall; trains on every next token (MAD's training targets), scores the values."""
    del training
    slots = cfg.seq_len // 2 - 1
    k_lo, k_hi = cfg.key_vocab
    v_lo, v_hi = cfg.value_vocab
    n_keys = k_hi - k_lo
    noise = rng.random((n, slots)) < cfg.frac_noise if cfg.frac_noise > 0 else np.zeros((n, slots), bool)
    noise[np.arange(n), rng.integers(0, slots, size=n)] = False  # at least one real pair
    keys = rng.integers(k_lo, k_hi, size=(n, slots))
    kv_map = rng.integers(v_lo, v_hi, size=(n, n_keys))  # a random function from keys to values
    rows = np.arange(n)[:, None]
    values = kv_map[rows, keys - k_lo]
    if cfg.frac_noise > 0:
        n_lo, n_hi = cfg.noise_vocab
        noise_tokens = rng.integers(n_lo, n_hi, size=(n, slots, 2))
        keys = np.where(noise, noise_tokens[..., 0], keys)
        values = np.where(noise, noise_tokens[..., 1], values)
    seen = np.zeros((n, n_keys), dtype=bool)
    repeat = np.zeros((n, slots), dtype=bool)
    for j in range(slots):  # a value is scored when its key was shown in an earlier pair
        real = ~noise[:, j]
        k = np.where(real, keys[:, j] - k_lo, 0)
        repeat[:, j] = real & seen[np.arange(n), k]
        seen[np.arange(n), k] |= real
    # the final query: a key shown before, uniform over the distinct keys shown
    probe = np.argmax(np.where(seen, rng.random((n, n_keys)), -1.0), axis=1)
    seq = np.empty((n, 2 * slots + 2), dtype=np.int64)
    seq[:, 0:2 * slots:2], seq[:, 1:2 * slots:2] = keys, values
    seq[:, -2], seq[:, -1] = probe + k_lo, kv_map[np.arange(n), probe]
    scored = np.zeros(seq.shape, dtype=bool)
    scored[:, 1:2 * slots:2] = repeat
    scored[:, -1] = True
    return _shifted(seq, scored, train_everywhere=True)


def _shifted(seq: np.ndarray, scored: np.ndarray, train_everywhere: bool, pad: int | None = None) -> TaskData:
    """Inputs ``seq[:, :-1]``; the target at t is ``seq[:, t + 1]``, scored where ``scored[:, t + 1]``."""
    nxt = seq[:, 1:]
    targets = np.where(scored[:, 1:], nxt, IGNORE).astype(np.int64)
    loss = None
    if train_everywhere:
        loss = nxt.copy() if pad is None else np.where(nxt == pad, IGNORE, nxt).astype(np.int64)
    return TaskData(np.ascontiguousarray(seq[:, :-1]), targets, loss)


# --------------------------------------------------------------------------------------------- fuzzy recall


@dataclass(frozen=True)
class FuzzyRecallConfig:
    """Recall where keys and values are motifs of 1..k_motif_size (1..v_motif_size) distinct tokens.

    Training sequences mix key sizes; validation and test keys always have ``k_motif_size`` tokens (MAD's
    ``is_training`` switch). Sequences are left-padded with the pad token (the last id) to ``seq_len``.
    """

    vocab_size: int = 16
    seq_len: int = 128
    num_train_examples: int = 12_800
    k_motif_size: int = 3
    v_motif_size: int = 3
    noise_vocab_size: int = 0
    frac_noise: float = 0.0

    task = "fuzzy-recall"

    def __post_init__(self) -> None:
        _check_ints(self.task, self, ("vocab_size", "seq_len", "num_train_examples", "k_motif_size", "v_motif_size"))
        _check_ints(self.task, self, ("noise_vocab_size",), minimum=0)
        _check_noise(self.task, self.frac_noise, self.noise_vocab_size)
        k_lo, k_hi = self.key_vocab
        v_lo, v_hi = self.value_vocab
        if k_hi - k_lo < self.k_motif_size or v_hi - v_lo < self.v_motif_size:
            raise ConfigError(f"{self.task}: the vocabulary is too small for motifs of {self.k_motif_size} distinct "
                              f"key and {self.v_motif_size} distinct value tokens.")
        if self.seq_len < 4 * (self.k_motif_size + self.v_motif_size):
            raise ConfigError(f"{self.task}: seq_len must be >= {4 * (self.k_motif_size + self.v_motif_size)} for "
                              f"these motif sizes, got {self.seq_len}.")

    @property
    def pad_token(self) -> int:
        return self.vocab_size - 1

    @property
    def key_vocab(self) -> tuple[int, int]:
        return 0, (self.vocab_size - 1 - self.noise_vocab_size) // 2

    @property
    def value_vocab(self) -> tuple[int, int]:
        return (self.vocab_size - 1 - self.noise_vocab_size) // 2, self.vocab_size - 1 - self.noise_vocab_size

    @property
    def noise_vocab(self) -> tuple[int, int]:
        return self.vocab_size - 1 - self.noise_vocab_size, self.vocab_size - 1

    @property
    def chance(self) -> float:
        lo, hi = self.value_vocab
        return 1.0 / (hi - lo)


def generate_fuzzy_recall(cfg: FuzzyRecallConfig, n: int, rng: np.random.Generator, training: bool) -> TaskData:
    L = cfg.seq_len
    seqs = np.full((n, L + 1), cfg.pad_token, dtype=np.int64)
    scored = np.zeros((n, L + 1), dtype=bool)
    for i in range(n):
        tokens, marks = _fuzzy_example(cfg, rng, training)
        seqs[i, L + 1 - len(tokens):] = tokens
        scored[i, L + 1 - len(tokens):] = marks
    return _shifted(seqs, scored, train_everywhere=True, pad=cfg.pad_token)


def _fuzzy_example(cfg: FuzzyRecallConfig, rng: np.random.Generator, training: bool) -> tuple[list[int], list[bool]]:
    """One unpadded sequence (at most ``seq_len + 1`` tokens) and which of its tokens are scored values."""
    L, kmax, vmax = cfg.seq_len, cfg.k_motif_size, cfg.v_motif_size
    k_lo, k_hi = cfg.key_vocab
    v_lo, v_hi = cfg.value_vocab
    pairs = L // 2 + 2  # more draws than pairs that can fit
    # one batch of draws per example (as Python lists: the loop below is scalar work)
    k_sizes = (rng.integers(1, kmax + 1, size=pairs) if training else np.full(pairs, kmax)).tolist()
    v_sizes = rng.integers(1, vmax + 1, size=pairs).tolist()
    key_orders = (np.argsort(rng.random((pairs, k_hi - k_lo)), axis=1) + k_lo).tolist()
    value_orders = (np.argsort(rng.random((pairs, v_hi - v_lo)), axis=1) + v_lo).tolist()
    is_noise = (rng.random(pairs) < cfg.frac_noise).tolist()
    noise_tokens = rng.integers(*cfg.noise_vocab, size=(pairs, kmax + vmax)).tolist() if cfg.frac_noise > 0 else None

    probe_key = tuple(key_orders[0][:k_sizes[0]])
    probe_value = tuple(value_orders[0][:v_sizes[0]])
    probe_len = len(probe_key) + len(probe_value)
    stop = L - probe_len - (kmax + vmax)  # room for one more pair and the final query
    probe_at = int(rng.integers(0, max(1, stop - (kmax + vmax) + 1)))  # early enough to always be reached

    kv_map: dict[tuple[int, ...], tuple[int, ...]] = {}
    tokens: list[int] = []
    marks: list[bool] = []
    probe_shown = False
    for j in range(1, pairs):
        if len(tokens) >= stop:
            break
        if not probe_shown and len(tokens) >= probe_at:
            tokens += [*probe_key, *probe_value]
            marks += [False] * probe_len
            kv_map[probe_key] = probe_value
            probe_shown = True
            continue
        k_size, v_size = k_sizes[j], v_sizes[j]
        if is_noise[j]:
            tokens += noise_tokens[j][:k_size + v_size]
            marks += [False] * (k_size + v_size)
            continue
        key = tuple(key_orders[j][:k_size])
        repeat = key in kv_map
        if key == probe_key:
            value = probe_value
        elif repeat:
            value = kv_map[key]
        else:
            value = tuple(value_orders[j][:v_size])
        kv_map[key] = value
        tokens += [*key, *value]
        marks += [False] * len(key) + [repeat] * len(value)
    tokens += [*probe_key, *probe_value]
    marks += [False] * len(probe_key) + [True] * len(probe_value)
    return tokens, marks


# ------------------------------------------------------------------------------------------- selective copying


@dataclass(frozen=True)
class SelectiveCopyConfig:
    """``num_tokens_to_copy`` tokens scattered among blanks; after the copy token, emit them in order."""

    vocab_size: int = 16
    seq_len: int = 256
    num_tokens_to_copy: int = 16
    num_train_examples: int = 12_800

    task = "selective-copy"

    def __post_init__(self) -> None:
        _check_ints(self.task, self, ("vocab_size", "seq_len", "num_tokens_to_copy", "num_train_examples"))
        if self.vocab_size < 3:
            raise ConfigError(f"{self.task}: vocab_size must be >= 3 (a blank, a copy token and content), got "
                              f"{self.vocab_size}.")
        if self.seq_len <= 2 * self.num_tokens_to_copy + 1:
            raise ConfigError(f"{self.task}: seq_len must exceed 2 * num_tokens_to_copy + 1 "
                              f"({2 * self.num_tokens_to_copy + 1}), got {self.seq_len}.")

    @property
    def copy_token(self) -> int:
        return self.vocab_size - 1

    @property
    def blank_token(self) -> int:
        return self.vocab_size - 2

    @property
    def region(self) -> int:
        """Positions before the copy token, where the tokens to copy are scattered."""
        return self.seq_len - self.num_tokens_to_copy - 1

    @property
    def chance(self) -> float:
        return 1.0 / (self.vocab_size - 2)


def generate_selective_copy(cfg: SelectiveCopyConfig, n: int, rng: np.random.Generator, training: bool) -> TaskData:
    del training
    m, region = cfg.num_tokens_to_copy, cfg.region
    content = rng.integers(0, cfg.vocab_size - 2, size=(n, m))
    positions = np.sort(np.argsort(rng.random((n, region)), axis=1)[:, :m], axis=1)
    inputs = np.full((n, cfg.seq_len), cfg.blank_token, dtype=np.int64)
    inputs[np.arange(n)[:, None], positions] = content
    inputs[:, region] = cfg.copy_token
    targets = np.full((n, cfg.seq_len), IGNORE, dtype=np.int64)
    targets[:, region + 1:] = content
    return TaskData(inputs, targets)


# --------------------------------------------------------------------------------------------------- compression


@dataclass(frozen=True)
class CompressionConfig:
    """``seq_len - 1`` random tokens and a compression token; a decoder reads only the model's output at the
    compression token and must reconstruct every token (MAD's auto-encoder setup)."""

    vocab_size: int = 16
    seq_len: int = 32
    num_train_examples: int = 12_800

    task = "compression"

    def __post_init__(self) -> None:
        _check_ints(self.task, self, ("vocab_size", "seq_len", "num_train_examples"))
        if self.vocab_size < 2 or self.seq_len < 2:
            raise ConfigError(f"{self.task}: vocab_size and seq_len must be >= 2.")

    @property
    def compression_token(self) -> int:
        return self.vocab_size - 1

    @property
    def chance(self) -> float:
        return 1.0 / (self.vocab_size - 1)


def generate_compression(cfg: CompressionConfig, n: int, rng: np.random.Generator, training: bool) -> TaskData:
    del training
    inputs = np.empty((n, cfg.seq_len), dtype=np.int64)
    inputs[:, :-1] = rng.integers(0, cfg.vocab_size - 1, size=(n, cfg.seq_len - 1))
    inputs[:, -1] = cfg.compression_token
    targets = inputs.copy()
    targets[:, -1] = IGNORE
    return TaskData(inputs, targets)


# ------------------------------------------------------------------------------------------------- memorization


@dataclass(frozen=True)
class MemorizationConfig:
    """A fixed key-to-value map (the same for every split) that can only be learned in the weights: sequences of
    (key, insert token) pairs where the value must be emitted at the insert token."""

    vocab_size: int = 256
    seq_len: int = 32
    num_train_examples: int = 256

    task = "memorization"

    def __post_init__(self) -> None:
        _check_ints(self.task, self, ("vocab_size", "seq_len", "num_train_examples"))
        if self.vocab_size < 5 or self.seq_len < 2 or self.seq_len % 2:
            raise ConfigError(f"{self.task}: vocab_size must be >= 5 and seq_len even and >= 2.")

    @property
    def insert_token(self) -> int:
        return self.vocab_size - 1

    @property
    def n_keys(self) -> int:
        return (self.vocab_size - 1) // 2

    @property
    def value_vocab(self) -> tuple[int, int]:
        return self.n_keys, self.vocab_size - 1

    @property
    def chance(self) -> float:
        lo, hi = self.value_vocab
        return 1.0 / (hi - lo)


def memorization_facts(cfg: MemorizationConfig, rng: np.random.Generator) -> np.ndarray:
    """The value of each key 0 .. n_keys - 1: a random injection into the value vocabulary."""
    lo, hi = cfg.value_vocab
    return (rng.permutation(hi - lo)[:cfg.n_keys] + lo).astype(np.int64)


def generate_memorization(cfg: MemorizationConfig, n: int, rng: np.random.Generator, training: bool,
                          facts: np.ndarray) -> TaskData:
    del training
    pairs = cfg.seq_len // 2
    keys = rng.integers(0, cfg.n_keys, size=(n, pairs))
    inputs = np.empty((n, cfg.seq_len), dtype=np.int64)
    inputs[:, 0::2], inputs[:, 1::2] = keys, cfg.insert_token
    targets = np.full((n, cfg.seq_len), IGNORE, dtype=np.int64)
    targets[:, 1::2] = facts[keys]
    return TaskData(inputs, targets)
