"""The judge cache: every reply the judge ever gave, on disk, so a rerun makes no judge calls.

SQLite in WAL mode: readers never block the one writer and other processes can read while a run writes; each
reply is committed as soon as it arrives, so an interrupted run loses nothing it already paid for. A verdict's
key is the sha256 of (judge model, template hash, prompt, output shown as A, output shown as B), so the order
of presentation is part of the key. The raw reply is stored, not the parsed verdict: a better parser re-reads
old replies without asking the judge again. Replies the judge could not give (failed calls) are not stored,
so the next run asks again.

Canary replies go to their own table, one row per (session, canary, order): they are re-asked in every run
that calls the judge, and the previous session is what drift is measured against.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from harness.data import default_cache_dir
from harness.errors import MixbenchError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    key TEXT PRIMARY KEY,
    judge_model TEXT NOT NULL,
    template_hash TEXT NOT NULL,
    reply TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS canaries (
    session TEXT NOT NULL,
    judge_model TEXT NOT NULL,
    template_hash TEXT NOT NULL,
    canary_id TEXT NOT NULL,
    good_first INTEGER NOT NULL,
    reply TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session, canary_id, good_first)
);
"""


def default_cache_path() -> Path:
    return default_cache_dir() / "judge" / "verdicts.sqlite"


def verdict_key(judge_model: str, template_hash: str, prompt: str, output_a: str, output_b: str) -> str:
    payload = json.dumps([judge_model, template_hash, prompt, output_a, output_b], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class CanaryReply:
    canary_id: str
    good_first: bool
    reply: str


class JudgeCache:
    """One SQLite file; use from one thread (the arena writes from its main thread as calls complete)."""

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

    def __enter__(self) -> "JudgeCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, key: str) -> str | None:
        row = self._db.execute("SELECT reply FROM verdicts WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, judge_model: str, template_hash: str, reply: str) -> None:
        """Store a reply; the first reply for a key wins (a concurrent writer's equal-key reply is ignored)."""
        with self._db:
            self._db.execute("INSERT OR IGNORE INTO verdicts VALUES (?, ?, ?, ?, ?)",
                             (key, judge_model, template_hash, reply, _now()))

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    def put_canary(self, session: str, judge_model: str, template_hash: str, reply: CanaryReply) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO canaries VALUES (?, ?, ?, ?, ?, ?, ?)",
                (session, judge_model, template_hash, reply.canary_id, int(reply.good_first), reply.reply, _now()),
            )

    def canary_sessions(self, judge_model: str, template_hash: str) -> list[str]:
        """Sessions of this judge and template, oldest first."""
        rows = self._db.execute(
            "SELECT session, MIN(created_at) AS t FROM canaries WHERE judge_model = ? AND template_hash = ? "
            "GROUP BY session ORDER BY t",
            (judge_model, template_hash),
        ).fetchall()
        return [r[0] for r in rows]

    def canary_replies(self, session: str) -> list[CanaryReply]:
        rows = self._db.execute(
            "SELECT canary_id, good_first, reply FROM canaries WHERE session = ? ORDER BY canary_id, good_first",
            (session,),
        ).fetchall()
        return [CanaryReply(cid, bool(gf), reply) for cid, gf, reply in rows]
