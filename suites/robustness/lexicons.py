"""The vendored lexicons (``data/``, provenance and licences in ``data/SOURCES.md``), loaded once per process.

Nothing is downloaded: WordNet ships as the tar.gz in ``data/`` and is extracted once into the mixbench cache,
atomically (a temporary folder renamed into place), so concurrent first uses and killed runs never leave a half
folder. NLTK only reads files under its data paths, so the extracted root is appended to ``nltk.data.path`` of this
process; NLTK's own data folders and downloader are never touched.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tarfile
import warnings
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import MixbenchError
from harness.kit import cache_dir as mixbench_cache, fill_folder_once

if TYPE_CHECKING:  # pragma: no cover
    from nltk.corpus.reader import WordNetCorpusReader

DATA_FILES = (
    "wordnet-3.0.tar.gz",
    "codespell_dictionary.txt.gz",
    "codespell_dictionary_en-GB_to_en-US.txt.gz",
    "abbreviations.tsv",
    "spelling_variants.tsv",
)
#: US spellings whose British form depends on the part of speech or sense (GB noun "practice", verb "practise";
#: a parking "meter" is a meter in Britain too): only the British -> American direction is used for them.
US_TO_GB_AMBIGUOUS = frozenset({"practice", "license", "licenses", "meter", "meters", "dialog", "analog", "catalog"})


def data_path(name: str) -> Path:
    path = Path(str(files("suites.robustness").joinpath("data").joinpath(name)))
    if not path.is_file():
        raise MixbenchError(f"the robustness lexicon {name} is missing from {path.parent}; reinstall mixbench.")
    return path


@lru_cache(maxsize=1)
def lexicon_digest() -> str:
    """sha256 (16 hex) of every vendored file: part of the pair-set cache key, so a lexicon change rebuilds pairs."""
    h = hashlib.sha256()
    for name in DATA_FILES:
        h.update(name.encode())
        h.update(data_path(name).read_bytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------- WordNet


def wordnet_root(cache_dir: Path | None = None) -> Path:
    """The NLTK data root holding ``corpora/wordnet``, extracted from the vendored archive on first use."""
    archive = data_path("wordnet-3.0.tar.gz")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
    root = Path(cache_dir or mixbench_cache()) / "lexicons" / f"wordnet-3.0-{digest}"

    def extract(tmp: Path) -> None:
        with tarfile.open(archive, "r:gz") as tar:
            # the "data" filter (Python >= 3.11.4) refuses links and paths outside the target
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(tmp / "corpora", **safe)

    return fill_folder_once(root, extract, lambda r: (r / "corpora" / "wordnet" / "lexnames").is_file())


@lru_cache(maxsize=1)
def wordnet() -> WordNetCorpusReader:
    """NLTK's WordNet 3.0 reader over the vendored copy (a few seconds: it indexes every lemma)."""
    import nltk
    from nltk.corpus.reader import WordNetCorpusReader

    class WordNet30(WordNetCorpusReader):
        def map_wn(self, version: str = "wordnet") -> None:
            """No mapping to WordNet 3.0: it is 3.0. NLTK builds one for the Open Multilingual Wordnet, which is
            not used here, by reading both sense indexes again (a third of the reader's start-up)."""
            return None

    root = str(wordnet_root())
    if root not in nltk.data.path:
        nltk.data.path.append(root)  # NLTK refuses to read outside its data paths
    with warnings.catch_warnings():  # "multilingual functions are not available": no Open Multilingual Wordnet
        warnings.simplefilter("ignore", UserWarning)
        return WordNet30(os.path.join(root, "corpora", "wordnet"), None)


# ------------------------------------------------------------------------------------------------- word lists


def _gz_lines(name: str) -> list[str]:
    with gzip.open(data_path(name), "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


@lru_cache(maxsize=1)
def misspellings() -> dict[str, tuple[str, ...]]:
    """codespell inverted: correct lowercase word -> its attested misspellings (sorted).

    Only lines with a single correction are used (``a->b, c,`` lists alternatives, so ``a`` is not a clear
    misspelling of either), and only alphabetic lowercase words on both sides.
    """
    out: dict[str, list[str]] = {}
    for line in _gz_lines("codespell_dictionary.txt.gz"):
        wrong, _, right = line.partition("->")
        if "," in right or not (wrong.isalpha() and wrong.islower() and right.isalpha() and right.islower()):
            continue
        out.setdefault(right, []).append(wrong)
    return {right: tuple(sorted(set(wrongs))) for right, wrongs in out.items()}


@lru_cache(maxsize=1)
def spelling_variants() -> dict[str, tuple[str, str]]:
    """Lowercase word or phrase -> (its other national spelling, "gb->us" or "us->gb"): codespell's British ->
    American list and the project's ``spelling_variants.tsv`` (which adds -our, -re, -ise, double-l, ae/oe words
    and "per cent"), both used in both directions unless marked one-way."""
    pairs = [(*line.split("->"), "") for line in _gz_lines("codespell_dictionary_en-GB_to_en-US.txt.gz")]
    for n, line in enumerate(data_path("spelling_variants.tsv").read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            parts = line.split("\t")
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "gb->us"):
                raise MixbenchError(f"spelling_variants.tsv line {n}: expected 'british<TAB>american[<TAB>gb->us]'.")
            pairs.append((parts[0], parts[1], parts[2] if len(parts) == 3 else ""))
    out: dict[str, tuple[str, str]] = {}
    for gb, us, one_way in pairs:
        out.setdefault(gb, (us, "gb->us"))
        if not one_way and us not in US_TO_GB_AMBIGUOUS:
            out.setdefault(us, (gb, "us->gb"))
    return out


@dataclass(frozen=True)
class Abbreviation:
    full: str
    short: str
    abbreviate: bool  # full -> short allowed
    expand: bool  # short -> full allowed


@lru_cache(maxsize=1)
def abbreviations() -> tuple[Abbreviation, ...]:
    out = []
    for n, line in enumerate(data_path("abbreviations.tsv").read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or parts[2] not in ("both", "abbreviate", "expand"):
            raise MixbenchError(f"abbreviations.tsv line {n}: expected 'full<TAB>short<TAB>both|abbreviate|expand'.")
        full, short, direction = parts
        out.append(Abbreviation(full, short, direction != "expand", direction != "abbreviate"))
    return tuple(out)
