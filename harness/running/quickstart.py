"""The embedded default run (`mixbench quickstart` / `make quickstart`): the mixers and suites that declare a
quickstart part (docs/ARCHITECTURE.md "Quickstart").

Budget: `make quickstart` must finish within 15 minutes on a fresh 2-core CPU machine, setup included. Training
the mixers at preset ``quick`` takes most of it, so each suite runs the reduced configuration it declares in
:attr:`harness.suite.Suite.quickstart` (the full protocols stay the suites' defaults). A mixer takes part when
its class says ``quickstart = True`` (the paper's four built-ins). The core names neither.
"""

from __future__ import annotations

from typing import Any

from harness.errors import ConfigError
from harness.registry import MIXERS, SUITES


def quickstart_mixers() -> list[str]:
    """Registered mixers that declare ``quickstart = True``, in registration order of their names."""
    return [e.name for e in MIXERS.entries() if getattr(e.cls, "quickstart", False)]


def quickstart_suites() -> dict[str, dict[str, Any]]:
    """Suite name -> its reduced quickstart config, for every registered suite that declares one."""
    return {e.name: dict(e.cls.quickstart) for e in SUITES.entries() if e.cls.quickstart is not None}


def quickstart_budgets() -> dict[float, list[str]]:
    """Fraction of the preset's token budget -> the quickstart suites that also score models trained at it
    (:attr:`harness.suite.Suite.quickstart_budgets`), smallest first."""
    out: dict[float, list[str]] = {}
    for e in SUITES.entries():
        if e.cls.quickstart is None:
            continue
        for fraction in e.cls.quickstart_budgets:
            if not 0 < fraction < 1:
                raise ConfigError(f"suite {e.name}: quickstart_budgets are fractions in (0, 1), got {fraction!r}.")
            out.setdefault(float(fraction), []).append(e.name)
    return dict(sorted(out.items()))
