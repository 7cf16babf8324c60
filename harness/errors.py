"""User-facing errors.

Every mistake a user can make (an unknown name, an invalid config, a missing file) is raised as a
:class:`MixbenchError` with one sentence saying what is wrong and what to do. The CLI prints the message
without a traceback and exits with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class MixbenchError(Exception):
    """A problem the user can fix; the message is shown as is."""


class ConfigError(MixbenchError, ValueError):
    """An invalid configuration value."""


class UnknownNameError(MixbenchError, KeyError):
    """A mixer, suite or preset name that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        listing = ", ".join(known) if known else "(none)"
        plugin = (f" A {kind} of your own module is registered only once the module is imported: pass "
                  "--plugin MODULE." if kind in ("mixer", "suite") else "")
        super().__init__(f"unknown {kind} '{name}'.{hint} Registered {kind}s: {listing}.{plugin}")
        self.kind, self.name, self.known, self.suggestion = kind, name, known, (close[0] if close else None)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class NonFiniteLossError(MixbenchError):
    """Training produced a NaN or infinite loss."""


def short_repr(value: object, limit: int = 60) -> str:
    """``repr`` for a message: long texts cut, and a huge integer described (its digits cannot even be printed
    past 4,300 of them)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 160:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
