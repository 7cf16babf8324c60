"""Which generations are rated together: *pools* of generation runs in the results store.

A pool is the newest ``judge`` generation run of each mixer at one (preset, training seed, generation key); the
generation key hashes the prompt texts and decoding settings, so only continuations of the same prompts made
the same way are ever compared. Training seeds are separate pools: each gives its own ratings, and the
leaderboard aggregates them across seeds like any other metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.results import ResultsStore, RunRecord
from suites.judge.protocol import Comparison, make_comparisons


@dataclass(frozen=True)
class Pool:
    preset: str
    seed: Any
    generation_key: str
    runs: dict[str, RunRecord]  # mixer -> its newest generation run

    @property
    def label(self) -> str:
        return f"preset {self.preset}, seed {self.seed}, prompts {self.generation_key}"

    def comparisons(self, seed: int, baseline: str | None) -> list[Comparison]:
        outputs = {m: {s["prompt_id"]: s["output"] for s in run.samples} for m, run in self.runs.items()}
        prompts: dict[str, str] = {}
        for run in self.runs.values():
            for s in run.samples:
                prompts.setdefault(s["prompt_id"], s["prompt"])
        return make_comparisons(outputs, prompts, seed, baseline)


def is_generation_run(run: RunRecord) -> bool:
    m = run.manifest
    return m.get("suite") == "judge" and m.get("kind") == "eval" and "generation_key" in (m.get("suite_info") or {})


def find_pools(store: ResultsStore, preset: str | None = None,
               suite_config: dict[str, Any] | None = None) -> list[Pool]:
    """Generation runs grouped by (preset, seed, generation key); ``suite_config`` keeps only runs made with it."""
    groups: dict[tuple, dict[str, RunRecord]] = {}
    for run in store.iter_runs(samples=True):
        m = run.manifest
        if not is_generation_run(run) or (preset is not None and m.get("preset") != preset):
            continue
        if suite_config is not None and m.get("suite_config") != suite_config:
            continue
        key = (str(m.get("preset")), m.get("seed"), m["suite_info"]["generation_key"])
        mixers = groups.setdefault(key, {})
        older = mixers.get(m.get("mixer"))
        if older is None or str(older.manifest.get("written_at")) < str(m.get("written_at")):
            mixers[m.get("mixer")] = run
    return [Pool(p, s, g, dict(sorted(r.items()))) for (p, s, g), r in sorted(groups.items(), key=str)]
