"""Words, sentences, casing and the per-example random stream the perturbations share.

Everything here is deterministic across machines and Python versions: randomness comes from
:func:`example_rng`, a ``random.Random`` seeded by sha256 of (seed, family, example id) and only ever read through
``random()`` (the one ``random`` method whose sequence Python guarantees), never from ``hash()``.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

#: a word: letters with inner apostrophes ("don't", "o'clock"); hyphenated compounds are several words
WORD = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)*")
_SPACE = re.compile(r"\s+")
# a sentence ends at . ! ? (plus closing quotes/brackets) followed by space and a capital or an opening quote
_BOUNDARY = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s+[\"“‘'(\[]?[A-Z])")
_TITLES = frozenset(
    """
    mr mrs ms dr st jr sr vs prof sen rep gov gen col capt lt sgt rev hon messrs mt co corp inc ltd no jan feb mar
    apr aug sept sep oct nov dec etc
    """.split()
)


#: closed-class words (determiners, pronouns, prepositions, conjunctions, auxiliaries, modals and a few frequent
#: adverbs and quantifiers): never given synonyms, and the words after which a pronoun reads as an object
FUNCTION_WORDS = frozenset(
    """
    a an the this that these those some any no every each either neither both all half several many much more most
    few fewer less least other another such what which whatever whichever whose who whom whoever one ones i me my
    mine myself we us our ours ourselves you your yours yourself yourselves he him his himself she her hers
    herself it its itself they them their theirs themselves there here about above across after against along amid
    among amongst around as at before behind below beneath beside besides between beyond but by concerning despite
    down during except for from in inside into like near of off on onto out outside over past per since than
    through throughout till to toward towards under underneath unlike until up upon versus via with within without
    and or nor so yet if then else because although though while whereas whether unless once lest be am is are was
    were been being have has had having do does did doing done can could may might must shall should will would
    ought need dare not never also just only even still already again ever very too quite rather really almost
    enough now how when where why else thus hence however therefore indeed let lets said say says get got
    """.split()
)


@dataclass(frozen=True)
class Word:
    text: str
    start: int
    end: int
    index: int  # position among the sentence's words


def words(text: str) -> list[Word]:
    return [Word(m.group(), m.start(), m.end(), i) for i, m in enumerate(WORD.finditer(text))]


def split_sentences(text: str) -> list[str]:
    """Sentences of a document, whitespace collapsed. A period after a title (Mr., Dr., ...), an initial (J.) or a
    dotted abbreviation (U.S.) does not end a sentence."""
    text = _SPACE.sub(" ", text).strip()
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        before = text[start : m.start()].rsplit(" ", 1)[-1]
        token = before.strip("\"'“‘(")
        if m.group().startswith(".") and (
            token.lower() in _TITLES or (len(token) == 1 and token.isupper()) or "." in token
        ):
            continue
        out.append(text[start : m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def match_case(template: str, word: str) -> str:
    """``word`` cased like ``template``: UPPER, Title or as given."""
    if len(template) > 1 and template.isupper():
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def stable_int(*parts: object) -> int:
    """A 64-bit integer from sha256 of the parts (``hash()`` is salted per process)."""
    data = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


def example_rng(seed: int, family: str, example_id: str) -> random.Random:
    return random.Random(stable_int(seed, family, example_id))


def pick(rng: random.Random, items: Sequence[T]) -> T:
    return items[min(int(rng.random() * len(items)), len(items) - 1)]


def sample(rng: random.Random, items: Sequence[T], k: int) -> list[T]:
    """``k`` distinct items in random order (a partial Fisher-Yates driven by ``random()`` alone)."""
    pool = list(items)
    k = min(k, len(pool))
    for i in range(k):
        j = i + min(int(rng.random() * (len(pool) - i)), len(pool) - i - 1)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]
