"""Who is compared with whom, in which order, and how two verdicts become one outcome (FastChat's pairwise mode).

* Pairs: every pair of mixers on every shared prompt, or each mixer against one baseline.
* Both orders: each comparison is shown twice, once with each output as A. Which order is asked first is a coin
  seeded by (seed, prompt, pair), so in a run that stops half way the verdicts it has are not all from one
  position. The outcome needs both verdicts: equal verdicts decide; any disagreement (a win against a tie, or a
  win for each side) is a tie. A comparison missing a verdict (failed or unparsable call) is left out of the
  ratings and counted; the verdicts it has stay cached, so the next run completes it.
* Position bias: the share of complete comparisons where the judge picked the same *slot* (A, A or B, B) in
  both orders, i.e. the verdict followed the position and not the text.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from harness.config import content_hash
from suites.judge.prompts import Verdict


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


@dataclass(frozen=True)
class Outcome:
    """A comparison's two verdicts (by presentation: left shown as A, left shown as B) and what they add up to."""

    comparison: Comparison
    left_as_a: Verdict | None
    left_as_b: Verdict | None

    @property
    def complete(self) -> bool:
        return self.left_as_a is not None and self.left_as_b is not None

    @property
    def winners(self) -> tuple[str | None, str | None]:
        """Each verdict translated to "left" / "right" / "tie" (None where missing)."""
        first = {"A": "left", "B": "right", "tie": "tie"}.get(self.left_as_a or "")
        second = {"A": "right", "B": "left", "tie": "tie"}.get(self.left_as_b or "")
        return first, second

    @property
    def score(self) -> float | None:
        """Left's score: 1 win, 0 loss, 0.5 tie or disagreement; None when incomplete."""
        if not self.complete:
            return None
        first, second = self.winners
        if first != second or first == "tie":
            return 0.5
        return 1.0 if first == "left" else 0.0

    @property
    def consistent(self) -> bool:
        first, second = self.winners
        return self.complete and first == second

    @property
    def same_slot(self) -> bool:
        """Both verdicts chose the same position (A twice or B twice): a pure position effect."""
        return self.complete and self.left_as_a == self.left_as_b and self.left_as_a in ("A", "B")


@dataclass(frozen=True)
class ProtocolCounts:
    comparisons: int
    complete: int
    inconsistent: int
    same_slot: int
    first_slot_wins: int  # decisive single verdicts that chose A
    decisive: int  # single verdicts that chose A or B

    @property
    def position_bias(self) -> float:
        return self.same_slot / self.complete if self.complete else float("nan")

    @property
    def inconsistent_rate(self) -> float:
        return self.inconsistent / self.complete if self.complete else float("nan")

    @property
    def a_preference(self) -> float:
        """Share of decisive verdicts that chose A (0.5 for a judge without slot preference)."""
        return self.first_slot_wins / self.decisive if self.decisive else float("nan")


def count(outcomes: list[Outcome]) -> ProtocolCounts:
    singles = [v for o in outcomes for v in (o.left_as_a, o.left_as_b) if v in ("A", "B")]
    complete = [o for o in outcomes if o.complete]
    return ProtocolCounts(
        comparisons=len(outcomes),
        complete=len(complete),
        inconsistent=sum(not o.consistent for o in complete),
        same_slot=sum(o.same_slot for o in complete),
        first_slot_wins=sum(v == "A" for v in singles),
        decisive=len(singles),
    )
