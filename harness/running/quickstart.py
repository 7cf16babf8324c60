"""The embedded default run (`mixbench quickstart` / `make quickstart`): the mixers and suites that declare a
quickstart part (docs/ARCHITECTURE.md "Quickstart").

Budget: `make quickstart` must finish within 15 minutes on a fresh 2-core CPU machine, setup included. Training
the mixers at preset ``quick`` takes most of it, so each suite runs the reduced configuration it declares in
:attr:`harness.suite.Suite.quickstart` (the full protocols stay the suites' defaults). A mixer takes part when
its class says ``quickstart = True`` (the paper's four built-ins). The core names neither.
"""

from __future__ import annotations

from typing import Any

from harness.registry import MIXERS, SUITES


def quickstart_mixers() -> list[str]:
    """Registered mixers that declare ``quickstart = True``, in registration order of their names."""
    return [e.name for e in MIXERS.entries() if getattr(e.cls, "quickstart", False)]


def quickstart_suites() -> dict[str, dict[str, Any]]:
    """Suite name -> its reduced quickstart config, for every registered suite that declares one."""
    return {e.name: dict(e.cls.quickstart) for e in SUITES.entries() if e.cls.quickstart is not None}
