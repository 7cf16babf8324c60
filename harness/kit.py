"""The plugin kit: the core's helpers a suite, mixer or reproduction target may use, by name.

A plugin imports only the API modules (``harness`` and its top-level ``errors``, ``registry``, ``suite``,
``mixer``, ``values``, ``config``, ``stats``, ``reproduction``, ``recording``, ``timing``) and this kit
(docs/ARCHITECTURE.md, "Layers and imports"; ``tests/test_layering.py`` walks every import). The core's modules
behind these names may move or split without a plugin noticing; a need not listed here is added here, not
imported from the core. Every name is imported on first use (PEP 562), so importing the kit loads no torch.
"""

from __future__ import annotations

import importlib

#: each public name and the core module it lives in, by group
_HOME = {
    # model: the backbone and its blocks, checkpoints, run specs, FLOPs, devices, the tuned recipes' seed spread
    "MixerLM": "harness.model.backbone", "RMSNorm": "harness.model.backbone",
    "build_model": "harness.model.backbone", "init_output_projection": "harness.model.backbone",
    "rms_norm": "harness.model.backbone_kernels", "load_model": "harness.model.checkpoint",
    "validate_model": "harness.model.specs", "spec_flops_per_token": "harness.model.flops",
    "resolve_device": "harness.model.devices", "NLL_SCALE": "harness.model.recipes",
    "seed_spread": "harness.model.recipes",
    # training: what a suite that trains small models uses (loss, optimiser, learning-rate schedule)
    "lm_loss": "harness.running.training", "adamw": "harness.running.training",
    "param_groups": "harness.running.training", "lr_at": "harness.running.training",
    # evaluation: windowed NLL, batching, memory checks before a forward or a training run
    "window_nll": "harness.model.window_nll", "document_nll": "harness.model.window_nll",
    "bucket_nll": "harness.model.window_nll", "position_buckets": "harness.model.window_nll",
    "IGNORE_INDEX": "harness.model.batching", "Estimate": "harness.model.memory",
    "check_forward": "harness.model.memory", "check_fits": "harness.model.memory",
    "check_training": "harness.model.memory", "peak_bytes": "harness.model.memory",
    # data: the corpus, its splits, the tokenizer
    "Corpus": "harness.corpus.data", "SPLITS": "harness.corpus.data", "Window": "harness.corpus.data",
    "Tokenizer": "harness.corpus.tokenizer", "digest_texts": "harness.corpus.tokenizer",
    # store reading: the results store and its runs (only the core writes; see running below)
    "ResultsStore": "harness.store.results", "RunRecord": "harness.store.results",
    # plotting: one figure style for every suite's plots; the board's Pareto front
    "figure": "harness.reporting.plotting", "save": "harness.reporting.plotting",
    "pareto_front": "harness.reporting.pareto",
    # formatting: numbers as the board prints them
    "si": "harness.reporting.numbers", "fmt": "harness.reporting.numbers",
    "speed_ratio_text": "harness.reporting.run_report",
    # cache folders and durable writes
    "cache_dir": "harness.store.storage", "fill_folder_once": "harness.store.storage",
    "atomic_write": "harness.store.storage",
    # compiled kernels: build and load a small C library
    "CompiledLibrary": "harness.model.compiled", "pointer": "harness.model.compiled",
    # the LLM judge: client, replies, reply cache, the local judge server
    "DEFAULT_KEY_ENV": "harness.llm_judge", "EndpointConfig": "harness.llm_judge", "GoldReply": "harness.llm_judge",
    "JudgeCallFailed": "harness.llm_judge", "JudgeClient": "harness.llm_judge", "JudgeMode": "harness.llm_judge",
    "LocalJudge": "harness.llm_judge", "Reply": "harness.llm_judge", "ReplyCache": "harness.llm_judge",
    "check_reachable": "harness.llm_judge", "local_judge_id": "harness.llm_judge", "reply_key": "harness.llm_judge",
    # provenance: the machine, its load, package versions, secrets kept out of records
    "device_descriptor": "harness.store.provenance", "load_average": "harness.store.provenance",
    "package_versions": "harness.store.provenance", "redact_url": "harness.store.redaction",
    # identity and manifests: what a suite's cross-run runs (AggregateRun) are named and described by
    "Identity": "harness.store.identity", "run_identity": "harness.store.identity",
    "RunManifest": "harness.store.manifest", "build_manifest": "harness.running.evaluate",
    # running: the core's write path for runs a suite made, a checkpoint scored, a plan's grid (suites' commands)
    "store_runs": "harness.running.evaluate", "write_aggregate": "harness.running.evaluate",
    "evaluate_checkpoint": "harness.running.evaluate", "load_plan": "harness.running.plan",
    "run_plan_grid": "harness.running.plan_commands",
}

__all__ = list(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'harness.kit' has no attribute {name!r}")
