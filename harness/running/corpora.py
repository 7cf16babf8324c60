"""The corpora a process has loaded, and their loading in a pool worker while the driver plans a grid.

One corpus per data config per process: the driver's load is reused by in-process jobs, and a pool or Ray worker
that runs several jobs loads it once (the tokenizer and token stream come from the disk cache). A local pool loads
a grid's corpora ahead of the driver (:func:`prefetch_corpora`; docs/ARCHITECTURE.md, "Quickstart"): matching each
mixer's width to the reference builds its models (25 s for the quickstart's six, the packages imported), a corpus
takes its tokenizer's training and the encoding (32 s), and neither needs the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.config import DataConfig

if TYPE_CHECKING:  # pragma: no cover
    from harness.corpus.data import Corpus
    from harness.running.executors import Executor, Prefetch

_CORPORA: dict[DataConfig, "Corpus"] = {}


def is_loaded(cfg: DataConfig) -> bool:
    return cfg in _CORPORA


def corpus_for(cfg: DataConfig, progress: bool) -> "Corpus":
    from harness.corpus.data import load_corpus

    if cfg not in _CORPORA:
        _CORPORA[cfg] = load_corpus(cfg, progress=progress)
    return _CORPORA[cfg]


def prepare_corpus(item: tuple[DataConfig, bool]) -> None:
    """Load a corpus in a pool worker: its tokenizer and token stream land in the disk cache the driver reads, and
    the worker keeps it for the grid's jobs it will run."""
    corpus_for(*item)


def prefetch_corpora(configs: Sequence[DataConfig], progress: bool, executor: "Executor",
                     like: list[Any]) -> "Prefetch | None":
    """Start loading the ``configs`` not loaded here on ``executor``'s workers (those jobs shaped ``like`` get)."""
    todo = [(cfg, progress) for cfg in dict.fromkeys(configs) if cfg not in _CORPORA]
    return executor.prefetch(prepare_corpus, todo, like)
