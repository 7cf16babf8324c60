"""The ``synthetic`` suite: zoology's MQAR and MAD-lab's six tasks, trained from scratch per mixer; accuracy with
Wilson intervals against decode state size (docs/synthetic.md).

For each task setting the suite generates seeded train / validation / test splits, trains a small model of the
mixer on the training split for each (learning rate, weight decay) of the grid, keeps the best by validation
accuracy and reports its test accuracy at the target positions. Metrics, per setting ``S`` of task ``K``:

* ``K/S/acc`` - test accuracy (role ``score``), Wilson interval over target positions, per-example items,
  ``chance`` = 1 / |tokens a target can be|, ``perfect`` = 1;
* ``K/S/state_floats`` - the model's decode state after the setting's input length (:meth:`Mixer.state_size`
  summed over layers; attention's KV cache grows with the length), role ``diagnostic``;
* ``K/S/extrap_xF_acc`` - MQAR's first setting tested at F times its length, for mixers that declare
  ``length_extrapolation`` (diagnostic: it exists for some mixers only; named off the ``*/acc`` headline);
* state-tracking settings (docs/state_tracking.md) add ``K/S/final_acc``, the accuracy at the last position
  (the state after the whole sequence; Wilson over examples), and are each tested at F times their trained
  length L: ``K/S/extrap_xF_acc`` over the positions past L (prefix lengths never trained) and
  ``K/S/extrap_xF_final_acc`` at the last one. Mixers that declare no length extrapolation are not tested past L
  unless ``extrapolate_all`` asks for it (their model is then built for the longest length and trained at L);

and per task ``K/avg`` (``K/avg_3of5`` on part of a grid): the MAD score, the mean over the task's settings,
role ``diagnostic`` so that no setting votes twice on the board (docs/synthetic.md, "Votes").
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from harness.config import BackboneConfig, ModelSpec, as_tuple, to_dict
from harness.kit import Estimate, check_fits, check_training, validate_model
from harness.errors import ConfigError
from harness.registry import MIXERS, register_suite
from harness.suite import Metric, Suite, SuiteContext, SuiteResult
from suites.synthetic import site
from suites.synthetic.data import MAX_EXAMPLES, MAX_SEQ_LEN, check_size, check_split_tokens, split_rng, torch_seed
from suites.synthetic.plots import plot_accuracy_vs_state
from suites.synthetic.site import PLOT_NAME
from suites.synthetic.scoring import (
    ExampleScores, accuracy_metric, average_metric, end_scores, item_ids, position_hits, scaled_accuracy_metric,
    score_split, window_scores,
)
from suites.synthetic.state_tracking import draw_lengths, mask_lengths, parse_length_range
from suites.synthetic.tasks import DEFAULT_TASKS, TaskSpec, expand_tasks, get_task, parse_settings
from suites.synthetic.train import TrainSettings, sweep

GRIDS = ("base", "full")
LABELS = ("all", "end")


@dataclass(frozen=True)
class SyntheticConfig:
    """What runs and how it trains. The defaults are sized for a 2-core CPU; docs/synthetic.md says why each is
    what it is and how it relates to zoology's and MAD's protocols."""

    tasks: tuple[str, ...] = DEFAULT_TASKS  # tasks (or groups: recall, state-tracking) to run, in order
    grid: str = "base"  # base: MQAR (64,4) (128,8) (256,16) and each MAD baseline; full: MAD's sweep, zoology's 5
    settings: str = ""  # replaces the grid of the tasks it names: "mqar:seq_len=64,num_kv_pairs=4;compression:"
    d_model: int = 64  # width of the trained models
    n_layers: int = 2  # depth of the trained models
    batch_size: int = 32  # training batch (examples)
    max_steps: int = 1000  # optimizer steps per training run at most
    eval_every: int = 50  # steps between validation passes (and early-stop checks)
    stop_accuracy: float = 0.99  # validation accuracy that ends a run and the sweep (zoology's threshold)
    lrs: tuple[float, ...] = (3e-3, 1e-3)  # learning rates tried, in order
    weight_decays: tuple[float, ...] = (0.1,)  # weight decays tried with each learning rate
    warmup_frac: float = 0.05  # linear warm-up, then cosine decay to 10% of the peak
    grad_clip: float = 1.0  # gradient-norm clip
    valid_examples: int = 256  # examples of the validation split (sweep choice, early stop)
    test_examples: int = 1000  # examples of the test split (reported accuracy)
    eval_batch_size: int = 128  # batch of validation and test passes
    extrapolation: tuple[int, ...] = (2, 4)  # MQAR's first setting and every state-tracking setting tested at
    # these multiples of its length
    extrapolate_all: bool = False  # state tracking: test mixers that declare no length extrapolation past L too
    # Grazzi et al.'s protocol (docs/state_tracking.md): the defaults leave every run as it was
    min_len: int = 0  # state tracking: train, validate and test on lengths min_len..seq_len, drawn per example
    # (right-padded, masked); 0: every example at seq_len
    labels: str = "all"  # state tracking: "all" positions labelled, or "end" (the last position of each example)
    test_lengths: str = ""  # state tracking: "40-256": also test on lengths drawn per example in this range
    seeds: int = 1  # train this many model seeds per setting, keep the best by validation accuracy
    data_seed: int = 0  # seed of every generated split (the model seed is the run's)
    confidence: float = 0.95  # level of the Wilson intervals

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", expand_tasks(as_tuple(self.tasks, str, "synthetic: tasks")))
        object.__setattr__(self, "lrs", as_tuple(self.lrs, float, "synthetic: lrs"))
        object.__setattr__(self, "weight_decays", as_tuple(self.weight_decays, float, "synthetic: weight_decays"))
        object.__setattr__(self, "extrapolation", as_tuple(self.extrapolation, int, "synthetic: extrapolation"))
        if not self.tasks:
            raise ConfigError("synthetic: tasks must name at least one task.")
        for name in self.tasks:
            get_task(name)
        if len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(f"synthetic: tasks lists a task twice: {', '.join(self.tasks)}.")
        if self.grid not in GRIDS:
            raise ConfigError(f"synthetic: grid must be one of {', '.join(GRIDS)}, got '{self.grid}'.")
        for name in ("d_model", "n_layers", "batch_size", "max_steps", "eval_every", "valid_examples",
                     "test_examples", "eval_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"synthetic: {name} must be a positive integer, got {value!r}.")
        for name in ("valid_examples", "test_examples"):
            check_size("synthetic", name, getattr(self, name), MAX_EXAMPLES,
                       "the split is generated in memory at once (the sources test on at most 8,192 examples)")
        if not self.lrs or any(not (lr > 0 and math.isfinite(lr)) for lr in self.lrs):
            raise ConfigError(f"synthetic: lrs must be positive learning rates, got {self.lrs}.")
        if not self.weight_decays or any(not (wd >= 0 and math.isfinite(wd)) for wd in self.weight_decays):
            raise ConfigError(f"synthetic: weight_decays must be >= 0, got {self.weight_decays}.")
        if not 0 < self.stop_accuracy <= 1:
            raise ConfigError(f"synthetic: stop_accuracy must be in (0, 1], got {self.stop_accuracy}.")
        if not 0 <= self.warmup_frac < 1 or not self.grad_clip > 0:
            raise ConfigError("synthetic: warmup_frac must be in [0, 1) and grad_clip positive.")
        if any(f < 2 for f in self.extrapolation):
            raise ConfigError(f"synthetic: extrapolation factors must be integers >= 2, got {self.extrapolation}.")
        if not isinstance(self.extrapolate_all, bool):
            raise ConfigError(f"synthetic: extrapolate_all must be true or false, got {self.extrapolate_all!r}.")
        if isinstance(self.min_len, bool) or not isinstance(self.min_len, int) or self.min_len < 0 or \
                self.min_len == 1:
            raise ConfigError(f"synthetic: min_len must be 0 (off) or an integer >= 2, got {self.min_len!r}.")
        if self.labels not in LABELS:
            raise ConfigError(f"synthetic: labels must be one of {', '.join(LABELS)}, got {self.labels!r}.")
        parse_length_range(self.test_lengths, "test_lengths")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or not 1 <= self.seeds <= 16:
            raise ConfigError(f"synthetic: seeds must be an integer in 1..16, got {self.seeds!r}.")
        if not 0.5 <= self.confidence < 1:
            raise ConfigError(f"synthetic: confidence must be in [0.5, 1), got {self.confidence}.")
        stray = sorted(set(parse_settings(self.settings)) - set(self.tasks))
        if stray:
            raise ConfigError(f"synthetic: settings name {', '.join(stray)}, which tasks does not include.")
        for task, setting in self.plan():  # every setting builds (its own config validates it)
            self._check_tested_sizes(task, setting)

    def _check_tested_sizes(self, task: TaskSpec, setting: Any) -> None:
        """What a setting's own config cannot see: its validation and test splits, and the longer test sets of a
        setting tested past its length (MQAR's, state tracking's) against the bounds of suites/synthetic/data.py."""
        where = f"synthetic {task.name}/{task.label(setting)}"
        longest = setting.seq_len
        if task.name == "mqar" or task.state_tracking:
            longest *= max((1, *self.extrapolation))
        if task.state_tracking:
            longest = max(longest, self.test_range[1] if self.test_range else 0)
            if self.min_len > setting.seq_len:
                raise ConfigError(f"{where}: min_len ({self.min_len}) is above the trained length {setting.seq_len}.")
        check_size(where, "the longest tested length (seq_len x the largest extrapolation factor)", longest,
                   MAX_SEQ_LEN, "every test example is generated and scored at it (the sources' longest is 1,024)")
        check_split_tokens(where, "validation", self.valid_examples, setting.seq_len)
        check_split_tokens(where, "test", self.test_examples, longest)

    def plan(self) -> list[tuple[TaskSpec, Any]]:
        """(task, setting config) pairs in run order."""
        custom = parse_settings(self.settings)
        out = []
        for name in self.tasks:
            task = get_task(name)
            configs = [task.make(o) for o in custom[name]] if name in custom else task.settings(self.grid)
            labels = [task.label(c) for c in configs]
            if len(set(labels)) != len(labels):
                raise ConfigError(f"synthetic: task {name} lists one setting twice ({', '.join(labels)}).")
            out += [(task, c) for c in configs]
        return out

    @property
    def test_range(self) -> tuple[int, int] | None:
        return parse_length_range(self.test_lengths, "test_lengths")

    @property
    def grazzi(self) -> bool:
        """Whether any option of Grazzi et al.'s protocol is on (the runs then also report scaled accuracy)."""
        return bool(self.min_len or self.labels != "all" or self.test_lengths)

    def grid_points(self) -> list[tuple[float, float]]:
        return [(lr, wd) for lr in self.lrs for wd in self.weight_decays]

    def train_settings(self) -> TrainSettings:
        return TrainSettings(self.batch_size, self.max_steps, self.eval_every, self.stop_accuracy, self.warmup_frac,
                             self.grad_clip, self.eval_batch_size)


@dataclass
class SettingResult:
    """What one trained setting contributes to the metrics and the plot."""

    task: TaskSpec
    config: Any
    label: str
    scores: ExampleScores
    ids: tuple[str, ...]
    metrics: list[Metric]
    info: dict[str, Any]


@register_suite("synthetic", config=SyntheticConfig)
class Synthetic(Suite):
    version: ClassVar[int] = 2
    scope: ClassVar[str] = "mixer"
    headline: ClassVar[tuple[str, ...]] = ("mqar/*/acc", "*/acc", "*/avg", "*/avg_*of*")
    #: MQAR at (64, 4) and (128, 8), in-context recall at length 64 and memorization, at width 32 with 20 steps of
    #: 16 examples and one learning rate: a smoke run of the whole pipeline that fits the quickstart's budget
    #: (docs/synthetic.md, "Quickstart", has the measured time); its accuracies are near chance by design
    quickstart: ClassVar[dict[str, Any] | None] = {
        "tasks": ("mqar", "in-context-recall", "memorization"),
        "settings": "mqar:seq_len=64,num_kv_pairs=4,num_train_examples=2000;"
                    "mqar:seq_len=128,num_kv_pairs=8,num_train_examples=2000;"
                    "in-context-recall:seq_len=64,num_train_examples=2000;"
                    "memorization:",
        "d_model": 32, "batch_size": 16, "max_steps": 20, "eval_every": 10, "lrs": (3e-3,),
        "valid_examples": 32, "test_examples": 64, "extrapolation": (2,),
    }

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        """From a checkpoint: train fresh models of the checkpoint's mixer and config (its weights are not used;
        these tasks need models trained on them)."""
        result = self.run_mixer(model.spec.mixer, dict(model.spec.mixer_config), ctx)
        result.info["from_checkpoint"] = "the checkpoint's mixer and config; its weights are not used"
        return result

    def run_mixer(self, mixer: str, mixer_config: dict[str, Any], ctx: SuiteContext) -> SuiteResult:
        cfg: SyntheticConfig = self.cfg
        entry = MIXERS.get(mixer)
        entry.make_config(mixer_config)  # a bad mixer config fails before any data is generated
        extrapolates = bool(getattr(entry.cls, "length_extrapolation", False))
        device = torch.device(ctx.device)
        work = Path(ctx.work_dir)
        work.mkdir(parents=True, exist_ok=True)
        t_start = time.perf_counter()
        plan = cfg.plan()
        self._check_sizes(mixer, mixer_config, plan, device)
        results: list[SettingResult] = []
        for i, (task, setting) in enumerate(plan, 1):
            if ctx.progress:
                print(f"synthetic {mixer}: [{i}/{len(plan)}] {task.name}/{task.label(setting)}", file=sys.stderr,
                      flush=True)
            first_mqar = task.name == "mqar" and not any(r.task.name == "mqar" for r in results)
            if task.state_tracking:
                results.append(self._run_state_setting(mixer, mixer_config, task, setting, ctx, device,
                                                       extrapolates))
                continue
            results.append(self._run_setting(mixer, mixer_config, task, setting, ctx, device,
                                             extrapolate=first_mqar and extrapolates))
        metrics = [m for r in results for m in r.metrics] + self._averages(results)
        plot = plot_accuracy_vs_state(
            [{"mixer": mixer, "task": r.task.name, "label": r.label, "accuracy": r.scores.accuracy,
              "low": r.metrics[0].ci_low, "high": r.metrics[0].ci_high, "state_floats": r.info["state_floats"],
              "chance": r.info["chance"]} for r in results],
            work / PLOT_NAME, title=f"synthetic: {mixer}",
        )
        info = {
            "mixer": mixer, "mixer_config": to_dict(mixer_config), "config": to_dict(cfg),
            "length_extrapolation": extrapolates, "extrapolate_all": cfg.extrapolate_all, "device": str(device),
            "torch_threads": torch.get_num_threads(),
            "settings": [r.info for r in results], "wall_s": round(time.perf_counter() - t_start, 2),
        }
        return SuiteResult(metrics=metrics, plots=[plot], info=info)

    def _check_sizes(self, mixer: str, mixer_config: dict[str, Any], plan, device: torch.device) -> None:
        """Every setting's model, data and training step against the memory there is, from the numbers alone,
        before any data is generated or model built (docs/memory.md)."""
        cfg: SyntheticConfig = self.cfg
        for task, setting in plan:
            longest = setting.seq_len * max((1, *cfg.extrapolation))
            if task.state_tracking and cfg.test_range:
                longest = max(longest, cfg.test_range[1])
            examples = task.train_examples(setting) + cfg.valid_examples + cfg.test_examples
            what = f"synthetic {task.name}/{task.label(setting)}"
            # inputs and targets as int64 for every example (the extrapolation sets are test-sized, longer)
            data = 16 * (examples * setting.seq_len + len(cfg.extrapolation) * cfg.test_examples * longest)
            check_fits(Estimate(data, f"{examples:,} examples of {setting.seq_len} tokens, inputs and targets"),
                       "cpu", f"{what}'s data", "lower num_train_examples, valid_examples or test_examples")
            backbone = BackboneConfig(cfg.d_model, self._depth(mixer), setting.seq_len, setting.vocab_size)
            validate_model(ModelSpec(mixer, dict(mixer_config), backbone))
            check_training(backbone, cfg.batch_size, device, f"{what}'s training")

    def _depth(self, mixer: str) -> int:
        """``n_layers`` rounded up to the mixer's depth multiple: a hybrid of period 4 trains 4 layers where the
        others train 2 (docs/hybrids.md)."""
        multiple = MIXERS.get(mixer).cls.depth_multiple
        return -(-self.cfg.n_layers // multiple) * multiple

    # ------------------------------------------------------------------------------------------- one setting
    def _run_setting(self, mixer: str, mixer_config: dict[str, Any], task: TaskSpec, setting: Any,
                     ctx: SuiteContext, device: torch.device, extrapolate: bool) -> SettingResult:
        cfg: SyntheticConfig = self.cfg
        t0 = time.perf_counter()
        label = task.label(setting)
        train, valid, test, best, tries = self._train(mixer, mixer_config, task, setting, ctx, device)
        scores = score_split(best.model.predict, test, cfg.eval_batch_size, device)
        ids = item_ids(test.fingerprint(), len(test))
        chance = task.chance(setting)
        state = int(best.model.lm.state_size(test.seq_len))
        prefix = f"{task.name}/{label}"
        metrics = [
            accuracy_metric(f"{prefix}/acc", scores, ids, chance, cfg.confidence,
                            role="diagnostic" if task.one_token_lookback else "score"),
            Metric(f"{prefix}/state_floats", float(state), False, unit="floats/sequence"),
        ]
        extrap: dict[str, Any] = {}
        if extrapolate:
            for factor in cfg.extrapolation:
                longer = type(setting)(**{**to_dict(setting), "seq_len": setting.seq_len * factor})
                data = task.split(longer, cfg.data_seed, "test", cfg.test_examples)
                ex_scores = score_split(best.model.predict, data, cfg.eval_batch_size, device)
                ex = accuracy_metric(f"{prefix}/extrap_x{factor}_acc", ex_scores, item_ids(data.fingerprint(), len(data)),
                                     chance, cfg.confidence, role="diagnostic")
                metrics.append(ex)
                extrap[f"x{factor}"] = {"seq_len": data.seq_len, "accuracy": ex.value,
                                        "state_floats": int(best.model.lm.state_size(data.seq_len))}
        info = {
            "task": task.name, "label": label, "config": to_dict(setting), "source": task.source,
            "train_examples": len(train), "valid_examples": len(valid), "test_examples": len(test),
            "input_length": test.seq_len, "targets": scores.n_targets, "accuracy": scores.accuracy,
            "chance": chance, "state_floats": state, "parameters": best.model.lm.num_parameters(),
            "chosen": best.summary(), "tries": tries, "history": best.history,
            "test_fingerprint": test.fingerprint(), "wall_s": round(time.perf_counter() - t0, 2),
        }
        if extrap:
            info["extrapolation"] = extrap
        return SettingResult(task, setting, label, scores, ids, metrics, info)

    def _train(self, mixer: str, mixer_config: dict[str, Any], task: TaskSpec, setting: Any, ctx: SuiteContext,
               device: torch.device, context: int | None = None, prepare=None):
        """Generate a setting's splits and train its model (the sweep, for each of ``cfg.seeds`` model seeds; the
        best by validation accuracy); ``context`` overrides the backbone's (the input length); ``prepare(data,
        split)`` rewrites a split (state tracking's per-example lengths and end labels)."""
        cfg: SyntheticConfig = self.cfg
        label = task.label(setting)
        splits = {name: task.split(setting, cfg.data_seed, name, n) for name, n in
                  (("train", task.train_examples(setting)), ("valid", cfg.valid_examples), ("test", cfg.test_examples))}
        if prepare is not None:
            splits = {name: prepare(data, name) for name, data in splits.items()}
        train, valid, test = splits["train"], splits["valid"], splits["test"]
        backbone = BackboneConfig(cfg.d_model, self._depth(mixer), context or test.seq_len, setting.vocab_size)
        spec = ModelSpec(mixer, dict(mixer_config), backbone)
        best, tries, per_seed = None, [], []
        for index in range(cfg.seeds):
            # seed 0 keeps the key of a one-seed run, so a run with seeds=1 trains exactly what it always did
            key = (task.name, to_dict(setting), int(ctx.seed)) + ((index,) if index else ())
            desc = f"{mixer} {task.name}/{label}" + (f" seed {index + 1}/{cfg.seeds}" if cfg.seeds > 1 else "")
            run, run_tries = sweep(spec, task.head, train, valid, cfg.grid_points(), cfg.train_settings(),
                                   torch_seed("init", *key), torch_seed("order", *key), device, desc, ctx.progress)
            per_seed.append({"seed_index": index, "val_accuracy": run.val_accuracy, "steps": run.steps})
            tries += [{**t, "seed_index": index} for t in run_tries] if cfg.seeds > 1 else run_tries
            if best is None or run.val_accuracy > best.val_accuracy:  # ties: the first seed
                best, chosen = run, index
            if run.val_accuracy >= cfg.stop_accuracy:  # as the sweep: no later seed can be chosen for more than
                break  # a tie at the stop threshold, so the remaining seeds are not trained (recorded below)
        if cfg.seeds > 1:
            tries.append({"best_of_seeds": per_seed, "chosen_seed_index": chosen, "seeds_trained": len(per_seed),
                          "selected_by": "validation accuracy (Grazzi et al. pick the best seed by test accuracy)"})
        return train, valid, test, best, tries

    def _run_state_setting(self, mixer: str, mixer_config: dict[str, Any], task: TaskSpec, setting: Any,
                           ctx: SuiteContext, device: torch.device, extrapolates: bool) -> SettingResult:
        """A state-tracking setting: trained at its length L (or at lengths ``min_len``..L), scored at every labelled
        position and at the end of each example, then at each extrapolation multiple past L and on the
        ``test_lengths`` range (docs/state_tracking.md, "Protocol" and "Grazzi et al.'s protocol")."""
        cfg: SyntheticConfig = self.cfg
        t0 = time.perf_counter()
        label = task.label(setting)
        L = setting.seq_len
        end_only = cfg.labels == "end"
        factors = cfg.extrapolation if (extrapolates or cfg.extrapolate_all) else ()
        test_range = cfg.test_range if (extrapolates or cfg.extrapolate_all) else None
        # a mixer without length extrapolation is built for the longest length it is tested at (and trained at L)
        longest = max([L * f for f in factors] + [test_range[1] if test_range else 0])
        context = longest if longest > L and not extrapolates else None

        def lengths(data, split: str, low: int, high: int):
            rng = split_rng(task.name, setting, cfg.data_seed, f"{split}/lengths{low}-{high}")
            return draw_lengths(rng, len(data), low, high)

        def prepare(data, split: str):
            if not cfg.min_len and not end_only:
                return data  # the default protocol: every example at L, every position labelled
            return mask_lengths(data, lengths(data, split, cfg.min_len, L) if cfg.min_len else None, end_only)

        train, valid, test, best, tries = self._train(mixer, mixer_config, task, setting, ctx, device, context,
                                                      prepare)
        chance = task.chance(setting)
        hits, mask = position_hits(best.model.predict, test, cfg.eval_batch_size, device)
        scores = window_scores(hits, mask, 0, L)
        final = end_scores(hits, mask)
        ids = item_ids(test.fingerprint(), len(test))
        state = int(best.model.lm.state_size(L))
        prefix = f"{task.name}/{label}"
        metrics = [
            accuracy_metric(f"{prefix}/acc", scores, ids, chance, cfg.confidence),
            accuracy_metric(f"{prefix}/final_acc", final, ids, chance, cfg.confidence, role="diagnostic"),
            Metric(f"{prefix}/state_floats", float(state), False, unit="floats/sequence"),
        ]
        if cfg.grazzi:
            metrics.append(scaled_accuracy_metric(f"{prefix}/final_scaled", final, ids, chance, cfg.confidence))
        curves = {"x1": _curve(hits, mask)}
        extrap: dict[str, Any] = {}
        for factor in factors:
            longer = type(setting)(**{**to_dict(setting), "seq_len": L * factor})
            data = task.split(longer, cfg.data_seed, "test", cfg.test_examples)
            if end_only:
                data = mask_lengths(data, None, True)
            ex_hits, ex_mask = position_hits(best.model.predict, data, cfg.eval_batch_size, device)
            ex_ids = item_ids(data.fingerprint(), len(data))
            past = accuracy_metric(f"{prefix}/extrap_x{factor}_acc", window_scores(ex_hits, ex_mask, L, L * factor),
                                   ex_ids, chance, cfg.confidence, role="diagnostic")
            last = accuracy_metric(f"{prefix}/extrap_x{factor}_final_acc",
                                   window_scores(ex_hits, ex_mask, L * factor - 1, L * factor), ex_ids, chance,
                                   cfg.confidence, role="diagnostic")
            metrics += [past, last]
            curves[f"x{factor}"] = _curve(ex_hits, ex_mask)
            extrap[f"x{factor}"] = {"seq_len": data.seq_len, "accuracy_past_L": past.value,
                                    "final_accuracy": last.value,
                                    "state_floats": int(best.model.lm.state_size(data.seq_len))}
        ranged: dict[str, Any] = {}
        if test_range:
            low, high = test_range
            longer = type(setting)(**{**to_dict(setting), "seq_len": high})
            data = task.split(longer, cfg.data_seed, "test", cfg.test_examples)
            data = mask_lengths(data, lengths(data, "test", low, high), True)
            r_hits, r_mask = position_hits(best.model.predict, data, cfg.eval_batch_size, device)
            r_ids, r_end = item_ids(data.fingerprint(), len(data)), end_scores(r_hits, r_mask)
            name = f"{prefix}/len{low}to{high}_final"
            metrics += [accuracy_metric(f"{name}_acc", r_end, r_ids, chance, cfg.confidence, role="diagnostic"),
                        scaled_accuracy_metric(f"{name}_scaled", r_end, r_ids, chance, cfg.confidence)]
            ranged = {"lengths": [low, high], "final_accuracy": r_end.accuracy, "labels": "end",
                      "test_fingerprint": data.fingerprint()}
        info = {
            "task": task.name, "label": label, "config": to_dict(setting), "source": task.source,
            "train_examples": len(train), "valid_examples": len(valid), "test_examples": len(test),
            "input_length": L, "targets": scores.n_targets, "accuracy": scores.accuracy,
            "final_accuracy": final.accuracy, "chance": chance, "state_floats": state,
            "parameters": best.model.lm.num_parameters(), "chosen": best.summary(), "tries": tries,
            "history": best.history, "test_fingerprint": test.fingerprint(),
            "position_accuracy": curves, "model_context": context or L,
        }
        if cfg.grazzi or cfg.seeds > 1:
            info["protocol"] = {"train_lengths": [cfg.min_len or L, L], "labels": cfg.labels,
                                "test_lengths": list(test_range) if test_range else None, "seeds": cfg.seeds,
                                "padding": "right, token 0, no target (exact for causal models)"}
        if ranged:
            info["test_range"] = ranged
        if extrap:
            info["extrapolation"] = extrap
        elif cfg.extrapolation or cfg.test_range:
            info["extrapolation_skipped"] = (
                f"{mixer} declares no length extrapolation: not tested past its trained length {L} "
                "(extrapolate_all=true builds its model for the longest length and tests it there)")
        info["wall_s"] = round(time.perf_counter() - t0, 2)
        return SettingResult(task, setting, label, scores, ids, metrics, info)

    def _averages(self, results: list[SettingResult]) -> list[Metric]:
        cfg: SyntheticConfig = self.cfg
        out = []
        for name in cfg.tasks:
            mine = [r for r in results if r.task.name == name]
            if not mine:
                continue
            task = get_task(name)
            reference = {task.label(c) for c in task.settings(cfg.grid)}
            ran = {r.label for r in mine}
            metric = "avg" if ran == reference else f"avg_{len(ran & reference)}of{len(reference)}"
            if not ran <= reference:
                metric = f"avg_custom{len(ran)}"
            chance = sum(r.info["chance"] for r in mine) / len(mine)
            out.append(average_metric(f"{name}/{metric}", [(r.scores, r.ids) for r in mine], chance, cfg.confidence))
        return out

    @classmethod
    def site_section(cls, runs, kit) -> str:
        return site.site_section(runs, kit)


def _curve(hits, mask) -> list[float | None]:
    """Accuracy at each position over the examples (rounded), the per-position view of a state-tracking run."""
    counts = mask.sum(0)
    return [round(float(h) / float(c), 4) if c else None for h, c in zip(hits.sum(0), counts)]
