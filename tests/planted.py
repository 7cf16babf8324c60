"""Planted stores for board, store and site tests: runs with chosen numbers and typed manifests, no training."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from harness.config import content_hash
from harness.store.manifest import GateRecord, RunManifest, Subject
from harness.store.results import ResultsStore
from harness.stats import Interval
from harness.suite import ItemValues, Metric, SuiteResult

_counter = itertools.count()


def subject(mixer: str = "protot", preset: str = "tiny", seed: int = 0, config: dict[str, Any] | None = None,
            code: str = "c0", **fields: Any) -> Subject:
    """A model subject; models that differ in ``config``, ``code`` or ``train_diff`` are different identities,
    seeds share a row."""
    config = dict(config or {})
    parts = {"mixer": mixer, "preset": preset, "config": config, "code": code}
    if fields.get("train_diff"):
        parts["train"] = fields["train_diff"]
    row = content_hash(parts)
    return Subject(
        kind="model", id=content_hash({"row": row, "seed": seed}), row_id=row,
        mixer_id=content_hash({"mixer": mixer, "config": config, "code": code}), mixer=mixer,
        mixer_source=f"mixers.{mixer}.X", mixer_config=config, config_diff=config, preset=preset, seed=seed,
        parameters=fields.pop("parameters", 1000), state_floats=fields.pop("state_floats", 10),
        train_tokens_per_s=fields.pop("train_tokens_per_s", 100.0), **fields,
    )


def control(name: str = "none", preset: str = "tiny", seed: int = 0, **fields: Any) -> Subject:
    """A control row's subject (docs/controls.md): ``none`` is context-free. A column votes only if a null (a
    control with a value there) can veto it, so a planted board that ranks needs one."""
    return dataclasses.replace(subject(name, preset, seed, **fields), control=True, context_free=name == "none")


def manifest(suite: str, subj: Subject, config: dict[str, Any] | None = None, source: str = "default",
             gate: str = "passed", headline: tuple[str, ...] = (), code: str = "c0",
             train: dict[str, Any] | None = None, **fields: Any) -> RunManifest:
    """A run of ``suite`` on ``subj``; ``train`` adds training config parts to its identity (a token budget)."""
    config = dict(config or {})
    parts = {
        "subject_parts": {
            "mixer": {"mixer": subj.mixer, "mixer_config": subj.mixer_config, "mixer_code": code},
            "train": {"seed": subj.seed, **(train or {})}, "preset": subj.preset, "core_code": code,
        },
        "suite_code": "s0",
    }
    return RunManifest(
        suite=suite, suite_version=1, suite_config=config, config_source=source, config_diff=config, subject=subj,
        gate=GateRecord(gate, 2, "k"), identity=parts, headline=headline, **fields,
    )


def score(name: str, value: float, higher: bool = True, half: float | None = None, items: dict | None = None,
          role: str = "score", **fields: Any) -> Metric:
    """A metric with a bootstrap interval of half-width ``half`` and, optionally, per-item values."""
    interval = None if half is None else Interval(value - half, value + half, "bootstrap")
    item_values = None if items is None else ItemValues(tuple(items), tuple(items.values()))
    return Metric(name, value, higher, role=role, interval=interval, items=item_values, **fields)


def put(store: ResultsStore, m: RunManifest, metrics: list[Metric], samples: list | None = None) -> str:
    """Write one run under a fresh id and return the id."""
    run_id = content_hash({"n": next(_counter), "suite": m.suite, "subject": m.subject.id})
    store.write_run(run_id, m, SuiteResult(metrics, samples=samples or []))
    return run_id


def payload(extra: dict[str, Any] | None = None) -> RunManifest:
    """A valid manifest carrying ``extra``: for store tests, where the manifest is only something to round-trip."""
    return manifest("perplexity", subject(), extra=dict(extra or {}))
