"""Which generations are rated together: *pools* of generation runs in the results store.

A pool is the newest ``judge`` generation run of each board row (a model: the mixer and whatever of its config
differs from the defaults) at one (preset, training seed, generation key); the generation key hashes the prompt
texts and decoding settings, so only continuations of the same prompts made the same way are ever compared.
Training seeds are separate pools: each gives its own ratings, and the board averages them across seeds like any
other metric. A player is named by the board's label of its model (``protot``, ``protot (n_prototypes=4)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.kit import ResultsStore, RunRecord
from suites.judge.protocol import Comparison, make_comparisons


@dataclass(frozen=True)
class Pool:
    preset: str
    seed: Any
    generation_key: str
    runs: dict[str, RunRecord]  # player (the model's board label) -> its newest generation run

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
    return m.suite == "judge" and m.kind == "suite" and "generation_key" in m.suite_info


def player(run: RunRecord) -> str:
    return run.manifest.subject.label


def find_pools(store: ResultsStore, preset: str | None = None,
               suite_config: dict[str, Any] | None = None) -> list[Pool]:
    """Generation runs grouped by (preset, seed, generation key); ``suite_config`` keeps only runs made with it.
    An external model's generations (docs/huggingface.md: no preset, no training seed) join every pool of their
    generation key, and make a pool of their own with other external models where no mixbench model has one."""
    groups: dict[tuple, dict[str, RunRecord]] = {}
    external: list[RunRecord] = []
    for run in store.iter_runs(samples=True):
        m = run.manifest
        if not is_generation_run(run) or (suite_config is not None and m.suite_config != suite_config):
            continue
        if m.subject.kind == "external":
            external.append(run)
            continue
        if preset is not None and m.subject.preset != preset:
            continue
        _newest(groups.setdefault((str(m.subject.preset), m.subject.seed, m.suite_info["generation_key"]), {}), run)
    for run in external:
        key = run.manifest.suite_info["generation_key"]
        joined = [players for (_, _, g), players in groups.items() if g == key]
        for players in joined or [groups.setdefault(("external", None, key), {})]:
            _newest(players, run)
    return [Pool(p, s, g, dict(sorted(r.items()))) for (p, s, g), r in sorted(groups.items(), key=str)]


def _newest(players: dict[str, RunRecord], run: RunRecord) -> None:
    older = players.get(player(run))
    if older is None or older.manifest.written_at < run.manifest.written_at:
        players[player(run)] = run
