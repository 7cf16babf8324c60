"""Documents, splits, tokenised streams and evaluation windows (docs/DESIGN.md §4).

:func:`load_documents` turns a :class:`~harness.config.DataConfig` into named splits of :class:`Document`;
:func:`load_corpus` adds the tokenizer and the training token stream (both cached on disk) and returns the
:class:`Corpus` that training draws batches from and suites evaluate on. Held-out splits are fixed by document id and
reported by :meth:`Corpus.split_doc_ids` for the manifest.

Sources:

- ``embedded``: the public-domain corpus in ``harness/corpus/corpora`` (see its SOURCES.md). Train = State of the Union
  addresses before 2000 + Brown + Shakespeare + KJV; validation/test = SOTU from 2000 (in domain, later era);
  validation_ood/test_ood = Moby-Dick chapters. Each held-out set is sorted by id and alternated (even positions
  validation, odd test).
- a local ``.txt``/``.jsonl``/``.json``/``.parquet`` file (optionally ``.gz`` for text and json) or a folder of them;
  a ``.txt`` file gives one document per paragraph (blank-line separated). Files or sub-folders named train*,
  validation*/valid*/dev*/val*, test* are used as those splits. Every file is checked first, so a mistake is one
  sentence naming the file, the line and byte offset, and the fix: an empty, binary (NUL byte) or non-UTF-8 file,
  a line that is not JSON, a row that is not an object, rows without a string text field (an error unless
  ``skip_bad_rows``: then they are left out, counted in :attr:`Corpus.skipped_rows` and announced). JSON rows are
  parsed here (document ids stay ``<split>/<row>``, as ``datasets`` numbered them); text and parquet files are
  then read with HF ``datasets``.
- a hub dataset, ``hub:owner/name`` (or ``owner/name`` when no such path exists), through ``datasets.load_dataset``.

Held-out splits a local or hub source lacks are carved out of its train split: documents are ranked by the sha256
of their text and the first 1% (at least one) become validation, the next 1% test. ``max_train_docs`` keeps the
training documents whose ids have the smallest sha256, in their original order.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from harness.config import DataConfig, content_hash
from harness.errors import MixbenchError, UnknownNameError
from harness.store.storage import atomic_write, cache_dir as mixbench_cache
from harness.corpus.protocol import check_read
from harness.corpus.tokenizer import Tokenizer, digest_texts, train_bpe

SPLITS = ("train", "validation", "test", "validation_ood", "test_ood")
EMBEDDED_TRAIN = ("sotu", "brown", "shakespeare", "kjv")  # SOTU only before HELDOUT_YEAR
HELDOUT_YEAR = 2000
_EXTENSIONS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
_SPLIT_NAME = re.compile(r"^(train|training|validation|valid|dev|val|test|testing)([-._ 0-9]|$)", re.IGNORECASE)
_SPLIT_ALIASES = {
    "training": "train",
    "valid": "validation",
    "dev": "validation",
    "val": "validation",
    "testing": "test",
}
_ENCODE_CHUNK = 64  # documents per batch-encoder call: big enough to use every core, small enough for a live bar


@dataclass
class Document:
    id: str  # unique across all splits of a source
    text: str
    source: str  # corpus name (embedded) or the DataConfig source
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EncodedDoc:
    doc_id: str
    #: int32: [bos] + tokens + [eos]; the leading token (end-of-text, or an external model's own bos) gives the
    #: first token a context
    ids: np.ndarray
    n_bytes: int  # UTF-8 bytes of the text, for bits-per-byte


@dataclass(frozen=True)
class Window:
    doc_index: int  # index into Corpus.encode_split(split)
    start: int  # offset of ids[0] in the document's ids
    ids: np.ndarray  # up to context+1 tokens; ids[1:] are the targets


# ----------------------------------------------------------------------------------------------- documents


def load_documents(cfg: DataConfig, report: dict[str, Any] | None = None) -> dict[str, list[Document]]:
    """Every split in :data:`SPLITS` (the ood ones are empty for non-embedded sources); empty texts dropped.

    ``report`` (a dict) receives ``skipped_rows``: file -> rows left out under ``cfg.skip_bad_rows``.
    """
    report = {} if report is None else report
    source = cfg.source
    if source == "embedded":
        splits = _embedded()
    elif source.startswith("hub:"):
        splits = _hub(source[4:], cfg, "")
    elif Path(source).expanduser().exists():
        splits = _local(Path(source).expanduser(), cfg, report)
    elif "/" in source and not source.startswith(("/", ".", "~")) and _builder(Path(source)) is None:
        splits = _hub(source, cfg, f" (no local path {source} exists either)")
    else:
        raise MixbenchError(
            f"data path {source} does not exist; give an existing file or folder, 'embedded', or a hub dataset "
            f"as hub:owner/name."
        )
    splits = {name: splits.get(name, []) for name in SPLITS}
    if cfg.max_train_docs:
        keep = {d.id for d in sorted(splits["train"], key=lambda d: _sha(d.id))[: cfg.max_train_docs]}
        splits["train"] = [d for d in splits["train"] if d.id in keep]
    if not splits["train"]:
        raise MixbenchError(f"data source {source} has no training documents; give a source with non-empty text.")
    seen: set[str] = set()
    for docs in splits.values():
        for d in docs:
            if d.id in seen:
                raise MixbenchError(f"document id {d.id} occurs twice in {source}; document ids must be unique.")
            seen.add(d.id)
    return splits


def _embedded() -> dict[str, list[Document]]:
    corpus = {name: list(_read_jsonl_gz(name)) for name in (*EMBEDDED_TRAIN, "moby_dick")}
    sotu_new = [d for d in corpus["sotu"] if d.meta["year"] >= HELDOUT_YEAR]
    corpus["sotu"] = [d for d in corpus["sotu"] if d.meta["year"] < HELDOUT_YEAR]
    val, test = _alternate(sotu_new)
    val_ood, test_ood = _alternate(corpus["moby_dick"])
    train = [d for name in EMBEDDED_TRAIN for d in corpus[name]]
    return {"train": train, "validation": val, "test": test, "validation_ood": val_ood, "test_ood": test_ood}


def _read_jsonl_gz(name: str) -> Iterator[Document]:
    with files("harness.corpus").joinpath(f"corpora/{name}.jsonl.gz").open("rb") as raw, gzip.open(raw, "rt") as f:
        for line in f:
            row = json.loads(line)
            text = row.pop("text")
            if text.strip():
                yield Document(f"{name}/{row.pop('id')}", text, name, row)


def _alternate(docs: list[Document]) -> tuple[list[Document], list[Document]]:
    """Halve a held-out set by document: sort by id (digit runs as numbers), even positions first, odd second."""
    docs = sorted(docs, key=lambda d: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", d.id)])
    return docs[0::2], docs[1::2]


def _builder(path: Path) -> str | None:
    """The ``datasets`` packaged builder for a data file, or None for files we do not read."""
    suffix = path.suffixes[-2] if path.suffix == ".gz" and len(path.suffixes) > 1 else path.suffix
    builder = _EXTENSIONS.get(suffix.lower())
    return None if builder == "parquet" and path.suffix == ".gz" else builder


def _local(path: Path, cfg: DataConfig, report: dict[str, Any]) -> dict[str, list[Document]]:
    if path.is_file():
        if _builder(path) is None:
            raise MixbenchError(f"data file {path} is not {', '.join(_EXTENSIONS)}; convert it or give a folder.")
        data_files = {"train": [path]}
    else:
        found = sorted(p for p in path.rglob("*") if p.is_file() and _builder(p) and not p.name.startswith("."))
        if not found:
            raise MixbenchError(
                f"data folder {path} holds no {', '.join(_EXTENSIONS)} files; add some or fix the path."
            )
        data_files = _split_files(path, found)
    builders = {_builder(p) for ps in data_files.values() for p in ps}
    if len(builders) > 1:
        raise MixbenchError(
            f"data folder {path} mixes {', '.join(sorted(builders))} files; keep one format per folder."
        )
    builder = builders.pop()
    if builder == "json":  # parsed here, line by line: every error names its file and line
        tables = {split: _Rows() for split in data_files}
        for split, files in data_files.items():
            for file in files:
                tables[split].extend(_json_rows(file, cfg, report))
        return _from_dataset_dict(tables, str(path), cfg.text_field)
    for file in (p for ps in data_files.values() for p in ps):
        if builder == "text":
            _check_text_file(file)
        else:
            _check_parquet(file, cfg, report)
    kwargs = {"sample_by": "paragraph"} if builder == "text" else {}
    import datasets  # imported on use: it is slow to import and the embedded corpus does not need it

    try:
        ds = datasets.load_dataset(
            builder, data_files={k: [str(p) for p in v] for k, v in data_files.items()}, **kwargs
        )
    except Exception as exc:  # checked above, so this is rare: say which files, without datasets' traceback
        cause = exc.__cause__ or exc
        raise MixbenchError(
            f"the datasets library could not read the {builder} files under {path} "
            f"({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}); check those files."
        ) from exc
    return _from_dataset_dict(ds, str(path), "text" if builder == "text" else cfg.text_field)


class _Rows(list):
    """Rows of one split, in a form :func:`_from_dataset_dict` reads like a ``datasets`` table."""

    @property
    def column_names(self) -> list[str]:
        return list(dict.fromkeys(k for row in self for k in row))


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _where(path: Path, line: int, offset: int) -> str:
    unzipped = " of the decompressed text" if path.suffix == ".gz" else ""
    return f"line {line}, byte offset {offset}{unzipped}"


def _decoded_lines(path: Path) -> Iterator[tuple[int, int, str]]:
    """``(line number, byte offset, text)`` of each line, or a one-sentence error for a binary, non-UTF-8 or
    unreadable (bad gzip) file."""
    offset = 0
    try:
        with _open_binary(path) as f:
            for number, raw in enumerate(f, 1):
                nul = raw.find(b"\x00")
                if nul >= 0:
                    raise MixbenchError(
                        f"data file {path} looks binary: a NUL byte at {_where(path, number, offset + nul)}; "
                        "give a UTF-8 text file."
                    )
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise MixbenchError(
                        f"data file {path} is not UTF-8: byte 0x{raw[exc.start]:02x} at "
                        f"{_where(path, number, offset + exc.start)} does not decode; re-save the file as UTF-8 "
                        f"(from Latin-1: iconv -f latin1 -t utf-8)."
                    ) from None
                yield number, offset, text
                offset += len(raw)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError; EOFError: a truncated .gz
        raise MixbenchError(f"data file {path} cannot be read ({type(exc).__name__}: {exc}); replace it.") from None


def _check_text_file(path: Path) -> None:
    """A .txt file must hold some UTF-8 text without NUL bytes (errors name the line and byte offset)."""
    has_text = False
    for _, _, text in _decoded_lines(path):  # every line: a binary or non-UTF-8 byte anywhere is an error
        has_text = has_text or bool(text.strip())
    if not has_text:
        raise MixbenchError(f"data file {path} is empty (no text in it); add text or remove the file.")


def _json_rows(path: Path, cfg: DataConfig, report: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a .json/.jsonl file: JSON Lines (one object per line), or for .json a whole-file array.

    A row without a string ``text_field`` is an error naming its line, unless ``skip_bad_rows``: then such rows
    are left out, counted in ``report["skipped_rows"]`` and announced on stderr. The row index of the others
    is unchanged (it is part of each document's id).
    """
    lines: Any = _decoded_lines(path)
    if path.name.removesuffix(".gz").endswith(".json"):
        lines = list(lines)
        whole = "".join(text for _, _, text in lines)
        try:
            parsed = json.loads(whole)
        except json.JSONDecodeError:
            parsed = None  # JSON Lines in a .json file: parsed line by line below
        if isinstance(parsed, list):
            return _checked_rows(path, [(1, 0, row) for row in parsed], cfg, report, whole_file=True)
    rows = []
    for number, offset, text in lines:
        if not text.strip():
            continue
        try:
            rows.append((number, offset, json.loads(text.rstrip("\r\n"))))
        except json.JSONDecodeError as exc:
            raise MixbenchError(
                f"data file {path} is not valid JSON at {_where(path, number, offset)} ({exc.msg} at column "
                f"{exc.colno}); fix that line (one JSON object per line) or remove it."
            ) from None
    return _checked_rows(path, rows, cfg, report)


def _checked_rows(path: Path, rows: list[tuple[int, int, Any]], cfg: DataConfig, report: dict[str, Any],
                  whole_file: bool = False) -> list[dict[str, Any]]:
    if not rows:
        raise MixbenchError(f"data file {path} is empty (no JSON rows in it); add rows or remove the file.")
    field = cfg.text_field
    out, bad = [], []
    for index, (number, offset, row) in enumerate(rows):
        where = f"row {index + 1}" if whole_file else _where(path, number, offset)
        if not isinstance(row, dict):
            raise MixbenchError(
                f"data file {path} holds a JSON {type(row).__name__} instead of an object at {where}; write one "
                f"object per row, e.g. {{\"{field}\": \"...\"}}."
            )
        if not isinstance(row.get(field), str):
            bad.append(where)
            row = {**row, field: None}
        out.append(row)
    if len(bad) == len(rows):
        columns = ", ".join(dict.fromkeys(k for r in out for k in r if k != field)) or "none"
        raise MixbenchError(
            f"{path} has no column '{field}' holding text in any row (columns: {columns}); set text_field "
            f"(--text-field) to the field holding the text."
        )
    if bad:
        _bad_rows(path, bad, len(rows), cfg, report, f"without a string '{field}'")
    return out


def _check_parquet(path: Path, cfg: DataConfig, report: dict[str, Any]) -> None:
    """A readable parquet file whose text column holds strings; null texts are bad rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        if cfg.text_field not in schema.names:
            raise MixbenchError(
                f"{path} has no column '{cfg.text_field}' (columns: {', '.join(schema.names)}); set text_field "
                f"(--text-field) to the column holding the text."
            )
        column = pq.read_table(path, columns=[cfg.text_field]).column(0)
    except MixbenchError:
        raise
    except Exception as exc:  # ArrowInvalid, OSError: not parquet, truncated
        raise MixbenchError(
            f"data file {path} is not a readable parquet file ({type(exc).__name__}: {exc}); replace it."
        ) from None
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise MixbenchError(
            f"{path}: column '{cfg.text_field}' holds {column.type}, not text; set text_field to a text column."
        )
    if column.null_count:
        nulls = column.is_null().to_pylist()
        bad = [f"row {i + 1}" for i, null in enumerate(nulls) if null]
        _bad_rows(path, bad, len(column), cfg, report, f"with a null '{cfg.text_field}'")


def _bad_rows(path: Path, bad: list[str], total: int, cfg: DataConfig, report: dict[str, Any], what: str) -> None:
    if not cfg.skip_bad_rows:
        raise MixbenchError(
            f"data file {path} has {len(bad)} of {total} rows {what} (the first at {bad[0]}); fix them, set "
            f"text_field, or pass --skip-bad-rows (skip_bad_rows: true in a plan's data) to leave them out."
        )
    report.setdefault("skipped_rows", {})[str(path)] = len(bad)
    print(
        f"[mixbench] {path}: skipped {len(bad)} of {total} rows {what} (the first at {bad[0]}; --skip-bad-rows)",
        file=sys.stderr, flush=True,
    )


def _split_files(root: Path, found: list[Path]) -> dict[str, list[Path]]:
    """Files grouped by the split their name (or a parent folder's) names; all in train when none is named."""
    named: dict[str, list[Path]] = {}
    unnamed = []
    for p in found:
        parts = p.relative_to(root).parts
        match = next((m for m in map(_SPLIT_NAME.match, parts) if m), None)
        if match:
            split = match.group(1).lower()
            named.setdefault(_SPLIT_ALIASES.get(split, split), []).append(p)
        else:
            unnamed.append(p)
    if not named:
        return {"train": unnamed}
    if unnamed or "train" not in named:
        stray = unnamed[0] if unnamed else "a train file"
        raise MixbenchError(
            f"data folder {root} names splits by file name but {stray} fits none; name every file train*, "
            f"validation*, or test* (with at least one train file), or none of them."
        )
    return named


def _hub(name: str, cfg: DataConfig, note: str) -> dict[str, list[Document]]:
    import datasets  # imported on use: it is slow to import and the embedded corpus does not need it

    try:
        ds = datasets.load_dataset(name)
    except Exception as e:  # offline, unreachable, missing, gated, needs a config: all are the user's to fix
        raise MixbenchError(
            f"dataset {name} could not be loaded from the hub{note} ({type(e).__name__}: {e}); "
            f"offline use needs a local path or 'embedded' as the data source."
        ) from e
    if not isinstance(ds, datasets.DatasetDict):
        ds = datasets.DatasetDict({"train": ds})
    aliases = {k: _SPLIT_ALIASES.get(k, k) for k in ds}
    ds = datasets.DatasetDict({aliases[k]: v for k, v in ds.items() if aliases[k] in ("train", "validation", "test")})
    if "train" not in ds:
        raise MixbenchError(f"dataset {name} has no train split; give a dataset with one or a local path.")
    return _from_dataset_dict(ds, name, cfg.text_field)


def _from_dataset_dict(ds: Any, source: str, text_field: str) -> dict[str, list[Document]]:
    """Documents per split (ids ``<split>/<row>``), carving any missing validation/test out of train."""
    splits = {}
    for split, table in ds.items():
        if text_field not in table.column_names:
            raise MixbenchError(
                f"{source} has no column '{text_field}' (columns: {', '.join(table.column_names)}); "
                f"set text_field to the column holding the text."
            )
        splits[split] = [
            Document(f"{split}/{i}", row[text_field], source, _scalars(row, text_field))
            for i, row in enumerate(table)
            if isinstance(row[text_field], str) and row[text_field].strip()
        ]
    missing = [s for s in ("validation", "test") if s not in splits]
    if missing:
        splits.update(_carve(splits, missing, source))
    return splits


def _carve(splits: dict[str, list[Document]], missing: list[str], source: str) -> dict[str, list[Document]]:
    train = splits["train"]
    k = max(1, round(len(train) / 100))
    if len(train) < k * len(missing) + 1:
        raise MixbenchError(
            f"{source} has {len(train)} document(s), too few to hold out {' and '.join(missing)}; add documents."
        )
    ranked = sorted(range(len(train)), key=lambda i: (_sha(train[i].text), i))
    out, taken = {}, set()
    for j, split in enumerate(missing):
        chosen = sorted(ranked[j * k : (j + 1) * k])
        out[split] = [train[i] for i in chosen]
        taken.update(chosen)
    out["train"] = [d for i, d in enumerate(train) if i not in taken]
    return out


def _scalars(row: dict[str, Any], text_field: str) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != text_field and isinstance(v, (str, int, float, bool))}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------------------- corpus


def load_corpus(cfg: DataConfig, cache_dir: Path | None = None, progress: bool = True,
                tokenizer: Tokenizer | None = None) -> Corpus:
    """Documents, tokenizer and training stream for ``cfg``; tokenizer and stream come from the cache when present.
    ``tokenizer``: use this one (an external model's) instead of ``cfg``'s."""
    cache_dir = Path(cache_dir) if cache_dir is not None else mixbench_cache()
    report: dict[str, Any] = {}
    documents = load_documents(cfg, report)
    train_texts = [d.text for d in documents["train"]]
    if tokenizer is not None:
        pass
    elif cfg.tokenizer_file:
        tokenizer = Tokenizer.from_file(cfg.tokenizer_file)
    else:
        tokenizer = train_bpe(train_texts, cfg.vocab_size, cache_dir, progress)
    docs_digest = digest_texts((part for s in SPLITS for d in documents[s] for part in (s, d.id, d.text)), "docs")
    fingerprint = content_hash({"documents": docs_digest, "tokenizer": tokenizer.fingerprint})
    path = cache_dir / "tokens" / f"{fingerprint}.npy"
    if path.is_file():
        train_tokens = np.load(path)
    else:
        streams = _encode(tokenizer, train_texts, "encoding train", progress)
        eos = np.array([tokenizer.eos_id], dtype=np.int32)
        train_tokens = np.concatenate([part for ids in streams for part in (ids, eos)])
        buf = io.BytesIO()
        np.save(buf, train_tokens)
        atomic_write(path, buf.getvalue())
    corpus = Corpus(cfg, documents, tokenizer, train_tokens, fingerprint, progress)
    corpus.skipped_rows = dict(report.get("skipped_rows", {}))
    return corpus


def _encode(tokenizer: Tokenizer, texts: list[str], desc: str, progress: bool) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    with tqdm(total=len(texts), desc=desc, unit="doc", disable=not progress) as bar:
        for i in range(0, len(texts), _ENCODE_CHUNK):
            chunk = texts[i : i + _ENCODE_CHUNK]
            out.extend(np.asarray(ids, dtype=np.int32) for ids in tokenizer.encode_batch(chunk))
            bar.update(len(chunk))
    return out


class SplitDocuments(Mapping):
    """The documents of each split, read through :func:`harness.corpus.protocol.check_read`: a selection run
    cannot read a test split, and every run records the splits it read (docs/protocol.md)."""

    def __init__(self, documents: dict[str, list[Document]]):
        self._documents = dict(documents)

    def __getitem__(self, split: str) -> list[Document]:
        docs = self._documents[split]
        check_read(split)
        return docs

    def __contains__(self, split: object) -> bool:
        return split in self._documents

    def __iter__(self) -> Iterator[str]:
        return iter(self._documents)

    def __len__(self) -> int:
        return len(self._documents)

    def ids(self, split: str) -> list[str]:
        """The document ids of ``split`` (what pins a held-out set in a manifest; no text is read)."""
        return [d.id for d in self._documents[split]]

    def count(self, split: str) -> int:
        return len(self._documents[split])


class Corpus:
    """Splits of documents, their tokenizer, and the token views training and the suites use."""

    def __init__(
        self,
        cfg: DataConfig,
        documents: dict[str, list[Document]],
        tokenizer: Tokenizer,
        train_tokens: np.ndarray,
        fingerprint: str,
        progress: bool = True,
    ):
        self.cfg = cfg
        self.documents = SplitDocuments(documents)
        self.tokenizer = tokenizer
        self.train_tokens = train_tokens
        self.fingerprint = fingerprint  # documents of every split + tokenizer
        self.progress = progress
        #: file -> rows left out under ``skip_bad_rows`` (recorded in checkpoints and manifests)
        self.skipped_rows: dict[str, int] = {}
        self._encoded: dict[str, list[EncodedDoc]] = {}
        train_tokens.flags.writeable = False

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={self.documents.count(s)}" for s in SPLITS)
        return f"Corpus({self.cfg.source}: {sizes} docs, {len(self.train_tokens)} train tokens, {self.tokenizer})"

    def split_doc_ids(self) -> dict[str, list[str]]:
        """Document ids per split, in split order: what the manifest records to pin the held-out sets."""
        return {s: self.documents.ids(s) for s in SPLITS}

    def train_batch(self, step: int, batch_size: int, context: int, seed: int) -> torch.Tensor:
        """``[batch_size, context+1]`` int64 windows at offsets drawn from ``(seed, step)`` alone, so a resumed run
        sees the same batches."""
        n = len(self.train_tokens)
        if n < context + 1:
            raise MixbenchError(
                f"the training stream has {n} tokens, fewer than context+1 = {context + 1}; "
                f"use more training documents or a shorter context."
            )
        starts = np.random.default_rng([seed, step]).integers(0, n - context, size=batch_size)
        windows = self.train_tokens[starts[:, None] + np.arange(context + 1)]
        return torch.from_numpy(windows.astype(np.int64))

    def encode_split(self, split: str) -> list[EncodedDoc]:
        """Each document as ``[bos] + tokens + [eos]`` (computed once, then kept in memory); ``bos`` is the
        end-of-text id except for an external model's tokenizer with its own (:attr:`Tokenizer.bos_id`)."""
        if split not in self.documents:
            raise UnknownNameError("split", split, SPLITS)
        check_read(split)  # on every call: the encoded split is kept, and a later selection must still be refused
        if split not in self._encoded:
            docs = self.documents[split]
            encoded = _encode(self.tokenizer, [d.text for d in docs], f"encoding {split}", self.progress)
            bos, eos = self.tokenizer.bos_id, self.tokenizer.eos_id
            self._encoded[split] = []
            for doc, ids in zip(docs, encoded, strict=True):
                full = np.concatenate([[bos], ids, [eos]]).astype(np.int32)
                full.flags.writeable = False
                self._encoded[split].append(EncodedDoc(doc.id, full, len(doc.text.encode("utf-8"))))
        return self._encoded[split]

    def eval_windows(self, split: str, context: int, max_windows: int | None = None) -> list[Window]:
        """Windows of up to ``context+1`` tokens, consecutive ones sharing one token, so every token after a
        document's leading token is a target exactly once. Ordered by document, then start; ``max_windows`` keeps an
        evenly spaced subset of that order."""
        windows = [
            Window(i, start, doc.ids[start : start + context + 1])
            for i, doc in enumerate(self.encode_split(split))
            for start in range(0, len(doc.ids) - 1, context)
        ]
        if max_windows is not None and max_windows < len(windows):
            windows = [windows[j] for j in (np.arange(max_windows) * len(windows)) // max_windows]
        return windows

    def unigram_logprobs(self, alpha: float = 1.0) -> np.ndarray:
        """Add-``alpha`` smoothed log-probabilities of each id in the training stream: the unigram baseline."""
        counts = np.bincount(self.train_tokens, minlength=self.tokenizer.vocab_size).astype(np.float64)
        return np.log(counts + alpha) - np.log(counts.sum() + alpha * len(counts))
