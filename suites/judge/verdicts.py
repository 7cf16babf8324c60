"""A presentation's score from the judge's reply: P(A) - P(B), from log-probabilities or from the text.

Probability verdicts (mode ``probabilities``): the verdict position is the first generated token that reads as a
verdict (``A``, ``B`` or ``tie``, ignoring whitespace and quotes), or the first token when none does; at that
position the probabilities of the alternatives that read as each verdict are summed (``"A"`` and ``" A"`` are one
verdict) and renormalised over the three verdicts, and the score is P(A) - P(B). When no verdict is among the
server's ``top_logprobs`` there, the reply has no probability verdict and counts as unreadable.

Text verdicts (mode ``text``, or a server without log-probabilities): :func:`suites.judge.prompts.parse_verdict`
gives A, B or tie, scored +1, -1, 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.kit import Reply
from suites.judge.prompts import parse_verdict

_TEXT_SCORE = {"A": 1.0, "B": -1.0, "tie": 0.0}
_STRIP = " \t\n\"'*([<>:.)]"


def verdict_of_token(token: str) -> str | None:
    """``A`` / ``B`` / ``tie`` when a token reads as that verdict (capital letters only: "a" is an article)."""
    core = token.strip(_STRIP)
    if core in ("A", "B"):
        return core
    return "tie" if core.lower() == "tie" else None


@dataclass(frozen=True)
class VerdictProbabilities:
    a: float
    b: float
    tie: float

    @property
    def score(self) -> float:
        return self.a - self.b


def verdict_probabilities(reply: Reply) -> VerdictProbabilities | None:
    """P(A), P(B), P(tie) renormalised over the verdicts at the verdict position, or None (see the module doc)."""
    if not reply.tokens:
        return None
    position = next((t for t in reply.tokens if verdict_of_token(t.token) is not None), reply.tokens[0])
    mass = {"A": 0.0, "B": 0.0, "tie": 0.0}
    alternatives = position.top or ((position.token, position.logprob),)
    for token, logprob in alternatives:
        verdict = verdict_of_token(token)
        if verdict is not None and math.isfinite(logprob):
            mass[verdict] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return VerdictProbabilities(mass["A"] / total, mass["B"] / total, mass["tie"] / total)


def presentation_score(reply: Reply | None, mode: str) -> float | None:
    """P(A) - P(B) for one presentation in ``mode`` (``probabilities`` or ``text``); None when unreadable."""
    if reply is None:
        return None
    if mode == "probabilities":
        probs = verdict_probabilities(reply)
        return None if probs is None else probs.score
    verdict = parse_verdict(reply.text)
    return None if verdict is None else _TEXT_SCORE[verdict]


def describe(reply: Reply | None, mode: str) -> str:
    """A short human reading of a reply's verdict for samples and the site: ``A``, ``P(A) 0.71, P(B) 0.22``."""
    if reply is None:
        return "no reply"
    if mode == "probabilities":
        probs = verdict_probabilities(reply)
        if probs is None:
            return "no verdict probabilities"
        return f"P(A) {probs.a:.2f}, P(B) {probs.b:.2f}, P(tie) {probs.tie:.2f}"
    return parse_verdict(reply.text) or "unreadable"
