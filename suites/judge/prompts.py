"""What the judge is asked and how a text reply is read (the gold canaries are in :mod:`suites.judge.canaries`).

The template is a system message, a few worked examples as earlier chat turns, then the question. The examples
are there for small local judges, which otherwise answer in prose; a strong judge ignores them at no cost. The
template's hash (every message and the decoding settings, the number of log-probability alternatives included)
is part of each cache key, so editing the wording never reuses verdicts given to another wording. The examples'
answers are a bare token (A or B), which also puts the verdict token first for probability verdicts.

The parser is tolerant because judges are sloppy: it reads a JSON object ({"verdict": "A"}), FastChat's
``[[A]]`` / ``[[B]]`` / ``[[C]]`` (C = tie), a labelled answer ("Verdict: B", "The better continuation is A"),
alpaca_eval's "Output (a)", a bare leading letter ("B", "A: because ..."), and tie words. A reply naming both
sides with no structure is unparsable, never guessed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from harness.config import content_hash

Verdict = Literal["A", "B", "tie"]

SYSTEM = (
    "You judge two continuations of the same text. Prefer the one that is fluent, grammatical English that "
    "follows on naturally from the text; ignore which one is longer. Answer with one token: A, B, or tie."
)

# Worked examples (prefix, continuation A, continuation B, answer); written for this project. Two, one per
# answer: each example costs every call ~50 prompt tokens, and on a CPU judge prompt length is the latency.
EXAMPLES: tuple[tuple[str, str, str, str], ...] = (
    ("It was a bright cold morning, and", "the frost lay thick on every window of the town.",
     "morning morning cold the the , , bright and of", "A"),
    ("The committee met on Tuesday to", "to to met the on committee committee Tuesday ,",
     "discuss the budget for the coming year.", "B"),
)


def question(prefix: str, a: str, b: str) -> str:
    return f"Text: {prefix}\nContinuation A: {a}\nContinuation B: {b}\nBetter continuation:"


@dataclass(frozen=True)
class Template:
    """The judge request apart from the pair itself; its hash keys the cache."""

    system: str = SYSTEM
    examples: tuple[tuple[str, str, str, str], ...] = EXAMPLES
    temperature: float = 0.0
    max_tokens: int = 16
    top_logprobs: int = 20  # alternatives per generated token in probability mode (the OpenAI API's maximum)

    def messages(self, prefix: str, a: str, b: str) -> list[dict[str, str]]:
        out = [{"role": "system", "content": self.system}]
        for p, ea, eb, answer in self.examples:
            out += [{"role": "user", "content": question(p, ea, eb)}, {"role": "assistant", "content": answer}]
        out.append({"role": "user", "content": question(prefix, a, b)})
        return out

    @property
    def hash(self) -> str:
        return content_hash(
            {"system": self.system, "examples": self.examples, "question": question("{p}", "{a}", "{b}"),
             "temperature": self.temperature, "max_tokens": self.max_tokens, "top_logprobs": self.top_logprobs}
        )


_LETTER = {"a": "A", "b": "B", "c": "tie", "tie": "tie", "1": "A", "2": "B"}
_JSON_KEYS = ("verdict", "winner", "choice", "preference", "answer", "better")
_JSON_OBJECT = re.compile(r"\{[^{}]*\}", re.DOTALL)
_BRACKETS = re.compile(r"\[\[\s*(A|B|C|tie)\s*\]\]", re.IGNORECASE)
_LABELLED = re.compile(  # words in any case, the letter in capitals ("the better one is a matter of ...")
    r"(?i:\b(?:verdict|answer|winner|choice|preference|better(?:\s+(?:continuation|output|response|one))?)"
    r"\s*(?:is|:|=|-)?\s*[\"'*(\[]*\s*(?:continuation|output|response)?\s*\(?)(A|B|(?i:tie))\b"
)
_OUTPUT_PAREN = re.compile(r"\boutput\s*\(\s*([ab])\s*\)", re.IGNORECASE)
_LEADING = re.compile(r"^[\s\"'*#>(\[]*(?i:continuation\s+|output\s+)?(A|B)(?:$|\s*[.:)\],;!*\-]|\s*$)")
_TIE = re.compile(r"\b(tie|equally (?:good|bad|fluent)|both (?:are )?equally|neither)\b", re.IGNORECASE)


def parse_verdict(reply: str | None) -> Verdict | None:
    """The judge's verdict in ``reply``, or None when it cannot be read unambiguously."""
    if not reply or not reply.strip():
        return None
    text = reply.strip()
    for block in _JSON_OBJECT.findall(text):
        try:
            obj = json.loads(block)
        except ValueError:
            continue
        for key in _JSON_KEYS:
            value = obj.get(key) if isinstance(obj, dict) else None
            if isinstance(value, str) and value.strip().lower() in _LETTER:
                return _LETTER[value.strip().lower()]  # type: ignore[return-value]
    found = {_LETTER[m.lower()] for m in _BRACKETS.findall(text)}
    if len(found) == 1:
        return found.pop()  # type: ignore[return-value]
    if found:
        return None
    labelled = _LABELLED.search(text)
    if labelled:
        return _LETTER[labelled.group(1).lower()]  # type: ignore[return-value]
    paren = {_LETTER[m.lower()] for m in _OUTPUT_PAREN.findall(text)}
    if len(paren) == 1:
        return paren.pop()  # type: ignore[return-value]
    leading = _LEADING.match(text)
    if leading:
        return leading.group(1)  # type: ignore[return-value]
    if _TIE.search(text):
        return "tie"
    return None
