"""Attribute flips (the sensitivity slices): gender, grammatical number, negation.

These change what a sentence says, so a model that reads the sentence should change its predictions; the suite
reports them apart from the meaning-preserving families (docs/PAPERS.md §A.4 item 6 has templated versions of the same
flips). Gender and number flip every site at once, so the sentence stays consistent ("he ... his" -> "she ...
her"); negation flips ``max_edits`` sites.
"""

from __future__ import annotations

from suites.robustness.families import is_participle
from suites.robustness.perturbations import Option, Perturbation, Site, register_perturbation
from suites.robustness.text import FUNCTION_WORDS, Word, match_case, words

_GENDERED = (
    ("he", "she"), ("himself", "herself"), ("man", "woman"), ("men", "women"), ("boy", "girl"), ("boys", "girls"),
    ("father", "mother"), ("fathers", "mothers"), ("son", "daughter"), ("sons", "daughters"),
    ("brother", "sister"), ("brothers", "sisters"), ("husband", "wife"), ("husbands", "wives"), ("king", "queen"),
    ("kings", "queens"), ("uncle", "aunt"), ("uncles", "aunts"), ("nephew", "niece"), ("nephews", "nieces"),
    ("grandfather", "grandmother"), ("grandfathers", "grandmothers"), ("grandson", "granddaughter"),
    ("grandsons", "granddaughters"), ("gentleman", "lady"), ("gentlemen", "ladies"), ("sir", "madam"),
    ("mr", "mrs"), ("male", "female"), ("males", "females"), ("prince", "princess"), ("princes", "princesses"),
    ("actor", "actress"), ("boyfriend", "girlfriend"), ("businessman", "businesswoman"),
    ("businessmen", "businesswomen"), ("chairman", "chairwoman"), ("congressman", "congresswoman"),
    ("congressmen", "congresswomen"), ("spokesman", "spokeswoman"), ("policeman", "policewoman"),
    ("policemen", "policewomen"), ("dad", "mom"), ("daddy", "mommy"), ("groom", "bride"), ("monk", "nun"),
    ("monks", "nuns"), ("hero", "heroine"), ("heroes", "heroines"), ("lad", "lass"), ("masculine", "feminine"),
    ("fatherhood", "motherhood"), ("brotherhood", "sisterhood"), ("manhood", "womanhood"), ("widower", "widow"),
)  # fmt: skip
#: one-way flips (the reverse is ambiguous or already taken: "lady" -> "gentleman", "her" -> "him"/"his")
_GENDER_EXTRA = {"lord": "lady", "ms": "mr", "hers": "his"}
GENDER = {**{m: f for m, f in _GENDERED}, **{f: m for m, f in _GENDERED}, **_GENDER_EXTRA}


def _next_word(text: str, ws: list[Word], i: int) -> str:
    """The word right after ``ws[i]`` when only a space separates them (else "": punctuation or the end)."""
    if i + 1 < len(ws) and text[ws[i].end : ws[i + 1].start] == " ":
        return ws[i + 1].text.lower()
    return ""


#: function words that still follow a possessive determiner ("his own", "her every move")
_AFTER_POSSESSIVE = frozenset("own every other only very first last many few most best whole next".split())


def _determiner_use(text: str, ws: list[Word], i: int) -> bool:
    """Whether "her" is a determiner ("her book", "her own") rather than an object pronoun ("told her that")."""
    following = _next_word(text, ws, i)
    return bool(following) and (following not in FUNCTION_WORDS or following in _AFTER_POSSESSIVE)


def _split_possessive(token: str) -> tuple[str, str]:
    """("father's" -> "father", "'s"): the stem is flipped, the suffix kept."""
    for suffix in ("'s", "’s"):
        if token.lower().endswith(suffix) and len(token) > len(suffix):
            return token[: -len(suffix)], token[-len(suffix) :]
    return token, ""


@register_perturbation("gender", kind="sensitivity")
class Gender(Perturbation):
    """Every gendered pronoun and noun swapped to the other gender ("her" -> "his" before a noun, "him" otherwise;
    "his" -> "hers" before punctuation, "her" otherwise)."""

    all_sites = True

    def sites(self, text: str) -> list[Site]:
        ws = words(text)
        out = []
        for i, w in enumerate(ws):
            stem, suffix = _split_possessive(w.text)
            lower = stem.lower()
            if lower == "her":
                new = "his" if _determiner_use(text, ws, i) else "him"
            elif lower == "his":  # a pronoun only before punctuation or the end: "the choice is his."
                new = "her" if _next_word(text, ws, i) or text[w.end : w.end + 1] == " " else "hers"
            elif lower in GENDER:
                new = GENDER[lower]
            else:
                continue
            out.append(Site(w.start, w.end, (Option(match_case(stem, new) + suffix, "gender"),)))
        return out


_SINGULAR = {"i": "we", "me": "us", "my": "our", "myself": "ourselves", "i'm": "we're", "i've": "we've",
             "i'll": "we'll", "i'd": "we'd", "mine": "ours"}  # fmt: skip
_PLURAL = {"we": "i", "us": "me", "our": "my", "ours": "mine", "ourselves": "myself", "we're": "i'm",
           "we've": "i've", "we'll": "i'll", "we'd": "i'd"}  # fmt: skip
_BE = {"i": {"am": "are", "was": "were"}, "we": {"are": "am", "were": "was"}}


def _at_start(text: str, w: Word) -> bool:
    return not text[: w.start].strip("\"'“‘( ")


#: words after which "will", "can", "may", "might", "must" or "mine" are nouns ("the will of the people")
_DETERMINERS = frozenset("a an the this his her its their our my your every no own good free coal gold".split())


@register_perturbation("number", kind="sensitivity")
class Number(Perturbation):
    """First person flipped between singular and plural (I/me/my/mine/myself <-> we/us/our/ours/ourselves, with
    "am"/"was" <-> "are"/"were" next to the pronoun): the one number flip English does without inflecting other
    words. A sentence with any singular form goes to plural, otherwise plural goes to singular."""

    all_sites = True

    def sites(self, text: str) -> list[Site]:
        ws = words(text)
        keys = [w.text.lower().replace("’", "'") for w in ws]
        usable = [self._usable(text, ws, i) for i in range(len(ws))]
        singular = any(k in _SINGULAR and ok for k, ok in zip(keys, usable, strict=True))
        table = _SINGULAR if singular else _PLURAL
        out = []
        for i, (w, key) in enumerate(zip(ws, keys, strict=True)):
            if key not in table or not usable[i]:
                continue
            new = table[key]
            if new == "i" or new.startswith("i'"):
                new = "I" + new[1:]
            elif _at_start(text, w):
                new = new[0].upper() + new[1:]
            if "’" in w.text:
                new = new.replace("'", "’")
            out.append(Site(w.start, w.end, (Option(new, "number"),)))
            verbs = _BE.get(key, {})
            for j in (i - 1, i + 1):
                if 0 <= j < len(ws) and keys[j] in verbs and text[ws[min(i, j)].end : ws[max(i, j)].start] == " ":
                    flipped = match_case(ws[j].text, verbs[keys[j]])
                    out.append(Site(ws[j].start, ws[j].end, (Option(flipped, "number"),)))
        return out

    @staticmethod
    def _usable(text: str, ws: list[Word], i: int) -> bool:
        w = ws[i]
        if w.text in ("US", "Us") and not _at_start(text, w):  # the country, not the pronoun
            return False
        if w.text.lower() == "mine":  # "the mine", "mine workers": a noun
            return not (i and ws[i - 1].text.lower() in _DETERMINERS) and not _determiner_use(text, ws, i)
        return True


_INSERT_NOT = ("is", "are", "was", "were", "am", "will", "would", "should", "could", "must", "may", "might", "shall")
_HAVE = ("has", "have", "had")
_NOUN_LIKE = ("will", "can", "may", "might", "must")
_REMOVE_NT = {
    "isn't": "is", "aren't": "are", "wasn't": "was", "weren't": "were", "won't": "will", "wouldn't": "would",
    "shouldn't": "should", "couldn't": "could", "can't": "can", "mustn't": "must", "hasn't": "has",
    "haven't": "have", "hadn't": "had",
}  # fmt: skip


def _noun_use(ws: list[Word], i: int, lower: str) -> bool:
    """Whether a modal is a noun here: after a determiner ("the will of the people", "a can of beans")."""
    return lower in _NOUN_LIKE and i > 0 and ws[i - 1].text.lower() in _DETERMINERS


@register_perturbation("negation", kind="sensitivity")
class Negation(Perturbation):
    """A clause negated ("is" -> "is not", "can" -> "cannot", "has been" -> "has not been") or un-negated ("is not",
    "isn't" -> "is"; "do not know", "don't know" -> "know"). Capitalised (sentence-initial) auxiliaries and
    questions are left alone (inversion), "not only" is kept, and do-support is removed only for "do" (removing
    "does"/"did" would need the verb inflected)."""

    def sites(self, text: str) -> list[Site]:
        ws = words(text)
        question = text.rstrip("\"'”’)").endswith("?")
        out = []
        for i, w in enumerate(ws):
            lower = w.text.lower().replace("’", "'")
            following = _next_word(text, ws, i)
            if w.text[:1].isupper() or not following:
                continue
            if following == "not":
                if _next_word(text, ws, i + 1) in ("only", ""):
                    continue
                if lower in _INSERT_NOT or lower in _HAVE:
                    out.append(Site(w.end, ws[i + 1].end, (Option("", "affirm"),)))  # "is not" -> "is"
                elif lower == "do":
                    out.append(Site(w.start, ws[i + 2].start, (Option("", "affirm"),)))  # "do not know" -> "know"
            elif lower in _REMOVE_NT:
                out.append(Site(w.start, w.end, (Option(_REMOVE_NT[lower], "affirm"),)))
            elif lower == "don't":
                out.append(Site(w.start, ws[i + 1].start, (Option("", "affirm"),)))
            elif lower == "cannot":
                out.append(Site(w.start, w.end, (Option("can", "affirm"),)))
            elif question or following in ("never", "no") or _noun_use(ws, i, lower):
                continue
            elif lower == "can":
                out.append(Site(w.start, w.end, (Option("cannot", "negate"),)))
            elif lower in _INSERT_NOT or (lower in _HAVE and is_participle(following)):
                out.append(Site(w.end, w.end, (Option(" not", "negate"),)))
        return out
