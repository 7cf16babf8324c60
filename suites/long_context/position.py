"""Loss by target position far past the training context (docs/long_context.md, "Loss by position").

The test split's documents are cut into windows of ``factor`` x the training context ``C``
(:meth:`harness.corpus.data.Corpus.eval_windows`), and each target's NLL is summed per document in buckets of its
position in the window (:func:`harness.model.window_nll.bucket_nll`): the log2 buckets within ``C``
(:func:`harness.model.window_nll.position_buckets`), then ``[C, 2C)``, ``[2C, 4C)``, ... up to ``factor * C``.
A model that may not read past ``C`` (:meth:`MixerLM.check_context`) is scored on the first ``C`` targets of the
same windows, which are the same targets with the same context, so its buckets within ``C`` pair with everyone's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness import stats
from harness.kit import Window, position_buckets


def long_buckets(context: int, factor: int) -> list[tuple[int, int]]:
    """Buckets within ``context`` (log2 from 16), then doubling ones up to ``factor * context``."""
    out = position_buckets(context)
    a = context
    while a < factor * context:
        out.append((a, min(2 * a, factor * context)))
        a *= 2
    return out


@dataclass(frozen=True)
class BucketLoss:
    """One bucket's token-weighted NLL per token with its bootstrap interval over documents."""

    bucket: tuple[int, int]
    value: float
    interval: stats.Interval | None
    tokens: int


def _ratio(num, den, axis=-1):
    return np.sum(num, axis=axis) / np.maximum(np.sum(den, axis=axis), 1e-12)


def bucket_losses(nll: np.ndarray, tokens: np.ndarray, buckets: list[tuple[int, int]], n_resamples: int,
                  level: float, seed: int) -> list[BucketLoss | None]:
    """Per bucket (``None`` where no document has a target there): the ratio of the summed NLL to the summed
    tokens, its percentile interval resampling documents."""
    out: list[BucketLoss | None] = []
    for i, b in enumerate(buckets):
        use = tokens[:, i] > 0
        if not use.any():
            out.append(None)
            continue
        res = stats.bootstrap((nll[use, i], tokens[use, i]), _ratio, n_resamples=n_resamples, level=level, seed=seed)
        out.append(BucketLoss(b, res.point, res.interval, int(tokens[use, i].sum())))
    return out


def context_used(losses: list[BucketLoss | None]) -> int:
    """The end of the last bucket whose loss is below the lower end of the previous bucket's interval (the loss
    still falls there), or the first bucket's end when none is: how far back the model's loss keeps improving."""
    used = next((b.bucket[1] for b in losses if b is not None), 0)
    for prev, cur in zip(losses, losses[1:]):
        if prev is not None and cur is not None and prev.interval is not None and cur.value < prev.interval.low:
            used = cur.bucket[1]
    return used


def extrapolation(nll: np.ndarray, tokens: np.ndarray, buckets: list[tuple[int, int]], context: int,
                  n_resamples: int, level: float, seed: int) -> stats.BootstrapResult | None:
    """Loss per token in ``[C, factor * C)`` minus loss in the last bucket within ``C`` (``[C/2, C)``), with a
    percentile interval resampling documents (both terms from the same draws); ``None`` without targets in both."""
    far = [i for i, (a, _) in enumerate(buckets) if a >= context]
    near = [i for i, (_, b) in enumerate(buckets) if b == context]
    if not far or not near:
        return None
    f_nll, f_tok = nll[:, far].sum(1), tokens[:, far].sum(1)
    n_nll, n_tok = nll[:, near[0]], tokens[:, near[0]]
    use = (f_tok > 0) | (n_tok > 0)
    if f_tok[use].sum() == 0 or n_tok[use].sum() == 0:
        return None

    def statistic(a, b, c, d, axis=-1):
        return _ratio(a, b, axis) - _ratio(c, d, axis)

    return stats.bootstrap((f_nll[use], f_tok[use], n_nll[use], n_tok[use]), statistic, n_resamples=n_resamples,
                           level=level, seed=seed)


def restarted_windows(windows: list[Window], context: int) -> list[Window]:
    """The targets at positions ``context`` on of each window, in windows of ``context`` tokens that restart the
    context every ``context`` targets: the same targets, read with at most ``context`` tokens before them."""
    return [Window(w.doc_index, w.start + j, w.ids[j:j + context + 1])
            for w in windows for j in range(context, len(w.ids) - 1, context)]


def far_context_gain(long_nll: np.ndarray, short_nll: np.ndarray, tokens: np.ndarray, n_resamples: int,
                     level: float, seed: int) -> stats.BootstrapResult | None:
    """Per target past the training context: NLL read with the whole long window minus NLL of the same target read
    with at most the training context (:func:`restarted_windows`), token-weighted, resampling documents. Both
    terms score the same tokens, so the text's own variation cancels: negative, the model gains from what lies
    past its training context; positive, reading that far hurts it."""
    use = tokens > 0
    if not use.any():
        return None
    return stats.bootstrap((long_nll[use] - short_nll[use], tokens[use]), _ratio, n_resamples=n_resamples,
                           level=level, seed=seed)
