"""A planned run: one suite run of one subject, decided once, in the driver (docs/ARCHITECTURE.md, "A run's route").

The driver (``mixbench run``, a plan, the quickstart, ``mixbench eval``) validates the suite's config and builds
a :class:`PlannedRun`; once the subject is known (a mixer's identity, or a trained model's identity with its
weights hash) :meth:`PlannedRun.bind` fixes the run's identity through :func:`harness.store.identity.run_identity`,
the one function every run id comes from. The store is asked whether the run exists by that id before anything
is loaded, and the worker that scores it writes under that id: nothing downstream recomputes what it carries.

A model that is not trained yet has no weights hash, so its runs travel unbound and the worker binds them to the
checkpoint it trained; a device-dependent suite (throughput) is bound to the device descriptor of the machine
that binds it, and the worker rebinds when its own machine differs (a CPU driver planning GPU jobs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.store.identity import Identity, run_identity
from harness.registry import SUITES


def config_source(overrides: Mapping[str, Any] | None, grid: bool) -> str:
    """``grid`` when a plan / run / quickstart declared the config, else ``default`` or ``override``."""
    if grid:
        return "grid"
    return "override" if overrides else "default"


@dataclass(frozen=True)
class PlannedRun:
    """What one suite run is, before it runs: the suite and its config as asked, where the config came from, the
    device it is planned for, and (once bound to its subject) its identity. Picklable: a job carries its runs to
    a process-pool or Ray worker."""

    suite: str
    overrides: Mapping[str, Any] = field(default_factory=dict)  # as asked; empty: the suite's default config
    config_source: str = "default"  # default | override | grid (harness/store/manifest.py)
    device: str = "cpu"
    identity: Identity | None = None  # None until bound to a subject
    descriptor: Mapping[str, Any] | None = None  # the device descriptor the identity holds (device-dependent)

    @classmethod
    def make(cls, suite: str, overrides: Mapping[str, Any] | None = None, *, device: str = "cpu",
             grid: bool = False) -> "PlannedRun":
        """Validate the suite's name and config (the typed parser's limits) before anything runs."""
        SUITES.get(suite).make_config(overrides)
        return cls(suite, dict(overrides or {}), config_source(overrides, grid), device)

    def config(self) -> Any:
        """The suite's typed config (validated when the run was made)."""
        return SUITES.get(self.suite).make_config(self.overrides)

    @property
    def scope(self) -> str:
        """``model`` (scores a checkpoint) or ``mixer`` (trains its own models from the mixer's definition)."""
        return SUITES.get(self.suite).cls.scope

    @property
    def device_dependent(self) -> bool:
        """Whether the suite measures the machine (timings): its runs are made alone (docs/ARCHITECTURE.md)."""
        return bool(SUITES.get(self.suite).cls.device_dependent)

    @property
    def run_id(self) -> str | None:
        return self.identity.id if self.identity is not None else None

    def bound_to(self, subject: Identity) -> bool:
        """Whether this run's identity is already that of ``subject`` on this machine."""
        if self.identity is None or self.identity.parts.get("subject") != subject.id:
            return False
        return self.descriptor is None or dict(self.descriptor) == self._descriptor()

    def bind(self, subject: Identity) -> "PlannedRun":
        """This run of ``subject``: its identity, computed by :func:`harness.store.identity.run_identity` (a run already
        bound to ``subject`` on this machine is returned as it is)."""
        if self.bound_to(subject):
            return self
        cfg = self.config()
        descriptor = self._descriptor()
        identity = run_identity(subject, self.suite, cfg, descriptor, SUITES.get(self.suite).cls(cfg).identity_parts())
        return dataclasses.replace(self, identity=identity, descriptor=descriptor)

    def _descriptor(self) -> dict[str, Any] | None:
        if not SUITES.get(self.suite).cls.device_dependent:
            return None
        from harness.store.provenance import device_descriptor

        return device_descriptor(self.device)
