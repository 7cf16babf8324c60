"""The LLM-judge reply cache: every reply a judge ever gave, on disk, so a rerun makes no judge call.

SQLite in WAL mode: readers never block the one writer and other processes can read while a run writes; each
reply is committed as soon as it arrives, so an interrupted run loses nothing it already paid for.

* ``replies``: a reply by key. The key (:func:`reply_key`) is the sha256 of the judge's identity, the request
  template's hash, the verdict mode (``probabilities`` or ``text``: a reply asked for with log-probabilities is a
  different request) and the request's own parts (for a pairwise verdict: prompt, output shown as A, output shown
  as B, so the order of presentation is part of the key). The raw reply is stored, with its tokens'
  log-probabilities when it has them, not a parsed verdict: a better parser re-reads old replies without asking
  again. Calls that failed are not stored, so the next run asks again.
* ``gold_replies``: replies to a fixed set of gold items (the judge suite's canaries), one row per (session, item,
  variant); they are re-asked in every session that calls the judge, and the previous session is what drift is
  measured against.
* ``judge_modes``: the verdict mode each judge was found to support (a server either returns log-probabilities
  or not), so a rerun can compute its cache keys without asking the judge.

Everything written is passed through :func:`harness.store.redaction.redact_text` once more (the client has already
removed its own key), so URL credentials or secret environment values a reply might carry never reach the file.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from harness.store.storage import cache_dir
from harness.errors import MixbenchError
from harness.llm_judge.openai_client import Reply
from harness.store.redaction import redact_text

MODES = ("probabilities", "text")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    judge TEXT NOT NULL,
    template_hash TEXT NOT NULL,
    mode TEXT NOT NULL,
    reply TEXT NOT NULL,
    tokens TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS gold_replies (
    session TEXT NOT NULL,
    judge TEXT NOT NULL,
    template_hash TEXT NOT NULL,
    mode TEXT NOT NULL,
    item_id TEXT NOT NULL,
    variant INTEGER NOT NULL,
    reply TEXT NOT NULL,
    tokens TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session, item_id, variant)
);
CREATE TABLE IF NOT EXISTS judge_modes (
    judge TEXT PRIMARY KEY,
    mode TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


def default_cache_path() -> Path:
    return cache_dir() / "judge" / "replies.sqlite"


def reply_key(judge: str, template_hash: str, mode: str, *parts: str) -> str:
    """The cache key of one request: judge identity, template, verdict mode and the request's parts."""
    if mode not in MODES:
        raise ValueError(f"reply_key: mode must be one of {', '.join(MODES)}, got {mode!r}")
    payload = json.dumps([judge, template_hash, mode, *parts], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class GoldReply:
    item_id: str
    variant: bool
    reply: Reply


@dataclass(frozen=True)
class JudgeMode:
    mode: str
    reason: str


class ReplyCache:
    """One SQLite file; use from one thread (the judge suite writes from its main thread as calls complete)."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_cache_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise MixbenchError(
                f"cannot open the judge cache {self.path} ({exc}); set MIXBENCH_CACHE or pass --judge-cache to a "
                "writable folder."
            ) from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "ReplyCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------------------- replies
    def get(self, key: str) -> Reply | None:
        row = self._db.execute("SELECT reply, tokens FROM replies WHERE key = ?", (key,)).fetchone()
        return None if row is None else Reply.from_json(row[0], row[1])

    def put(self, key: str, judge: str, template_hash: str, mode: str, reply: Reply) -> None:
        """Store a reply; the first reply for a key wins (a concurrent writer's equal-key reply is ignored)."""
        text, tokens = _clean(reply)
        with self._db:
            self._db.execute("INSERT OR IGNORE INTO replies VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (key, judge, template_hash, mode, text, tokens, _now()))

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    # -------------------------------------------------------------------------------- gold items
    def put_gold(self, session: str, judge: str, template_hash: str, mode: str, reply: GoldReply) -> None:
        text, tokens = _clean(reply.reply)
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO gold_replies VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session, judge, template_hash, mode, reply.item_id, int(reply.variant), text, tokens, _now()),
            )

    def gold_sessions(self, judge: str, template_hash: str, mode: str) -> list[str]:
        """Sessions of this judge, template and mode, oldest first."""
        rows = self._db.execute(
            "SELECT session, MIN(created_at) AS t FROM gold_replies WHERE judge = ? AND template_hash = ? "
            "AND mode = ? GROUP BY session ORDER BY t",
            (judge, template_hash, mode),
        ).fetchall()
        return [r[0] for r in rows]

    def gold_replies(self, session: str) -> list[GoldReply]:
        rows = self._db.execute(
            "SELECT item_id, variant, reply, tokens FROM gold_replies WHERE session = ? ORDER BY item_id, variant",
            (session,),
        ).fetchall()
        return [GoldReply(item, bool(variant), Reply.from_json(text, tokens)) for item, variant, text, tokens in rows]

    # -------------------------------------------------------------------------------- judge modes
    def judge_mode(self, judge: str) -> JudgeMode | None:
        row = self._db.execute("SELECT mode, reason FROM judge_modes WHERE judge = ?", (judge,)).fetchone()
        return None if row is None else JudgeMode(row[0], row[1])

    def set_judge_mode(self, judge: str, mode: JudgeMode) -> None:
        if mode.mode not in MODES:
            raise ValueError(f"judge mode must be one of {', '.join(MODES)}, got {mode.mode!r}")
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO judge_modes VALUES (?, ?, ?, ?)",
                             (judge, mode.mode, redact_text(mode.reason), _now()))


def _clean(reply: Reply) -> tuple[str, str | None]:
    tokens = reply.tokens_json()
    return redact_text(reply.text), None if tokens is None else redact_text(tokens)
