"""The long-context suite: loss by position far past the training context, and retrieval (passkey, needles,
RULER-style tasks) by log-likelihood ranking (docs/long_context.md)."""

from suites.long_context.suite import LongContext, LongContextConfig

__all__ = ["LongContext", "LongContextConfig"]
