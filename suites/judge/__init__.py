"""LLM-as-judge pairwise preference suite (DESIGN §5): continuations judged in pairs, Bradley–Terry / Elo ratings.

Two steps, because a suite's ``run()`` sees one model and a preference needs two:

1. ``mixbench eval --suite judge --checkpoint C`` (this suite's ``run``) generates the model's continuations of
   the shared prompt set and stores them, with the decoding settings and seed, as the run's samples.
2. Rating (:func:`suites.judge.arena.judge_runs`, ``mixbench judge``) reads the generation runs of all mixers at
   a preset, judges each pair on each prompt in both orders through an OpenAI-compatible endpoint (cached on
   disk), fits Bradley–Terry ratings and writes one ``judge-rating`` run per mixer: Elo centred at 1000 with
   bootstrap CIs, length-controlled Elo, win rates (overall and per opponent), and the judge's position bias,
   inconsistency, unparsable and failure rates and its agreement on the gold canaries.

``Suite.aggregate`` runs step 2 after ``mixbench eval`` and once at the end of a grid, so as soon as two mixers'
generations are in the store they are rated. The judge there is the local default (SmolLM2-135M-Instruct, a
weak judge: fine for an offline smoke run, not for conclusions) unless MIXBENCH_JUDGE_URL and
MIXBENCH_JUDGE_MODEL name another; ``mixbench judge --judge-url ... --judge-model ...`` rates with any judge.

Public API: :class:`JudgeConfig` / :class:`Judge` (the suite), :class:`ArenaConfig` / :func:`judge_runs` /
:func:`find_pools` (rating), :class:`JudgeClient` / :class:`EndpointConfig` (the client), :class:`JudgeCache`,
:func:`fit_bradley_terry` / :func:`rate` / :class:`Games` (ratings), :func:`parse_verdict`, :class:`LocalJudge`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from harness.config import to_dict
from harness.errors import ConfigError, MixbenchError
from harness.registry import register_suite
from harness.suite import Metric, Suite, SuiteContext, SuiteResult
from suites.judge.arena import ArenaConfig, ArenaResult, judge_runs
from suites.judge.cache import JudgeCache
from suites.judge.client import EndpointConfig, JudgeCallFailed, JudgeClient
from suites.judge.generation import Decoding, corpus_prompts, distinct_bigrams, file_prompts, generate, generation_key
from suites.judge.pools import find_pools
from suites.judge.prompts import CANARIES, Template, parse_verdict
from suites.judge.ratings import Games, fit_bradley_terry, rate
from suites.judge.records import HEADLINE
from suites.judge.server import LocalJudge


@dataclass(frozen=True)
class JudgeConfig:
    """How each model's continuations are made (the judge itself is configured at rating time, not here, so
    changing judges never regenerates). Defaults follow the ProtoT code's sampling (T 0.8, top-k 50, top-p 0.92)."""

    prompts_file: str = ""  # JSONL with a "prompt" (and optional "id") per line; "" = held-out corpus prefixes
    split: str = "test"
    n_prompts: int = 6  # sized for the local CPU judge (~1 s a verdict); use hundreds with a strong judge
    prompt_words: int = 24
    max_new_tokens: int = 32
    temperature: float = 0.8
    top_k: int = 50
    top_p: float = 0.92
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_prompts < 0 or (self.n_prompts == 0 and not self.prompts_file):
            raise ConfigError("judge: n_prompts must be >= 1 (0 means 'all', only with a prompts_file).")
        if self.prompt_words < 1 or self.max_new_tokens < 1:
            raise ConfigError("judge: prompt_words and max_new_tokens must be >= 1.")
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ConfigError("judge: temperature and top_k must be >= 0 and top_p in (0, 1].")

    def decoding(self) -> Decoding:
        return Decoding(self.max_new_tokens, self.temperature, self.top_k, self.top_p, self.seed)


@register_suite("judge", config=JudgeConfig)
class Judge(Suite):
    headline: ClassVar[tuple[str, ...]] = HEADLINE  # the rating runs' metrics; generation stats stay off the table

    def validate(self, model) -> None:
        if self.cfg.max_new_tokens + 2 > model.config.context:
            raise ConfigError(
                f"judge: max_new_tokens={self.cfg.max_new_tokens} does not fit the model's context "
                f"{model.config.context} with a prompt; lower it."
            )

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        self.validate(model)
        cfg = self.cfg
        prompts = (file_prompts(cfg.prompts_file, cfg.n_prompts) if cfg.prompts_file
                   else corpus_prompts(ctx.corpus, cfg.split, cfg.n_prompts, cfg.prompt_words))
        decoding = cfg.decoding()
        rows = generate(model, ctx.corpus, prompts, decoding, ctx.progress)
        n = len(rows)
        metrics = [
            Metric("gen_tokens", sum(r["output_tokens"] for r in rows) / n, True, n=n, unit="tokens"),
            Metric("gen_finished", sum(r["finished"] for r in rows) / n, True, n=n, unit="fraction"),
            Metric("gen_distinct2", distinct_bigrams([r["output"] for r in rows]), True, n=n, unit="fraction"),
        ]
        info = {
            "generation_key": generation_key(prompts, decoding),
            "prompt_source": cfg.prompts_file or f"corpus {ctx.corpus.cfg.source} split {cfg.split}",
            "decoding": to_dict(decoding),
        }
        return SuiteResult(metrics=metrics, samples=rows, info=info)

    def aggregate(self, store, progress: bool) -> None:
        """Rate the pools this config's generations belong to (see :func:`suites.judge.arena.judge_runs`)."""
        try:
            result = judge_runs(store, ArenaConfig.from_env(), suite_config=to_dict(self.cfg), progress=progress)
        except MixbenchError as exc:
            raise MixbenchError(
                f"the generations are stored, but rating them failed: {exc} Fix that and run `mixbench judge`."
            ) from None
        if result.pools:
            print(result.render(), file=sys.stderr, flush=True)


__all__ = [
    "ArenaConfig", "ArenaResult", "CANARIES", "EndpointConfig", "Games", "Judge", "JudgeCache", "JudgeCallFailed",
    "JudgeClient", "JudgeConfig", "LocalJudge", "Template", "find_pools", "fit_bradley_terry", "judge_runs",
    "parse_verdict", "rate",
]  # fmt: skip
