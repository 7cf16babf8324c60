"""Asking the judge: which verdict mode it supports, the missing verdicts with bounded concurrency, the canaries.

Each reply goes into the cache as soon as it arrives (from the calling thread; workers only make HTTP calls),
so an interrupted run keeps everything it paid for. Calls are kept ``2 x concurrency`` ahead of the results, and
on Ctrl-C the calls still queued are cancelled rather than awaited.

The verdict mode (:func:`probe_mode`) is found once per judge with one request for log-probabilities: a reply
that has them means ``probabilities``; a reply without them, or a 4xx refusal of the parameter when the same
request without it succeeds, means ``text``, with the reason recorded. The cache remembers the answer, so a rerun
computes its cache keys (which include the mode) without asking the judge.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from harness import stats
from harness.errors import MixbenchError
from harness.kit import GoldReply, JudgeCallFailed, JudgeClient, JudgeMode, Reply, ReplyCache
from suites.judge.canaries import CANARIES, Canary
from suites.judge.prompts import Template
from suites.judge.protocol import pair_preference
from suites.judge.verdicts import presentation_score, verdict_probabilities


@dataclass(frozen=True)
class Job:
    """One presentation to ask: the pair in the order shown, and its cache key."""

    key: str
    prompt: str
    a: str
    b: str
    second: bool  # the comparison's second presentation: asked after every first one


@dataclass(frozen=True)
class CanaryItem:
    """One gold pair's result: the presentation scores (P(A) - P(B)) with the good side as A and as B."""

    canary: Canary
    good_as_a: float | None
    good_as_b: float | None

    @property
    def preference(self) -> float | None:
        """The preference for the good side, both orders averaged; None when a presentation is missing."""
        if self.good_as_a is None or self.good_as_b is None:
            return None
        return pair_preference(self.good_as_a, self.good_as_b)

    def to_json(self) -> dict[str, Any]:
        c = self.canary
        return {"id": c.id, "kind": c.kind, "prefix": c.prefix, "good": c.good, "bad": c.bad,
                "good_as_a": self.good_as_a, "good_as_b": self.good_as_b, "preference": self.preference}


@dataclass
class CanaryReport:
    """Agreement with gold: the share of decided canary pairs (both orders read, preference not exactly 0) whose
    preference favours the good side, with its Wilson interval."""

    items: list[CanaryItem]
    session: str
    fresh: bool  # asked in this run (False: the latest session in the cache, as no judge call was needed)
    drift: float | None  # share of decided pairs whose decision changed since the previous session
    level: float

    @property
    def asked(self) -> int:
        return len(self.items)

    @property
    def decided(self) -> int:
        return sum(i.preference is not None and i.preference != 0 for i in self.items)

    @property
    def agreed(self) -> int:
        return sum(i.preference is not None and i.preference > 0 for i in self.items)

    @property
    def agreement(self) -> float:
        return self.agreed / self.decided if self.decided else math.nan

    @property
    def interval(self) -> stats.Interval | None:
        return stats.wilson_interval(self.agreed, self.decided, self.level)

    def unreliable_reason(self) -> str | None:
        """Why ratings from this judge measure nothing, or None when its agreement is above chance."""
        iv = self.interval
        if iv is None:
            return (f"no canary pair was decided ({self.asked} asked): the judge followed only the position or "
                    "gave no readable verdict")
        summary = (f"canary agreement {self.agreement:.2f} ({self.agreed}/{self.decided} gold pairs, "
                   f"{self.level:.0%} Wilson interval [{iv.low:.2f}, {iv.high:.2f}])")
        if iv.high < 0.5:
            return f"{summary} is below chance (0.5): the judge prefers the worse text"
        if iv.low <= 0.5:
            return f"{summary} includes chance (0.5): the judge cannot tell the gold pairs apart"
        return None

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """(agreed, decided) per kind of difference."""
        out: dict[str, tuple[int, int]] = {}
        for item in self.items:
            p = item.preference
            agreed, decided = out.get(item.canary.kind, (0, 0))
            out[item.canary.kind] = (agreed + int(p is not None and p > 0),
                                     decided + int(p is not None and p != 0))
        return out


@dataclass
class Session:
    """One invocation's judge: identity, where it was, its verdict mode, what it cost, what failed."""

    judge_id: str
    url: str  # redacted
    local: bool
    template: Template
    mode: JudgeMode | None = None
    stats: dict[str, Any] = field(default_factory=dict)  # the client's counts: requests, retries, failures
    server_start_s: float = 0.0
    judging_s: float = 0.0
    canaries: CanaryReport | None = None


def probe_mode(client: JudgeClient, template: Template) -> JudgeMode:
    """Whether the judge returns log-probabilities, from one request on the first canary (see the module doc)."""
    canary = CANARIES[0]
    messages = template.messages(canary.prefix, canary.good, canary.bad)
    try:
        reply = client.complete(messages, template.temperature, template.max_tokens, template.top_logprobs)
    except JudgeCallFailed as exc:
        if not exc.kind.startswith("http_4"):
            raise MixbenchError(f"the judge did not answer a first request ({exc}); check the server.") from None
        try:
            client.complete(messages, template.temperature, template.max_tokens)
        except JudgeCallFailed as again:
            raise MixbenchError(f"the judge refused the request ({again}); check the model name and key.") from None
        return JudgeMode("text", f"the server refused log-probabilities ({exc})")
    if reply.tokens is None:
        return JudgeMode("text", "the server returned no log-probabilities")
    if not any(t.top for t in reply.tokens):
        return JudgeMode("text", "the server returned no top_logprobs alternatives")
    return JudgeMode("probabilities", "the server returned log-probabilities")


def _ask(client: JudgeClient, template: Template, mode: str, messages: list[dict[str, str]]) -> Reply:
    top = template.top_logprobs if mode == "probabilities" else None
    return client.complete(messages, template.temperature, template.max_tokens, top)


def judge_jobs(client: JudgeClient, template: Template, mode: str, jobs: list[Job], cache: ReplyCache,
               judge_id: str, concurrency: int, progress: bool) -> None:
    """Ask for every job, caching each reply as it arrives; a failed call leaves its job uncached."""
    requests = [(template.messages(job.prompt, job.a, job.b),
                 lambda reply, job=job: cache.put(job.key, judge_id, template.hash, mode, reply)) for job in jobs]
    _ask_all(client, template, mode, requests, concurrency, progress, "judge: verdicts")


def ask_canaries(client: JudgeClient, template: Template, mode: str, cache: ReplyCache, judge_id: str,
                 concurrency: int = 1, progress: bool = False) -> str:
    """Ask every gold pair in both orders (never from the cache); returns the new session's id."""
    session = uuid.uuid4().hex[:12]
    requests = []
    for canary in CANARIES:
        for good_first in (True, False):
            a, b = (canary.good, canary.bad) if good_first else (canary.bad, canary.good)
            requests.append((template.messages(canary.prefix, a, b),
                             lambda reply, c=canary.id, g=good_first: cache.put_gold(
                                 session, judge_id, template.hash, mode, GoldReply(c, g, reply))))
    _ask_all(client, template, mode, requests, concurrency, progress, "judge: canaries")
    return session


def _ask_all(client: JudgeClient, template: Template, mode: str,
             requests: list[tuple[list[dict[str, str]], Callable[[Reply], None]]], concurrency: int, progress: bool,
             desc: str) -> None:
    """Ask every request with at most ``concurrency`` calls in flight; each reply is handed to its callback from
    this thread as it arrives, failed calls are skipped (the client counts them)."""
    bar = tqdm(total=len(requests), desc=desc, unit="call", disable=not progress, leave=False)
    pool = ThreadPoolExecutor(max_workers=concurrency)
    pending: dict[Future, Callable[[Reply], None]] = {}
    queue = iter(requests)

    def submit(request: tuple[list[dict[str, str]], Callable[[Reply], None]]) -> None:
        messages, on_reply = request
        pending[pool.submit(_ask, client, template, mode, messages)] = on_reply

    try:
        for request in queue:
            submit(request)
            if len(pending) >= 2 * concurrency:
                break
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                on_reply = pending.pop(fut)
                try:
                    on_reply(fut.result())
                except JudgeCallFailed:
                    pass  # counted by the client; the next run asks again
                bar.update(1)
                nxt = next(queue, None)
                if nxt is not None:
                    submit(nxt)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        bar.close()


def canary_report(cache: ReplyCache, judge_id: str, template: Template, mode: str, fresh: bool,
                  level: float = 0.95) -> CanaryReport | None:
    """Agreement with gold in the latest session of this judge, template and mode, and drift from the one before."""
    sessions = cache.gold_sessions(judge_id, template.hash, mode)
    if not sessions:
        return None

    def items(session: str) -> list[CanaryItem]:
        replies = {(r.item_id, r.variant): r.reply for r in cache.gold_replies(session)}
        return [CanaryItem(c, presentation_score(replies.get((c.id, True)), mode),
                           presentation_score(replies.get((c.id, False)), mode)) for c in CANARIES]

    latest = items(sessions[-1])
    drift = None
    if len(sessions) > 1:
        before = {i.canary.id: i.preference for i in items(sessions[-2])}
        shared = [(i.preference, before[i.canary.id]) for i in latest
                  if i.preference is not None and before.get(i.canary.id) is not None]
        drift = sum((a > 0) != (b > 0) for a, b in shared) / len(shared) if shared else None
    return CanaryReport(latest, sessions[-1], fresh, drift, level)


__all__ = ["CanaryItem", "CanaryReport", "Job", "Session", "ask_canaries", "canary_report", "judge_jobs",
           "probe_mode", "verdict_probabilities"]
