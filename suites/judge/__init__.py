"""LLM-as-judge pairwise preference suite (DESIGN §5): continuations judged in pairs, Bradley–Terry / Elo ratings.

Two steps, because a suite's ``run()`` sees one model and a preference needs two:

1. ``mixbench eval --suite judge --checkpoint C`` (this suite's ``run``) generates the model's continuations of
   the shared prompt set and stores them, with the decoding settings and seed, as the run's samples.
2. Rating (:func:`suites.judge.arena.judge_runs`, ``mixbench judge``) reads the generation runs of all mixers at
   a preset, judges each pair on each prompt in both orders through an OpenAI-compatible endpoint (cached on
   disk), and writes one rating run (kind ``aggregate``) per mixer. Each presentation is scored by the judge's
   P(A) - P(B) over the verdict tokens when the server returns log-probabilities (else by its text verdict,
   recorded as such); a pair's preference is the mean over both orders, which cancels a constant position bias; Bradley–Terry
   ratings are fitted to the soft preferences (Elo centred at 1000, bootstrap intervals over prompts, a
   length-controlled Elo, win rates). The judge's reliability is measured on 40 gold canary pairs (agreement with
   a Wilson interval), by swap consistency and by its position bias; when the canary interval includes chance the
   ratings are marked unreliable (shown, never voting). See docs/judge.md.

``Suite.aggregate`` runs step 2 after ``mixbench eval`` and once at the end of a grid, so as soon as two mixers'
generations are in the store they are rated. The judge there is the local default (SmolLM2-135M-Instruct on
llama.cpp's server, :mod:`harness.llm_judge`; a weak judge: fine for an offline smoke run, not for conclusions)
unless MIXBENCH_JUDGE_URL and MIXBENCH_JUDGE_MODEL name another; ``mixbench judge --judge-url ... --judge-model
...`` (this suite's CLI command) rates with any judge.

Public API: :class:`JudgeConfig` / :class:`Judge` (the suite), :class:`ArenaConfig` / :func:`judge_runs` /
:func:`find_pools` (rating), :func:`fit_bradley_terry` / :func:`rate` / :class:`Games` (ratings),
:func:`parse_verdict` / :func:`presentation_score` (verdicts), :data:`CANARIES`; the client, cache and local
server are :mod:`harness.llm_judge`'s.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.config import to_dict
from harness.errors import ConfigError, MixbenchError
from harness.registry import register_suite
from harness.suite import AggregateRun, Metric, SiteKit, Suite, SuiteCommand, SuiteContext, SuiteResult
from harness.values import option
from suites.judge.arena import SUITE_VERSION, ArenaConfig, ArenaResult, judge_runs
from suites.judge.canaries import CANARIES
from suites.judge.command import JUDGE_COMMAND
from suites.judge.generation import Decoding, corpus_prompts, distinct_bigrams, file_prompts, generate, generation_key
from suites.judge.pools import find_pools
from suites.judge.prompts import Template, parse_verdict
from suites.judge.ratings import Games, fit_bradley_terry, rate
from suites.judge.records import HEADLINE
from suites.judge.site import site_section
from suites.judge.verdicts import presentation_score


@dataclass(frozen=True)
class JudgeConfig:
    """How each model's continuations are made (the judge itself is configured at rating time, not here, so
    changing judges never regenerates). Defaults follow the ProtoT code's sampling (T 0.8, top-k 50, top-p 0.92)."""

    prompts_file: str = ""  # JSONL with a "prompt" (and optional "id") per line; "" = held-out corpus prefixes
    split: str = option("test", "corpus split the prompts come from (without a prompts_file)")
    n_prompts: int = option(6, min=0)  # sized for the local CPU judge (~1 s a verdict); use hundreds with a strong judge
    prompt_words: int = option(24, "words of a corpus prompt", min=1)
    max_new_tokens: int = option(32, "tokens generated per continuation", min=1)
    temperature: float = option(0.8, "sampling temperature (0 = greedy)", min=0)
    top_k: int = option(50, "sample from the k most likely tokens (0 = all)", min=0)
    top_p: float = option(0.92, "nucleus sampling mass", gt=0, max=1)
    seed: int = option(0, "seed of the sampling", min=0)

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
    #: uses logits, generate and the context only: scores external transformers models too (docs/huggingface.md)
    external: ClassVar[bool] = True
    version: ClassVar[int] = SUITE_VERSION  # 2: probability verdicts, soft preferences, 40 canaries, the gate
    headline: ClassVar[tuple[str, ...]] = HEADLINE  # the rating runs' metrics; generation stats stay off the table
    # 2 prompts x 15 pairs (six models) x 2 orders + 40 canaries x 2 = 140 calls, ~0.4 s each on the local judge
    # (4 prompts: 201 calls, 90 s of the quickstart run alone after its models)
    quickstart: ClassVar[dict[str, Any] | None] = {"n_prompts": 2}
    commands: ClassVar[tuple[SuiteCommand, ...]] = (JUDGE_COMMAND,)

    @classmethod
    def site_section(cls, runs, kit: SiteKit) -> str:
        """Judge reliability, ratings, canaries and judged pairs per pool (:mod:`suites.judge.site`)."""
        return site_section(runs, kit)

    def validate(self, model) -> None:
        if self.cfg.max_new_tokens + 2 > model.config.context:
            raise ConfigError(
                f"judge: max_new_tokens={self.cfg.max_new_tokens} does not fit the model's context "
                f"{model.config.context} with a prompt; lower it."
            )

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
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

    def aggregate(self, store, progress: bool) -> list[AggregateRun]:
        """Rate the pools this config's generations belong to (see :func:`suites.judge.arena.judge_runs`); the
        core writes the rating runs."""
        try:
            result = judge_runs(store, ArenaConfig.from_env(), suite_config=to_dict(self.cfg), progress=progress)
        except MixbenchError as exc:
            raise MixbenchError(
                f"the generations are stored, but rating them failed: {exc} Fix that and run `mixbench judge`."
            ) from None
        if result.pools:
            print(result.render(), file=sys.stderr, flush=True)
        return result.runs


__all__ = [
    "ArenaConfig", "ArenaResult", "CANARIES", "Games", "Judge", "JudgeConfig", "Template", "find_pools",
    "fit_bradley_terry", "judge_runs", "parse_verdict", "presentation_score", "rate",
]  # fmt: skip
