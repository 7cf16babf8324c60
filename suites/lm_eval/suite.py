"""``mixbench lm-eval``: run ``lm_eval.simple_evaluate`` on a checkpoint and record it in the results store.

lm-eval's own cache is keyed by the request, not the model, so a retrained checkpoint at the same path would
reuse stale answers. Here a run's id is a content hash of the checkpoint's weight hash, its tokenizer, the
task names, the tasks' resolved configs and local data files, and the settings that change answers (limit,
few-shot count, bootstrap iterations, lm-eval version). Re-running the same is a no-op; new weights or edited
tasks are a new run. Batch size and device are provenance, not identity.

Zero/few-shot lm-eval scores are recorded under the suite name ``lm-eval``, apart from the fine-tuned glue suite.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checkpoint import load_checkpoint
from harness.config import content_hash, to_dict
from harness.errors import ConfigError, MixbenchError
from harness.evaluate import EvalOutcome, model_manifest
from harness.provenance import provenance
from harness import stats
from harness.results import ResultsStore
from harness.suite import Metric, SuiteResult

SUITE = "lm-eval"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # object reprs in task configs differ between processes


@dataclass(frozen=True)
class LmEvalConfig:
    tasks: tuple[str, ...]
    include_path: str = ""  # a folder of task YAMLs (and their data), searched before the built-in tasks
    limit: float | None = None  # examples per task: a count (>= 1) or a fraction (< 1), as lm-eval takes it
    num_fewshot: int | None = None  # None = each task's own setting
    batch_size: int = 16
    bootstrap_iters: int = 1000  # lm-eval's bootstrap for the standard errors of non-mean metrics

    def __post_init__(self) -> None:
        tasks = tuple(t.strip() for t in self.tasks if t.strip())
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


def run_key(weights_sha256: str, tokenizer_sha256: str, tasks_sha256: str, cfg: LmEvalConfig) -> dict[str, Any]:
    """What defines the answers of an lm-eval run (see the module docstring)."""
    import lm_eval

    return {
        "kind": SUITE,
        "weights_sha256": weights_sha256,
        "tokenizer_sha256": tokenizer_sha256,
        "tasks": sorted(cfg.tasks),
        "tasks_sha256": tasks_sha256,
        "limit": cfg.limit,
        "num_fewshot": cfg.num_fewshot,
        "bootstrap_iters": cfg.bootstrap_iters,
        "lm_eval": lm_eval.__version__,
    }


def task_manager(cfg: LmEvalConfig):
    """lm-eval's TaskManager; indexing the ~15k built-in tasks takes seconds, so it is skipped when the
    include path alone has every requested task."""
    from lm_eval.tasks import TaskManager

    if cfg.include_path:
        local = TaskManager(include_path=str(Path(cfg.include_path).expanduser()), include_defaults=False)
        if all(t in local.all_tasks for t in cfg.tasks):
            return local
    manager = TaskManager(include_path=str(Path(cfg.include_path).expanduser()) if cfg.include_path else None)
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
    lm-eval's standard error when it has one; groups' aggregate metrics are included."""
    out = []
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
            out.append(Metric(name, float(value), bool(better.get(metric, True)), role="score", interval=interval, n=n))
    return out


@contextmanager
def _data_errors(cfg: LmEvalConfig) -> Iterator[None]:
    """datasets' ConnectionError / FileNotFoundError (OSErrors) mean a task's data is not reachable."""
    try:
        yield
    except OSError as exc:
        raise MixbenchError(
            f"lm-eval could not load the data of {', '.join(cfg.tasks)} ({type(exc).__name__}: {exc}); offline, "
            f"built-in tasks that download from the hub fail: copy the task YAML, point it at local files and pass "
            f"--include-path."
        ) from exc


def run_lm_eval(
    checkpoint: Path | str, cfg: LmEvalConfig, store: ResultsStore, device: str = "cpu", force: bool = False
) -> EvalOutcome:
    """Evaluate ``checkpoint`` on ``cfg.tasks`` with lm-eval unless the store already has this exact run."""
    ckpt = load_checkpoint(checkpoint)
    manager = task_manager(cfg)
    with _data_errors(cfg):
        tasks_sha256 = task_fingerprint(manager, cfg.tasks)
    key = run_key(ckpt.meta["weights_sha256"], _digest_file(ckpt.tokenizer_path), tasks_sha256, cfg)
    run_id = content_hash(key)
    if store.has_run(run_id) and not force:
        return EvalOutcome(run_id, SUITE, True, 0.0)
    store.ensure_writable()

    import lm_eval

    from harness.lm_eval_adapter.model import MixbenchLM

    lm = MixbenchLM(pretrained=str(ckpt.path), device=device, batch_size=cfg.batch_size)
    t0 = time.perf_counter()
    with _data_errors(cfg):
        results = lm_eval.simple_evaluate(
            model=lm, tasks=list(cfg.tasks), num_fewshot=cfg.num_fewshot, limit=cfg.limit, task_manager=manager,
            bootstrap_iters=cfg.bootstrap_iters, log_samples=False,
        )
    seconds = time.perf_counter() - t0
    metrics = metrics_from_results(results)
    model = lm.model
    manifest = {
        "kind": SUITE,
        "suite": SUITE,
        "suite_config": to_dict(cfg),
        "run_key": key,
        "headline": [m.name for m in metrics],
        **model_manifest(ckpt, model, device),
        "batch_size": cfg.batch_size,
        "lm_eval": {k: results.get(k) for k in ("configs", "versions", "n-shot", "n-samples", "higher_is_better")},
        "timings": {"train_s": ckpt.meta.get("train_seconds"), "eval_s": round(seconds, 3)},
        "provenance": provenance(),
    }
    store.write_run(run_id, manifest, SuiteResult(metrics=metrics), force=force)
    return EvalOutcome(run_id, SUITE, False, seconds)
