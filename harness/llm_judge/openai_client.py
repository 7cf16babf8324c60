"""An LLM judge behind any OpenAI-compatible ``/v1/chat/completions`` endpoint, through the official ``openai`` package.

The package's own retries are switched off (``max_retries=0``) so that every attempt is counted here and the
policy is ours: 429, 5xx, 408/409, timeouts, connection errors and malformed responses are retried with
exponential backoff and full jitter (``uniform(0, min(cap, base·2^attempt))``), or after exactly the server's
``Retry-After`` when it sends one (capped by the same ``cap``); other 4xx (bad key, unknown model, a parameter the
server refuses) fail at once. A call that still fails is reported as failed, never turned into a reply.

:meth:`JudgeClient.complete` can ask for the log-probabilities of the generated tokens (``logprobs`` /
``top_logprobs`` in the chat API; vLLM, llama.cpp's server and OpenAI return them): the :class:`Reply` then
carries each generated token with its most likely alternatives, or ``tokens=None`` when the server sent none.

Secrets (docs/judge.md, "Secrets"): the API key is read from the environment variable the config names when the
client is built and handed to the ``openai`` client only. Query parameters of the base URL (``?api_key=...``)
are sent as the client's default query, so they reach the server and not the path. Everything the judge sends
back is redacted of the key and of the URL's credentials (:mod:`harness.store.redaction`) before it leaves this
module, so no reply that is cached, stored or printed can carry them; error details and URLs in messages are
redacted too.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from harness.errors import ConfigError, MixbenchError
from harness.store.redaction import redact_text, redact_url, too_short_to_redact, url_passwords, url_secrets

DEFAULT_KEY_ENV = "MIXBENCH_JUDGE_API_KEY"
_NO_KEY = "no-key"  # local servers want none, but the openai client refuses an empty one
MAX_TOP_LOGPROBS = 20  # the OpenAI API's limit


@dataclass(frozen=True)
class EndpointConfig:
    """Where the judge is and how hard to try. ``api_key_env`` names the variable holding the key."""

    base_url: str
    model: str
    api_key_env: str = DEFAULT_KEY_ENV
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    concurrency: int = 2

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"judge: base URL must start with http:// or https://, got '{redact_url(self.base_url)}'."
            )
        if not self.model:
            raise ConfigError("judge: a judge model name is required with a judge URL (--judge-model).")
        if not self.api_key_env or not self.api_key_env.replace("_", "").isalnum():
            raise ConfigError(f"judge: api_key_env must name an environment variable, got '{self.api_key_env}'.")
        if self.timeout_s <= 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ConfigError("judge: timeout_s must be > 0 and backoff_s, max_backoff_s >= 0.")
        if self.max_retries < 0 or self.concurrency < 1:
            raise ConfigError("judge: max_retries must be >= 0 and concurrency >= 1.")
        key = os.environ.get(self.api_key_env, "")
        if too_short_to_redact(key):
            raise ConfigError(
                f"judge: the key in {self.api_key_env} is {len(key)} characters long; a key of fewer than 8 cannot be "
                "kept out of replies, caches and records without blanking ordinary text, so it is refused: set the "
                "server's real key (a server that ignores keys takes any longer string)."
            )
        if any(too_short_to_redact(v) for v in url_passwords(self.base_url)):
            raise ConfigError(
                f"judge: a password or key in the judge URL {self.safe_url} is shorter than 8 characters and could "
                f"not be kept out of what is stored; put a real key in {self.api_key_env} instead."
            )

    @property
    def safe_url(self) -> str:
        """The base URL as it may be recorded or printed (:func:`harness.store.redaction.redact_url`)."""
        return redact_url(self.base_url)

    def secrets(self) -> list[str]:
        """What must never leave the client: the configured key and the URL's credentials."""
        key = os.environ.get(self.api_key_env, "")
        return [s for s in (key, *url_secrets(self.base_url)) if s]


@dataclass(frozen=True)
class TokenChoice:
    """One generated token, its log-probability and the server's ``top_logprobs`` alternatives at that step."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Reply:
    """The judge's answer: the text, and the generated tokens with log-probabilities when the server sent them."""

    text: str
    tokens: tuple[TokenChoice, ...] | None = None

    def tokens_json(self) -> str | None:
        if self.tokens is None:
            return None
        return json.dumps([[t.token, t.logprob, [list(p) for p in t.top]] for t in self.tokens], ensure_ascii=False)

    @staticmethod
    def from_json(text: str, tokens_json: str | None) -> "Reply":
        if tokens_json is None:
            return Reply(text)
        rows = json.loads(tokens_json)
        return Reply(text, tuple(TokenChoice(t, float(lp), tuple((a, float(b)) for a, b in top))
                                 for t, lp, top in rows))


class JudgeCallFailed(Exception):
    """The judge gave no usable reply after every retry; ``kind`` says why (``http_400``, ``timeout``, ...)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class JudgeClient:
    """Thread-safe: the judge suite calls :meth:`complete` from ``concurrency`` worker threads."""

    def __init__(self, cfg: EndpointConfig, sleep: Callable[[float], None] = time.sleep, seed: int | None = None):
        import openai

        self.cfg = cfg
        self._openai = openai
        self._secrets = cfg.secrets()
        base_url, query = _split_query(cfg.base_url)
        self._client = openai.OpenAI(
            base_url=base_url, api_key=os.environ.get(cfg.api_key_env) or _NO_KEY,
            max_retries=0, timeout=cfg.timeout_s, default_query=query or None,
        )
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.requests = 0
        self.retries = 0
        self.failed = 0
        self.errors: Counter[str] = Counter()  # failed attempts by kind (each retry counts)

    def stats(self) -> dict[str, object]:
        with self._lock:
            return {"requests": self.requests, "retries": self.retries, "failed_calls": self.failed,
                    "errors": dict(sorted(self.errors.items()))}

    def redact(self, text: str) -> str:
        """``text`` without this client's key or URL credentials (for anything the server said)."""
        return redact_text(text, self._secrets)

    def ask(self, messages: list[dict[str, str]], temperature: float, max_tokens: int) -> str:
        """The reply text (redacted), or :class:`JudgeCallFailed` once retries are spent."""
        return self.complete(messages, temperature, max_tokens).text

    def complete(self, messages: list[dict[str, str]], temperature: float, max_tokens: int,
                 top_logprobs: int | None = None) -> Reply:
        """The reply, with per-token log-probabilities when ``top_logprobs`` is given and the server has them."""
        extra: dict[str, Any] = {}
        if top_logprobs is not None:
            extra = {"logprobs": True, "top_logprobs": min(max(int(top_logprobs), 1), MAX_TOP_LOGPROBS)}
        attempt = 0
        while True:
            with self._lock:
                self.requests += 1
            try:
                response = self._client.chat.completions.create(
                    model=self.cfg.model, messages=messages, temperature=temperature, max_tokens=max_tokens, **extra,
                )
                return self._reply(response)
            except Exception as exc:  # classified here; anything unknown is a bug and propagates
                kind, retryable, wait = self._classify(exc)
                detail = self.redact(_describe(exc))
            with self._lock:
                self.errors[kind] += 1
                give_up = not retryable or attempt >= self.cfg.max_retries
                if give_up:
                    self.failed += 1
                else:
                    self.retries += 1
            if give_up:
                raise JudgeCallFailed(kind, detail)
            self._sleep(wait if wait is not None else self._backoff(attempt))
            attempt += 1

    def _reply(self, response: object) -> Reply:
        try:
            choice = response.choices[0]  # type: ignore[attr-defined]
            content = choice.message.content
        except (AttributeError, IndexError, TypeError, KeyError):
            raise _Malformed(f"no choices[0].message.content in {type(response).__name__}") from None
        if not isinstance(content, str):
            raise _Malformed("the message content is not text")
        return Reply(self.redact(content), self._tokens(getattr(choice, "logprobs", None)))

    def _tokens(self, logprobs: object) -> tuple[TokenChoice, ...] | None:
        content = getattr(logprobs, "content", None) if logprobs is not None else None
        if not content:
            return None
        out = []
        for item in content:
            token, logprob = getattr(item, "token", None), getattr(item, "logprob", None)
            if not isinstance(token, str) or not isinstance(logprob, (int, float)):
                return None  # not the shape the API documents: treat as no probabilities
            top = tuple((self.redact(t.token), float(t.logprob)) for t in (getattr(item, "top_logprobs", None) or [])
                        if isinstance(getattr(t, "token", None), str) and isinstance(t.logprob, (int, float)))
            out.append(TokenChoice(self.redact(token), float(logprob), top))
        return tuple(out)

    def _backoff(self, attempt: int) -> float:
        with self._lock:
            return self._rng.uniform(0, min(self.cfg.max_backoff_s, self.cfg.backoff_s * 2**attempt))

    def _classify(self, exc: Exception) -> tuple[str, bool, float | None]:
        """(kind, retryable, server-requested wait)."""
        o = self._openai
        if isinstance(exc, (_Malformed, o.APIResponseValidationError, json.JSONDecodeError)):
            return "malformed", True, None
        if isinstance(exc, o.APITimeoutError):
            return "timeout", True, None
        if isinstance(exc, o.APIConnectionError):
            return "connection", True, None
        if isinstance(exc, o.APIStatusError):
            status = exc.status_code
            wait = _retry_after(exc.response.headers, self.cfg.max_backoff_s)
            if status == 429:
                return "rate_limited", True, wait
            if status >= 500:
                return "server_error", True, wait
            if status in (408, 409):
                return f"http_{status}", True, wait
            return f"http_{status}", False, None
        raise exc


class _Malformed(Exception):
    """A 200 response without a message to read."""


def _split_query(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without its query, the query parameters): the openai client appends paths to ``base_url`` and
    takes query parameters separately."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="", fragment="")), dict(parse_qsl(parts.query, keep_blank_values=True))


def _retry_after(headers: object, cap: float) -> float | None:
    """Seconds from ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``, capped; None if absent."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    ms = get("retry-after-ms")
    raw = get("retry-after")
    seconds: float | None = None
    try:
        if ms is not None:
            seconds = float(ms) / 1000
        elif raw is not None:
            seconds = float(raw)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(raw) if raw else None
        seconds = parsed.timestamp() - time.time() if parsed else None
    return None if seconds is None else min(max(seconds, 0.0), cap)


def _describe(exc: Exception) -> str:
    """One line about a failure; status and message only (request headers, which carry the key, never)."""
    status = getattr(exc, "status_code", None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"HTTP {status}: {text[:200]}" if status else text[:200]


def check_reachable(cfg: EndpointConfig) -> None:
    """Fail early, with advice, when nothing answers at the judge URL (any HTTP status counts as an answer)."""
    import urllib.error
    import urllib.request

    parts = urlsplit(cfg.base_url)
    try:
        host = parts.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    except ValueError:
        raise MixbenchError(f"the judge URL {cfg.safe_url} has an invalid port; check --judge-url.") from None
    probe = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/models", "", ""))  # no credentials
    try:
        urllib.request.urlopen(probe, timeout=min(cfg.timeout_s, 10.0)).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = redact_text(str(getattr(exc, "reason", exc)), cfg.secrets())
        raise MixbenchError(
            f"no judge answers at {cfg.safe_url} ({reason}); start the server or pass another --judge-url "
            "(omit it to use the built-in local judge)."
        ) from None
