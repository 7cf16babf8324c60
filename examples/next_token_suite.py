"""A worked example of a suite: top-1 next-token accuracy on held-out documents (docs/ARCHITECTURE.md, "Adding a
suite"). Load it with ``--plugin``::

    mixbench eval --suite example-next-token --checkpoint DIR --plugin examples.next_token_suite

What makes it a mixbench suite rather than a script, each point one the board relies on:

* a typed, frozen config whose limits live in ``option(...)`` (the parser checks them and names the field);
* ``version``, ``headline`` and ``quickstart`` declared on the class (a change of numbers bumps the version);
* every metric typed: a direction, a role (``score`` votes; the unigram model's accuracy is a ``baseline`` and
  never votes), an interval of a stated kind (a bootstrap over documents), and per-document ``items``, so the
  board compares two models on the same documents and a control that ignores its context is measured on the
  same scale. The context-free ``none`` mixer is a bigram model, and at preset tiny (32k training tokens) it
  wins this column: accuracy 0.053 [0.050, 0.055] against protot's 0.034 and attention's 0.031 (the unigram
  guess: 0.017), so the board does not let the column vote and marks both mixers' cells; next-token accuracy
  is a score only at a budget where mixing beats the bigram;
* the suite never writes to the store: it returns a ``SuiteResult`` and the core writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from harness import register_suite
from harness.stats import bootstrap
from harness.suite import ItemValues, Metric, Suite, SuiteContext, SuiteResult
from harness.values import option


@dataclass(frozen=True)
class NextTokenConfig:
    split: str = option("test", "held-out split to score", choices=("test", "test_ood"))
    context: int = option(0, "window length in tokens; 0 = the model's training context", min=0)
    max_windows: int = option(64, "evenly spaced windows scored; 0 = every window", min=0)
    bootstrap: int = option(1000, "resamples of documents for the intervals", min=0)


@register_suite("example-next-token", config=NextTokenConfig)
class NextTokenAccuracy(Suite):
    version: ClassVar[int] = 1
    headline: ClassVar[tuple[str, ...]] = ("acc", "unigram_acc")
    quickstart: ClassVar[dict[str, Any] | None] = None  # an example: not part of `mixbench quickstart`

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        cfg, corpus = self.cfg, ctx.corpus
        context = cfg.context or model.config.context
        windows = corpus.eval_windows(cfg.split, context, cfg.max_windows or None)
        unigram_guess = int(np.argmax(corpus.unigram_logprobs()))  # what a model without any input predicts
        docs = corpus.encode_split(cfg.split)
        hits: dict[int, int] = {}
        unigram_hits: dict[int, int] = {}
        tokens: dict[int, int] = {}
        model.eval()
        with torch.no_grad():
            for w in windows:
                if len(w.ids) < 2:
                    continue
                ids = torch.as_tensor(w.ids, dtype=torch.long, device=ctx.device).unsqueeze(0)
                logits, _ = model(ids[:, :-1])
                targets = ids[0, 1:]
                hits[w.doc_index] = hits.get(w.doc_index, 0) + int((logits[0].argmax(-1) == targets).sum())
                unigram_hits[w.doc_index] = unigram_hits.get(w.doc_index, 0) + int((targets == unigram_guess).sum())
                tokens[w.doc_index] = tokens.get(w.doc_index, 0) + len(targets)
        order = sorted(tokens)
        ids = tuple(docs[i].doc_id for i in order)
        weights = np.array([tokens[i] for i in order], dtype=np.float64)

        def accuracy(per_doc_hits: dict[int, int], name: str, role: str) -> Metric:
            per_doc = np.array([per_doc_hits[i] / tokens[i] for i in order])
            # token-weighted mean over documents, documents resampled (the items the board pairs on)
            result = bootstrap([per_doc, weights], _weighted_mean, n_resamples=cfg.bootstrap, seed=ctx.seed)
            return Metric(name, result.point, True, role=role, interval=result.interval, n=len(order),
                          unit="fraction of tokens", items=ItemValues(ids, tuple(per_doc), tuple(weights)),
                          perfect=1.0)

        return SuiteResult(
            metrics=[accuracy(hits, "acc", "score"), accuracy(unigram_hits, "unigram_acc", "baseline")],
            info={"windows": len(windows), "documents": len(order), "tokens": int(weights.sum()),
                  "unigram_guess": unigram_guess},
        )


def _weighted_mean(values: np.ndarray, weights: np.ndarray, axis: int = -1) -> np.ndarray:
    return (values * weights).sum(axis=axis) / weights.sum(axis=axis)
