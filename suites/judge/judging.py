"""Asking the judge: the missing verdicts with bounded concurrency, and the drift canaries.

Each reply goes into the cache as soon as it arrives (from the calling thread; workers only make HTTP calls),
so an interrupted run keeps everything it paid for. Calls are kept ``2 x concurrency`` ahead of the results, and
on Ctrl-C the calls still queued are cancelled rather than awaited.
"""

from __future__ import annotations

import math
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tqdm.auto import tqdm

from suites.judge.cache import CanaryReply, JudgeCache
from suites.judge.client import JudgeCallFailed, JudgeClient
from suites.judge.prompts import CANARIES, Template, Verdict, parse_verdict


@dataclass(frozen=True)
class Job:
    """One presentation to ask: the pair in the order shown, and its cache key."""

    key: str
    prompt: str
    a: str
    b: str
    second: bool  # the comparison's second presentation: asked after every first one


@dataclass
class CanaryReport:
    agreement: float  # share of parsed canary verdicts that chose the good side
    parsed: int
    asked: int
    drift: float | None  # share of canary verdicts that changed since the previous session (None: no previous)
    session: str
    fresh: bool  # asked in this run (False: the latest session in the cache, as no judge call was needed)


@dataclass
class Session:
    """One invocation's judge: identity, where it was, what it cost, what failed."""

    judge_id: str
    url: str
    local: bool
    template: Template
    stats: dict[str, Any] = field(default_factory=dict)  # the client's counts: requests, retries, failures
    server_start_s: float = 0.0
    judging_s: float = 0.0
    canaries: CanaryReport | None = None


def judge_jobs(client: JudgeClient, template: Template, jobs: list[Job], cache: JudgeCache, judge_id: str,
               concurrency: int, progress: bool) -> None:
    """Ask for every job, caching each reply as it arrives; a failed call leaves its job uncached."""
    bar = tqdm(total=len(jobs), desc="judge: verdicts", unit="call", disable=not progress, leave=False)
    pool = ThreadPoolExecutor(max_workers=concurrency)
    pending: dict[Future, Job] = {}
    queue = iter(jobs)

    def submit(job: Job) -> None:
        messages = template.messages(job.prompt, job.a, job.b)
        pending[pool.submit(client.ask, messages, template.temperature, template.max_tokens)] = job

    try:
        for job in queue:
            submit(job)
            if len(pending) >= 2 * concurrency:
                break
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                job = pending.pop(fut)
                try:
                    cache.put(job.key, judge_id, template.hash, fut.result())
                except JudgeCallFailed:
                    pass  # counted by the client; the next run asks again
                bar.update(1)
                nxt = next(queue, None)
                if nxt is not None:
                    submit(nxt)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        bar.close()


def ask_canaries(client: JudgeClient, template: Template, cache: JudgeCache, judge_id: str) -> str:
    """Ask every gold pair in both orders (never from the cache); returns the new session's id."""
    session = uuid.uuid4().hex[:12]
    for canary in CANARIES:
        for good_first in (True, False):
            a, b = (canary.good, canary.bad) if good_first else (canary.bad, canary.good)
            try:
                reply = client.ask(template.messages(canary.prefix, a, b), template.temperature, template.max_tokens)
            except JudgeCallFailed:
                continue
            cache.put_canary(session, judge_id, template.hash, CanaryReply(canary.id, good_first, reply))
    return session


def canary_report(cache: JudgeCache, judge_id: str, template: Template, fresh: bool) -> CanaryReport | None:
    """Agreement with gold in the latest session of this judge and template, and drift from the one before."""
    sessions = cache.canary_sessions(judge_id, template.hash)
    if not sessions:
        return None

    def verdicts(session: str) -> dict[tuple[str, bool], Verdict | None]:
        return {(r.canary_id, r.good_first): parse_verdict(r.reply) for r in cache.canary_replies(session)}

    latest = verdicts(sessions[-1])
    parsed = {k: v for k, v in latest.items() if v is not None}
    good = sum(v == ("A" if good_first else "B") for (_, good_first), v in parsed.items())
    drift = None
    if len(sessions) > 1:
        previous = verdicts(sessions[-2])
        shared = [k for k in latest if k in previous]
        drift = sum(latest[k] != previous[k] for k in shared) / len(shared) if shared else None
    return CanaryReport(good / len(parsed) if parsed else math.nan, len(parsed), 2 * len(CANARIES), drift,
                        sessions[-1], fresh)


def safe_url(url: str) -> str:
    """The URL without ``user:password@`` (a key can hide there), for records."""
    parts = urlsplit(url)
    if not parts.hostname:
        return url
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))
