"""Optional LLM-judge scores of a unit (the paper's disentanglement, coverage and number of themes, 0-10).

The paper's rubric was not published (PAPERS.md §A.6); this one asks for the three scores from the unit's top
tokens and top contexts, the activating token marked with [[ ]], in a fixed reply format:
    DISENTANGLEMENT: <0-10>   how much the contexts share one specific concept (10: all of them, one concept)
    COVERAGE: <0-10>          how much of the contexts the best one-phrase description explains (10: all)
    THEMES: <integer>         how many distinct themes the contexts show
The judge is any ``ask(prompt) -> reply`` callable. :func:`endpoint_asker` builds one on the shared LLM-judge
client (:class:`harness.llm_judge.JudgeClient`: retries, backoff, replies redacted of the key) and its on-disk
cache (:class:`harness.llm_judge.ReplyCache`, keyed by judge model, this template's hash and the prompt), with the
built-in local judge (:class:`harness.llm_judge.LocalJudge`) when ``judge_url`` is "local". A reply that does not
parse gives no score for that unit.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterator

from suites.interpretability.profiles import UnitProfile

TEMPLATE = (
    "You are analysing one unit of a neural language model. Below are the tokens and the text contexts on which it "
    "is most active; in each context the token where it fires is marked [[like this]].\n\n"
    "Top tokens: {tokens}\n\nContexts:\n{contexts}\n\n"
    "Score the unit. DISENTANGLEMENT: 0-10, how much the contexts share one specific concept (10 = all of them, one "
    "concept). COVERAGE: 0-10, how much of the contexts your best one-phrase description of the unit explains "
    "(10 = all). THEMES: the number of distinct themes among the contexts.\n"
    "Reply with exactly three lines:\nDISENTANGLEMENT: <number>\nCOVERAGE: <number>\nTHEMES: <number>"
)
TEMPLATE_HASH = hashlib.sha256(TEMPLATE.encode()).hexdigest()[:16]
_FIELD = re.compile(r"^\s*\**\s*(DISENTANGLEMENT|COVERAGE|THEMES)\s*\**\s*[:=]\s*(\d+(?:\.\d+)?)", re.IGNORECASE | re.MULTILINE)


def prompt(p: UnitProfile) -> str:
    tokens = ", ".join(repr(t) for t, _ in p.top_tokens[:8])
    contexts = "\n".join(f"{i + 1}. {c.left}[[{c.token}]]{c.right}" for i, c in enumerate(p.contexts))
    return TEMPLATE.format(tokens=tokens, contexts=contexts)


def parse_scores(reply: str) -> dict[str, float] | None:
    """{"disentanglement", "coverage", "themes"} from a reply, or None unless all three are there and in range."""
    found = {name.lower(): float(value) for name, value in _FIELD.findall(reply)}
    if set(found) != {"disentanglement", "coverage", "themes"}:
        return None
    if not (0 <= found["disentanglement"] <= 10 and 0 <= found["coverage"] <= 10 and found["themes"] >= 0):
        return None
    return found


def judge_profiles(profiles: list[UnitProfile], ask: Callable[[str], str]) -> int:
    """Adds judge_* scores to each profile the judge scores; returns how many replies failed to parse."""
    failed = 0
    for p in profiles:
        scores = parse_scores(ask(prompt(p)))
        if scores is None:
            failed += 1
            continue
        p.scores.update({f"judge_{k}": v for k, v in scores.items()})
    return failed


@contextlib.contextmanager
def endpoint_asker(url: str, model: str, progress: bool) -> Iterator[Callable[[str], str]]:
    """An ``ask`` on the shared LLM-judge client and cache; ``url == "local"`` starts the built-in local judge."""
    from harness.kit import (
        EndpointConfig,
        JudgeCallFailed,
        JudgeClient,
        LocalJudge,
        ReplyCache,
        check_reachable,
        reply_key,
    )

    with contextlib.ExitStack() as stack:
        if url == "local":
            endpoint = stack.enter_context(LocalJudge(progress=progress))
        else:
            endpoint = EndpointConfig(url, model)
            check_reachable(endpoint)
        client = JudgeClient(endpoint)
        cache = stack.enter_context(ReplyCache())

        def ask(text: str) -> str:
            key = reply_key(endpoint.model, TEMPLATE_HASH, "text", text)
            cached = cache.get(key)
            if cached is not None:
                return cached.text
            try:
                reply = client.complete([{"role": "user", "content": text}], temperature=0.0, max_tokens=48)
            except JudgeCallFailed:
                return ""
            cache.put(key, endpoint.model, TEMPLATE_HASH, "text", reply)
            return reply.text

        yield ask
