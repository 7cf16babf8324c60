"""Pair sets: (original, perturbed) sentences per slice, built from held-out text or imported from a file.

A built set depends only on the held-out documents, the lexicons, the code of the perturbation families and a
:class:`PairSetSpec`, so it is built once and cached as JSONL under a content hash of those inputs; every mixer
scored on the same corpus reuses the same file, and a change to any of them builds a new one. The JSONL is
byte-identical across runs with the same inputs: sentences are visited in an order drawn from the seed, each
perturbation is drawn from (seed, family, sentence id), and lines are written with a fixed field order. A larger
``pairs_per_slice`` extends a smaller set (same prefix).

A user's own file (the ProtoT paper's ``perturbation_benchmark_clean.jsonl`` has this shape) is JSON Lines with
string fields ``slice``, ``original`` and ``perturbed`` (optional ``id``; other fields are ignored). Such a file may
repeat pairs (the paper's has 70 unique pairs in 500 synonym lines, 21 in 500 abbreviation lines): every line is
scored and counted in the point estimates, but a pair's identity is :func:`pair_key` (slice and texts), intervals
resample unique pairs and :func:`duplicate_counts` reports the duplicate rate (docs/faithfulness.md).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from harness.config import content_hash
from harness.errors import MixbenchError
from harness.kit import atomic_write, digest_texts
from suites.robustness.lexicons import lexicon_digest
from suites.robustness.perturbations import PERTURBATIONS, Edit, Perturbed, perturb
from suites.robustness.text import split_sentences, stable_int, words

_TERMINAL = (".", "!", "?", '."', '!"', '?"', ".”", "!”", "?”", ".’", ".'")


@dataclass(frozen=True)
class Sentence:
    id: str  # "<document id>#<index of the sentence in the document>"
    text: str


@dataclass(frozen=True)
class Pair:
    id: str
    slice: str
    original: str
    perturbed: str
    source: str = ""  # the sentence id for built pairs, the file for imported ones
    edits: tuple[Edit, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The fields in their declared order (the JSONL's fixed field order)."""
        return {**asdict(self), "edits": [e.to_json() for e in self.edits]}


@dataclass(frozen=True)
class PairSetSpec:
    """Everything a built pair set depends on besides the documents and the lexicons."""

    slices: tuple[str, ...]
    pairs_per_slice: int
    splits: tuple[str, ...]
    min_words: int
    max_words: int
    max_edits: int
    seed: int


def held_out_sentences(
    documents: dict[str, list], splits: Iterable[str], min_words: int, max_words: int
) -> list[Sentence]:
    """Complete sentences (capitalised start, terminal punctuation, ``min_words``..``max_words`` words) of the
    held-out splits, each text once (the first occurrence), in split and document order."""
    out, seen = [], set()
    for split in splits:
        for doc in documents[split]:
            for k, text in enumerate(split_sentences(doc.text)):
                n = len(words(text))
                if not (min_words <= n <= max_words) or text in seen or not text.endswith(_TERMINAL):
                    continue
                first = text.lstrip("\"'“‘(")[:1]
                if not first.isupper() or text.isupper():
                    continue
                seen.add(text)
                out.append(Sentence(f"{doc.id}#{k}", text))
    return out


def build_pairs(sentences: list[Sentence], spec: PairSetSpec, progress: bool = False) -> list[Pair]:
    """Up to ``spec.pairs_per_slice`` pairs per slice: the sentences in a seeded order, each perturbed with its own
    random stream, skipping those the family cannot change.

    The robustness families visit the sentences some sensitivity family of the spec can flip first (in the same
    seeded order), then the others: a sentence among a robustness family's first N is then among the first N of
    a sensitivity family that flips it, so as many sentences as possible carry both kinds of edit, which the
    suite's score compares on the same sentence (:mod:`suites.robustness.selectivity`). Which sentences come first
    does not depend on ``pairs_per_slice``, so a larger set still extends a smaller one."""
    order = sorted(sentences, key=lambda s: (stable_int(spec.seed, "order", s.id), s.id))
    flips = [n for n in spec.slices if PERTURBATIONS[n].kind == "sensitivity"]
    flippable: dict[str, bool] = {}

    def can_flip(sentence: Sentence) -> bool:
        if sentence.id not in flippable:
            flippable[sentence.id] = any(_perturbed(n, sentence, spec) is not None for n in flips)
        return flippable[sentence.id]

    def flippable_first() -> Iterator[Sentence]:
        yield from (s for s in order if can_flip(s))
        yield from (s for s in order if not can_flip(s))

    pairs: list[Pair] = []
    for name in tqdm(spec.slices, desc="robustness pairs", unit="slice", disable=not progress, leave=False):
        visit = iter(order) if name in flips or not flips else flippable_first()
        kept = 0
        for sentence in visit:
            if kept == spec.pairs_per_slice:
                break
            result = _perturbed(name, sentence, spec)
            if result is None:
                continue
            pairs.append(Pair(f"{name}/{sentence.id}", name, sentence.text, result.text, sentence.id, result.edits))
            kept += 1
    return pairs


def _perturbed(name: str, sentence: Sentence, spec: PairSetSpec) -> Perturbed | None:
    result = perturb(name, sentence.text, spec.seed, sentence.id, spec.max_edits)
    return None if result is None or result.text == sentence.text else result


def pair_key(pair: Pair) -> str:
    """A stable id of the unique pair: ``<slice>/<16 hex of sha256(original NUL perturbed)>``. Repeated lines of
    a pair file share it (one cluster in the intervals, one item in paired comparisons across mixers)."""
    digest = hashlib.sha256(f"{pair.original}\0{pair.perturbed}".encode()).hexdigest()[:16]
    return f"{pair.slice}/{digest}"


def duplicate_counts(pairs: Iterable[Pair]) -> dict[str, Any]:
    """``{"per_slice": {slice: counts}, "total": counts}`` (slices in order of appearance), counts being lines,
    unique pairs and the duplicate rate 1 - unique / lines."""
    lines: dict[str, int] = {}
    unique: dict[str, set[str]] = {}
    for p in pairs:
        lines[p.slice] = lines.get(p.slice, 0) + 1
        unique.setdefault(p.slice, set()).add(pair_key(p))

    def counts(n: int, u: int) -> dict[str, Any]:
        return {"lines": n, "unique": u, "duplicate_rate": round(1.0 - u / n, 6) if n else 0.0}

    return {"per_slice": {s: counts(n, len(unique[s])) for s, n in lines.items()},
            "total": counts(sum(lines.values()), sum(len(u) for u in unique.values()))}


def dumps(pairs: Iterable[Pair]) -> bytes:
    lines = (json.dumps(p.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n" for p in pairs)
    return "".join(lines).encode("utf-8")


def save_pairs(path: Path | str, pairs: Iterable[Pair]) -> None:
    atomic_write(Path(path), dumps(pairs))


def load_pairs(path: Path | str) -> list[Pair]:
    """A pair file written by :func:`save_pairs` or a user's {slice, original, perturbed} JSON Lines file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise MixbenchError(f"pair file {path} does not exist; give a JSON Lines file with slice, original, perturbed.")
    pairs, ids = [], set()
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise MixbenchError(f"pair file {path} line {n} is not JSON ({e.msg}); fix or remove it.") from None
            missing = [
                k for k in ("slice", "original", "perturbed") if not isinstance(row, dict) or not _text(row.get(k))
            ]
            if missing:
                raise MixbenchError(
                    f"pair file {path} line {n} lacks non-empty string field(s) {', '.join(missing)}; each line needs "
                    f"slice, original and perturbed."
                )
            pair_id = str(row.get("id") or f"{row['slice']}/{n}")
            if pair_id in ids:
                raise MixbenchError(f"pair file {path} line {n} repeats the id {pair_id}; ids must be unique.")
            ids.add(pair_id)
            edits = tuple(Edit(**e) for e in row.get("edits") or ())
            pairs.append(
                Pair(pair_id, row["slice"], row["original"], row["perturbed"], row.get("source") or path.name, edits)
            )
    if not pairs:
        raise MixbenchError(f"pair file {path} holds no pairs; add lines with slice, original and perturbed.")
    return pairs


#: modules every family relies on; the families' own modules are added per pair set
_SHARED_MODULES = ("suites.robustness.lexicons", "suites.robustness.perturbations", "suites.robustness.synonyms",
                   "suites.robustness.text", __name__)  # fmt: skip


def code_digest(slices: Iterable[str]) -> str:
    """sha256 (16 hex) of the source of the shared modules and of each family's module (plugins included), so
    editing a family rebuilds cached pair sets instead of silently reusing stale ones."""
    names = sorted({*_SHARED_MODULES, *(PERTURBATIONS[s].__module__ for s in slices)})
    return digest_texts((Path(sys.modules[n].__file__).read_text(encoding="utf-8") for n in names), "code")


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def cached_pairs(
    documents: dict[str, list], spec: PairSetSpec, cache_dir: Path, progress: bool = False
) -> tuple[list[Pair], Path]:
    """The pair set for ``spec`` over these documents: read from ``cache_dir`` when built before, else built and
    saved there (atomically) for the next mixer."""
    held_out = digest_texts((part for s in spec.splits for d in documents[s] for part in (s, d.id, d.text)), "held-out")
    key = content_hash(
        {"code": code_digest(spec.slices), "lexicons": lexicon_digest(), "documents": held_out, "spec": spec}
    )
    path = Path(cache_dir) / "robustness" / f"pairs-{key}.jsonl"
    if path.is_file():
        return load_pairs(path), path
    sentences = held_out_sentences(documents, spec.splits, spec.min_words, spec.max_words)
    pairs = build_pairs(sentences, spec, progress)
    save_pairs(path, pairs)
    return pairs, path
