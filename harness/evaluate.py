"""Scoring a checkpoint with a suite and recording the run in the results store.

A run's id is the content hash of (training run spec, suite name, suite config): the same model scored the
same way is the same run, and re-running it is a no-op unless forced. The kernel and the device are
provenance, not identity: they are recorded in the manifest, and the conformance gate is what guarantees
that kernels agree.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checkpoint import load_model
from harness.config import to_dict
from harness.errors import MixbenchError
from harness.provenance import device_descriptor, provenance
from harness.registry import SUITES
from harness.results import ResultsStore
from harness.results import run_id as results_run_id
from harness.suite import SuiteContext


@dataclass
class EvalOutcome:
    run_id: str
    suite: str
    skipped: bool
    seconds: float


def run_key(train_spec: dict[str, Any], suite: str, suite_config: Any) -> dict[str, Any]:
    return {"train": train_spec, "suite": suite, "suite_config": to_dict(suite_config)}


def evaluate(
    checkpoint: Path | str,
    suite: str,
    store: ResultsStore,
    suite_overrides: dict[str, Any] | None = None,
    device: str = "cpu",
    kernel: str | None = None,
    force: bool = False,
    progress: bool = True,
    corpus=None,
    work_dir: Path | None = None,
    aggregate: bool = True,
) -> EvalOutcome:
    """Score ``checkpoint`` with ``suite``; every input is validated before any work starts.

    With ``aggregate``, the suite's cross-run step (:meth:`Suite.aggregate`) follows, also when the run was
    already in the store; a grid passes False and aggregates once at its end.
    """
    from harness.data import load_corpus

    entry = SUITES.get(suite)
    cfg = entry.make_config(suite_overrides)
    model, ckpt = load_model(checkpoint, device)
    if kernel is not None:
        model.set_kernel(kernel)
    key = run_key(ckpt.spec.to_json(), suite, cfg)
    if getattr(entry.cls, "device_dependent", False):  # a speed measured elsewhere is not this device's speed
        key["device"] = device_descriptor(device)
    run_id = results_run_id(key)
    suite_obj = entry.cls(cfg)
    if store.has_run(run_id) and not force:
        if aggregate:
            suite_obj.aggregate(store, progress)
        return EvalOutcome(run_id, suite, True, 0.0)
    suite_obj.validate(model)
    store.ensure_writable()
    if corpus is None:
        corpus = load_corpus(ckpt.spec.data, progress=progress)
    trained_on = ckpt.meta.get("corpus_fingerprint")
    if trained_on is not None and trained_on != corpus.fingerprint:
        raise MixbenchError(
            f"the data or tokenizer of {ckpt.spec.data.source} changed since {ckpt.path} was trained "
            f"(fingerprint {corpus.fingerprint} vs {trained_on}); retrain the checkpoint."
        )
    with tempfile.TemporaryDirectory(prefix=f"mixbench-{suite}-") as scratch:
        ctx = SuiteContext(corpus, Path(work_dir or scratch), ckpt.spec.train.seed, device, progress)
        t0 = time.perf_counter()
        result = suite_obj.run(model, ctx)
        seconds = time.perf_counter() - t0
        manifest = build_manifest(ckpt, model, entry, cfg, corpus, result, seconds, device)
        store.write_run(run_id, manifest, result, force=force)
    if aggregate:
        suite_obj.aggregate(store, progress)
    return EvalOutcome(run_id, suite, False, seconds)


def model_manifest(ckpt, model, device: str) -> dict[str, Any]:
    """The manifest fields that identify the scored model and where it ran; every kind of run (a suite's, an
    lm-eval run) carries them, so the leaderboard can group and compare runs of any kind."""
    return {
        "mixer": ckpt.spec.model.mixer,
        "mixer_config": to_dict(model.mixer_config),
        "preset": ckpt.spec.preset,
        "seed": ckpt.spec.train.seed,
        "train_id": ckpt.spec.train_id,
        "run_spec": ckpt.spec.to_json(),
        "checkpoint": str(ckpt.path),
        "checkpoint_step": ckpt.step,
        "weights_sha256": ckpt.meta.get("weights_sha256"),
        "parameters": model.num_parameters(),
        "state_floats": model.state_size(ckpt.spec.model.backbone.context),
        "train_flops": ckpt.meta.get("train_flops"),
        "train_tokens_per_s": ckpt.meta.get("tokens_per_s"),
        "kernel": model.kernel,
        "device": device,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "mixer_packages": model.mixers[0].package_versions(),
    }


def build_manifest(ckpt, model, entry, cfg, corpus, result, seconds: float, device: str) -> dict[str, Any]:
    """Everything needed to trust and reproduce a run: configs, code and package versions, kernel, timings."""
    return {
        "kind": "eval",
        "suite": entry.name,
        "suite_config": to_dict(cfg),
        "headline": list(getattr(entry.cls, "headline", ())) or None,
        **model_manifest(ckpt, model, device),
        "data": {"fingerprint": corpus.fingerprint, "splits": corpus.split_doc_ids()},
        "suite_info": result.info,
        "timings": {"train_s": ckpt.meta.get("train_seconds"), "eval_s": round(seconds, 3)},
        "provenance": provenance(),
    }
