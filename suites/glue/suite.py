"""The glue suite: fine-tune the pretrained backbone per task and report GLUE's metrics (docs/DESIGN.md §5).

Protocol per task:

1. A fixed random part of the training split (``dev_fraction``, at most ``max_dev_examples``) is held out.
   GLUE's test labels are hidden, so the validation split is what is reported; choosing hyper-parameters on it
   would inflate the numbers. The learning rate is chosen on the held-out part (first seed), never on validation.
2. Each seed fine-tunes a fresh copy of the backbone at the chosen rate (the first seed's grid run is reused)
   and predicts the validation split(s).
3. Metrics (x100, as GLUE reports them): MCC for CoLA, F1 and accuracy for MRPC/QQP, Pearson and Spearman for
   STS-B, accuracy on MNLI's matched and mismatched sets, accuracy elsewhere. The CI is a Student-t 95% interval
   over seeds; with one seed, a percentile bootstrap over evaluation examples (:mod:`harness.stats`).
   ``task/majority_acc`` is the accuracy of always predicting the training majority class: the floor a
   classifier must beat (role ``baseline``), and the ``chance`` level of the task's accuracy. Task metrics are
   the suite's scores; accuracies carry per-example correctness as items, so mixers are compared on the same
   examples.
4. Averages, GLUE's way: a task's score is the mean of its metrics (F1/acc, Pearson/Spearman and MNLI m/mm
   averaged within the task), the average is the mean of task scores. It is computed per family over the tasks
   that ran (at least two) and named by how many (``glue/avg`` for all nine, ``glue/avg_3of9`` otherwise);
   the stand-ins get their own ``standin/avg``, never a GLUE average.
"""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from harness.errors import ConfigError, MixbenchError
from harness.registry import register_suite
from harness import stats
from harness.stats import Interval
from harness.suite import ItemValues, Metric, Suite, SuiteContext, SuiteResult
from suites.glue.config import GlueConfig
from suites.glue.finetune import Encoded, encode, fine_tune, predict
from suites.glue.loading import Example, load_task
from suites.glue.metrics import METRICS
from suites.glue.tasks import GLUE, SPLIT_SUFFIX, STANDIN, TASKS, TaskSpec, average_name, headline_metrics

SCALE = 100.0  # GLUE reports every metric x100
UNIT = "x100"


@dataclass
class TaskOutcome:
    spec: TaskSpec
    per_seed: list[dict[str, float]]  # reported metric -> value, one dict per seed
    replicates: dict[str, np.ndarray] | None  # reported metric -> bootstrap values (single seed only)
    n: dict[str, int]  # reported metric -> evaluation examples
    majority: dict[str, tuple[float, int]]  # task/majority_acc[_split] -> (value, n); classification only
    items: dict[str, ItemValues]  # accuracy metric -> per-example correctness (mean over seeds)
    chance: dict[str, float]  # reported metric -> its chance level (majority rate for accuracies, 0 for MCC)

    def scores(self) -> np.ndarray:
        """GLUE's task score per seed: the mean of the task's metrics."""
        return np.array([np.mean(list(values.values())) for values in self.per_seed])

    def score_replicates(self) -> np.ndarray | None:
        return None if self.replicates is None else np.mean(list(self.replicates.values()), axis=0)


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def _interval(values: np.ndarray, replicates: np.ndarray | None, level: float = 0.95) -> tuple[float, Interval | None]:
    """Over seeds a Student-t interval of the mean; with one seed a percentile bootstrap over examples."""
    if len(values) > 1:
        return float(np.mean(values)), stats.t_interval(list(values), level)
    value = float(values[0])
    return value, None if replicates is None else stats.percentile_interval(replicates, level)


def _example_ids(split: str, examples: list[Example]) -> tuple[str, ...]:
    """Ids that join the same evaluation example across runs: split, position and a hash of its text."""
    texts = [f"{e.text_a}\x00{e.text_b}" for e in examples]
    return tuple(f"{split}:{i}:{zlib.crc32(t.encode()):08x}" for i, t in enumerate(texts))


@register_suite("glue", config=GlueConfig)
class Glue(Suite):
    #: one stand-in (sentiment, where a quick-preset model can beat the majority class), one learning rate and
    #: one seed, 500 training examples: the CI is a bootstrap over 400 evaluation examples (1000 and 500 took
    #: 12-22 s per model on one thread beside another model)
    quickstart: ClassVar[dict[str, Any] | None] = {
        "tasks": ("standin-sentiment",), "max_train_examples": 500, "epochs": 1, "lrs": (3e-3,), "seeds": (0,),
        "pooling": "mean", "max_eval_examples": 400,
    }
    headline: ClassVar[tuple[str, ...]] = headline_metrics()

    def validate(self, model) -> None:
        cfg = self.cfg
        model.check_context(cfg.max_length or model.config.context)
        glue_tasks = [t for t in cfg.tasks if TASKS[t].family == GLUE]
        if not glue_tasks:
            return
        if cfg.data_dir and not Path(cfg.data_dir).expanduser().is_dir():
            raise ConfigError(
                f"glue: data_dir {cfg.data_dir} is not a folder; give GLUE's TSV download or parquet files."
            )
        if not cfg.data_dir and _offline():
            raise ConfigError(
                f"glue: {', '.join(glue_tasks)} need GLUE's data and the hub is off (HF_DATASETS_OFFLINE / "
                f"HF_HUB_OFFLINE); pass data_dir=FOLDER (GLUE's TSV download or parquet files) or run the "
                f"offline stand-ins (tasks=standin)."
            )

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        max_length = self.cfg.max_length or model.config.context
        outcomes: list[TaskOutcome] = []
        info: dict = {"max_length": max_length, "scale": UNIT, "lr_selection": "held-out part of train", "tasks": {}}
        for name in self.cfg.tasks:
            t0 = time.perf_counter()
            outcome, task_info = self._run_task(TASKS[name], model, ctx, max_length)
            info["tasks"][name] = {**task_info, "seconds": round(time.perf_counter() - t0, 2)}
            outcomes.append(outcome)
        metrics = [m for o in outcomes for m in self._task_metrics(o)] + self._averages(outcomes)
        return SuiteResult(metrics=metrics, info=info)

    # ------------------------------------------------------------------------------------------- one task
    def _run_task(self, spec: TaskSpec, model, ctx: SuiteContext, max_length: int) -> tuple[TaskOutcome, dict]:
        cfg = self.cfg
        data = load_task(spec, cfg.data_dir, cfg.hub_dataset)
        rng = np.random.default_rng([cfg.data_seed, zlib.crc32(spec.name.encode())])
        fit, dev = self._hold_out(spec, data.train, rng)
        evals = {split: self._subset(examples, rng) for split, examples in data.evals.items()}
        tokenizer, pad = ctx.corpus.tokenizer, ctx.corpus.tokenizer.pad_id
        fit_e, dev_e = (encode(x, tokenizer, max_length, spec.regression) for x in (fit, dev))
        eval_e = {split: encode(x, tokenizer, max_length, spec.regression) for split, x in evals.items()}
        run = partial(fine_tune, model, fit_e, spec.num_outputs, cfg=cfg, pad_id=pad, progress=ctx.progress)
        batch = 2 * cfg.batch_size  # no gradients at prediction time

        first = cfg.seeds[0]
        dev_scores: dict[str, float] = {}
        best, best_lr, best_score = None, cfg.lrs[0], -np.inf
        for lr in cfg.lrs:
            clf = run(lr=lr, seed=first, desc=f"{spec.name} lr={lr:g} seed={first}")
            score = 0.0
            if len(cfg.lrs) > 1:  # a single rate needs no selection
                dev_pred = predict(clf, dev_e, batch, pad)
                score = SCALE * float(np.mean([METRICS[m](dev_e.labels, dev_pred) for m in spec.metrics]))
                dev_scores[f"{lr:g}"] = score
            if score > best_score:
                best, best_lr, best_score = clf, lr, score
        predictions = []
        for seed in cfg.seeds:
            clf = best if seed == first else run(lr=best_lr, seed=seed, desc=f"{spec.name} lr={best_lr:g} seed={seed}")
            predictions.append({split: predict(clf, e, batch, pad) for split, e in eval_e.items()})

        majority = None if spec.regression else int(np.bincount(fit_e.labels, minlength=spec.num_outputs).argmax())
        outcome = self._outcome(spec, evals, eval_e, predictions, majority, rng)
        info = {
            "source": data.source,
            "skipped_rows": data.skipped,
            "examples": {"train_split": len(data.train), "fit": len(fit), "dev": len(dev)}
            | {s: len(x) for s, x in evals.items()},
            "truncated": {"fit": fit_e.truncated, "dev": dev_e.truncated} | {s: e.truncated for s, e in eval_e.items()},
            "dev_scores": dev_scores,
            "lr": best_lr,
            "majority_label": None if majority is None else spec.labels[majority],  # of the fit part; ties: lower id
            "per_seed": {str(seed): values for seed, values in zip(cfg.seeds, outcome.per_seed, strict=True)},
        }
        return outcome, info

    def _hold_out(self, spec: TaskSpec, train: list[Example], rng) -> tuple[list[Example], list[Example]]:
        cfg = self.cfg
        n_dev = min(cfg.max_dev_examples, max(1, round(cfg.dev_fraction * len(train))))
        if len(train) - n_dev < 1:
            raise MixbenchError(
                f"glue: {spec.name} has {len(train)} training example(s), too few to hold out a dev part."
            )
        perm = rng.permutation(len(train))
        fit = perm[n_dev:][: cfg.max_train_examples or None]
        return [train[i] for i in sorted(fit)], [train[i] for i in sorted(perm[:n_dev])]

    def _subset(self, examples: list[Example], rng) -> list[Example]:
        k = self.cfg.max_eval_examples
        if not k or k >= len(examples):
            return examples
        return [examples[i] for i in sorted(rng.choice(len(examples), k, replace=False))]

    def _outcome(self, spec, evals: dict[str, list[Example]], eval_e: dict[str, Encoded], predictions,
                 majority_label: int | None, rng) -> TaskOutcome:
        def column(m: str, split: str) -> str:
            return f"{spec.name}/{m}{SPLIT_SUFFIX[split]}"

        per_seed = [
            {column(m, split): SCALE * METRICS[m](e.labels, preds[split]) for split, e in eval_e.items()
             for m in spec.metrics}
            for preds in predictions
        ]
        n = {column(m, split): len(e) for split, e in eval_e.items() for m in spec.metrics}
        replicates = None
        if len(predictions) == 1 and self.cfg.bootstrap:
            replicates = {}
            for split, e in eval_e.items():
                draws = stats.resample_indices(len(e), self.cfg.bootstrap, rng)  # shared by the split's metrics
                y, p = e.labels, predictions[0][split]
                for m in spec.metrics:
                    replicates[column(m, split)] = SCALE * np.array([METRICS[m](y[d], p[d]) for d in draws])
        items, chance, majority = {}, {}, {}
        for split, e in eval_e.items():
            if "acc" in spec.metrics:
                correct = np.mean([preds[split] == e.labels for preds in predictions], axis=0)
                items[column("acc", split)] = ItemValues(_example_ids(split, evals[split]), tuple(SCALE * correct))
            if "mcc" in spec.metrics:
                chance[column("mcc", split)] = 0.0  # MCC's chance level by construction
            if majority_label is not None:
                rate = SCALE * float(np.mean(e.labels == majority_label))
                majority[column("majority_acc", split)] = (rate, len(e))
                if "acc" in spec.metrics:
                    chance[column("acc", split)] = rate
        return TaskOutcome(spec, per_seed, replicates, n, majority, items, chance)

    # ------------------------------------------------------------------------------------------- metrics
    def _task_metrics(self, o: TaskOutcome) -> list[Metric]:
        out = []
        for name in o.per_seed[0]:
            values = np.array([values[name] for values in o.per_seed])
            value, interval = _interval(values, None if o.replicates is None else o.replicates[name])
            out.append(Metric(name, value, True, role="score", interval=interval, n=o.n[name], unit=UNIT,
                              items=o.items.get(name), chance=o.chance.get(name), perfect=SCALE))
        for name, (value, n) in o.majority.items():
            out.append(Metric(name, value, True, role="baseline", n=n, unit=UNIT))
        return out

    def _averages(self, outcomes: list[TaskOutcome]) -> list[Metric]:
        """Family averages: derived from the task scores, which vote themselves, so the average is diagnostic."""
        out = []
        for family in (GLUE, STANDIN):
            group = [o for o in outcomes if o.spec.family == family]
            if len(group) < 2:
                continue
            scores = np.mean([o.scores() for o in group], axis=0)
            reps = [o.score_replicates() for o in group]
            replicates = None if any(r is None for r in reps) else np.mean(reps, axis=0)
            value, interval = _interval(scores, replicates)
            out.append(Metric(average_name(family, len(group)), value, True, interval=interval, n=len(group),
                              unit=UNIT, perfect=SCALE))
        return out
