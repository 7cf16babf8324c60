"""Meaning-preserving perturbation families (the robustness slices).

Each family finds the sites of a sentence it can change; :class:`~suites.robustness.perturbations.Perturbation`
draws among them. Designs follow NL-Augmenter's and CheckList's transformations (public perturbation toolkits), with the
lexicons vendored in ``data/`` instead of fetched.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from suites.robustness.lexicons import abbreviations, misspellings, spelling_variants, wordnet
from suites.robustness.perturbations import Option, Perturbation, Site, register_perturbation
from suites.robustness.synonyms import synonyms
from suites.robustness.text import FUNCTION_WORDS, match_case, words

_CLOSING = "\"'”’)]"


def _in_compound(text: str, start: int, end: int) -> bool:
    """Part of a hyphenated or dotted compound ("back-to-back", "e.g"), where a word edit would break it."""
    return text[start - 1 : start] in ("-", ".") or text[end : end + 1] == "-"


# ------------------------------------------------------------------------------------------------- synonym


@register_perturbation("synonym")
class Synonym(Perturbation):
    """A content word replaced by a WordNet synonym of its dominant sense (see :mod:`suites.robustness.synonyms`)."""

    def sites(self, text: str) -> list[Site]:
        ws = words(text)
        out = []
        for i, w in enumerate(ws):
            if _in_compound(text, w.start, w.end):
                continue
            previous = ws[i - 1].text if i and text[ws[i - 1].end : w.start] == " " else ""
            options = tuple(Option(s, "synonym") for s in synonyms(w.text, previous))
            if options:
                out.append(Site(w.start, w.end, options))
        return out


# ------------------------------------------------------------------------------------------------- typo

_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_STAGGER = (0.0, 0.25, 0.75)  # horizontal offset of each row on a QWERTY keyboard, in key widths


def _keyboard_neighbours() -> dict[str, str]:
    """Keys touching each letter: same row at distance 1, adjacent rows within 1.25 key widths."""
    pos = {ch: (r, c + _STAGGER[r]) for r, row in enumerate(_ROWS) for c, ch in enumerate(row)}
    return {
        a: "".join(
            b
            for b, (rb, xb) in pos.items()
            if b != a and abs(ra - rb) <= 1 and abs(xa - xb) <= (1 if ra == rb else 1.25)
        )
        for a, (ra, xa) in pos.items()
    }


NEIGHBOURS = _keyboard_neighbours()


def keyboard_typos(word: str) -> list[str]:
    """Every one-keystroke slip on a QWERTY keyboard: a neighbouring key instead of or after a letter, a letter
    left out, two adjacent letters swapped. Case follows the replaced letter."""
    out = []
    for i, ch in enumerate(word):
        for n in NEIGHBOURS.get(ch.lower(), ""):
            n = n.upper() if ch.isupper() else n
            out += [word[:i] + n + word[i + 1 :], word[: i + 1] + n + word[i + 1 :]]
        if len(word) > 3:
            out.append(word[:i] + word[i + 1 :])
        if i + 1 < len(word) and ch != word[i + 1] and not (i == 0 and ch.isupper()):
            out.append(word[:i] + word[i + 1] + ch + word[i + 2 :])
    return list(dict.fromkeys(t for t in out if t != word))


@lru_cache(maxsize=1)
def _known_words() -> frozenset[str]:
    wn = wordnet()
    return frozenset(n for n in wn.all_lemma_names() if n.isalpha()) | FUNCTION_WORDS


def is_word(token: str) -> bool:
    """A dictionary word in any inflection (WordNet lemma names, morphology, closed-class words)."""
    lower = token.lower()
    if lower in _known_words():
        return True
    wn = wordnet()
    return any(wn._morphy(lower, pos) for pos in ("n", "v", "a", "r"))


@register_perturbation("typo")
class Typo(Perturbation):
    """One word misspelt: half of the time, when codespell attests misspellings of the word, one of those
    (codespell's list inverted), otherwise a keyboard slip that is not itself a dictionary word ("from" -> "form"
    would change the meaning, not the spelling)."""

    def sites(self, text: str) -> list[Site]:
        table = misspellings()
        out = []
        for w in words(text):
            if len(w.text) < 3 or not w.text.isalpha() or _in_compound(text, w.start, w.end):
                continue
            real = table.get(w.text.lower(), ())
            options = [Option(match_case(w.text, m), "misspelling") for m in real]
            options += [Option(t, "keyboard") for t in keyboard_typos(w.text)]
            out.append(Site(w.start, w.end, tuple(options)))
        return out

    def choose(self, site: Site, rng: random.Random) -> Option:
        while True:
            option = super().choose(site, rng)
            if option.op == "misspelling" or not is_word(option.replacement):
                return option
            site = Site(site.start, site.end, tuple(o for o in site.options if o != option))
            if not site.options:  # every slip is a word: keep the last, still a change
                return option


# ------------------------------------------------------------------------------------------------- spelling


@lru_cache(maxsize=1)
def _spelling_phrases() -> list[tuple[re.Pattern[str], str, str]]:
    return [
        (re.compile(r"(?<![\w-])" + re.escape(k) + r"(?![\w-])", re.IGNORECASE), *v)
        for k, v in spelling_variants().items()
        if " " in k
    ]


@register_perturbation("spelling")
class Spelling(Perturbation):
    """British <-> American spelling of one word or phrase (codespell's en-GB -> en-US list and the project's
    additions, both ways)."""

    def sites(self, text: str) -> list[Site]:
        table = spelling_variants()
        out = []
        for w in words(text):
            variant = table.get(w.text.lower())
            if variant is not None and not _in_compound(text, w.start, w.end):
                out.append(Site(w.start, w.end, (Option(match_case(w.text, variant[0]), variant[1]),)))
        for pattern, variant, op in _spelling_phrases():
            out += [
                Site(m.start(), m.end(), (Option(match_case(m.group(), variant), op),)) for m in pattern.finditer(text)
            ]
        return out


# ------------------------------------------------------------------------------------------------- punctuation

_INTRODUCTORY = (
    "However", "Therefore", "Moreover", "Furthermore", "Meanwhile", "Nevertheless", "Consequently", "Indeed",
    "Instead", "Finally", "Today", "Tonight", "Now", "Thus", "Hence", "Besides", "Otherwise", "Unfortunately",
    "Fortunately", "Together", "Yes", "Again", "Then", "Yet", "Sometimes", "Recently", "Soon",
    "In fact", "Of course", "For example", "In addition", "After all", "At last", "Above all", "In short",
    "This year", "Last year", "In the end", "At the same time",
)  # fmt: skip
_INTRO = re.compile(r"^[\"“‘']?(" + "|".join(_INTRODUCTORY) + r") (?=[A-Za-z])")
_SERIAL = re.compile(r"\b[A-Za-z]+, [A-Za-z]+(?= (?:and|or) )")


@register_perturbation("punctuation")
class Punctuation(Perturbation):
    """A comma dropped (not inside a number), a serial comma added to "A, B and C", or a comma added after a
    sentence-opening adverbial ("Today we" -> "Today, we")."""

    def sites(self, text: str) -> list[Site]:
        out = [
            Site(i, i + 1, (Option("", "drop-comma"),))
            for i, ch in enumerate(text)
            if ch == "," and not (text[i - 1 : i].isdigit() and text[i + 1 : i + 2].isdigit())
        ]
        out += [Site(m.end(), m.end(), (Option(",", "serial-comma"),)) for m in _SERIAL.finditer(text)]
        m = _INTRO.match(text)
        if m:
            out.append(Site(m.end(1), m.end(1), (Option(",", "intro-comma"),)))
        return out


# ------------------------------------------------------------------------------------------------- abbreviation


def _phrase_pattern(phrase: str) -> re.Pattern[str]:
    tail = "" if phrase.endswith(".") else r"(?![\w&])"
    return re.compile(r"(?<![\w.&])" + re.escape(phrase) + tail)


@lru_cache(maxsize=1)
def _abbreviation_patterns() -> list[tuple[re.Pattern[str], str, str, bool]]:
    """(pattern, replacement, op, replacement ends a dotted abbreviation) for both directions of every entry."""
    out = []
    for a in abbreviations():
        symbol = not any(ch.isalpha() for ch in a.short)  # "%" attaches to the number before it
        if a.abbreviate:
            pattern = re.compile(r"(?<=\d) " + re.escape(a.full) + r"\b") if symbol else _phrase_pattern(a.full)
            out.append((pattern, a.short, "abbreviate", a.short.endswith(".")))
        if a.expand:
            pattern = re.compile(r"(?<=\d)" + re.escape(a.short)) if symbol else _phrase_pattern(a.short)
            out.append((pattern, (" " if symbol else "") + a.full, "expand", False))
    return out


@register_perturbation("abbreviation")
class Abbreviation(Perturbation):
    """A phrase abbreviated or an abbreviation expanded, from the project's list (``data/abbreviations.tsv``).
    A dotted abbreviation absorbs a sentence-final period ("in the United States." -> "in the U.S.") and gives it
    back when expanded."""

    def sites(self, text: str) -> list[Site]:
        found = []
        for pattern, replacement, op, dotted in _abbreviation_patterns():
            for m in pattern.finditer(text):
                start, end, new = m.start(), m.end(), replacement
                if dotted and text[end:].rstrip(_CLOSING) == ".":
                    end += 1  # "States." -> "S." not "S.."
                elif op == "expand" and m.group().endswith(".") and not text[end:].strip(_CLOSING):
                    new += "."  # the abbreviation's period was also the sentence's
                found.append(Site(start, end, (Option(new, op),)))
        found.sort(key=lambda s: s.start - s.end)  # longest first: "United States of America" before "United States"
        out: list[Site] = []
        for site in found:
            if not any(site.start < o.end and o.start < site.end for o in out):
                out.append(site)
        return sorted(out, key=lambda s: s.start)


# ------------------------------------------------------------------------------------------------- contraction

_NEGATIVE = {
    "do not": "don't", "does not": "doesn't", "did not": "didn't", "is not": "isn't", "are not": "aren't",
    "was not": "wasn't", "were not": "weren't", "have not": "haven't", "has not": "hasn't", "had not": "hadn't",
    "will not": "won't", "would not": "wouldn't", "should not": "shouldn't", "could not": "couldn't",
    "cannot": "can't", "must not": "mustn't", "need not": "needn't",
}  # fmt: skip
_PRONOUN_VERB = {
    "am": ("I",), "are": ("you", "we", "they"), "is": ("he", "she", "it", "that", "there", "what", "who"),
    "will": ("I", "you", "we", "they", "he", "she", "it"), "would": ("I", "you", "we", "they", "he", "she"),
    "have": ("I", "you", "we", "they"), "has": ("he", "she", "it"), "had": ("I", "you", "we", "they", "he", "she"),
}  # fmt: skip
_CLITIC = {"am": "m", "are": "re", "is": "s", "will": "ll", "would": "d", "have": "ve", "has": "s", "had": "d"}
#: past participles that do not end in -ed/-en: after them "'s" is "has" and "'d" is "had"
PARTICIPLES = frozenset(
    """
    been got gotten made done seen had come gone become taken given known said built brought thought left lost won
    met kept sent spent told found heard paid put set cut run begun grown shown held led felt stood understood
    taught bought caught fought sought meant read let hit
    """.split()
)


def is_participle(word: str) -> bool:
    w = word.lower()
    return w in PARTICIPLES or (len(w) > 3 and w.endswith(("ed", "en")))


def _contraction_table() -> list[tuple[str, str, str | None]]:
    """(expanded, contracted, requirement on the next word: None or "participle")."""
    table: list[tuple[str, str, str | None]] = [(e, c, None) for e, c in _NEGATIVE.items()]
    for verb, subjects in _PRONOUN_VERB.items():
        need = "participle" if verb in ("have", "has", "had") else None
        for subject in subjects:
            table.append((f"{subject} {verb}", f"{subject}'{_CLITIC[verb]}", need))
    table.append(("let us", "let's", None))
    return table


@register_perturbation("contraction")
class Contraction(Perturbation):
    """A contraction expanded ("don't" -> "do not", "it's been" -> "it has been") or a phrase contracted, only
    before another word (never "where it's.") and, for have/has/had, only before a participle."""

    def __init__(self) -> None:
        self.table = _contraction_table()
        self.contract = [
            (re.compile(r"(?<![\w'’])" + re.escape(e) + r"(?= ([A-Za-z]+))", re.IGNORECASE), c, need)
            for e, c, need in self.table
        ]
        self.expansions: dict[str, list[tuple[str, str | None]]] = {}
        for e, c, need in self.table:
            self.expansions.setdefault(c.lower(), []).append((e, need))

    def sites(self, text: str) -> list[Site]:
        apostrophe = "’" if "’" in text else "'"
        ws = words(text)
        out = []
        for pattern, contracted, need in self.contract:
            for m in pattern.finditer(text):
                if need == "participle" and not is_participle(m.group(1)):
                    continue
                new = _recase(m.group(), contracted).replace("'", apostrophe)
                out.append(Site(m.start(), m.end(), (Option(new, "contract"),)))
        for i, w in enumerate(ws):
            key = w.text.lower().replace("’", "'")
            readings = self.expansions.get(key)
            if not readings:
                continue
            following = ws[i + 1].text if i + 1 < len(ws) and text[w.end : ws[i + 1].start] == " " else ""
            expanded = self._expand(readings, following)
            if expanded is not None:
                out.append(Site(w.start, w.end, (Option(_recase(w.text, expanded), "expand"),)))
        return out

    @staticmethod
    def _expand(readings: list[tuple[str, str | None]], following: str) -> str | None:
        """The reading of an ambiguous clitic ('s = is/has, 'd = would/had) that fits the next word."""
        participle = bool(following) and is_participle(following)
        fits = [e for e, need in readings if need is None or participle]
        has_verb = [e for e in fits if e.endswith((" has", " had"))]
        if participle and has_verb:
            return has_verb[0]
        plain = [e for e in fits if not e.endswith((" has", " had", " have"))]
        return plain[0] if plain else (fits[0] if fits else None)


def _recase(template: str, phrase: str) -> str:
    """``phrase`` with its first letter cased like ``template``'s ("Don't" -> "Do not")."""
    return phrase[:1].upper() + phrase[1:] if template[:1].isupper() else phrase
