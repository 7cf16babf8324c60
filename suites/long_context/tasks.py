"""Retrieval tasks of the long-context suite, generated offline from a seed (docs/long_context.md, "Retrieval").

Every example is a prefix of token ids (filler text with facts inserted at chosen depths, then a question) and
``k`` candidate answers of equal token length, one of them true, in a random order. A model is scored by which
candidate it gives the highest log-likelihood after the prefix (:mod:`suites.long_context.retrieval`), so
guessing scores ``1/k``. The tasks:

* ``passkey``: "The pass key is 48213." at a depth of the filler; the other candidates are random keys that appear
  nowhere in the example (Mohtashami & Jaggi 2023).
* ``niah_single``: one "special magic number" for a named key (RULER's single needle); random other candidates.
* ``niah_multikey``: ``k`` such needles for ``k`` names; the question names one, the one at the cell's depth (the
  others at random depths), and the candidates are all ``k`` numbers, so copying any number of the context scores
  chance (RULER's multi-key needle with distractors).
* ``variable_tracking``: ``k`` chains "let apple = 48213. ... let river = apple. ...", the asked chain starting at
  the cell's depth; the candidates are the chains' values (RULER's variable tracking, as a choice among k).
* ``frequent_words``: ``k`` three-digit codes strewn through the filler, one more often than every other (RULER's
  frequent-word extraction, as a choice among k); it has no depth.

Answers are digits, one token per digit, and the filler is held-out text with every token that holds a digit
removed: no answer is in the filler, and every candidate has the same number of tokens (a log-likelihood sum
never favours a shorter one). Each candidate is scored in a row of its own, so a model that reads the token after
a position (the answer being teacher-forced) sees only its own candidate and gains nothing.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError

#: tasks placed at a depth of the filler; ``frequent_words`` strews its codes through all of it
DEPTH_TASKS = ("passkey", "niah_single", "niah_multikey", "variable_tracking")
TASKS = DEPTH_TASKS + ("frequent_words",)
#: names of the needles (niah) and variables (variable tracking): common words
NAMES = ("apple", "river", "garden", "window", "silver", "mountain", "candle", "forest", "harbor", "lantern",
         "meadow", "castle", "anchor", "violet", "thunder", "marble")


@dataclass(frozen=True)
class Example:
    """One scored example: ``prefix`` then each row of ``candidates``; ``answer`` is the true row."""

    task: str
    length: int  # tokens of the prefix and one answer together
    depth: float | None
    index: int
    prefix: np.ndarray  # int64
    candidates: np.ndarray  # [k, answer tokens] int64
    answer: int

    @property
    def id(self) -> str:
        depth = "-" if self.depth is None else f"{self.depth:g}"
        return f"{self.task}/L{self.length}/d{depth}/{self.index}"


class Vocabulary:
    """The token ids the tasks are written in, from the model's tokenizer: one id per digit, the phrases, and a
    digit-free filler stream."""

    def __init__(self, tokenizer, filler: Sequence[np.ndarray]):
        """``filler``: token streams (documents) the filler is cut from, once their digit and special tokens are
        removed."""
        self.tokenizer = tokenizer
        by_text: dict[str, int] = {}
        for i in range(tokenizer.vocab_size):
            by_text.setdefault(tokenizer.decode([i]), i)
        missing = [d for d in string.digits if d not in by_text]
        if missing:
            raise ConfigError(f"long-context: the tokenizer has no single token for the digit(s) {missing}; the "
                              "retrieval tasks need one token per digit.")
        self.digits = np.array([by_text[d] for d in string.digits], dtype=np.int64)
        drop = np.array([any(c.isdigit() for c in tokenizer.decode([i])) for i in range(tokenizer.vocab_size)])
        self.digit_tokens = np.flatnonzero(drop)
        drop[[tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id]] = True
        stream = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in filler])
        self.filler = stream[~drop[stream]]
        self.bos = int(tokenizer.bos_id)
        self._cache: dict[str, np.ndarray] = {}

    def text(self, s: str) -> np.ndarray:
        """Token ids of a phrase (digit-free: an answer must only ever come from the tasks' own digit tokens)."""
        if s not in self._cache:
            ids = np.asarray(self.tokenizer.encode(s), dtype=np.int64)
            assert not np.isin(ids, self.digit_tokens).any(), s
            self._cache[s] = ids
        return self._cache[s]

    def number(self, value: Sequence[int]) -> np.ndarray:
        return self.digits[np.asarray(value)]


def _keys(rng: np.random.Generator, n: int, digits: int) -> np.ndarray:
    """``n`` distinct keys of ``digits`` digits each (first digit not 0), as rows of digit values."""
    low, high = 10 ** (digits - 1), 10**digits
    values = rng.choice(high - low, size=n, replace=False) + low
    return np.array([[int(c) for c in str(v)] for v in values])


@dataclass(frozen=True)
class TaskSettings:
    k: int  # candidates per example
    key_digits: int
    hops: int  # variable tracking: assignments after the first in each chain


def _build(task: str, vocab: Vocabulary, rng: np.random.Generator, depth: float | None, s: TaskSettings
           ) -> tuple[list[tuple[float, np.ndarray]], np.ndarray, np.ndarray, int]:
    """The inserted facts (depth in [0, 1], ids), the question, the candidates and the true row."""
    k, t = s.k, vocab.text
    if task in ("passkey", "niah_single"):
        keys = _keys(rng, k, s.key_digits)
        if task == "passkey":
            needle = np.concatenate([t(" The pass key is"), vocab.number(keys[0]), t(". Remember it.")])
            question = t(" What is the pass key? The pass key is")
        else:
            name = NAMES[rng.integers(len(NAMES))]
            needle = np.concatenate([t(f" The special magic number for {name} is"), vocab.number(keys[0]), t(".")])
            question = t(f" What is the special magic number for {name}? The special magic number for {name} is")
        facts = [(depth, needle)]
        candidates = keys
    elif task == "niah_multikey":
        keys = _keys(rng, k, s.key_digits)
        names = [NAMES[i] for i in rng.choice(len(NAMES), k, replace=False)]
        facts = [(depth if j == 0 else float(rng.random()),
                  np.concatenate([t(f" The number for {names[j]} is"), vocab.number(keys[j]), t(".")]))
                 for j in range(k)]
        question = t(f" What is the number for {names[0]}? The number for {names[0]} is")
        candidates = keys
    elif task == "variable_tracking":
        keys = _keys(rng, k, s.key_digits)
        names = [NAMES[i] for i in rng.choice(len(NAMES), k * (s.hops + 1), replace=False)]
        facts = []
        for j in range(k):
            chain = names[j * (s.hops + 1):(j + 1) * (s.hops + 1)]
            start = depth if j == 0 else float(rng.random())
            depths = [start] + sorted(start + (1 - start) * rng.random(s.hops))
            facts.append((depths[0], np.concatenate([t(f" let {chain[0]} ="), vocab.number(keys[j]), t(".")])))
            facts += [(d, t(f" let {b} = {a}.")) for d, a, b in zip(depths[1:], chain, chain[1:])]
        question = t(f" Then {names[s.hops]} is")
        candidates = keys
    elif task == "frequent_words":
        codes = _keys(rng, k, 3)
        counts = [3] + [2] * (k - 1)  # the first is the most frequent, by one
        facts = [(float(rng.random()), np.concatenate([t(" code"), vocab.number(codes[j]), t(".")]))
                 for j in range(k) for _ in range(counts[j])]
        question = t(" Which code came most often above? The code")
        candidates = codes
    else:  # pragma: no cover - the config's choices exclude it
        raise ConfigError(f"long-context: unknown task {task!r}")
    order = rng.permutation(k)  # the true candidate at a random row: ties (a model that sees no difference) are chance
    return facts, question, vocab.number(candidates[order]), int(np.flatnonzero(order == 0)[0])


def min_length(task: str, vocab: Vocabulary, s: TaskSettings) -> int:
    """The fewest tokens an example of ``task`` needs without filler (the longest of a few drawn examples)."""
    rng = np.random.default_rng(0)
    need = 0
    for _ in range(8):
        facts, question, candidates, _ = _build(task, vocab, rng, 0.5 if task in DEPTH_TASKS else None, s)
        need = max(need, 1 + sum(len(f) for _, f in facts) + len(question) + candidates.shape[1])
    return need


def make_example(task: str, vocab: Vocabulary, filler: np.ndarray, length: int, depth: float | None, index: int,
                 rng: np.random.Generator, s: TaskSettings) -> Example:
    """An example of ``length`` tokens (prefix and answer): the facts inserted into a random stretch of ``filler``
    at their depths (a fact at depth 0 opens the filler, at depth 1 closes it, just before the question). The
    stretch starts at a random token and wraps around the filler's end, so any length can be built."""
    facts, question, candidates, answer = _build(task, vocab, rng, depth, s)
    budget = length - 1 - sum(len(f) for _, f in facts) - len(question) - candidates.shape[1]
    if budget < 0:
        raise ConfigError(f"long-context: a {task} example needs at least {length - budget} tokens (its facts, "
                          f"question and answer), more than {length}; use longer lengths.")
    start = int(rng.integers(0, len(filler)))
    stretch = filler[(start + np.arange(budget)) % len(filler)]  # wraps around: lengths past the filler's repeat it
    cuts = [min(budget, int(round(d * budget))) for d, _ in facts]
    pieces, last = [np.array([vocab.bos], dtype=np.int64)], 0
    for j in sorted(range(len(facts)), key=lambda j: (cuts[j], facts[j][0], j)):  # stable: a chain keeps its order
        pieces += [stretch[last:cuts[j]], facts[j][1]]
        last = cuts[j]
    pieces += [stretch[last:], question]
    prefix = np.concatenate(pieces).astype(np.int64)
    return Example(task, length, depth, index, prefix, candidates, answer)


def make_grid(vocab: Vocabulary, filler: np.ndarray, tasks: Sequence[str], lengths: Sequence[int],
              depths: Sequence[float], per_cell: int, seed: int, s: TaskSettings) -> list[Example]:
    """Every task x length x depth cell with ``per_cell`` examples (``frequent_words``: ``per_cell`` times the
    number of depths per length, so every task has as many examples), each cell from its own generator, seeded by
    the task, length and depth (not by the other tasks, lengths or depths asked for)."""
    out: list[Example] = []
    for task in tasks:
        for length in lengths:
            cells = [(d, per_cell) for d in depths] if task in DEPTH_TASKS else [(None, per_cell * len(depths))]
            for di, (depth, n) in enumerate(cells):  # a cell's examples do not depend on which others are asked
                rng = np.random.default_rng([seed, TASKS.index(task), length, round(1000 * (depth or 0)), di])
                out += [make_example(task, vocab, filler, length, depth, i, rng, s) for i in range(n)]
    return out
