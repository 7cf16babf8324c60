"""The ``lm-eval`` suite: lm-eval's own zero/few-shot tasks (or local task YAMLs) through the registered
``mixbench`` lm-eval model (docs/DESIGN.md §5; docs/ARCHITECTURE.md "Suites").

``mixbench eval --suite lm-eval --checkpoint DIR --suite-config tasks=a,b include_path=DIR`` (or the
``mixbench lm-eval`` command this suite adds, or a plan listing ``lm-eval`` among its suites). Its runs are keyed
by the one identity function like every suite's; what the config points at joins the identity through
:meth:`LmEval.identity_parts`: the tasks' resolved configs and the bytes of their local data files, and
lm-eval's version. Re-running the same is a no-op; an edited task or data file is a new run. lm-eval's
per-document accuracies are stored as the metric's items, so the board compares mixers on the same documents.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from harness import stats
from harness.config import as_tuple
from harness.errors import ConfigError, MixbenchError
from harness.registry import register_suite
from harness.suite import ItemValues, Metric, Suite, SuiteCommand, SuiteContext, SuiteResult

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # object reprs in task configs differ between processes


@dataclass(frozen=True)
class LmEvalConfig:
    #: lm-eval task names (comma-separated on the CLI); the default is the bundled offline stand-in
    tasks: tuple[str, ...] = ("standin_sentiment_zeroshot",)
    include_path: str = ""  # a folder of task YAMLs (and their data), searched before the built-in tasks
    limit: float | None = None  # examples per task: a count (>= 1) or a fraction (< 1), as lm-eval takes it
    num_fewshot: int | None = None  # None = each task's own setting
    batch_size: int = 16  # sequences per forward pass
    bootstrap_iters: int = 1000  # lm-eval's bootstrap for the standard errors of non-mean metrics

    def __post_init__(self) -> None:
        tasks = tuple(t for t in as_tuple(self.tasks, str, "lm-eval tasks") if t)
        if not tasks:
            raise ConfigError("lm-eval: give at least one task name (--tasks a,b).")
        object.__setattr__(self, "tasks", tasks)
        if self.include_path and not Path(self.include_path).expanduser().is_dir():
            raise ConfigError(f"lm-eval: --include-path {self.include_path} is not a folder of task YAMLs.")
        if self.limit is not None and not self.limit > 0:
            raise ConfigError(f"lm-eval: --limit must be positive (a count or a fraction below 1), got {self.limit}.")
        if self.limit is not None and self.limit >= 1:
            object.__setattr__(self, "limit", int(self.limit))
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise ConfigError(f"lm-eval: --num-fewshot must be >= 0, got {self.num_fewshot}.")
        if self.batch_size < 1 or self.bootstrap_iters < 0:
            raise ConfigError("lm-eval: --batch-size must be >= 1 and bootstrap_iters >= 0.")


def _digest_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _local_paths(value: Any) -> list[Path]:
    """Existing local files among the strings of a task's ``dataset_path`` / ``dataset_kwargs`` (folders
    expanded to their files)."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in _local_paths(v)]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in _local_paths(v)]
    if not isinstance(value, str) or not value or "\n" in value:
        return []
    path = Path(value).expanduser()
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []


def task_fingerprint(manager, tasks: tuple[str, ...]) -> str:
    """sha256 over the resolved config of every task the names expand to (templates, metrics, ``!function``
    sources) and the bytes of the local data files they read: an edited task or data file is a new run."""
    loaded = manager.load(list(tasks))
    h = hashlib.sha256()
    for name in sorted(loaded["tasks"]):
        config = loaded["tasks"][name].config.to_dict()
        h.update(_ADDRESS.sub("", json.dumps({name: config}, sort_keys=True, default=str)).encode())
        for path in _local_paths([config.get("dataset_path"), config.get("dataset_kwargs")]):
            h.update(f"{path}|{_digest_file(path)}".encode())
    h.update(json.dumps(sorted(loaded["groups"])).encode())
    return h.hexdigest()


#: the suite's own offline stand-in tasks (never reported as lm-eval's or GLUE's): always searched
BUNDLED_TASKS = Path(__file__).parent / "tasks"


def _include_paths(cfg: LmEvalConfig) -> list[str]:
    paths = [str(BUNDLED_TASKS)]
    if cfg.include_path:
        paths.insert(0, str(Path(cfg.include_path).expanduser()))
    return paths


def task_manager(cfg: LmEvalConfig):
    """lm-eval's TaskManager; indexing the ~15k built-in tasks takes seconds, so it is skipped when the
    include paths (the user's and the bundled stand-ins) alone have every requested task."""
    from lm_eval.tasks import TaskManager

    local = TaskManager(include_path=_include_paths(cfg), include_defaults=False)
    if all(t in local.all_tasks for t in cfg.tasks):
        return local
    manager = TaskManager(include_path=_include_paths(cfg))
    unknown = [t for t in cfg.tasks if t not in manager.all_tasks]
    if unknown:
        close = difflib.get_close_matches(unknown[0], manager.all_tasks, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise MixbenchError(
            f"unknown lm-eval task(s) {', '.join(unknown)}.{hint} `lm-eval ls tasks` lists the built-in ones; "
            f"local task YAMLs need --include-path."
        )
    return manager


def metrics_from_results(results: dict[str, Any]) -> list[Metric]:
    """``task/metric`` (``task/metric[filter]`` for filters other than none) with a 95% normal interval from
    lm-eval's standard error when it has one, and per-document values when lm-eval logged them; groups'
    aggregate metrics are included."""
    out = []
    samples = results.get("samples") or {}
    for task, values in results["results"].items():
        better = results.get("higher_is_better", {}).get(task, {})
        n = results.get("n-samples", {}).get(task, {}).get("effective")
        for key, value in values.items():
            metric, _, filt = key.partition(",")
            if not filt or metric.endswith("_stderr") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            stderr = values.get(f"{metric}_stderr,{filt}")
            interval = None
            if isinstance(stderr, (int, float)) and not isinstance(stderr, bool):
                interval = stats.normal_interval(float(value), float(stderr))
            name = f"{task}/{metric}" if filt == "none" else f"{task}/{metric}[{filt}]"
            logged = samples.get(task) or []
            items = _items(logged, metric, filt, float(value))
            chance = constant_answer_rate(logged, metric, filt)
            out.append(Metric(name, float(value), bool(better.get(metric, True)), role="score", interval=interval,
                              n=n, items=items, chance=chance, perfect=None if chance is None else 1.0))
    return out


def constant_answer_rate(logged: list[dict[str, Any]], metric: str, filt: str) -> float | None:
    """The accuracy of always picking the same answer position, the best such position (the majority-class rate
    of the gold answers), for a multiple-choice accuracy: what a model that learned nothing about the task
    scores, and so the metric's chance level. None when the logged samples do not say the gold position (other
    metrics, generation tasks, several gold answers)."""
    if metric not in ("acc", "acc_norm"):
        return None
    golds = []
    for s in logged:
        if s.get("filter", "none") != filt:
            continue
        choices = [a[1] if isinstance(a, (list, tuple)) and len(a) > 1 else None for a in s.get("arguments") or []]
        target = s.get("target")
        if isinstance(target, int) and not isinstance(target, bool):
            gold = target
        elif isinstance(target, str):
            stripped = [c.strip() if isinstance(c, str) else None for c in choices]
            gold = stripped.index(target.strip()) if target.strip() in stripped else -1
        else:
            return None
        if not 0 <= gold < len(choices):
            return None
        golds.append(gold)
    if len(golds) < 2:
        return None
    return max(golds.count(j) for j in set(golds)) / len(golds)


def _items(logged: list[dict[str, Any]], metric: str, filt: str, value: float) -> ItemValues | None:
    """Per-document values of a mean metric (accuracy) from lm-eval's logged samples; None when the metric is
    not a plain mean of them (perplexities, F1, MCC): then the board compares the intervals."""
    rows = [(s.get("doc_id"), s.get(metric)) for s in logged if s.get("filter", "none") == filt]
    rows = [(d, v) for d, v in rows if d is not None and isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(rows) < 2 or abs(sum(v for _, v in rows) / len(rows) - value) > 1e-9:
        return None
    return ItemValues(tuple(str(d) for d, _ in rows), tuple(float(v) for _, v in rows))


@contextmanager
def _quiet_lm_eval(progress: bool) -> Iterator[None]:
    """lm-eval logs a warning per task with a custom loader, and draws progress bars of its own; only its errors
    matter to a mixbench run, and its bars follow the run's ``progress`` (tqdm reads ``TQDM_DISABLE``)."""
    import logging
    import os

    names = [n for n in logging.root.manager.loggerDict if n.startswith(("lm-eval", "lm_eval"))]
    loggers = [logging.getLogger(n) for n in ("lm-eval", "lm_eval", *names)]
    levels = [lg.level for lg in loggers]
    saved = os.environ.get("TQDM_DISABLE")
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    if not progress:
        os.environ["TQDM_DISABLE"] = "1"
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if saved is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = saved


@contextmanager
def _task_errors(cfg: LmEvalConfig) -> Iterator[None]:
    """What goes wrong inside a task's own files, as one sentence: a ``!function`` whose module or name cannot
    be imported (or does not parse), and data that is not reachable (datasets' ConnectionError /
    FileNotFoundError are OSErrors)."""
    try:
        yield
    except (ImportError, AttributeError, SyntaxError) as exc:
        raise MixbenchError(
            f"lm-eval could not load task(s) {', '.join(cfg.tasks)}: a function its YAML names cannot be imported "
            f"({type(exc).__name__}: {' '.join(str(exc).split())}); fix the task's `!function` line or the module "
            "it names (a .py file beside the YAML)."
        ) from exc
    except OSError as exc:
        raise MixbenchError(
            f"lm-eval could not load the data of {', '.join(cfg.tasks)} ({type(exc).__name__}: {exc}); offline, "
            f"built-in tasks that download from the hub fail: copy the task YAML, point it at local files and pass "
            f"--include-path."
        ) from exc


@register_suite("lm-eval", config=LmEvalConfig)
class LmEval(Suite):
    """lm-eval tasks on a checkpoint; every metric lm-eval reports is a score (normal intervals from its standard
    errors), with per-document values where lm-eval logs them."""

    #: uses logits, generate and the context only: scores external transformers models too (docs/huggingface.md)
    external: ClassVar[bool] = True
    version: ClassVar[int] = 3  # 3: multiple-choice accuracies carry their chance level (the constant-answer rate)
    #: the bundled zero-shot stand-in task (sentiment reviews, two choices), its first 500: ~4 s per model
    quickstart: ClassVar[dict[str, Any] | None] = {"limit": 300}  # 500 examples: 7-11 s per model on one thread

    def validate(self, model) -> None:
        with _task_errors(self.cfg):
            task_manager(self.cfg)  # unknown tasks fail here, before any work

    def identity_parts(self) -> dict[str, Any]:
        import lm_eval

        with _task_errors(self.cfg), _quiet_lm_eval(progress=False):
            tasks_sha256 = task_fingerprint(task_manager(self.cfg), self.cfg.tasks)
        return {"tasks_sha256": tasks_sha256, "lm_eval": lm_eval.__version__}

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        import lm_eval

        from suites.lm_eval.model import MixbenchLM

        cfg = self.cfg
        with _task_errors(cfg):
            manager = task_manager(cfg)
        lm = MixbenchLM.wrap(model, ctx.corpus.tokenizer, ctx.device, cfg.batch_size, progress=ctx.progress)
        with _task_errors(cfg), _quiet_lm_eval(progress=ctx.progress):
            results = lm_eval.simple_evaluate(
                model=lm, tasks=list(cfg.tasks), num_fewshot=cfg.num_fewshot, limit=cfg.limit, task_manager=manager,
                bootstrap_iters=cfg.bootstrap_iters, log_samples=True,
            )
        info = {"lm_eval": {k: results.get(k) for k in ("configs", "versions", "n-shot", "n-samples", "higher_is_better")}}
        return SuiteResult(metrics=metrics_from_results(results), info=info)

    commands: ClassVar[tuple[SuiteCommand, ...]] = ()


def _configure(p) -> None:
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    p.add_argument("--include-path", default="", help="folder of task YAMLs searched before the built-in tasks")
    p.add_argument("--limit", default=None, help="examples per task: a count, or a fraction below 1")
    p.add_argument("--num-fewshot", default=None, help="few-shot examples (default: each task's own)")
    p.add_argument("--batch-size", default=None)
    p.add_argument("--device", default=None)
    p.add_argument("--force", action="store_true")
    p.add_argument("--skip-gate", action="store_true", help="score a mixer that fails the conformance gate (recorded)")


def _command(args) -> int:
    """``mixbench lm-eval``: the same as ``mixbench eval --suite lm-eval`` with the task options as flags."""
    from harness.kit import ResultsStore, evaluate_checkpoint

    overrides = {"include_path": args.include_path, "limit": args.limit, "num_fewshot": args.num_fewshot,
                 "batch_size": args.batch_size}
    # --tasks is always passed on, empty or not: `--tasks ""` must fail, never fall back to the default task
    overrides = {"tasks": args.tasks, **{k: v for k, v in overrides.items() if v not in (None, "")}}
    outcome = evaluate_checkpoint(args.checkpoint, "lm-eval", overrides, ResultsStore(args.results), args.device,
                                  force=args.force, skip_gate=args.skip_gate)
    if outcome.skipped:
        print(f"run {outcome.run_id} (lm-eval) is already in {args.results}; nothing to do (--force reruns).")
    else:
        print(f"run {outcome.run_id} (lm-eval) written to {args.results} in {outcome.seconds:.1f} s")
    return 0


LmEval.commands = (SuiteCommand("lm-eval", "score a checkpoint with lm-eval tasks (zero/few-shot)", _configure, _command),)
