"""The ``scaling`` suite: does the board's ordering hold as compute grows? (docs/scaling.md)

Per model, the suite scores held-out documents (:func:`harness.model.window_nll.document_nll` on ``split``) and
stores the token-weighted mean NLL ``loss`` with one item per document. Its cross-run step reads every such run in the
store, groups the models into ladders (:mod:`suites.scaling.ladder`) and, per ladder, fits each mixer's
``L(C) = E + A * C^-alpha`` against training FLOPs, finds where the fitted curves of every pair cross, and orders
the mixers with tie groups at every rung (:mod:`suites.scaling.analysis`). Each fitted mixer gets one aggregate
run on the row of its largest model, holding its fit (``alpha``, ``E``, the predicted loss at 10x the ladder's
largest compute) as diagnostics and the whole ladder's analysis in ``suite_info``; the site draws the ladder.

A ladder is trained by a plan with a ``ladder:`` key (``mixbench scaling`` runs the default one in
``suites/scaling/cpu-ladder.yaml``, ``plans/scaling-gpu.yaml`` is the paper-sized one); the runner trains only what
the store lacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from harness import stats
from harness.kit import check_forward, document_nll
from harness.errors import ConfigError
from harness.registry import register_suite
from harness.suite import AggregateRun, ItemValues, Metric, Suite, SuiteCommand, SuiteContext, SuiteResult
from harness.values import option
from suites.scaling.command import SCALING_COMMAND
from suites.scaling.ladder import LOSS_METRIC

SPLITS = ("test", "test_ood", "validation", "validation_ood")
#: windows per forward pass
EVAL_BATCH = 8


@dataclass(frozen=True)
class ScalingConfig:
    split: str = option("test", "held-out split whose documents every ladder point is scored on", choices=SPLITS)
    max_windows: int = option(128, "evenly spaced evaluation windows of the split (0 = all)", min=0)
    bootstrap: int = option(400, "bootstrap replicates of the fits (documents and ladder points resampled)", min=0)
    confidence: float = option(0.95, "level of every interval", min=0.5, lt=1)
    extrapolate: float = option(10.0, "the fits predict up to this multiple of the ladder's largest compute", min=1)
    seed: int = option(0, "seed of the bootstrap", min=0)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ConfigError(f"scaling: split must be one of {', '.join(SPLITS)}, got {self.split!r}.")


@register_suite("scaling", config=ScalingConfig)
class Scaling(Suite):
    version: ClassVar[int] = 1
    headline: ClassVar[tuple[str, ...]] = ("loss", "alpha", "E", "loss_at_*")
    commands: ClassVar[tuple[SuiteCommand, ...]] = (SCALING_COMMAND,)
    #: the quickstart's ladder: its models at a sixteenth and an eighth of the preset's budget too (20k, 41k and
    #: 328k tokens at preset quick, one backbone: one gate per mixer), so each mixer has three computes to fit and
    #: the crossovers say whether the quickstart's ordering is still moving with the budget. Half and a quarter made
    #: `make quickstart` 845 s cold of its 900 s budget; an eighth and a quarter cost 131 s of its wall time when it
    #: was 1,053 s cold with models side by side (docs/ARCHITECTURE.md, "Quickstart")
    quickstart: ClassVar[dict[str, Any] | None] = {"max_windows": 48, "bootstrap": 200}
    quickstart_budgets: ClassVar[tuple[float, ...]] = (0.0625, 0.125)

    def validate(self, model) -> None:
        check_forward(model, EVAL_BATCH, model.config.context, "scaling: scoring held-out windows",
                      "use a smaller model")

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        """The model's held-out loss per document: the unit every fit and ordering of its ladder resamples."""
        cfg = self.cfg
        windows = ctx.corpus.eval_windows(cfg.split, model.config.context, cfg.max_windows or None)
        docs = ctx.corpus.encode_split(cfg.split)
        if not windows:
            raise ConfigError(f"scaling: the split {cfg.split} is empty for this data source; choose another split.")
        nll, tokens = document_nll(model, windows, len(docs), EVAL_BATCH, ctx.corpus.tokenizer.pad_id,
                                   f"scaling {cfg.split}", ctx.progress)
        scored = np.flatnonzero(tokens > 0)
        res = stats.bootstrap((nll[scored], tokens[scored]),
                              lambda n, t, axis=-1: np.sum(n, axis=axis) / np.sum(t, axis=axis),
                              n_resamples=max(cfg.bootstrap, 100), level=cfg.confidence, seed=cfg.seed)
        items = ItemValues(tuple(docs[d].doc_id for d in scored), tuple(nll[scored] / tokens[scored]),
                           tuple(tokens[scored]))
        loss = Metric(LOSS_METRIC, res.point, False, role="diagnostic", interval=res.interval,
                      n=int(tokens.sum()), unit="nats/token", items=items)
        return SuiteResult(metrics=[loss], info={"split": cfg.split, "windows": len(windows),
                                                 "documents": int(scored.size), "context": model.config.context})

    def aggregate(self, store, progress: bool) -> list[AggregateRun]:
        """Fit every ladder in the store (see the module docstring); the core writes the runs."""
        from suites.scaling.aggregate import ladder_runs

        return ladder_runs(store, self.cfg, self.name, progress)

    @classmethod
    def site_section(cls, runs, kit) -> str:
        from suites.scaling.site import section

        return section(runs, kit)
