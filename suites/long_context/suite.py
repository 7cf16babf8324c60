"""The long-context suite: whether a mixer uses what lies far back (docs/long_context.md).

Two parts, both on the checkpoint as trained (scope ``model``):

* **Loss by position** (:mod:`suites.long_context.position`): the test split's documents in windows of ``factor``
  x the training context ``C``; ``nll_pos_A-B`` is the NLL per token of targets at window positions A..B, with a
  bootstrap interval over documents and per-document items (nats/token, weighted by tokens), so the board pairs
  each mixer with ``none`` bucket by bucket. Read-outs: ``context_used`` (the end of the last bucket whose loss is
  below the previous bucket's interval), ``extrapolation`` (loss in ``[C, factor*C)`` minus loss in
  ``[C/2, C)``, interval from the same document draws) and ``far_context_gain`` (the targets past ``C`` read with
  the whole window minus the same targets read with at most ``C`` tokens before them: the paired read-out, which
  the text's variation between buckets does not confound).
* **Retrieval** (:mod:`suites.long_context.tasks`, :mod:`suites.long_context.retrieval`): passkey, single and
  multi-key needles and two RULER-style tasks on a length x depth grid, scored by log-likelihood ranking over
  ``k`` candidates (chance ``1/k``), zero-shot (``zs_``) and after a short fine-tune of a copy on the tasks at
  the training length (``ft_``). Accuracy with Wilson intervals, items per example.

What votes: ``retrieval_zs`` and ``retrieval_ft`` (accuracy over every task's examples at lengths within the
training context, which every model reads, so every row has the same items). Everything else is a diagnostic:
the loss buckets are mostly won by modelling nearby tokens, which the context-free control does too, and the
columns past training exist only for mixers that extrapolate. The board's generic rules then drop a score column
at which every row is at chance or that no mixer wins against the controls.

Past the training context a model whose mixers do not all declare ``length_extrapolation`` (attention: its RoPE
positions past training were never seen) is refused by :meth:`MixerLM.check_context`; its metrics there are
reported with NaN and ``unreliable = "not measured: ..."`` (never left out). ``past_training=score`` scores it
anyway, as an explicit opt-in, and marks those metrics unreliable ("scored past training by opt-in"): shown, never
voting. The default is to refuse, because what such a number measures is the positional encoding's failure on
unseen positions, which the suite would otherwise report as if it were the mixer's.

The buckets do not declare :attr:`Metric.positions`: the board's context-use lines read the first position group
on the board, the perplexity suite's, and windows of another length would not pair with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from harness import stats
from harness.errors import ConfigError
from harness.kit import Window, bucket_nll, check_forward, document_nll
from harness.registry import register_suite
from harness.suite import ItemValues, Metric, Suite, SuiteContext, SuiteResult
from harness.values import option
from suites.long_context.position import (bucket_losses, context_used, extrapolation, far_context_gain,
                                           long_buckets, restarted_windows)
from suites.long_context.retrieval import candidate_loglik, correct, fine_tune
from suites.long_context.site import site_section
from suites.long_context.tasks import DEPTH_TASKS, TASKS, TaskSettings, Vocabulary, make_grid, min_length

PAST_TRAINING = ("refuse", "score")
#: the fine-tune's filler: this many stretches of this many tokens, evenly spaced over the training stream
FINETUNE_CHUNKS, FINETUNE_CHUNK = 32, 4096


@dataclass(frozen=True)
class LongContextConfig:
    factor: int = option(8, "loss-by-position windows are factor x the training context", min=2)
    max_windows: int = option(0, "0 = every window of the test split; otherwise an evenly spaced subset", min=0)
    batch_size: int = option(2, "windows per forward pass of the loss by position", min=1)
    bootstrap: int = option(1000, "bootstrap resamples of documents for the loss intervals", min=0)
    confidence: float = option(0.95, "level of the intervals (bootstrap and Wilson)", min=0.5, lt=1)
    seed: int = option(0, "seed of the task generator, the fine-tune and the bootstrap", min=0)
    past_training: str = option("refuse", "a model whose mixers do not declare length extrapolation (attention's "
                                "RoPE): refuse = not measured past training; score = scored, marked unreliable",
                                choices=PAST_TRAINING)
    tasks: tuple[str, ...] = option(TASKS, "retrieval tasks (empty: loss by position only)", choices=TASKS)
    lengths: tuple[float, ...] = option((0.5, 1.0, 2.0, 4.0), "retrieval lengths, as multiples of the training "
                                        "context (past 1: only models that may read them)", gt=0)
    depths: tuple[float, ...] = option((0.0, 0.25, 0.5, 0.75, 1.0), "depths of the fact in the filler", min=0, max=1)
    examples: int = option(4, "examples per task x length x depth cell", min=1)
    candidates: int = option(4, "k: candidate answers per example (chance 1/k)", min=2, max=10)
    key_digits: int = option(5, "digits of a key (one token each)", min=2, max=8)
    hops: int = option(1, "variable tracking: assignments after the first in each chain", min=1)
    finetune_steps: int = option(40, "steps of the task fine-tune at the training length; 0 = zero-shot only",
                                 min=0)
    finetune_batch: int = option(8, "examples per fine-tune step", min=1)
    finetune_lr: float = option(1e-3, "fine-tune learning rate", gt=0)
    batch_rows: int = option(16, "candidate rows per forward pass of the retrieval scoring", min=1)

    def __post_init__(self) -> None:
        for name in ("tasks", "lengths", "depths"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, (str, int, float)) else tuple(value))
        if self.tasks and (not self.lengths or not self.depths):
            raise ConfigError("long-context: retrieval needs at least one length and one depth.")
        if len(set(self.lengths)) != len(self.lengths) or len(set(self.depths)) != len(self.depths):
            raise ConfigError("long-context: lengths and depths must not repeat a value.")


def _refusal(model, length: int) -> str | None:
    """Why ``model`` may not read ``length`` tokens (:meth:`MixerLM.check_context`), or None."""
    try:
        model.check_context(length)
    except ConfigError as exc:
        return str(exc)
    return None


def _rate(values: np.ndarray, level: float) -> tuple[float, stats.Interval | None]:
    return (float(values.mean()) if len(values) else math.nan,
            stats.wilson_interval(int(values.sum()), len(values), level))


@register_suite("long-context", config=LongContextConfig)
class LongContext(Suite):
    headline: ClassVar[tuple[str, ...]] = ("retrieval_ft", "retrieval_zs", "far_context_gain", "extrapolation",
                                           "context_used", "nll_pos_*")
    #: a sanity read, not a measurement (docs/long_context.md, "Cost"): 8 windows of twice the context, passkey and
    #: multi-key needles at the training length and half depth, 8 examples each, zero-shot only; 3-6 s per
    #: quick-preset model on the 2-core CPU, where the default takes 1-6 minutes
    quickstart: ClassVar[dict[str, Any] | None] = {
        "factor": 2, "max_windows": 8, "tasks": ("passkey", "niah_multikey"), "lengths": (1.0,), "depths": (0.5,),
        "examples": 8, "finetune_steps": 0,
    }

    def _lengths(self, context: int) -> list[int]:
        return sorted({max(1, int(round(f * context))) for f in self.cfg.lengths})

    def validate(self, model) -> None:
        """Refuse, before any data is read, what would not fit the device's memory: the loss windows, the retrieval
        rows at the longest length the model will read and the fine-tune's batch (docs/memory.md)."""
        cfg, context = self.cfg, model.config.context
        window = cfg.factor * context if self._past(model, cfg.factor * context)[0] else context
        check_forward(model, cfg.batch_size, window, f"long-context: {cfg.batch_size} windows of {window:,} tokens",
                      "lower factor or batch_size (--suite-config ...)")
        if cfg.tasks:
            longest = max([n for n in self._lengths(context) if n <= context or self._past(model, n)[0]])
            rows = max(1, cfg.batch_rows // cfg.candidates) * cfg.candidates
            check_forward(model, rows, longest, f"long-context: {rows} candidate rows of {longest:,} tokens",
                          "lower batch_rows or lengths (--suite-config ...)")
        if cfg.tasks and cfg.finetune_steps:
            check_forward(model, cfg.finetune_batch, context, f"long-context: fine-tuning on {cfg.finetune_batch} "
                          f"examples of {context:,} tokens", "lower finetune_batch (--suite-config ...)", backward=True)

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        metrics, info = self._positions(model, ctx)
        if self.cfg.tasks:
            more, grid = self._retrieval(model, ctx)
            metrics += more
            info["retrieval"] = grid
        info["decode_state"] = self._decode_state(model, info)
        return SuiteResult(metrics=metrics, info=info)

    @staticmethod
    def _decode_state(model, info: dict[str, Any]) -> dict[str, int]:
        """Floats of decode state per sequence after each length this run read (the buckets' ends, the retrieval
        lengths), as the mixer counts them (``state_size``): the cost side of reading that far. The time per token
        is the throughput suite's to measure; the site links its page (docs/long_context.md)."""
        state_size = getattr(model, "state_size", None)  # a model without one (an external model) says nothing
        if state_size is None:
            return {}
        lengths = {int(b) for _, b in info.get("buckets") or []}
        lengths |= {int(c["length"]) for cells in ((info.get("retrieval") or {}).get("cells") or {}).values()
                    for c in cells if c.get("length")}
        return {str(n): int(state_size(n)) for n in sorted(lengths)}

    # ------------------------------------------------------------------ loss by position
    def _past(self, model, length: int) -> tuple[bool, str | None]:
        """(score it, the reason to mark it unreliable) for ``length`` tokens past the training context."""
        refusal = _refusal(model, length)
        if refusal is None:
            return True, None
        if self.cfg.past_training == "score":
            return True, "scored past training by opt-in (past_training=score): these positions were never trained"
        return False, f"not measured: {refusal}"

    def _positions(self, model, ctx: SuiteContext) -> tuple[list[Metric], dict[str, Any]]:
        cfg, context = self.cfg, model.config.context
        window = cfg.factor * context
        buckets = long_buckets(context, cfg.factor)
        windows = ctx.corpus.eval_windows("test", window, cfg.max_windows or None)
        if not windows:
            raise ConfigError("long-context: the test split is empty for this data source.")
        docs = ctx.corpus.encode_split("test")
        read, why = self._past(model, window)
        if not read:  # the same windows' first C targets: the same targets with the same context
            windows = [Window(w.doc_index, w.start, w.ids[:context + 1]) for w in windows]
        nll, tokens = bucket_nll(model, windows, len(docs), buckets, cfg.batch_size, ctx.corpus.tokenizer.pad_id,
                                 "long-context positions", ctx.progress)
        losses = bucket_losses(nll, tokens, buckets, cfg.bootstrap, cfg.confidence, cfg.seed)
        metrics = []
        for i, ((a, b), loss) in enumerate(zip(buckets, losses)):
            name = f"nll_pos_{a}-{b - 1}"
            past = a >= context
            if loss is None:
                reason = why if past and why else "not measured: no document reaches these positions"
                metrics.append(Metric(name, math.nan, False, unit="nats/token", unreliable=reason))
                continue
            use = np.flatnonzero(tokens[:, i] > 0)
            items = ItemValues(tuple(docs[d].doc_id for d in use), tuple(nll[use, i] / tokens[use, i]),
                               tuple(tokens[use, i]), unit="nats/token")
            metrics.append(Metric(name, loss.value, False, interval=loss.interval, n=loss.tokens, unit="nats/token",
                                  items=items, unreliable=why if past else None))
        used = context_used(losses)
        if not read:  # the loss still fell at the last bucket measured: how much further it would, nobody knows
            used_note = f"a lower bound, positions past training {why}" if used >= context else None
        else:
            used_note = why if used > context else None
        metrics.append(Metric("context_used", float(used), True, unit="tokens", unreliable=used_note))
        far = [j for j, (a, _) in enumerate(buckets) if a >= context]
        ext = extrapolation(nll, tokens, buckets, context, cfg.bootstrap, cfg.confidence, cfg.seed) if read else None
        if ext is None:
            metrics.append(Metric("extrapolation", math.nan, False, unit="nats/token",
                                  unreliable=why or "not measured: no targets past the training context"))
        else:
            metrics.append(Metric("extrapolation", ext.point, False, interval=ext.interval, unit="nats/token",
                                  n=int(tokens[:, far].sum()), unreliable=why))
        gain = None
        if read:  # the far targets again, each read with at most the training context before it
            short_nll, short_tokens = document_nll(model, restarted_windows(windows, context), len(docs),
                                                   cfg.batch_size, ctx.corpus.tokenizer.pad_id)
            long_nll, long_tokens = nll[:, far].sum(1), tokens[:, far].sum(1)
            assert np.array_equal(short_tokens, long_tokens), "restarted windows must hold the same targets"
            gain = far_context_gain(long_nll, short_nll, long_tokens, cfg.bootstrap, cfg.confidence, cfg.seed)
        if gain is None:
            metrics.append(Metric("far_context_gain", math.nan, False, unit="nats/token",
                                  unreliable=why or "not measured: no targets past the training context"))
        else:
            use = np.flatnonzero(long_tokens > 0)
            per_doc = (long_nll - short_nll)[use] / long_tokens[use]
            items = ItemValues(tuple(docs[d].doc_id for d in use), tuple(per_doc), tuple(long_tokens[use]))
            metrics.append(Metric("far_context_gain", gain.point, False, interval=gain.interval, unit="nats/token",
                                  n=int(long_tokens.sum()), items=items, unreliable=why))
        info = {"context": context, "factor": cfg.factor, "window": window, "buckets": buckets,
                "windows": len(windows), "documents": int((tokens.sum(1) > 0).sum()), "past_training": why or "read",
                "losses": [None if m is None else [m.value, *((m.interval.low, m.interval.high) if m.interval
                                                              else (None, None))] for m in losses]}
        return metrics, info

    # ------------------------------------------------------------------ retrieval
    def _retrieval(self, model, ctx: SuiteContext) -> tuple[list[Metric], dict[str, Any]]:
        cfg, context = self.cfg, model.config.context
        settings = TaskSettings(cfg.candidates, cfg.key_digits, cfg.hops)
        tokenizer = ctx.corpus.tokenizer
        vocab = Vocabulary(tokenizer, [d.ids for d in ctx.corpus.encode_split("test")])
        lengths = self._lengths(context)
        readable = {n: self._past(model, n) if n > context else (True, None) for n in lengths}
        need = {task: min_length(task, vocab, settings) for task in cfg.tasks}
        grid = [e for task in cfg.tasks for e in make_grid(
            vocab, vocab.filler, (task,), [n for n in lengths if readable[n][0] and n >= need[task]], cfg.depths,
            cfg.examples, cfg.seed, settings)]
        if not any(e.length <= context for e in grid):
            raise ConfigError(f"long-context: no retrieval task fits the lengths within the context {context} "
                              f"(they need {need} tokens); raise lengths or drop tasks.")
        phases = {"zs": model}
        info: dict[str, Any] = {"lengths": lengths, "depths": list(cfg.depths), "k": cfg.candidates, "cells": {},
                                "finetune": None}
        if cfg.finetune_steps:
            stream = ctx.corpus.train_tokens  # training text: the fine-tune never sees the scored filler
            starts = np.linspace(0, max(0, len(stream) - FINETUNE_CHUNK), FINETUNE_CHUNKS).astype(int)
            tune_vocab = Vocabulary(tokenizer, [stream[s:s + FINETUNE_CHUNK] for s in starts])
            wanted = cfg.finetune_steps * cfg.finetune_batch
            per_cell = -(-wanted // (len(cfg.tasks) * len(cfg.depths)))
            tune = make_grid(tune_vocab, tune_vocab.filler, [t for t in cfg.tasks if need[t] <= context], [context],
                             cfg.depths, per_cell, cfg.seed + 1, settings)
            phases["ft"] = fine_tune(model, tune, cfg.finetune_steps, cfg.finetune_batch, cfg.finetune_lr, cfg.seed,
                                     "long-context fine-tune", ctx.progress)
            info["finetune"] = {"steps": cfg.finetune_steps, "batch": cfg.finetune_batch, "lr": cfg.finetune_lr,
                                "examples": len(tune), "length": context}
        chance = 1.0 / cfg.candidates
        metrics: list[Metric] = []
        for phase, scorer in phases.items():
            hits = correct(grid, candidate_loglik(scorer, grid, cfg.batch_rows, f"long-context {phase}",
                                                  ctx.progress))
            ids = [e.id for e in grid]
            within = np.array([e.length <= context for e in grid])

            def acc(name: str, mask: np.ndarray, role: str = "diagnostic", unreliable: str | None = None,
                    items: bool = True) -> Metric:
                if not mask.any():
                    return Metric(name, math.nan, True, role=role, unit="accuracy", chance=chance, perfect=1.0,
                                  unreliable=unreliable or "not measured: no example of this task fits these lengths")
                value, interval = _rate(hits[mask], cfg.confidence)
                chosen = np.flatnonzero(mask)
                return Metric(name, value, True, role=role, interval=interval, n=int(mask.sum()), unit="accuracy",
                              chance=chance, perfect=1.0, unreliable=unreliable,
                              items=ItemValues(tuple(ids[i] for i in chosen), tuple(hits[chosen])) if items else None)

            metrics.append(acc(f"retrieval_{phase}", within, role="score"))
            for task in cfg.tasks:
                metrics.append(acc(f"{phase}_{task}", within & np.array([e.task == task for e in grid])))
            for n in lengths:
                read, why = readable[n]
                name = f"{phase}_L{n}"
                if not read:
                    metrics.append(Metric(name, math.nan, True, unit="accuracy", chance=chance, perfect=1.0,
                                          unreliable=why))
                    continue
                metrics.append(acc(name, np.array([e.length == n for e in grid]), unreliable=why))
            cells = info["cells"].setdefault(phase, [])
            for task in cfg.tasks:
                for n in lengths:
                    depths = cfg.depths if task in DEPTH_TASKS else (None,)
                    for depth in depths:
                        mask = np.array([e.task == task and e.length == n and e.depth == depth for e in grid])
                        value, interval = _rate(hits[mask], cfg.confidence) if mask.any() else (math.nan, None)
                        short = (f"not measured: a {task} example needs {need[task]} tokens"
                                 if n < need[task] else None)
                        cells.append({"task": task, "length": n, "depth": depth, "n": int(mask.sum()),
                                      "accuracy": None if math.isnan(value) else value,
                                      "interval": None if interval is None else [interval.low, interval.high],
                                      "note": short or readable[n][1]})
        return metrics, info

    @classmethod
    def site_section(cls, runs, kit) -> str:
        return site_section(runs, kit)
