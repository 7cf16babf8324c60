"""Train-and-score grids: ``mixbench run --preset P`` and ``mixbench quickstart``.

For each (mixer, seed): build and validate the run spec, train into ``<checkpoints>/<train id>`` (resuming a
partial checkpoint, skipping a complete one), then score it with each suite (skipping runs already in the
store). Every request is validated before the first model trains, and the wall time of each phase is
reported so budgets can be checked.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.evaluate import evaluate
from harness.registry import SUITES
from harness.results import ResultsStore
from harness.specs import bind_vocab, make_run_spec
from harness.suite import Suite
from harness.training import train


@dataclass
class GridRequest:
    preset: str
    mixers: list[str]
    suites: list[str]
    seeds: list[int] = field(default_factory=lambda: [0])
    mixer_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    backbone_overrides: dict[str, Any] = field(default_factory=dict)
    train_overrides: dict[str, Any] = field(default_factory=dict)
    data_overrides: dict[str, Any] = field(default_factory=dict)
    suite_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    device: str = "cpu"
    kernel: str | None = None
    force: bool = False
    progress: bool = True


@dataclass
class PhaseTimer:
    phases: list[tuple[str, float]] = field(default_factory=list)

    def add(self, name: str, seconds: float) -> None:
        self.phases.append((name, seconds))
        print(f"[mixbench] {name}: {seconds:.1f} s", file=sys.stderr, flush=True)

    def render(self) -> str:
        total = sum(s for _, s in self.phases)
        rows = [f"  {name:<40} {s:8.1f} s" for name, s in self.phases]
        return "\n".join(["phase timings:", *rows, f"  {'total':<40} {total:8.1f} s"])


def checkpoint_root(store: ResultsStore) -> Path:
    """Checkpoints live beside a local store, or in the cache for a remote one (they are large)."""
    local = store.local_path
    if local is not None:
        return Path(local) / "checkpoints"
    return Path(os.environ.get("MIXBENCH_CACHE", Path.home() / ".cache" / "mixbench")) / "checkpoints"


def run_grid(req: GridRequest, store: ResultsStore) -> PhaseTimer:
    from harness.data import load_corpus

    timer = PhaseTimer()
    for suite in req.suites:  # fail on an unknown suite or bad suite option before any work
        SUITES.get(suite).make_config(req.suite_overrides.get(suite))
    specs = [
        make_run_spec(
            mixer,
            req.preset,
            mixer_config=req.mixer_configs.get(mixer),
            backbone_overrides=req.backbone_overrides,
            train_overrides={**req.train_overrides, "seed": seed},
            data_overrides=req.data_overrides,
        )
        for mixer in req.mixers
        for seed in req.seeds
    ]
    store.ensure_writable()

    t0 = time.perf_counter()
    corpus = load_corpus(specs[0].data, progress=req.progress)
    timer.add(f"data + tokenizer ({corpus.tokenizer.vocab_size} tokens vocab)", time.perf_counter() - t0)

    for spec in specs:
        spec = bind_vocab(spec, corpus.tokenizer.vocab_size)
        out = checkpoint_root(store) / spec.train_id
        t0 = time.perf_counter()
        result = train(spec, out, corpus, device=req.device, kernel=req.kernel, progress=req.progress, force=req.force)
        label = f"train {spec.model.mixer} seed {spec.train.seed}"
        if result.skipped:
            label += " (already trained)"
        else:
            label += f" ({result.tokens_per_s:,.0f} tokens/s, final loss {result.final_loss:.3f})"
        timer.add(label, time.perf_counter() - t0)
        for suite in req.suites:
            t0 = time.perf_counter()
            outcome = evaluate(
                out, suite, store, req.suite_overrides.get(suite), device=req.device, kernel=req.kernel,
                force=req.force, progress=req.progress, corpus=corpus, aggregate=False,
            )
            note = " (already in the store)" if outcome.skipped else ""
            timer.add(f"eval {suite} on {spec.model.mixer} seed {spec.train.seed}{note}", time.perf_counter() - t0)
    for suite in req.suites:  # cross-run steps (the judge's ratings) once every model's runs are in
        entry = SUITES.get(suite)
        if entry.cls.aggregate is not Suite.aggregate:
            t0 = time.perf_counter()
            entry.cls(entry.make_config(req.suite_overrides.get(suite))).aggregate(store, req.progress)
            timer.add(f"aggregate {suite}", time.perf_counter() - t0)
    return timer

