"""The one redaction function: credentials never reach a results folder, a cache, a published site or a terminal.

Three kinds of secret are removed (docs/judge.md, "Secrets"):

* values under secret-looking keys in JSON data (``api_key``, ``token``, ``password``, ``authorization``; token
  *counts* such as ``max_new_tokens`` are not secrets);
* credentials inside URLs, wherever a URL appears in a string: the userinfo (``user:password@``) and the values of
  query parameters whose names look like keys or tokens (``?api_key=...``, ``&token=...``, ``&sig=...``);
* known secret values anywhere in a string: the values of secret-looking environment variables, plus any the
  caller passes (a judge client passes the key it was configured with, which may live under an innocent variable
  name, and the credentials it found in its URL), so an endpoint that echoes its key into a reply cannot get it
  stored.

Every writer in mixbench goes through :func:`redact` (the results store, the nightly reports) or
:func:`redact_text` / :func:`redact_url` (the LLM-judge client, its reply cache, error messages).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

REDACTED = "[redacted]"

SECRET_KEY = re.compile(r"api[_-]?key|token|secret|password|authorization", re.IGNORECASE)
# Token counts and tokenizer settings name "token" without being credentials (token_budget, n_tokens,
# max_new_tokens, tokens_per_s_decode, tokenizer_file, eos_token_id, TOKENIZERS_PARALLELISM).
_BENIGN_TOKEN = re.compile(r"token(?:s|izer|_budget|_ids?)", re.IGNORECASE)
# In a URL's query string the names are shorter and a bare "key" or "sig" is a credential (?key=..., SAS "sig").
_SECRET_PARAM = re.compile(
    r"key|token|secret|passw(?:or)?d|pwd|auth|sig(?:nature)?|credential|session", re.IGNORECASE
)
_MIN_SECRET_LEN = 8  # shorter values ("1", "true") would blank out ordinary strings
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>\\`]+")


def too_short_to_redact(value: str) -> bool:
    """A configured secret of fewer than 8 characters cannot be redacted safely (replacing "abc" everywhere would
    blank ordinary text), so whoever configures one refuses it at start-up instead of storing it unredacted."""
    return 0 < len(value) < _MIN_SECRET_LEN


def url_passwords(url: str) -> list[str]:
    """The URL's password and secret-looking query values as they are, whatever their length."""
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        password = parts.password
    except ValueError:
        return []
    return [v for k, v in query if _SECRET_PARAM.search(k) and v] + ([password] if password else [])


def is_secret_key(name: str) -> bool:
    """True for dict keys / environment variable names that hold credentials."""
    return bool(SECRET_KEY.search(_BENIGN_TOKEN.sub("", name)))


def secret_env_values() -> list[str]:
    """Values of secret-looking environment variables (at least 8 characters), longest first."""
    return _ordered(v for k, v in os.environ.items() if is_secret_key(k))


def _ordered(values: Iterable[str]) -> list[str]:
    """Distinct secrets of at least 8 characters, longest first (a secret containing another goes whole)."""
    return sorted({v for v in values if v and len(v) >= _MIN_SECRET_LEN}, key=len, reverse=True)


def url_secrets(url: str) -> list[str]:
    """The credentials a URL carries: its userinfo (also as the Basic-auth header value an HTTP client makes of
    it) and the values of its secret-looking query parameters; for redacting what a server echoes back."""
    try:
        parts = urlsplit(url)
        username, password = parts.username, parts.password
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return []
    found = [v for k, v in query if _SECRET_PARAM.search(k)]
    if username or password:
        userinfo = parts.netloc.rpartition("@")[0]
        pair = f"{username or ''}:{password or ''}"
        found += [userinfo, pair, base64.b64encode(pair.encode()).decode(), *(s for s in (username, password) if s)]
    return _ordered(found)


def redact_url(url: str) -> str:
    """``url`` without userinfo and with secret-looking query values replaced; unparsable URLs are redacted whole
    after the scheme."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
        query = parse_qsl(parts.query, keep_blank_values=True) if parts.query else []
    except ValueError:
        scheme = url.split("://", 1)[0]
        return f"{scheme}://{REDACTED}"
    netloc = parts.netloc
    if "@" in netloc:
        host = f"[{host}]" if ":" in host else host
        netloc = host + (f":{port}" if port is not None else "")
    if query and any(_SECRET_PARAM.search(k) for k, _ in query):
        pairs = [(k, REDACTED if _SECRET_PARAM.search(k) else v) for k, v in query]
        new_query = "&".join(f"{quote(k, safe='')}={quote(v, safe='[]')}" for k, v in pairs)
    else:
        new_query = parts.query
    return urlunsplit(parts._replace(netloc=netloc, query=new_query))


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every URL's credentials removed and every known secret (``secrets`` and the values of
    secret-looking environment variables) replaced by ``[redacted]``."""
    if not text:
        return text
    for secret in _ordered([*secrets, *secret_env_values()]):
        text = text.replace(secret, REDACTED)
    return _redact_urls(text)


def _redact_urls(text: str) -> str:
    return _URL.sub(lambda m: redact_url(m.group(0)), text) if "://" in text else text


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of JSON-like ``obj`` with credentials replaced by ``"[redacted]"``.

    Values under secret-looking keys are replaced (``None`` and ``""`` are kept: they show no key was set); in
    every string, URL credentials are removed and any known secret (``secrets`` plus the values of
    secret-looking environment variables) is replaced, which catches a key that travelled under an innocent
    name or inside a URL or header.
    """
    return _redact(obj, _ordered([*secrets, *secret_env_values()]))


def _redact(obj: Any, secrets: list[str]) -> Any:
    if isinstance(obj, dict):
        return {
            k: REDACTED if is_secret_key(str(k)) and v not in (None, "") else _redact(v, secrets)
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [_redact(v, secrets) for v in obj]
    if isinstance(obj, str):
        for secret in secrets:
            obj = obj.replace(secret, REDACTED)
        return _redact_urls(obj)
    return obj
