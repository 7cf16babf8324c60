"""Per-token negative log-likelihood of evaluation windows: the one scoring loop behind every held-out loss a
suite reports per document (the perplexity suite's totals, the scaling suite's ladder points, the long-context
suite's loss by position), and the log2 position buckets those suites report it in."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from harness.model.batching import IGNORE_INDEX, batched, collate_windows


@torch.no_grad()
def window_nll(model, windows: Sequence[Any], batch_size: int, pad_id: int, desc: str = "",
               progress: bool = False) -> Iterator[tuple[list[Any], torch.Tensor, torch.Tensor]]:
    """For each batch of ``windows`` (objects with ``ids``), in order: the batch, the per-token NLL ``[B, T]``
    (float64, CPU; 0 where the target is padding) and the targets (``IGNORE_INDEX`` at padding). The model is put
    in eval mode."""
    device = next(model.parameters()).device
    model.eval()
    bar = tqdm(total=len(windows), desc=desc, unit="win", disable=not progress, leave=False)
    for chunk in batched(list(windows), batch_size):
        inputs, targets = collate_windows([w.ids for w in chunk], pad_id)
        logits, _ = model(inputs.to(device))
        nll = F.cross_entropy(
            logits.flatten(0, 1).float(), targets.to(device).flatten(), ignore_index=IGNORE_INDEX, reduction="none"
        ).view(targets.shape).double().cpu()
        yield chunk, nll, targets
        bar.update(len(chunk))
    bar.close()


def document_nll(model, windows: Sequence[Any], n_docs: int, batch_size: int, pad_id: int, desc: str = "",
                 progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Summed NLL and scored tokens per document (``window.doc_index``), over every window of ``windows``."""
    nll_sum, tokens = np.zeros(n_docs), np.zeros(n_docs)
    for chunk, nll, targets in window_nll(model, windows, batch_size, pad_id, desc, progress):
        valid = targets != IGNORE_INDEX
        for row, w in enumerate(chunk):
            nll_sum[w.doc_index] += float(nll[row][valid[row]].sum())
            tokens[w.doc_index] += int(valid[row].sum())
    return nll_sum, tokens


def position_buckets(context: int) -> list[tuple[int, int]]:
    """[0, 16), [16, 32), [32, 64), ... up to the context: log2-spaced target positions."""
    edges = [0, 16]
    while edges[-1] < context:
        edges.append(edges[-1] * 2)
    edges[-1] = context
    return [(a, b) for a, b in zip(edges, edges[1:]) if a < b]


def bucket_nll(model, windows: Sequence[Any], n_docs: int, buckets: Sequence[tuple[int, int]], batch_size: int,
               pad_id: int, desc: str = "", progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Summed NLL and scored tokens per document and target-position bucket ``[n_docs, len(buckets)]``: a target
    at window position ``p`` (0-based, the first target is 0) counts in the bucket ``[a, b)`` holding ``p``;
    positions in no bucket are not counted."""
    nll_sum, tokens = np.zeros((n_docs, len(buckets))), np.zeros((n_docs, len(buckets)))
    bucket_of = torch.full((max([b for _, b in buckets], default=0),), -1, dtype=torch.long)
    for i, (a, b) in enumerate(buckets):
        bucket_of[a:b] = i
    for chunk, nll, targets in window_nll(model, windows, batch_size, pad_id, desc, progress):
        T = targets.shape[1]
        where = torch.full((T,), -1, dtype=torch.long)
        where[: min(T, len(bucket_of))] = bucket_of[:T]
        for row, w in enumerate(chunk):
            keep = (targets[row] != IGNORE_INDEX) & (where >= 0)
            np.add.at(nll_sum[w.doc_index], where[keep].numpy(), nll[row][keep].numpy())
            np.add.at(tokens[w.doc_index], where[keep].numpy(), 1)
    return nll_sum, tokens
