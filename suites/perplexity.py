"""Perplexity suite: held-out perplexity and bits-per-byte with bootstrap CIs over documents (docs/DESIGN.md §5).

Each held-out document is cut into non-overlapping windows of the evaluation context (consecutive windows
share one token, so every token after the document's leading end-of-text is predicted exactly once, with the
context available inside its window). Reported per split:

* ``ppl`` - token-weighted: exp(total NLL / total target tokens). The CI is a percentile bootstrap that
  resamples *documents* (tokens within a document are not independent). The suite's score (one per split);
  its per-document NLLs are stored as the metric's items so the board compares mixers on the same documents.
* ``bpb`` - bits per UTF-8 byte of the targets: total NLL / ln 2 / total bytes (end-of-text targets carry no
  bytes), comparable across tokenizers: the number that compares an external model (its own tokenizer,
  docs/huggingface.md) with mixbench's. A document scored whole counts its text's bytes; one scored in part (a
  ``max_windows`` subset) its targets' bytes, which for a tokenizer that puts a space before each text is one byte
  more per document. Its items are per-document bits per byte weighted by bytes, so two models (whatever their
  tokenizers) are compared on the same documents. For an external model, the per-token perplexities are marked
  unreliable: a token of another tokenizer is another unit.
* ``ppl_batch_mean`` - the ProtoT paper's variant: exp(mean over evaluation batches of the batch's token-mean
  NLL), with the windows batched in order; it depends on the batch size, which is part of the config.
* ``unigram_ppl`` - the same targets under the training split's add-one unigram distribution: a model that
  does not beat it has learned nothing from context. A property of the data (role ``baseline``): it never votes.
* ``ppl_pos_A-B`` - token-weighted perplexity of targets at window positions A..B (log2 buckets): how well a
  mixer uses longer context, and at contexts past training, how it extrapolates.
* ``nll_ctx_A-B`` - mean NLL per token of targets at positions A..B of :func:`context_buckets`: 0-3 (every token
  of the context within a 4-tap short convolution's reach), 4-63, and 64 on. Items per document, so the board
  pairs each mixer with the controls bucket by bucket and says whether any mixer gains more over the context-free
  control far back than near (docs/protocol.md, "Mixing beyond n-grams").

Split names map to metric prefixes: test -> "", test_ood -> "ood_", validation -> "val_",
validation_ood -> "val_ood_".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from harness.kit import IGNORE_INDEX, check_forward, position_buckets, window_nll
from harness.errors import ConfigError
from harness.registry import register_suite
from harness import stats
from harness.suite import ItemValues, Metric, Suite, SuiteContext, SuiteResult
from harness.values import option

SPLIT_PREFIX = {"test": "", "test_ood": "ood_", "validation": "val_", "validation_ood": "val_ood_"}


@dataclass(frozen=True)
class PerplexityConfig:
    splits: tuple[str, ...] = option(("test", "test_ood"), "held-out splits to score", choices=tuple(SPLIT_PREFIX))
    context: int = option(0, "evaluation context in tokens; 0 = the model's training context", min=0)
    batch_size: int = option(8, "windows per forward pass (ppl_batch_mean depends on it)", min=1)
    max_windows: int = option(0, "0 = every window of each split; otherwise an evenly spaced subset", min=0)
    bootstrap: int = option(1000, "bootstrap resamples of documents for the CIs", min=0)
    confidence: float = option(0.95, "level of the confidence intervals", min=0.5, lt=1)
    seed: int = option(0, "seed of the bootstrap resampling", min=0)

    def __post_init__(self) -> None:
        splits = (self.splits,) if isinstance(self.splits, str) else tuple(self.splits)
        object.__setattr__(self, "splits", splits)
        unknown = [s for s in splits if s not in SPLIT_PREFIX]
        if unknown or not splits:
            raise ConfigError(f"perplexity: splits must be among {', '.join(SPLIT_PREFIX)}, got {list(splits)}.")


@dataclass
class DocTotals:
    """Per-document sums, the unit the bootstrap resamples."""

    nll: np.ndarray
    unigram_nll: np.ndarray
    tokens: np.ndarray
    bytes: np.ndarray
    bucket_nll: np.ndarray  # [docs, buckets]
    bucket_tokens: np.ndarray
    context_nll: np.ndarray  # [docs, context buckets]
    context_tokens: np.ndarray
    batch_means: list[float] = field(default_factory=list)


#: the context-use buckets' edges: a short convolution of 4 taps sees the whole context of targets 0-3, and what
#: lies 64 or more tokens back is beyond any n-gram's reach
CONTEXT_EDGES = (0, 4, 64)


def context_buckets(context: int) -> list[tuple[int, int]]:
    """[0, 4), [4, 64), [64, context): the positions the context-use comparison reads (fewer at short contexts)."""
    edges = [e for e in CONTEXT_EDGES if e < context] + [context]
    return list(zip(edges, edges[1:]))


@register_suite("perplexity", config=PerplexityConfig)
class Perplexity(Suite):
    #: uses logits, generate and the context only: scores external transformers models too (docs/huggingface.md)
    external: ClassVar[bool] = True
    #: 128 evenly spaced windows per split (of ~400 test and ~800 OOD at the quick context): every window took
    #: 17 s per quick-preset model, a tenth of the quickstart's per-model budget, and 256 windows 10-17 s on one
    #: thread (models side by side)
    quickstart: ClassVar[dict[str, Any] | None] = {"max_windows": 128}
    headline: ClassVar[tuple[str, ...]] = ("ppl", "bpb", "ppl_batch_mean", "ood_ppl", "unigram_ppl", "nll_ctx_*")

    def validate(self, model) -> None:
        context = self.cfg.context or model.config.context
        model.check_context(context)
        check_forward(  # a context past training can need far more memory than the machine has (docs/memory.md)
            model, self.cfg.batch_size, context, f"perplexity: scoring {self.cfg.batch_size} windows of up to "
            f"{context:,} tokens at a time", "lower context or batch_size (--suite-config context=... batch_size=...)",
        )

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        context = self.cfg.context or model.config.context
        buckets = position_buckets(context)
        near_far = context_buckets(context)
        unigram = torch.as_tensor(ctx.corpus.unigram_logprobs(), dtype=torch.float64)
        byte_lengths = torch.as_tensor(ctx.corpus.tokenizer.token_byte_lengths(), dtype=torch.float64)
        metrics: list[Metric] = []
        info: dict = {"context": context, "buckets": buckets, "splits": {}}
        for split in self.cfg.splits:
            windows = ctx.corpus.eval_windows(split, context, self.cfg.max_windows or None)
            if not windows:
                continue
            docs = ctx.corpus.encode_split(split)
            totals = self._score(model, windows, len(docs), buckets, near_far, unigram, byte_lengths, ctx, split)
            whole = totals.tokens == np.array([len(d.ids) - 1 for d in docs])  # every target of the document scored
            totals.bytes[whole] = np.array([d.n_bytes for d in docs], dtype=np.float64)[whole]
            # an external model reading with mixbench's own tokenizer (a re-imported export) is compared per token
            own_tokenizer = getattr(model, "external", False) and not getattr(model, "mixbench_tokenizer", False)
            metrics += self._metrics(SPLIT_PREFIX[split], totals, [d.doc_id for d in docs], buckets, near_far,
                                     own_tokenizer)
            info["splits"][split] = {"windows": len(windows), "documents": int((totals.tokens > 0).sum())}
        if not metrics:
            raise ConfigError(f"perplexity: the splits {list(self.cfg.splits)} are empty for this data source.")
        return SuiteResult(metrics=metrics, info=info)

    @torch.no_grad()
    def _score(self, model, windows, n_docs, buckets, near_far, unigram, byte_lengths, ctx, split) -> DocTotals:
        nb, nc = len(buckets), len(near_far)
        totals = DocTotals(
            np.zeros(n_docs), np.zeros(n_docs), np.zeros(n_docs), np.zeros(n_docs),
            np.zeros((n_docs, nb)), np.zeros((n_docs, nb)), np.zeros((n_docs, nc)), np.zeros((n_docs, nc)),
        )
        bucket_of = torch.zeros(max(b for _, b in buckets), dtype=torch.long)
        for i, (a, b) in enumerate(buckets):
            bucket_of[a:b] = i
        context_of = torch.zeros(max(b for _, b in near_far), dtype=torch.long)
        for i, (a, b) in enumerate(near_far):
            context_of[a:b] = i
        pad_id = ctx.corpus.tokenizer.pad_id
        for chunk, nll, targets in window_nll(model, windows, self.cfg.batch_size, pad_id, f"perplexity {split}",
                                              ctx.progress):
            valid = targets != IGNORE_INDEX
            safe_targets = targets.clamp(min=0)
            totals.batch_means.append(float(nll[valid].mean()))
            uni = -unigram[safe_targets] * valid
            nbytes = byte_lengths[safe_targets] * valid
            positions = bucket_of[: targets.shape[1]].expand_as(targets)
            reach = context_of[: targets.shape[1]].expand_as(targets)
            for row, w in enumerate(chunk):
                d = w.doc_index
                keep = valid[row]
                totals.nll[d] += float(nll[row][keep].sum())
                totals.unigram_nll[d] += float(uni[row].sum())
                totals.tokens[d] += int(keep.sum())
                totals.bytes[d] += float(nbytes[row].sum())
                np.add.at(totals.bucket_nll[d], positions[row][keep].numpy(), nll[row][keep].numpy())
                np.add.at(totals.bucket_tokens[d], positions[row][keep].numpy(), 1)
                np.add.at(totals.context_nll[d], reach[row][keep].numpy(), nll[row][keep].numpy())
                np.add.at(totals.context_tokens[d], reach[row][keep].numpy(), 1)
        return totals

    def _metrics(self, prefix: str, t: DocTotals, doc_ids: list[str], buckets, near_far,
                 external: bool) -> list[Metric]:
        docs = np.flatnonzero(t.tokens > 0)
        n_tokens = int(t.tokens.sum())
        cfg = self.cfg

        per_token = (None if not external else
                     "per-token perplexity of an external model's own tokenizer: compare it with other models on bpb")

        def ratio_metric(name: str, num: np.ndarray, den: np.ndarray, transform, unit: str, role: str,
                         n: int = n_tokens, items: str = "", unreliable: str | None = per_token,
                         positions: tuple[int, int] | None = None) -> Metric:
            """``items``: the per-document values' scale, "" for none."""
            def statistic(num_s, den_s, axis=-1):
                return transform(np.sum(num_s, axis=axis) / np.maximum(np.sum(den_s, axis=axis), 1e-12))

            use = docs[den[docs] > 0]
            res = stats.bootstrap((num[use], den[use]), statistic, n_resamples=cfg.bootstrap,
                                  level=cfg.confidence, seed=cfg.seed)
            per_doc = None
            if items:  # the per-document ratio weighted by its denominator: the metric is a monotone function of
                # their weighted mean (exp for ppl: mean NLL per token; / ln 2 for bpb: NLL per byte)
                per_doc = ItemValues(tuple(doc_ids[d] for d in use), tuple(num[use] / den[use]), tuple(den[use]),
                                     unit=items)
            return Metric(prefix + name, res.point, False, role=role, interval=res.interval,
                          n=n, unit=unit, items=per_doc, unreliable=unreliable, positions=positions)

        out = [
            ratio_metric("ppl", t.nll, t.tokens, np.exp, "perplexity", "score", items="nats/token"),
            ratio_metric("bpb", t.nll, t.bytes, lambda x: x / math.log(2), "bits/byte", "diagnostic",
                         n=int(t.bytes[docs].sum()), items="bits/byte", unreliable=None),
            Metric(prefix + "ppl_batch_mean", float(np.exp(np.mean(t.batch_means))), False, n=n_tokens,
                   unit="perplexity", unreliable=per_token),
            ratio_metric("unigram_ppl", t.unigram_nll, t.tokens, np.exp, "perplexity", "baseline"),
        ]
        for i, (a, b) in enumerate(buckets):
            if t.bucket_tokens[docs, i].sum() > 0:
                out.append(ratio_metric(f"ppl_pos_{a}-{b - 1}", t.bucket_nll[:, i], t.bucket_tokens[:, i], np.exp,
                                        "perplexity", "diagnostic", n=int(t.bucket_tokens[:, i].sum())))
        for i, (a, b) in enumerate(near_far):
            if t.context_tokens[docs, i].sum() > 0:
                out.append(ratio_metric(f"nll_ctx_{a}-{b - 1}", t.context_nll[:, i], t.context_tokens[:, i],
                                        lambda x: x, "nats/token", "diagnostic", n=int(t.context_tokens[:, i].sum()),
                                        items="nats/token", positions=(a, b)))
        return out
