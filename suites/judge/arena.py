"""Rating across runs (``mixbench judge``): every mixer's generations in a pool judged pairwise and rated together.

A ``judge`` eval run holds one model's continuations (a suite's ``run()`` sees one model). :func:`judge_runs`
finds the pools in the store (:mod:`suites.judge.pools`), judges every presentation the cache does not hold yet
(:mod:`suites.judge.judging`), fits the ratings (:mod:`suites.judge.ratings`) and writes one ``judge-rating``
run per mixer (:mod:`suites.judge.records`). Those runs carry the usual ``mixer`` / ``preset`` / ``seed``
manifest fields, so the leaderboard shows ``judge/elo`` etc. beside the other suites.

A rating run's id hashes (mixer, the pool's generation run ids, judge identity, template hash, protocol
settings). Rerunning with nothing new is a no-op that makes no judge call and starts no server; a new mixer in
the pool gives new runs (the leaderboard shows the newest); a pool whose earlier calls failed is judged again for
just those presentations and its runs are rewritten. The judge is only started when some verdict is missing from
the cache, and then the drift canaries are re-asked too.
"""

from __future__ import annotations

import os
import time
import warnings
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.config import content_hash
from harness.errors import ConfigError
from harness.results import ResultsStore
from suites.judge.cache import JudgeCache, verdict_key
from suites.judge.client import DEFAULT_KEY_ENV, EndpointConfig, JudgeClient, check_reachable
from suites.judge.judging import Job, Session, ask_canaries, canary_report, judge_jobs, safe_url
from suites.judge.pools import Pool, find_pools
from suites.judge.prompts import Template, Verdict, parse_verdict
from suites.judge.protocol import Comparison, Outcome, count
from suites.judge.ratings import Games, length_covariate, rate
from suites.judge.records import PoolReport, rating_manifest, rating_result

URL_ENV, MODEL_ENV = "MIXBENCH_JUDGE_URL", "MIXBENCH_JUDGE_MODEL"


@dataclass(frozen=True)
class ArenaConfig:
    """The judge and the rating protocol. An empty ``judge_url`` means the built-in local judge."""

    judge_url: str = ""
    judge_model: str = ""
    api_key_env: str = DEFAULT_KEY_ENV
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_s: float = 1.0  # base of the exponential backoff between retries
    concurrency: int = 4  # the local judge always uses 1: a CPU server gains nothing from parallel requests
    max_tokens: int = 16
    baseline: str = ""  # "" = every pair of mixers; else each mixer against this one
    bootstrap: int = 1000
    confidence: float = 0.95
    prior_ties: float = 1.0
    seed: int = 0
    canaries: bool = True
    cache: str = ""  # "" = $MIXBENCH_CACHE/judge/verdicts.sqlite

    def __post_init__(self) -> None:
        if bool(self.judge_url) != bool(self.judge_model):
            raise ConfigError("judge: give both --judge-url and --judge-model, or neither for the local judge.")
        if self.judge_url:
            self.endpoint()  # validates URL, key variable, timeouts
        if self.max_tokens < 1 or self.bootstrap < 0 or self.prior_ties < 0:
            raise ConfigError("judge: max_tokens must be >= 1, bootstrap >= 0 and prior_ties >= 0.")
        if not 0.5 <= self.confidence < 1:
            raise ConfigError(f"judge: confidence must be in [0.5, 1), got {self.confidence}.")

    @staticmethod
    def from_env(**overrides: Any) -> "ArenaConfig":
        """Defaults, with the judge from MIXBENCH_JUDGE_URL / MIXBENCH_JUDGE_MODEL when set; None overrides ignored."""
        env = {"judge_url": os.environ.get(URL_ENV, ""), "judge_model": os.environ.get(MODEL_ENV, "")}
        return ArenaConfig(**{**env, **{k: v for k, v in overrides.items() if v is not None}})

    def endpoint(self) -> EndpointConfig:
        return EndpointConfig(self.judge_url, self.judge_model, self.api_key_env, self.timeout_s, self.max_retries,
                              self.backoff_s, concurrency=self.concurrency)

    def template(self) -> Template:
        return Template(max_tokens=self.max_tokens)

    def protocol(self) -> dict[str, Any]:
        """The settings that change ratings (and so enter rating run ids)."""
        return {"baseline": self.baseline, "bootstrap": self.bootstrap, "confidence": self.confidence,
                "prior_ties": self.prior_ties, "seed": self.seed}


@dataclass
class ArenaResult:
    session: Session | None
    pools: list[PoolReport]
    seconds: float

    @property
    def judge_calls(self) -> int:
        return int(self.session.stats.get("requests", 0)) if self.session else 0

    def render(self) -> str:
        parts = [p.render() for p in self.pools] or ["judge: no pool of two or more mixers' generations to rate."]
        s = self.session
        if s is not None:
            c = s.canaries
            canary = "canaries: none" if c is None else (
                f"canaries: {c.agreement:.3f} agreement with gold ({c.parsed}/{c.asked} parsed"
                + (", asked now" if c.fresh else ", from the last session") + ")"
                + ("" if c.drift is None else f", {c.drift:.3f} changed since the previous session")
            )
            parts.append(
                f"judge {s.judge_id}: {self.judge_calls} calls ({s.stats.get('retries', 0)} retries, "
                f"{s.stats.get('failed_calls', 0)} failed); server start {s.server_start_s:.1f} s, judging "
                f"{s.judging_s:.1f} s, total {self.seconds:.1f} s; {canary}"
            )
        return "\n".join(parts)


def judge_runs(store: ResultsStore, cfg: ArenaConfig, preset: str | None = None,
               suite_config: dict[str, Any] | None = None, force: bool = False,
               progress: bool = True) -> ArenaResult:
    """Rate every pool in ``store`` (at ``preset``; made with ``suite_config`` when given) that needs it.

    ``force`` rewrites the rating runs; verdicts still come from the cache.
    """
    t0 = time.perf_counter()
    template = cfg.template()
    pools = [p for p in find_pools(store, preset, suite_config) if len(p.runs) >= 2]
    if cfg.baseline:
        for p in pools:
            if cfg.baseline not in p.runs:
                warnings.warn(f"judge: baseline {cfg.baseline} has no generations in pool {p.label}; skipped.",
                              stacklevel=2)
        pools = [p for p in pools if cfg.baseline in p.runs]
    if not pools:
        return ArenaResult(None, [], time.perf_counter() - t0)
    store.ensure_writable()
    judge_id = _judge_id(cfg)
    session = Session(judge_id, safe_url(cfg.judge_url) if cfg.judge_url else "local", not cfg.judge_url, template)
    with JudgeCache(cfg.cache or None) as cache, ExitStack() as server:
        jobs: dict[str, Job] = {}  # presentations the cache lacks (earlier failures included), over all pools
        plans = []
        for pool in pools:
            comparisons = pool.comparisons(cfg.seed, cfg.baseline or None)
            ids = {m: _rating_id(m, pool, judge_id, template, cfg) for m in pool.runs}
            missing = 0
            for c in comparisons:
                for second, left_as_a in enumerate(c.orders):
                    a, b = c.presentation(left_as_a)
                    key = verdict_key(judge_id, template.hash, c.prompt, a, b)
                    if key in jobs or cache.get(key) is None:
                        missing += 1
                        if key not in jobs or jobs[key].second:
                            jobs[key] = Job(key, c.prompt, a, b, bool(second))
            done = not force and not missing and all(store.has_run(r) for r in ids.values())
            plans.append((pool, comparisons, ids, done))
        if jobs:
            endpoint = _start_judge(cfg, server, session, progress)
            client = JudgeClient(endpoint, seed=cfg.seed)
            t1 = time.perf_counter()
            order = sorted(jobs.values(), key=lambda j: j.second)  # stable: prompt order within each half
            judge_jobs(client, template, order, cache, judge_id, endpoint.concurrency, progress)
            if cfg.canaries:
                ask_canaries(client, template, cache, judge_id)
            session.judging_s = time.perf_counter() - t1
            session.stats = client.stats()
        session.canaries = canary_report(cache, judge_id, template, fresh=bool(jobs)) if cfg.canaries else None
        server.close()  # the judge stops before the bootstrap and the writes
        reports = [
            PoolReport(pool, "up to date", run_ids=ids) if done
            else _rate_pool(store, cache, session, pool, comparisons, ids, cfg, force)
            for pool, comparisons, ids, done in plans
        ]
    return ArenaResult(session, reports, time.perf_counter() - t0)


def _judge_id(cfg: ArenaConfig) -> str:
    if cfg.judge_url:
        return cfg.judge_model
    from suites.judge.server import local_judge_id

    return local_judge_id()


def _start_judge(cfg: ArenaConfig, server: ExitStack, session: Session, progress: bool) -> EndpointConfig:
    if cfg.judge_url:
        endpoint = cfg.endpoint()
        check_reachable(endpoint)
        return endpoint
    from suites.judge.server import LocalJudge

    local = LocalJudge(progress=progress)
    endpoint = server.enter_context(local)
    session.server_start_s = local.start_seconds or 0.0
    return EndpointConfig(endpoint.base_url, endpoint.model, cfg.api_key_env, max(cfg.timeout_s, endpoint.timeout_s),
                          cfg.max_retries, cfg.backoff_s, concurrency=1)


def _rating_id(mixer: str, pool: Pool, judge_id: str, template: Template, cfg: ArenaConfig) -> str:
    return content_hash({
        "kind": "judge-rating", "mixer": mixer, "pool": {m: r.run_id for m, r in pool.runs.items()},
        "judge": judge_id, "template": template.hash, "protocol": cfg.protocol(),
    })


def _outcomes(comparisons: list[Comparison], cache: JudgeCache,
              session: Session) -> tuple[list[Outcome], dict[tuple[int, bool], str | None]]:
    """Outcomes from the cached replies, and the raw replies by (comparison, left shown as A)."""
    outcomes, replies = [], {}
    for c in comparisons:
        verdicts: dict[bool, Verdict | None] = {}
        for left_as_a in (True, False):
            reply = cache.get(verdict_key(session.judge_id, session.template.hash, c.prompt,
                                          *c.presentation(left_as_a)))
            replies[(id(c), left_as_a)] = reply
            verdicts[left_as_a] = parse_verdict(reply)
        outcomes.append(Outcome(c, verdicts[True], verdicts[False]))
    return outcomes, replies


def _rate_pool(store: ResultsStore, cache: JudgeCache, session: Session, pool: Pool, comparisons: list[Comparison],
               ids: dict[str, str], cfg: ArenaConfig, force: bool) -> PoolReport:
    t0 = time.perf_counter()
    outcomes, replies = _outcomes(comparisons, cache, session)
    got = [reply for reply in replies.values() if reply is not None]
    report = PoolReport(
        pool, "rated", counts=count(outcomes), replies=len(got), unparsable=sum(parse_verdict(r) is None for r in got),
        failed=len(replies) - len(got),  # every missing presentation was asked in this session and failed
        presentations=len(replies), run_ids=ids,
    )
    complete = [o for o in outcomes if o.complete]
    players = tuple(sorted({p for o in complete for p in (o.comparison.left, o.comparison.right)}))
    if not players:
        report.status = "skipped: no comparison has both verdicts (see failed calls and unparsable replies)"
        return report
    index = {p: i for i, p in enumerate(players)}
    prompt_index = {pid: i for i, pid in enumerate(dict.fromkeys(o.comparison.prompt_id for o in complete))}
    games = Games(
        players,
        np.array([index[o.comparison.left] for o in complete]),
        np.array([index[o.comparison.right] for o in complete]),
        np.array([o.score for o in complete], dtype=float),
        np.array([prompt_index[o.comparison.prompt_id] for o in complete]),
        length_covariate(np.array([len(o.comparison.left_output) for o in complete]),
                         np.array([len(o.comparison.right_output) for o in complete])),
    )
    report.ratings = rate(games, cfg.bootstrap, cfg.confidence, cfg.prior_ties, cfg.seed)
    for mixer in players:
        result = rating_result(mixer, report, outcomes, replies, session)
        manifest = rating_manifest(mixer, pool, session, report, cfg, time.perf_counter() - t0)
        store.write_run(ids[mixer], manifest, result, force=force or store.has_run(ids[mixer]))
    unrated = sorted(set(pool.runs) - set(players))
    if unrated:
        report.status += f" (no complete comparison for {', '.join(unrated)})"
    return report
