"""A judge behind any OpenAI-compatible ``/v1/chat/completions`` endpoint, through the official ``openai`` package.

The package's own retries are switched off (``max_retries=0``) so that every attempt is counted here and the
policy is ours: 429, 5xx, 408/409, timeouts, connection errors and malformed responses are retried with
exponential backoff and full jitter (``uniform(0, min(cap, base·2^attempt))``), or after exactly the server's
``Retry-After`` when it sends one (capped by the same ``cap``); other 4xx (bad key, unknown model) fail at
once. A call that still fails is reported as failed, never turned into a verdict.

The API key is read from the environment variable the config names, when the client is built, and handed to
the ``openai`` client only; it is never stored in a config, a result or a log line.
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

from harness.errors import ConfigError, MixbenchError

DEFAULT_KEY_ENV = "MIXBENCH_JUDGE_API_KEY"
_NO_KEY = "no-key"  # local servers want none, but the openai client refuses an empty one


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
            raise ConfigError(f"judge: base URL must start with http:// or https://, got '{self.base_url}'.")
        if not self.model:
            raise ConfigError("judge: a judge model name is required with a judge URL (--judge-model).")
        if not self.api_key_env or not self.api_key_env.replace("_", "").isalnum():
            raise ConfigError(f"judge: api_key_env must name an environment variable, got '{self.api_key_env}'.")
        if self.timeout_s <= 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ConfigError("judge: timeout_s must be > 0 and backoff_s, max_backoff_s >= 0.")
        if self.max_retries < 0 or self.concurrency < 1:
            raise ConfigError("judge: max_retries must be >= 0 and concurrency >= 1.")


class JudgeCallFailed(Exception):
    """The judge gave no usable reply after every retry; ``kind`` says why."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


class JudgeClient:
    """Thread-safe: the arena calls :meth:`ask` from ``concurrency`` worker threads."""

    def __init__(self, cfg: EndpointConfig, sleep: Callable[[float], None] = time.sleep, seed: int | None = None):
        import openai

        self.cfg = cfg
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=cfg.base_url, api_key=os.environ.get(cfg.api_key_env) or _NO_KEY,
            max_retries=0, timeout=cfg.timeout_s,
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

    def ask(self, messages: list[dict[str, str]], temperature: float, max_tokens: int) -> str:
        """The reply text, or :class:`JudgeCallFailed` once retries are spent."""
        attempt = 0
        while True:
            with self._lock:
                self.requests += 1
            try:
                response = self._client.chat.completions.create(
                    model=self.cfg.model, messages=messages, temperature=temperature, max_tokens=max_tokens,
                )
                return _content(response)
            except Exception as exc:  # classified here; anything unknown is a bug and propagates
                kind, retryable, wait = self._classify(exc)
                detail = _describe(exc)
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


def _content(response: object) -> str:
    try:
        content = response.choices[0].message.content  # type: ignore[attr-defined]
    except (AttributeError, IndexError, TypeError, KeyError):
        raise _Malformed(f"no choices[0].message.content in {type(response).__name__}") from None
    if not isinstance(content, str):
        raise _Malformed("the message content is not text")
    return content


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

    try:
        urllib.request.urlopen(cfg.base_url.rstrip("/") + "/models", timeout=min(cfg.timeout_s, 10.0)).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MixbenchError(
            f"no judge answers at {cfg.base_url} ({reason}); start the server or pass another --judge-url "
            "(omit it to use the built-in local judge)."
        ) from None
