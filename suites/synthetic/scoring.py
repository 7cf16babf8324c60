"""Accuracy at target positions, per example and per setting, and the metrics built from it
(docs/synthetic.md, "Scoring").

A *predictor* maps a batch of inputs ``[B, T]`` and the mask of its target positions to the token it emits at
each masked position (row-major order): a trained :class:`suites.synthetic.train.TaskModel`, or in the tests a
hand-written oracle. An example's value is the fraction of its target positions predicted exactly, weighted by
its number of targets, so the weighted mean over examples is the accuracy over all target positions (MAD's and
zoology's token-level accuracy) and the board can pair mixers on the same examples.

The Wilson interval is over target positions. Targets of one example are not independent (a model that has
not found the pairs misses all of them), so for the many-target recall tasks it is narrower than a
per-example interval would be; the board's paired comparisons resample whole examples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from harness import stats
from harness.suite import ItemValues, Metric
from suites.synthetic.data import IGNORE, TaskData

Predictor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
UNIT = "accuracy at target positions"


@dataclass(frozen=True)
class ExampleScores:
    """Per example: target positions predicted exactly (``correct``) out of ``total``."""

    correct: np.ndarray
    total: np.ndarray

    @property
    def n_correct(self) -> int:
        return int(self.correct.sum())

    @property
    def n_targets(self) -> int:
        return int(self.total.sum())

    @property
    def accuracy(self) -> float:
        return self.n_correct / self.n_targets if self.n_targets else math.nan


def score_split(predict: Predictor, data: TaskData, batch_size: int, device: torch.device | str = "cpu",
                limit: int | None = None) -> ExampleScores:
    """Run ``predict`` over ``data`` (its first ``limit`` examples) and count exact matches per example."""
    hits, mask = position_hits(predict, data, batch_size, device, limit)
    return window_scores(hits, mask, 0, hits.shape[1])


def position_hits(predict: Predictor, data: TaskData, batch_size: int, device: torch.device | str = "cpu",
                  limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per position: whether ``predict`` emits the target (``hits``) and whether there is one (``mask``), both
    bool ``[N, T]`` (``N``: the first ``limit`` examples, all without one); one pass over ``data``, from which
    :func:`window_scores` cuts any range of positions."""
    n = len(data) if limit is None else min(limit, len(data))
    hits = np.zeros((n, data.seq_len), dtype=bool)
    mask = data.targets[:n] != IGNORE
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        x = torch.from_numpy(data.inputs[start:stop]).to(device)
        y = torch.from_numpy(data.targets[start:stop]).to(device)
        m = y != IGNORE
        pred = predict(x, m)
        if pred.shape != (int(m.sum()),):
            raise ValueError(f"a predictor returned {tuple(pred.shape)} predictions for {int(m.sum())} targets")
        block = torch.zeros_like(m)
        block[m] = pred.to(y.device) == y[m]
        hits[start:stop] = block.cpu().numpy()
    return hits, mask


def window_scores(hits: np.ndarray, mask: np.ndarray, start: int, stop: int) -> ExampleScores:
    """Per example, the targets of positions ``[start, stop)`` predicted exactly, out of those there are."""
    return ExampleScores(hits[:, start:stop].sum(1).astype(np.int64), mask[:, start:stop].sum(1).astype(np.int64))


def item_ids(fingerprint: str, n: int) -> tuple[str, ...]:
    """Ids of a split's examples: the split's content hash and the index, equal across mixers for equal data."""
    return tuple(f"{fingerprint[:12]}:{i}" for i in range(n))


def accuracy_metric(name: str, scores: ExampleScores, ids: Sequence[str], chance: float, level: float,
                    role: str = "score") -> Metric:
    keep = scores.total > 0
    items = ItemValues(tuple(np.asarray(ids)[keep]), tuple(scores.correct[keep] / scores.total[keep]),
                       tuple(scores.total[keep].astype(float)))
    return Metric(name, scores.accuracy, True, role=role,
                  interval=stats.wilson_interval(scores.n_correct, scores.n_targets, level),
                  n=scores.n_targets, unit=UNIT, items=items, chance=chance, perfect=1.0)


def average_metric(name: str, parts: Sequence[tuple[ExampleScores, Sequence[str]]], chance: float,
                   level: float) -> Metric:
    """The MAD score: the unweighted mean of a task's per-setting accuracies (role ``diagnostic``, see
    docs/synthetic.md "Votes").

    Its items are every setting's examples with weights scaled so that each setting's weights sum to one; their
    weighted mean is exactly the mean of the accuracies. Its interval is normal, from the settings' Wilson
    intervals put on one scale (:meth:`harness.stats.Interval.normal_stderr`), or the Wilson interval itself
    when there is one setting.
    """
    accs, ids, values, weights, stderrs = [], [], [], [], []
    for scores, part_ids in parts:
        keep = scores.total > 0
        accs.append(scores.accuracy)
        ids += list(np.asarray(part_ids)[keep])
        values += list(scores.correct[keep] / scores.total[keep])
        weights += list(scores.total[keep] / max(scores.n_targets, 1))
        iv = stats.wilson_interval(scores.n_correct, scores.n_targets, level)
        stderrs.append(None if iv is None else iv.normal_stderr())
    mean = float(np.mean(accs))
    if len(parts) == 1:
        interval = stats.wilson_interval(parts[0][0].n_correct, parts[0][0].n_targets, level)
    elif all(s is not None for s in stderrs):
        interval = stats.normal_interval(mean, math.sqrt(sum(s * s for s in stderrs)) / len(parts), level)
    else:
        interval = None
    return Metric(name, mean, True, role="diagnostic", interval=interval,
                  n=sum(p[0].n_targets for p in parts), unit=UNIT, items=ItemValues(tuple(ids), tuple(values), tuple(weights)),
                  chance=chance, perfect=1.0)


def end_scores(hits: np.ndarray, mask: np.ndarray) -> ExampleScores:
    """Per example, whether its last target position is predicted exactly: the label at the end of the sequence
    (at ``T - 1`` for examples of full length with every position labelled, as :func:`window_scores` there)."""
    n, T = mask.shape
    has = mask.any(1)
    last = T - 1 - np.argmax(mask[:, ::-1], axis=1)
    correct = np.where(has, hits[np.arange(n), last], False).astype(np.int64)
    return ExampleScores(correct, has.astype(np.int64))


def scaled_accuracy_metric(name: str, scores: ExampleScores, ids: Sequence[str], chance: float,
                           level: float) -> Metric:
    """Scaled accuracy ``(acc - chance) / (1 - chance)`` (Grazzi et al. 2025's table, after xLSTM's formal-language
    evaluation; docs/state_tracking.md): 0 is guessing, 1 perfect, negative below chance. The map is increasing and
    affine, so its interval is the accuracy's Wilson interval mapped bound by bound (same coverage); the items are
    the per-example accuracies mapped the same way."""
    scale = lambda a: (a - chance) / (1.0 - chance)  # noqa: E731
    keep = scores.total > 0
    raw = stats.wilson_interval(scores.n_correct, scores.n_targets, level)
    interval = None if raw is None else stats.Interval(scale(raw.low), scale(raw.high), raw.kind, raw.level)
    items = ItemValues(tuple(np.asarray(ids)[keep]), tuple(scale(scores.correct[keep] / scores.total[keep])),
                       tuple(scores.total[keep].astype(float)))
    return Metric(name, scale(scores.accuracy), True, role="diagnostic", interval=interval, n=scores.n_targets,
                  unit="scaled accuracy, (acc - chance) / (1 - chance)", items=items, chance=0.0, perfect=1.0)
