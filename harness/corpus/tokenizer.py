"""Byte-level BPE tokenizers (docs/DESIGN.md §4).

:class:`Tokenizer` wraps a HF ``tokenizers.Tokenizer`` and fixes what the harness relies on: an end-of-text id that
separates documents (and serves as BOS/EOS) and a pad id. :func:`train_bpe` trains the project's own byte-level BPE
(no normaliser, so every string round-trips) and caches it on disk by a hash of its training text, so the same
corpus never trains twice; :meth:`Tokenizer.from_file` takes any pretrained ``tokenizer.json`` instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers
from tqdm.auto import tqdm

from harness.errors import MixbenchError
from harness.store.storage import atomic_write

EOS = "<|endoftext|>"  # id 0 in trained tokenizers: document separator, BOS and EOS
PAD = "<|pad|>"  # id 1 in trained tokenizers
# Bump when the BPE model, pre-tokenizer or trainer settings below change, so cached tokenizers are retrained.
BPE_SETTINGS_VERSION = 1
# Special tokens recognised in pretrained files, most specific first; a file without a pad token pads with EOS.
_EOS_NAMES = (EOS, "<|end_of_text|>", "</s>", "<eos>", "[SEP]")
_PAD_NAMES = (PAD, "<pad>", "[PAD]")


def digest_texts(texts: Iterable[str], *header: object) -> str:
    """sha256 (hex, 16 chars) of ``header`` and the texts, each length-prefixed so concatenations cannot collide."""
    h = hashlib.sha256(repr(header).encode())
    for text in texts:
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:16]


class Tokenizer:
    """Text <-> token ids, with the end-of-text and pad ids the harness needs."""

    def __init__(self, hf: tokenizers.Tokenizer, source: str = "<memory>", *, eos_id: int | None = None,
                 pad_id: int | None = None, bos_id: int | None = None):
        hf.encode_special_tokens = True  # a literal "<|endoftext|>" in text is text: only the harness adds separators
        self._tok = hf
        vocab = hf.get_vocab(with_added_tokens=True)
        eos = eos_id if eos_id is not None else next((vocab[name] for name in _EOS_NAMES if name in vocab), None)
        if eos is None:
            raise MixbenchError(
                f"tokenizer {source} has no end-of-text token (looked for {', '.join(_EOS_NAMES)}); "
                f"add one of them as a special token or let mixbench train a BPE (leave tokenizer_file empty)."
            )
        self._eos = eos
        self._pad = pad_id if pad_id is not None else next((vocab[name] for name in _PAD_NAMES if name in vocab), eos)
        self._bos = bos_id if bos_id is not None else eos
        ids = f"|{eos}|{self._pad}|{self._bos}" if (eos_id, pad_id, bos_id) != (None, None, None) else ""
        self._fingerprint = hashlib.sha256((hf.to_str() + ids).encode()).hexdigest()[:16]

    @classmethod
    def from_transformers(cls, hf_tokenizer, source: str) -> Tokenizer:
        """The tokenizer of a ``transformers`` model (a fast one: its ``tokenizer.json``), with the model's own
        end-of-text, beginning-of-text and pad ids (an external model scored by the suites, docs/huggingface.md)."""
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise MixbenchError(
                f"the tokenizer of {source} is not a fast (tokenizers) tokenizer; mixbench reads tokenizer.json, so "
                "save the model with a fast tokenizer (transformers converts most: AutoTokenizer(..., use_fast=True))."
            )
        eos = hf_tokenizer.eos_token_id
        if eos is None:
            raise MixbenchError(f"the tokenizer of {source} has no eos_token; set one in its tokenizer_config.json.")
        pad = hf_tokenizer.pad_token_id
        return cls(tokenizers.Tokenizer.from_str(backend.to_str()), source, eos_id=eos,
                   pad_id=eos if pad is None else pad, bos_id=hf_tokenizer.bos_token_id)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Tokenizer:
        """A tokenizer saved by :meth:`save` or any pretrained HF ``tokenizer.json`` (``DataConfig.tokenizer_file``)."""
        path = Path(path).expanduser()
        if not path.is_file():
            raise MixbenchError(f"tokenizer file {path} does not exist; give the path of a tokenizers JSON file.")
        try:
            hf = tokenizers.Tokenizer.from_file(str(path))
        except Exception as e:  # the Rust side raises a bare Exception for unreadable JSON
            raise MixbenchError(
                f"tokenizer file {path} could not be read ({e}); give a tokenizers JSON file "
                f"(a cached one may be deleted to retrain)."
            ) from None
        return cls(hf, source=str(path))

    load = from_file  # the inverse of save()

    def save(self, path: str | os.PathLike) -> None:
        atomic_write(Path(path), self._tok.to_str().encode())

    def to_str(self) -> str:
        return self._tok.to_str()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Encode many texts in parallel (the Rust batch encoder without offsets)."""
        return [e.ids for e in self._tok.encode_batch_fast(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Inverse of :meth:`encode`; special tokens are kept unless asked otherwise."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_byte_lengths(self) -> np.ndarray:
        """UTF-8 bytes each id stands for (0 for special tokens): summed over targets, the denominator of
        bits-per-byte. Exact for byte-level tokenizers (one symbol per byte) and for SentencePiece-style ones
        (``▁`` is a space, ``<0xNN>`` one byte; the space such a tokenizer puts before a text counts one byte
        more per text); otherwise each id decoded alone."""
        lengths = np.zeros(self.vocab_size, dtype=np.int64)
        if isinstance(self._tok.decoder, decoders.ByteLevel):
            for token, i in self._tok.get_vocab(with_added_tokens=True).items():
                lengths[i] = len(token)
        elif _sentencepiece_style(self._tok):
            for token, i in self._tok.get_vocab(with_added_tokens=True).items():
                lengths[i] = 1 if _BYTE_FALLBACK.fullmatch(token) else len(token.replace("\u2581", " ").encode("utf-8"))
        else:
            for i in range(self.vocab_size):
                lengths[i] = len(self._tok.decode([i], skip_special_tokens=False).encode("utf-8"))
        byte_tokens = _sentencepiece_style(self._tok)
        for i, added in self._tok.get_added_tokens_decoder().items():
            if byte_tokens and _BYTE_FALLBACK.fullmatch(added.content):
                lengths[i] = 1  # a byte-fallback token declared special still stands for one byte
            else:
                lengths[i] = 0 if added.special else len(added.content.encode("utf-8"))
        return lengths

    @property
    def vocab_size(self) -> int:
        """Number of ids (including special tokens); the model's embedding size."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    @property
    def eos_id(self) -> int:
        return self._eos

    @property
    def bos_id(self) -> int:
        """What a held-out document starts with: the end-of-text id for mixbench's own tokenizers (documents are
        separated by it), a model's own beginning-of-text id for an external one."""
        return self._bos

    @property
    def pad_id(self) -> int:
        return self._pad

    @property
    def fingerprint(self) -> str:
        """sha256 (16 hex chars) of the tokenizer JSON: identical tokenizers, identical fingerprints."""
        return self._fingerprint

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, fingerprint={self.fingerprint})"


_BYTE_FALLBACK = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _sentencepiece_style(tok: tokenizers.Tokenizer) -> bool:
    """A decoder that turns ``▁`` into a space (Metaspace, or a Replace step as LLaMA's tokenizer has)."""
    text = json.dumps(json.loads(tok.to_str()).get("decoder") or {})
    return "Metaspace" in text or "\\u2581" in text or "\u2581" in text


def train_bpe(texts: Iterable[str], vocab_size: int, cache_dir: Path, progress: bool = False) -> Tokenizer:
    """A byte-level BPE with ``vocab_size`` ids trained on ``texts``, cached at ``cache_dir/tokenizers/<hash>.json``.

    The hash covers every training text, ``vocab_size`` and :data:`BPE_SETTINGS_VERSION`, so a cache hit is exactly
    the tokenizer training would produce (training is deterministic). A corpus too small to fill ``vocab_size``
    yields fewer ids; use :attr:`Tokenizer.vocab_size`, not the request.
    """
    texts = list(texts)
    path = Path(cache_dir) / "tokenizers" / f"{digest_texts(texts, BPE_SETTINGS_VERSION, vocab_size)}.json"
    if path.is_file():
        return Tokenizer.load(path)
    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    feed = tqdm(texts, desc="training BPE", unit="doc", disable=not progress)
    hf.train_from_iterator(feed, trainer, length=len(texts))
    tokenizer = Tokenizer(hf)
    tokenizer.save(path)
    return tokenizer
