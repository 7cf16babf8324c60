"""Part-of-speech-aware WordNet synonyms without a trained tagger.

NLTK's taggers need a downloaded model, which the suite may not fetch. Instead the part of speech comes from WordNet
itself: every reading of a surface form (part of speech and base form, via WordNet's morphology) is weighted by how
often it was sense-tagged in SemCor (the counts WordNet ships in ``cntlist``). A word is replaced only when

* it is a lowercase content word (not in :data:`~suites.robustness.text.FUNCTION_WORDS`; capitalised words are
  mostly names), and its dominant reading has at least :data:`MIN_SHARE` of the tagged counts and
  :data:`MIN_TAGGED` of them: "saw" (mostly "see") and "can" are skipped, "economy" and "build" are not;
* the surface form is the base form of that reading, or the regular plural of a noun that is never tagged as a
  verb ("years", not "matters"): inflecting a synonym of "running" or "stronger" is where substitution usually
  goes wrong;
* the synonym is the most frequent (in SemCor) single lowercase word of at least three letters in the reading's
  *first* synset (WordNet's most frequent sense), attested at least :data:`MIN_SYNONYM_COUNT` times, so rare,
  archaic or abbreviated lemmas ("yr") are not offered;
* that synset is the synonym's own first sense too, in its own dominant part of speech (a mutual first sense):
  "job" -> "business" is refused because a business is first of all a firm, "well" -> "good" because "good" is
  first of all an adjective;
* the part of speech fits the word before it (:func:`fits_context`, a three-rule tagger): a noun or adjective after a
  determiner, a verb or adverb after a subject pronoun, a modal or "to" ("it matters" is not the plural of
  "matter", "to partner with" is not about a spouse).

Beyond that one word, context is not consulted, so a word used in a minority sense can still get a synonym of its
majority sense.
"""

from __future__ import annotations

from functools import cache

from suites.robustness.lexicons import wordnet
from suites.robustness.text import FUNCTION_WORDS

POS = ("n", "v", "a", "r")
MIN_SHARE = 0.75
MIN_TAGGED = 2
MIN_SYNONYM_COUNT = 2
_AFTER_DETERMINER = frozenset("a an the this these those his her its their our my your every each some any no".split())
_AFTER_SUBJECT = frozenset("i we you they he she it who to will would can could should must may might shall".split())


def fits_context(pos: str, previous: str) -> bool:
    """Whether part of speech ``pos`` can follow the lowercase word ``previous``."""
    if previous in _AFTER_DETERMINER:
        return pos in ("n", "a")
    if previous in _AFTER_SUBJECT:
        return pos in ("v", "r")
    return True


def pluralize(noun: str) -> str:
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if len(noun) > 1 and noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def synonyms(word: str, previous: str = "") -> tuple[str, ...]:
    """Synonyms of lowercase ``word`` (after the word ``previous``) in its dominant sense, inflected like it; empty
    when any check fails."""
    pos, options = reading(word)
    return options if options and fits_context(pos, previous.lower()) else ()


@cache
def _readings(word: str) -> dict[tuple[str, str], int]:
    """(part of speech, base form) -> SemCor-tagged count, over every reading WordNet's morphology allows."""
    wn = wordnet()
    return {
        (pos, base): sum(lemma.count() for lemma in wn.lemmas(base, pos))
        for pos in POS
        for base in wn._morphy(word, pos)  # every base form, e.g. saw -> saw, see
    }


def dominant(word: str) -> tuple[str, str] | None:
    """The (part of speech, base form) reading that holds at least ``MIN_SHARE`` of the word's tagged counts."""
    readings = _readings(word)
    if not readings:
        return None
    (pos, base), best = max(readings.items(), key=lambda kv: (kv[1], kv[0]))
    if best < MIN_TAGGED or best < MIN_SHARE * sum(readings.values()):
        return None
    return pos, base


@cache
def reading(word: str) -> tuple[str, tuple[str, ...]]:
    """The dominant part of speech of ``word`` and its synonym in that reading (``("", ())`` when unsure)."""
    if len(word) < 3 or not word.isalpha() or not word.islower() or word in FUNCTION_WORDS:
        return "", ()
    found = dominant(word)
    if found is None:
        return "", ()
    pos, base = found
    if base == word:
        inflect = str
    elif pos == "n" and pluralize(base) == word and not any(p == "v" and c for (p, _), c in _readings(word).items()):
        inflect = pluralize  # a plural noun that is never a verb ("matters" may be one)
    else:
        return "", ()
    wn = wordnet()
    first = wn.synsets(base, pos)[0]
    for lemma in sorted(first.lemmas(), key=lambda lemma: -lemma.count()):
        name = lemma.name()
        if name == base or len(name) < 3 or not name.isalpha() or not name.islower() or name in FUNCTION_WORDS:
            continue
        if lemma.count() < MIN_SYNONYM_COUNT or dominant(name) != (pos, name) or wn.synsets(name, pos)[0] != first:
            continue  # rare, or not the synonym's own dominant reading and first sense
        form = inflect(name)
        if inflect is pluralize and name not in wn._morphy(form, "n"):
            continue  # an irregular plural we would misspell
        return pos, (form,)
    return "", ()
