"""Shared LLM-judge infrastructure: any suite that asks a language model for a judgement uses these.

* :mod:`harness.llm_judge.openai_client`: :class:`JudgeClient` for any OpenAI-compatible chat endpoint, with
  counted retries, optional per-token log-probabilities (:class:`Reply`) and redaction of everything the server
  sends back;
* :mod:`harness.llm_judge.reply_cache`: :class:`ReplyCache`, the SQLite cache of replies (a rerun makes no call),
  gold-item sessions and the verdict mode each judge supports;
* :mod:`harness.llm_judge.local_server`: :class:`LocalJudge`, the offline default judge (SmolLM2-135M-Instruct on
  llama.cpp's server) started and stopped on 127.0.0.1.

The judge suite (pairwise preferences) and the interpretability suite (unit scores) build on it; what a reply
means is theirs to decide. Design notes: docs/judge.md.
"""

from harness.llm_judge.local_server import LocalJudge, local_judge_id
from harness.llm_judge.openai_client import (
    DEFAULT_KEY_ENV,
    EndpointConfig,
    JudgeCallFailed,
    JudgeClient,
    Reply,
    TokenChoice,
    check_reachable,
)
from harness.llm_judge.reply_cache import GoldReply, JudgeMode, ReplyCache, reply_key

__all__ = [
    "DEFAULT_KEY_ENV", "EndpointConfig", "GoldReply", "JudgeCallFailed", "JudgeClient", "JudgeMode", "LocalJudge",
    "Reply", "ReplyCache", "TokenChoice", "check_reachable", "local_judge_id", "reply_key",
]  # fmt: skip
