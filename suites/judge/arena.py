"""Rating across runs (``mixbench judge``): every mixer's generations in a pool judged pairwise and rated together.

A ``judge`` eval run holds one model's continuations (a suite's ``run()`` sees one model). :func:`judge_runs`
finds the pools in the store (:mod:`suites.judge.pools`), settles the judge's verdict mode (probabilities when the
server returns them, else text; :mod:`suites.judge.judging`), judges every presentation the cache does not hold
yet, asks the gold canaries, fits the ratings (:mod:`suites.judge.ratings`) and writes one rating run (kind
``aggregate``) per mixer (:mod:`suites.judge.records`). Those runs have the subject and suite config of the
mixer's generation run, so the board shows ``judge/elo`` etc. in that model's row beside the other suites. When the canaries' agreement
interval includes chance, the ratings are marked unreliable with that reason: shown, never voting.

A rating run's id (:func:`harness.store.identity.run_identity`) hashes the rated model, the suite (name, version, code,
config) and the pool's generation run ids, judge identity, template hash, verdict mode and protocol settings. Rerunning with nothing new is a no-op that makes no judge call and
starts no server; a new mixer in the pool gives new runs (the leaderboard shows the newest); a pool whose earlier
calls failed is judged again for just those presentations and its runs are rewritten. The judge is only started
when some verdict is missing from the cache (or its verdict mode is not known yet), and then the canaries are
re-asked too.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.errors import ConfigError, MixbenchError
from harness.kit import (
    DEFAULT_KEY_ENV, EndpointConfig, Identity, JudgeClient, JudgeMode, LocalJudge, Reply, ReplyCache, ResultsStore,
    check_reachable, local_judge_id, redact_url, reply_key, run_identity,
)
from harness.suite import AggregateRun
from suites.judge.judging import Job, Session, ask_canaries, canary_report, judge_jobs, probe_mode
from suites.judge.pools import Pool, find_pools
from suites.judge.prompts import Template
from suites.judge.protocol import Comparison, Outcome, count
from suites.judge.ratings import Games, length_covariate, rate
from suites.judge.records import PoolReport, rating_manifest, rating_result
from suites.judge.verdicts import presentation_score

URL_ENV, MODEL_ENV, MODE_ENV = "MIXBENCH_JUDGE_URL", "MIXBENCH_JUDGE_MODEL", "MIXBENCH_JUDGE_VERDICTS"
VERDICT_MODES = ("auto", "probabilities", "text")
SUITE_VERSION = 2  # the suite's ``version`` (probability verdicts, soft preferences, 40 canaries, the gate)


@dataclass(frozen=True)
class ArenaConfig:
    """The judge and the rating protocol. An empty ``judge_url`` means the built-in local judge."""

    judge_url: str = ""
    judge_model: str = ""
    api_key_env: str = DEFAULT_KEY_ENV
    verdict_mode: str = "auto"  # auto: probabilities when the server returns them, else text
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
    cache: str = ""  # "" = $MIXBENCH_CACHE/judge/replies.sqlite

    def __post_init__(self) -> None:
        if bool(self.judge_url) != bool(self.judge_model):
            raise ConfigError("judge: give both --judge-url and --judge-model, or neither for the local judge.")
        if self.judge_url:
            self.endpoint()  # validates URL, key variable, timeouts
        if self.verdict_mode not in VERDICT_MODES:
            raise ConfigError(f"judge: verdict mode must be one of {', '.join(VERDICT_MODES)}, "
                              f"got '{self.verdict_mode}'.")
        if self.max_tokens < 1 or self.bootstrap < 0 or self.prior_ties < 0:
            raise ConfigError("judge: max_tokens must be >= 1, bootstrap >= 0 and prior_ties >= 0.")
        if not 0.5 <= self.confidence < 1:
            raise ConfigError(f"judge: confidence must be in [0.5, 1), got {self.confidence}.")

    @staticmethod
    def from_env(**overrides: Any) -> "ArenaConfig":
        """Defaults, with the judge from MIXBENCH_JUDGE_URL / _MODEL / _VERDICTS when set; None overrides ignored."""
        env = {"judge_url": os.environ.get(URL_ENV, ""), "judge_model": os.environ.get(MODEL_ENV, "")}
        if os.environ.get(MODE_ENV):
            env["verdict_mode"] = os.environ[MODE_ENV]
        return ArenaConfig(**{**env, **{k: v for k, v in overrides.items() if v is not None}})

    def endpoint(self) -> EndpointConfig:
        return EndpointConfig(self.judge_url, self.judge_model, self.api_key_env, self.timeout_s, self.max_retries,
                              self.backoff_s, concurrency=self.concurrency)

    def template(self) -> Template:
        return Template(max_tokens=self.max_tokens)

    def protocol(self) -> dict[str, Any]:
        """The settings that change ratings (and so enter rating run ids)."""
        return {"baseline": self.baseline, "bootstrap": self.bootstrap, "confidence": self.confidence,
                "prior_ties": self.prior_ties, "seed": self.seed, "canaries": self.canaries}

    def record(self) -> dict[str, Any]:
        """The config as it may be stored: the URL without credentials."""
        from harness.config import to_dict

        return {**to_dict(self), "judge_url": redact_url(self.judge_url) if self.judge_url else ""}


@dataclass
class ArenaResult:
    session: Session | None
    pools: list[PoolReport]
    seconds: float

    @property
    def runs(self) -> list[AggregateRun]:
        """Every rating run made, for the core to write (:func:`harness.running.evaluate.store_runs`)."""
        return [run for pool in self.pools for run in pool.to_write]

    @property
    def judge_calls(self) -> int:
        return int(self.session.stats.get("requests", 0)) if self.session else 0

    def render(self) -> str:
        parts = [p.render() for p in self.pools] or ["judge: no pool of two or more mixers' generations to rate."]
        s = self.session
        if s is not None:
            mode = "unknown" if s.mode is None else f"{s.mode.mode} ({s.mode.reason})"
            parts.append(
                f"judge {s.judge_id} at {s.url}: verdicts {mode}; {self.judge_calls} calls "
                f"({s.stats.get('retries', 0)} retries, {s.stats.get('failed_calls', 0)} failed); server start "
                f"{s.server_start_s:.1f} s, judging {s.judging_s:.1f} s, total {self.seconds:.1f} s"
            )
            parts.append(_render_canaries(s))
        return "\n".join(parts)


def _render_canaries(s: Session) -> str:
    c = s.canaries
    if c is None:
        return "canaries: none (ratings marked unreliable: the judge was not checked against gold pairs)"
    iv = c.interval
    span = "" if iv is None else f" [{iv.low:.2f}, {iv.high:.2f}] ({c.level:.0%} Wilson)"
    reason = c.unreliable_reason()
    kinds = ", ".join(f"{k} {a}/{d}" for k, (a, d) in c.by_kind().items())
    return (
        f"canaries: agreement {c.agreement:.3f}{span} over {c.decided}/{c.asked} decided gold pairs ({kinds}); "
        + ("asked now" if c.fresh else "from the last session")
        + ("" if c.drift is None else f", {c.drift:.3f} changed since the previous session")
        + (f"\n  ratings marked unreliable: {reason}" if reason else "\n  ratings reliable: agreement above chance")
    )


def judge_runs(store: ResultsStore, cfg: ArenaConfig, preset: str | None = None,
               suite_config: dict[str, Any] | None = None, force: bool = False,
               progress: bool = True) -> ArenaResult:
    """Rate every pool in ``store`` (at ``preset``; made with ``suite_config`` when given) that needs it.

    The store is only read: the rating runs come back in :attr:`ArenaResult.runs` for the caller to write with
    :func:`harness.running.evaluate.store_runs`. ``force`` rewrites the rating runs; verdicts still come from the cache.
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
    judge_id = cfg.judge_model if cfg.judge_url else local_judge_id()
    session = Session(judge_id, redact_url(cfg.judge_url) if cfg.judge_url else "local", not cfg.judge_url, template)
    with ReplyCache(cfg.cache or None) as cache, ExitStack() as server:
        started: list[JudgeClient] = []

        def client() -> JudgeClient:
            if not started:
                endpoint = _start_judge(cfg, server, session, progress)
                started.append(JudgeClient(endpoint, seed=cfg.seed))
            return started[0]

        session.mode = _verdict_mode(cfg, cache, judge_id, template, client)
        mode = session.mode.mode
        jobs: dict[str, Job] = {}  # presentations the cache lacks (earlier failures included), over all pools
        plans = []
        for pool in pools:
            comparisons = pool.comparisons(cfg.seed, cfg.baseline or None)
            identities = {m: _rating_identity(m, pool, judge_id, template, mode, cfg) for m in pool.runs}
            ids = {m: identity.id for m, identity in identities.items()}
            missing = 0
            for c in comparisons:
                for second, left_as_a in enumerate(c.orders):
                    a, b = c.presentation(left_as_a)
                    key = reply_key(judge_id, template.hash, mode, c.prompt, a, b)
                    if key in jobs or cache.get(key) is None:
                        missing += 1
                        if key not in jobs or jobs[key].second:
                            jobs[key] = Job(key, c.prompt, a, b, bool(second))
            done = not force and not missing and all(store.has_run(r) for r in ids.values())
            plans.append((pool, comparisons, identities, done))
        if jobs:
            judge = client()
            t1 = time.perf_counter()
            order = sorted(jobs.values(), key=lambda j: j.second)  # stable: prompt order within each half
            endpoint = judge.cfg
            judge_jobs(judge, template, mode, order, cache, judge_id, endpoint.concurrency, progress)
            if cfg.canaries:
                ask_canaries(judge, template, mode, cache, judge_id, endpoint.concurrency, progress)
            session.judging_s = time.perf_counter() - t1
        if started:
            session.stats = started[0].stats()
        session.canaries = (canary_report(cache, judge_id, template, mode, fresh=bool(jobs), level=cfg.confidence)
                            if cfg.canaries else None)
        server.close()  # the judge stops before the bootstrap and the writes
        reports = [
            PoolReport(pool, "up to date", run_ids={m: i.id for m, i in identities.items()}) if done
            else _rate_pool(store, cache, session, pool, comparisons, identities, cfg, force)
            for pool, comparisons, identities, done in plans
        ]
    return ArenaResult(session, reports, time.perf_counter() - t0)


def _verdict_mode(cfg: ArenaConfig, cache: ReplyCache, judge_id: str, template: Template,
                  client: Callable[[], JudgeClient]) -> JudgeMode:
    """The verdict mode of this run: forced text, or what the judge was found to support (probed once)."""
    if cfg.verdict_mode == "text":
        return JudgeMode("text", "text verdicts were asked for")
    known = cache.judge_mode(judge_id)
    if known is None:
        known = probe_mode(client(), template)
        cache.set_judge_mode(judge_id, known)
    if cfg.verdict_mode == "probabilities" and known.mode != "probabilities":
        raise MixbenchError(f"the judge gives no probability verdicts ({known.reason}); use --verdict-mode auto "
                            "or text.")
    return known


def _start_judge(cfg: ArenaConfig, server: ExitStack, session: Session, progress: bool) -> EndpointConfig:
    if cfg.judge_url:
        endpoint = cfg.endpoint()
        check_reachable(endpoint)
        return endpoint
    local = LocalJudge(progress=progress)
    endpoint = server.enter_context(local)
    session.server_start_s = local.start_seconds or 0.0
    return EndpointConfig(endpoint.base_url, endpoint.model, cfg.api_key_env, max(cfg.timeout_s, endpoint.timeout_s),
                          cfg.max_retries, cfg.backoff_s, concurrency=1)


def _rating_identity(mixer: str, pool: Pool, judge_id: str, template: Template, mode: str,
                     cfg: ArenaConfig) -> Identity:
    """The rating run's identity (:func:`harness.store.identity.run_identity`): the rated model, the suite and its config,
    and as the suite's inputs the pool's generation runs, the judge, the template, the verdict mode, the protocol."""
    gen = pool.runs[mixer].manifest
    subject = Identity(gen.subject.id, dict(gen.identity.get("subject_parts") or {}))
    inputs = {"kind": "judge-rating", "pool": {m: r.run_id for m, r in pool.runs.items()}, "judge": judge_id,
              "template": template.hash, "mode": mode, "protocol": cfg.protocol()}
    return run_identity(subject, "judge", gen.suite_config, extra=inputs)


def _outcomes(comparisons: list[Comparison], cache: ReplyCache,
              session: Session) -> tuple[list[Outcome], dict[tuple[int, bool], Reply | None]]:
    """Outcomes from the cached replies, and the raw replies by (comparison, left shown as A)."""
    assert session.mode is not None
    mode = session.mode.mode
    outcomes, replies = [], {}
    for c in comparisons:
        scores: dict[bool, float | None] = {}
        for left_as_a in (True, False):
            reply = cache.get(reply_key(session.judge_id, session.template.hash, mode, c.prompt,
                                        *c.presentation(left_as_a)))
            replies[(id(c), left_as_a)] = reply
            scores[left_as_a] = presentation_score(reply, mode)
        outcomes.append(Outcome(c, scores[True], scores[False]))
    return outcomes, replies


def _rate_pool(store: ResultsStore, cache: ReplyCache, session: Session, pool: Pool, comparisons: list[Comparison],
               identities: dict[str, Identity], cfg: ArenaConfig, force: bool) -> PoolReport:
    t0 = time.perf_counter()
    ids = {m: i.id for m, i in identities.items()}
    assert session.mode is not None
    outcomes, replies = _outcomes(comparisons, cache, session)
    got = [reply for reply in replies.values() if reply is not None]
    report = PoolReport(
        pool, "rated", counts=count(outcomes), replies=len(got),
        unparsable=sum(presentation_score(r, session.mode.mode) is None for r in got),
        failed=len(replies) - len(got),  # every missing presentation was asked in this session and failed
        presentations=len(replies), run_ids=ids, outcomes=outcomes,
        unreliable=(session.canaries.unreliable_reason() if session.canaries is not None else
                    "the judge was not checked against the gold canaries (canaries off)"),
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
    for mixer in players:  # written by the core (harness.running.evaluate.store_runs), never here
        result = rating_result(mixer, report, outcomes, replies, session, cfg)
        manifest = rating_manifest(mixer, pool, session, report, cfg, time.perf_counter() - t0, identities[mixer])
        report.to_write.append(AggregateRun(ids[mixer], manifest, result, replace=force))
    unrated = sorted(set(pool.runs) - set(players))
    if unrated:
        report.status += f" (no complete comparison for {', '.join(unrated)})"
    return report
