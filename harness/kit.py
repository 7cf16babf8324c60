"""The plugin kit: the core's helpers a suite, mixer or reproduction target may use, by name.

A plugin imports only the API modules (``harness`` and its top-level ``errors``, ``registry``, ``suite``,
``mixer``, ``values``, ``config``, ``stats``, ``reproduction``, ``recording``, ``timing``) and this kit
(docs/ARCHITECTURE.md, "Layers and imports"; ``tests/test_layering.py`` walks every import). The core's modules
behind these names may move or split without a plugin noticing; a need not listed here is added here, not
imported from the core. Every name is imported on first use (PEP 562), so importing the kit loads no torch.
"""

from __future__ import annotations

import importlib

#: the core modules behind the kit and the public names each provides, by group
_MODULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # model: the backbone and its blocks, checkpoints, run specs, FLOPs, devices, the tuned recipes' seed spread
    ("harness.model.backbone", ("MixerLM", "RMSNorm", "build_model", "init_output_projection")),
    ("harness.model.backbone_kernels", ("rms_norm",)),
    ("harness.model.checkpoint", ("load_model",)),
    ("harness.model.specs", ("validate_model",)),
    ("harness.model.flops", ("spec_flops_per_token",)),
    ("harness.model.devices", ("resolve_device",)),
    ("harness.model.recipes", ("NLL_SCALE", "seed_spread")),
    # training: what a suite that trains small models uses (loss, optimiser, learning-rate schedule)
    ("harness.running.training", ("lm_loss", "adamw", "param_groups", "lr_at")),
    # evaluation: windowed NLL, batching, memory checks before a forward or a training run
    ("harness.model.window_nll", ("window_nll", "document_nll", "bucket_nll", "position_buckets")),
    ("harness.model.batching", ("IGNORE_INDEX",)),
    ("harness.model.memory", ("Estimate", "check_forward", "check_fits", "check_training", "peak_bytes")),
    # data: the corpus, its splits, the tokenizer
    ("harness.corpus.data", ("Corpus", "SPLITS", "Window")),
    ("harness.corpus.tokenizer", ("Tokenizer", "digest_texts")),
    # store reading: the results store and its runs (only the core writes; see running below)
    ("harness.store.results", ("ResultsStore", "RunRecord")),
    # plotting: one figure style for every suite's plots; the board's Pareto front
    ("harness.reporting.plotting", ("figure", "save")),
    ("harness.reporting.pareto", ("pareto_front",)),
    # formatting: numbers as the board prints them
    ("harness.reporting.numbers", ("si", "fmt")),
    ("harness.reporting.run_report", ("speed_ratio_text",)),
    # cache folders and durable writes
    ("harness.store.storage", ("cache_dir", "fill_folder_once", "atomic_write")),
    # compiled kernels: build and load a small C library
    ("harness.model.compiled", ("CompiledLibrary", "pointer")),
    # the LLM judge: client, replies, reply cache, the local judge server
    ("harness.llm_judge", ("DEFAULT_KEY_ENV", "EndpointConfig", "GoldReply", "JudgeCallFailed", "JudgeClient",
                           "JudgeMode", "LocalJudge", "Reply", "ReplyCache", "check_reachable", "local_judge_id",
                           "reply_key")),
    # provenance: the machine, its load, package versions, secrets kept out of records
    ("harness.store.provenance", ("device_descriptor", "load_average", "package_versions")),
    ("harness.store.redaction", ("redact_url",)),
    # identity and manifests: what a suite's cross-run runs (AggregateRun) are named and described by
    ("harness.store.identity", ("Identity", "run_identity")),
    ("harness.store.manifest", ("RunManifest",)),
    ("harness.running.evaluate", ("build_manifest",)),
    # running: the core's write path for runs a suite made, a checkpoint scored, a plan's grid (suites' commands)
    ("harness.running.evaluate", ("store_runs", "write_aggregate", "evaluate_checkpoint")),
    ("harness.running.plan", ("load_plan",)),
    ("harness.running.plan_commands", ("run_plan_grid",)),
)

__all__ = [name for _, names in _MODULES for name in names]  # a name listed twice shows here twice (a test looks)
#: each public name and the core module it lives in
_HOME = {name: module for module, names in _MODULES for name in names}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'harness.kit' has no attribute {name!r}")
