"""State tracking: word problems on finite groups, one label per position (docs/state_tracking.md).

An example is a sequence of group elements ``x_0 .. x_{T-1}`` drawn uniformly and independently; the label at
position ``t`` is the running product ``s_t = x_t * s_{t-1}`` (``s_0 = x_0``), the state a reader must carry
from the first token to the current one. Inputs and labels share one vocabulary: token ``g`` is the ``g``-th
element of the group (:meth:`WordProblemConfig.elements`), so the tied LM head emits an element.

* ``parity`` - the cyclic group Z_2: bits, the label the parity of the ones so far (Delétang et al. 2023;
  Grazzi et al. 2025, Figure 1);
* ``mod-add`` - Z_m (``modulus``, default 5 as in the Chomsky-hierarchy modular-arithmetic task): the running sum
  mod m;
* ``s3``, ``s5`` - the symmetric groups on 3 and 5 points (Merrill et al. 2024, "The Illusion of State in
  State-Space Models"; Siems et al. 2025, DeltaProduct): permutations in lexicographic order (token 0 is the
  identity), ``(p * q)(i) = p(q(i))``, so the state is "apply ``x_0``, then ``x_1``, ...".

Every position is a target and every position trains (the label at ``t`` is the answer for the prefix of length
``t + 1``, so a model trained at length L has seen every prefix length up to L). Chance is ``1 / |G|``: at every
position but the first, the label is uniform over the group given the current token alone (the running product
of uniform elements is uniform and independent of ``x_t``), so a context-free model (the ``none`` control)
scores chance there and exactly 1 at position 0, ``1/|G| + (1 - 1/|G|) / T`` over all T positions, and chance at
the final position.

Labels are computed with the group's Cayley table (:func:`cayley_table`); the cyclic groups' running sums with
``cumsum`` (the tests check both against naive loops over explicit tuples).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from harness.errors import ConfigError
from harness.values import option
from suites.synthetic.data import IGNORE, TaskData, check_size, check_task_sizes

#: the largest mod-add modulus: m is the trained model's vocabulary, and the group's Cayley table holds m^2 entries
MAX_MODULUS = 1_024


@dataclass(frozen=True)
class WordProblemConfig:
    """One word-problem setting: the trained length and the size of the training set (fresh sequences; the task
    has |G|^L of them, so none repeats in practice)."""

    seq_len: int = option(32, "trained length L (tested at L and at the suite's extrapolation multiples)", min=2)
    num_train_examples: int = option(8000, "training sequences", min=1)

    task: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for name in ("seq_len", "num_train_examples"):
            value = getattr(self, name)
            least = 2 if name == "seq_len" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{self.task}: {name} must be an integer >= {least}, got {value!r}.")
        check_task_sizes(self.task, self)

    @property
    def group_size(self) -> int:
        return self.cyclic_modulus() or len(self.elements())

    @property
    def vocab_size(self) -> int:
        return self.group_size

    @property
    def chance(self) -> float:
        return 1.0 / self.group_size

    def elements(self) -> tuple[tuple[int, ...], ...]:
        """The group's elements, token ``g`` being ``elements()[g]`` (for Z_m: ``(g,)``)."""
        raise NotImplementedError

    def table(self) -> np.ndarray:
        """The Cayley table ``[a, b] -> a * b``."""
        return cayley_table(type(self).__name__, self.elements(), self.cyclic_modulus())

    def cyclic_modulus(self) -> int:
        """m for Z_m, 0 for a permutation group."""
        return 0


@dataclass(frozen=True)
class ParityConfig(WordProblemConfig):
    """Parity: bits in, the parity of the ones so far out (Z_2)."""

    task: ClassVar[str] = "parity"

    def elements(self) -> tuple[tuple[int, ...], ...]:
        return ((0,), (1,))

    def cyclic_modulus(self) -> int:
        return 2


@dataclass(frozen=True)
class ModAddConfig(WordProblemConfig):
    """Running sum modulo ``modulus`` (Z_m)."""

    modulus: int = option(5, "m: elements 0 .. m-1, the label the running sum mod m", min=2)

    task: ClassVar[str] = "mod-add"

    def __post_init__(self) -> None:
        if isinstance(self.modulus, bool) or not isinstance(self.modulus, int) or self.modulus < 2:
            raise ConfigError(f"{self.task}: modulus must be an integer >= 2, got {self.modulus!r}.")
        check_size(self.task, "modulus", self.modulus, MAX_MODULUS, "m is the trained model's vocabulary and the "
                   "group's Cayley table holds m^2 entries (this task's grids use m <= 7)")
        super().__post_init__()

    def elements(self) -> tuple[tuple[int, ...], ...]:
        return tuple((g,) for g in range(self.modulus))

    def cyclic_modulus(self) -> int:
        return self.modulus


@dataclass(frozen=True)
class _SymmetricConfig(WordProblemConfig):
    degree: ClassVar[int] = 0

    def elements(self) -> tuple[tuple[int, ...], ...]:
        return permutations(self.degree)


@dataclass(frozen=True)
class S3Config(_SymmetricConfig):
    """Composition of permutations of 3 points (S3, 6 elements; the smallest non-abelian group)."""

    task: ClassVar[str] = "s3"
    degree: ClassVar[int] = 3


@dataclass(frozen=True)
class S5Config(_SymmetricConfig):
    """Composition of permutations of 5 points (S5, 120 elements; its word problem is NC1-complete)."""

    task: ClassVar[str] = "s5"
    degree: ClassVar[int] = 5


@lru_cache(maxsize=None)
def permutations(n: int) -> tuple[tuple[int, ...], ...]:
    """Every permutation of ``range(n)`` as a tuple of images, in lexicographic order (the identity first)."""
    return tuple(itertools.permutations(range(n)))


def compose(p: tuple[int, ...], q: tuple[int, ...]) -> tuple[int, ...]:
    """``p * q``: apply ``q``, then ``p`` (``(p * q)(i) = p(q(i))``)."""
    return tuple(p[i] for i in q)


@lru_cache(maxsize=None)
def cayley_table(name: str, elements: tuple[tuple[int, ...], ...], modulus: int) -> np.ndarray:
    """``[a, b] -> index of a * b``: addition mod ``modulus`` for a cyclic group, else composition."""
    del name  # part of the cache key only
    n = len(elements)
    if modulus:
        a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        out = (a + b) % modulus
    else:
        index = {p: i for i, p in enumerate(elements)}
        out = np.array([[index[compose(p, q)] for q in elements] for p in elements])
    out = out.astype(np.int64)
    out.setflags(write=False)
    return out


def running_products(cfg: WordProblemConfig, inputs: np.ndarray) -> np.ndarray:
    """Labels ``[N, T]`` of ``inputs [N, T]``: ``s_0 = x_0``, ``s_t = x_t * s_{t-1}``."""
    m = cfg.cyclic_modulus()
    if m:
        return (np.cumsum(inputs, axis=1) % m).astype(np.int64)
    table = cfg.table()
    out = np.empty_like(inputs)
    state = inputs[:, 0].copy()
    out[:, 0] = state
    for t in range(1, inputs.shape[1]):
        state = table[inputs[:, t], state]
        out[:, t] = state
    return out


def generate_word_problem(cfg: WordProblemConfig, n: int, rng: np.random.Generator, training: bool) -> TaskData:
    """``n`` sequences of ``cfg.seq_len`` uniform group elements and their running products at every position."""
    del training
    inputs = rng.integers(0, cfg.group_size, size=(n, cfg.seq_len)).astype(np.int64)
    return TaskData(inputs, running_products(cfg, inputs))


def parse_length_range(spec: str, what: str) -> tuple[int, int] | None:
    """``"40-256"`` -> (40, 256); ``""`` -> None (docs/state_tracking.md, "Grazzi et al.'s protocol")."""
    if not spec:
        return None
    lo, sep, hi = spec.partition("-")
    try:
        low, high = int(lo), int(hi)
    except ValueError:
        raise ConfigError(f"synthetic: {what} must look like 40-256 (the lowest and highest length), got "
                          f"{spec!r}.") from None
    if not sep or not 1 <= low <= high:
        raise ConfigError(f"synthetic: {what} must be two lengths low-high with 1 <= low <= high, got {spec!r}.")
    return low, high


def draw_lengths(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    """``n`` lengths uniform over ``low..high`` (both included), one per example."""
    return rng.integers(low, high + 1, size=n).astype(np.int64)


def mask_lengths(data: TaskData, lengths: np.ndarray | None, end_only: bool) -> TaskData:
    """``data`` cut to per-example ``lengths`` (None: every example at its full length): the positions past an
    example's length are padding, token 0 with no target; with ``end_only`` only the example's last position keeps
    its label (Grazzi et al. label the end of the sequence).

    Right padding is exact for a causal model: nothing at or after position ``len`` reaches the labels before it,
    so a padded batch scores what each example would score alone at its own length (the tests check this against a
    loop over unpadded examples)."""
    n, T = data.inputs.shape
    size = np.full(n, T, dtype=np.int64) if lengths is None else np.asarray(lengths, dtype=np.int64)
    if size.shape != (n,) or (size < 1).any() or (size > T).any():
        raise ValueError(f"mask_lengths: need one length in 1..{T} per example")
    pos = np.arange(T)[None, :]
    inside = pos < size[:, None]
    labelled = pos == size[:, None] - 1 if end_only else inside
    return TaskData(np.where(inside, data.inputs, 0), np.where(labelled, data.targets, IGNORE))
