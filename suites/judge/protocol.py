"""Who is compared with whom, in which order, and how two presentations become one preference.

* Pairs: every pair of mixers on every shared prompt, or each mixer against one baseline.
* Both orders: each comparison is shown twice, once with each output as A. Which order is asked first is a coin
  seeded by (seed, prompt, pair), so in a run that stops half way the verdicts it has are not all from one position.
* A presentation's *score* is the judge's P(A) - P(B) in [-1, 1] (:mod:`suites.judge.verdicts`): from the
  probabilities of the verdict tokens when the server gives them, else +1 / -1 / 0 for a text verdict A / B / tie.
* The *preference* for ``left`` is the mean of its advantage over both orders,
  ``(score(left as A) - score(left as B)) / 2``. A judge whose scores carry a constant position offset ``c`` (it
  adds ``c`` to every P(A) - P(B)) adds ``+c`` to both presentations, and the difference cancels it: a judge that
  only follows position gives preference 0, a tie, by construction. The soft outcome ``(1 + preference) / 2`` is
  what the ratings fit. In text mode this reproduces FastChat's rule where both orders agree (win, loss or tie) and
  makes a win against a tie three quarters of a win, a win for each side a tie.
* Swap consistency: the share of complete comparisons whose verdict survives the swap, i.e. the same output is
  favoured (or neither) in both presentations. Position bias: the share where the judge favoured the same *slot*
  (A twice or B twice), following the position and not the text.
* A comparison missing a presentation (failed call, unreadable reply) is left out of the ratings and counted; the
  reply it has stays cached, so the next run completes it.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

from harness.config import content_hash


@dataclass(frozen=True)
class Comparison:
    """One prompt and two mixers' outputs; ``left`` < ``right`` by name."""

    prompt_id: str
    prompt: str
    left: str
    right: str
    left_output: str
    right_output: str
    left_first: bool  # True: the first presentation shows left's output as A

    def presentation(self, left_as_a: bool) -> tuple[str, str]:
        """(output shown as A, output shown as B)."""
        return (self.left_output, self.right_output) if left_as_a else (self.right_output, self.left_output)

    @property
    def orders(self) -> tuple[bool, bool]:
        """``left_as_a`` of the first and the second presentation."""
        return (self.left_first, not self.left_first)


def order_coin(seed: int, prompt_id: str, left: str, right: str) -> bool:
    return random.Random(content_hash([seed, prompt_id, left, right])).random() < 0.5


def make_comparisons(outputs: dict[str, dict[str, str]], prompts: dict[str, str], seed: int,
                     baseline: str | None = None) -> list[Comparison]:
    """``outputs[mixer][prompt_id]`` -> comparisons on every prompt all mixers share, ordered by prompt then pair."""
    mixers = sorted(outputs)
    shared = [p for p in prompts if all(p in outputs[m] for m in mixers)]
    if baseline is not None:
        pairs = [tuple(sorted((baseline, m))) for m in mixers if m != baseline]
    else:
        pairs = list(itertools.combinations(mixers, 2))
    return [
        Comparison(p, prompts[p], a, b, outputs[a][p], outputs[b][p], order_coin(seed, p, a, b))
        for p in shared
        for a, b in pairs
    ]


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def pair_preference(score_first_as_a: float, score_first_as_b: float) -> float:
    """The preference for the first output from the scores (P(A) - P(B)) of the presentation showing it as A and
    of the one showing it as B: the mean of its advantage over both orders."""
    return (score_first_as_a - score_first_as_b) / 2.0


@dataclass(frozen=True)
class Outcome:
    """A comparison's two presentation scores (P(A) - P(B); None where missing) and what they add up to."""

    comparison: Comparison
    left_as_a: float | None
    left_as_b: float | None

    @property
    def complete(self) -> bool:
        return self.left_as_a is not None and self.left_as_b is not None

    @property
    def preference(self) -> float | None:
        """Left's preference in [-1, 1] (0: no preference, or only a position effect); None when incomplete."""
        if not self.complete:
            return None
        return pair_preference(self.left_as_a, self.left_as_b)  # type: ignore[arg-type]

    @property
    def score(self) -> float | None:
        """Left's soft outcome in [0, 1] for the ratings: ``(1 + preference) / 2``."""
        p = self.preference
        return None if p is None else (1.0 + p) / 2.0

    @property
    def consistent(self) -> bool:
        """The verdict survives the swap: the same output (or neither) is favoured in both presentations."""
        return self.complete and _sign(self.left_as_a) == _sign(-self.left_as_b)  # type: ignore[operator]

    @property
    def same_slot(self) -> bool:
        """Both presentations favoured the same position (A twice or B twice): a pure position effect."""
        return self.complete and _sign(self.left_as_a) == _sign(self.left_as_b) != 0  # type: ignore[arg-type]

    @property
    def slot_lean(self) -> float | None:
        """The position offset of this comparison, ``(score(left as A) + score(left as B)) / 2`` (> 0: toward A)."""
        return None if not self.complete else (self.left_as_a + self.left_as_b) / 2.0  # type: ignore[operator]


@dataclass(frozen=True)
class ProtocolCounts:
    comparisons: int
    complete: int
    consistent: int
    same_slot: int
    slot_lean: float  # mean position offset over complete comparisons (0: none; +1: always A)

    @property
    def position_bias(self) -> float:
        return self.same_slot / self.complete if self.complete else math.nan

    @property
    def swap_consistency(self) -> float:
        return self.consistent / self.complete if self.complete else math.nan


def count(outcomes: list[Outcome]) -> ProtocolCounts:
    complete = [o for o in outcomes if o.complete]
    leans = [o.slot_lean for o in complete]
    return ProtocolCounts(
        comparisons=len(outcomes),
        complete=len(complete),
        consistent=sum(o.consistent for o in complete),
        same_slot=sum(o.same_slot for o in complete),
        slot_lean=sum(leans) / len(leans) if leans else math.nan,  # type: ignore[arg-type]
    )
