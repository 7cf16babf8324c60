"""``mixbench judge``: the judge suite's CLI subcommand (declared on the suite, registered by the core's CLI)."""

from __future__ import annotations

import argparse

from harness.suite import SuiteCommand

HELP = "rate the judge suite's generations pairwise with an LLM judge"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default=None, help="only this preset (default: every preset with generations)")
    p.add_argument("--judge-url", default=None, help="OpenAI-compatible base URL, e.g. http://host:8000/v1 (default: $MIXBENCH_JUDGE_URL, else the built-in local judge)")
    p.add_argument("--judge-model", default=None, help="model name at --judge-url (default: $MIXBENCH_JUDGE_MODEL)")
    p.add_argument("--api-key-env", default=None, help="environment variable holding the judge's API key (default: MIXBENCH_JUDGE_API_KEY)")
    p.add_argument("--verdict-mode", default=None, choices=("auto", "probabilities", "text"), help="auto (default, or $MIXBENCH_JUDGE_VERDICTS): P(A) - P(B) from log-probabilities when the server returns them, else text verdicts")
    p.add_argument("--baseline", default=None, help="compare each mixer with this one instead of every pair")
    p.add_argument("--concurrency", type=int, default=None, help="parallel judge calls (default: 4; the local judge uses 1)")
    p.add_argument("--judge-cache", default=None, help="SQLite reply cache (default: $MIXBENCH_CACHE/judge/replies.sqlite)")
    p.add_argument("--force", action="store_true", help="rewrite the rating runs (cached verdicts are still reused)")
    p.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from harness.kit import ResultsStore, store_runs
    from suites.judge.arena import ArenaConfig, judge_runs

    cfg = ArenaConfig.from_env(
        judge_url=args.judge_url, judge_model=args.judge_model, api_key_env=args.api_key_env,
        verdict_mode=args.verdict_mode, baseline=args.baseline, concurrency=args.concurrency, cache=args.judge_cache,
    )
    store = ResultsStore(args.results)
    result = judge_runs(store, cfg, args.preset, force=args.force, progress=not args.no_progress)
    store_runs(store, result.runs)  # the core writes what the suite made
    print(result.render())
    return 0


JUDGE_COMMAND = SuiteCommand("judge", HELP, configure, run)
