"""Split discipline: what selects reads training and validation data only; test splits are read by scoring
(docs/protocol.md, "Splits").

A choice made by looking at test results (a recipe, a learning rate, a gate, a threshold) makes every later test
number optimistic, and the ``controls`` check that once picked the quickstart's recipe on the split it then scored
is the example this module exists for. So selection runs inside :func:`selection`, and the one place held-out
documents are read (:class:`harness.corpus.data.Corpus`) asks :func:`check_read` first: inside a selection, a test
split is refused with one sentence. Outside one, every read is noted by :func:`recording_reads`, so each run's
manifest records the splits it scored.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from harness.errors import MixbenchError


class SplitDisciplineError(MixbenchError):
    """A selection (tuning) run asked for a test split."""


_SELECTING: contextvars.ContextVar[str | None] = contextvars.ContextVar("mixbench_selecting", default=None)
_READS: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("mixbench_split_reads", default=None)


def is_test_split(split: str) -> bool:
    """``test``, ``test_ood`` and any split a source names ``test*``: what only scoring may read."""
    return split.lower().startswith("test")


@contextlib.contextmanager
def selection(purpose: str) -> Iterator[None]:
    """Everything inside selects (``purpose`` says what, for the error): reading a test split is refused."""
    token = _SELECTING.set(purpose)
    try:
        yield
    finally:
        _SELECTING.reset(token)


def selecting() -> str | None:
    """What the current selection is choosing, or None outside one."""
    return _SELECTING.get()


def check_read(split: str) -> None:
    """Called before held-out documents of ``split`` are read: refuse a test split inside a selection, and note
    the read for :func:`recording_reads`."""
    purpose = _SELECTING.get()
    if purpose is not None and is_test_split(split):
        raise SplitDisciplineError(
            f"{purpose} selects, and a selection reads training and validation data only, but it asked for the "
            f"'{split}' split; score on 'validation' (or 'validation_ood') instead, and read test splits only when "
            "scoring the choice afterwards (docs/protocol.md)."
        )
    reads = _READS.get()
    if reads is not None:
        reads.add(split)


@contextlib.contextmanager
def recording_reads() -> Iterator[set[str]]:
    """The held-out splits read inside the block (filled as they are read): what a run's manifest records."""
    reads: set[str] = set()
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)
