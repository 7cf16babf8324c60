"""Numbers as the board, the reports and the site print them: significant digits, thousands separators, SI
prefixes (docs/ARCHITECTURE.md, "The board"). A leaf module: every reporting module may import it."""

from __future__ import annotations

import math
from typing import Any

#: what a missing value prints as
MISSING = "—"


def decimals(x: float, significant: int) -> int | None:
    """Decimals that show ``x`` to ``significant`` digits; None where scientific notation is clearer."""
    a = abs(x)
    if a == 0 or not math.isfinite(a):
        return 2
    if a < 1e-3 or a >= 1e7:
        return None
    return max(0, significant - 1 - math.floor(math.log10(a)))


def fmt(x: float | None, significant: int = 4, digits: int | None = -1) -> str:
    if x is None:
        return MISSING
    if not math.isfinite(x):
        return "n/a"
    d = decimals(x, significant) if digits == -1 else digits
    return f"{x:.3e}" if d is None else f"{x:.{d}f}"


def readable(v: Any, significant: int = 4) -> str:
    """A number as a reader wants it: integers with thousands separators (``714,639``); other numbers to
    ``significant`` digits with thousands separators: ``908.9``, ``0.01234``, ``9,001``, ``11,962``; SI prefixes from
    ten million (``46.88G``), scientific below 0.001 (``1.234e-05``). None is missing, NaN and infinities n/a."""
    if v is None:
        return MISSING
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if not math.isfinite(v):
        return "n/a"
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e7:
        return si(v, significant=significant)
    if a >= 1e4:
        return f"{v:,.0f}"
    if a < 1e-3:
        return f"{v:.{significant - 1}e}"
    digits = max(0, significant - 1 - math.floor(math.log10(a)))
    return f"{v:,.0f}" if round(a, digits) >= 1e4 else f"{v:,.{digits}f}"


SI_PREFIXES = (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def si(v: float | int | None, unit: str = "", significant: int = 3) -> str:
    """``715k``, ``2k``, ``1.66 TFLOP``: up to ``significant`` digits and an SI prefix (a space before it when a unit
    follows)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return readable(v)
    for prefix, scale in SI_PREFIXES:
        if abs(v) >= scale:
            x = v / scale
            digits = max(0, significant - 1 - math.floor(math.log10(abs(x))))
            text = f"{x:.{digits}f}"
            text = text.rstrip("0").rstrip(".") if "." in text else text  # 2k, not 2.00k
            return f"{text}{' ' if unit else ''}{prefix}{unit}"
    return f"{readable(v, significant)}{' ' + unit if unit else ''}"


def compact_number(x: float, significant: int = 3) -> str:
    """A short number for the compact view: 3 significant digits, k/M/G above 10 000, no leading zero below 1."""
    if not math.isfinite(x):
        return "n/a"
    a = abs(x)
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e4)):
        if a >= scale:
            scale = 1e3 if suffix == "k" else scale
            return f"{x / scale:.{max(0, significant - 1 - math.floor(math.log10(a / scale)))}f}{suffix}"
    if a == 0:
        return "0"
    digits = max(0, significant - 1 - math.floor(math.log10(a)))
    text = f"{x:.{digits}f}"
    if 0 < a < 1:
        text = text.replace("0.", ".", 1)
    return text
