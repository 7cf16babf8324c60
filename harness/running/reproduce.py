"""Known answers: a target states a published claim, runs its protocol through the ordinary suites, and checks the
claim on the measured numbers with their intervals (docs/reproductions.md).

A :class:`Target` is registered like a suite (``@register_target``; built-ins in the ``reproductions`` package,
others by ``--plugin`` or the ``mixbench.targets`` entry point). It declares its source, the published claim in one
sentence, the claim as mixbench checks it, where its CPU protocol departs from the source's, and what it cost on
the reference machine; :meth:`Target.steps` says which mixers to score with which suite config at a scale
(``tiny`` for the tests, ``cpu`` for this machine, ``gpu`` for the source's own scale), and :meth:`Target.checks`
turns the stored runs into :class:`Check`s. Runs go through :func:`harness.running.runner.run_requests` (model
suites) and :func:`harness.running.evaluate.evaluate` (mixer suites), so they land in the store like any other and
nothing is computed twice.

Verdicts (:func:`verdict`): a check is *reproduced* when its whole interval lies on the claimed side of the
threshold, *not reproduced* when its whole interval lies on the other side, and *inconclusive* when the interval
straddles it or there is no interval (a number without an interval proves nothing either way). A target is
reproduced when every check is, not reproduced when any check is not, and inconclusive otherwise; a precondition
check (what the protocol must give for the claim to be testable at all, such as units that specialise) that is not
reproduced makes the target inconclusive.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from harness import stats
from harness.errors import MixbenchError

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
SCALES = ("tiny", "cpu", "gpu")


@dataclass(frozen=True)
class Step:
    """Score ``mixers`` with ``suite`` (its config ``suite_config``): a model suite trains each mixer at ``preset``
    (with ``train`` and ``data`` overrides, and ``controls`` beside them); a mixer suite trains its own models."""

    suite: str
    mixers: tuple[str, ...]
    suite_config: Mapping[str, Any] = field(default_factory=dict)
    preset: str = "tiny"
    train: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)  # data overrides (a larger vocabulary, another corpus)
    controls: tuple[str, ...] = ()
    mixer_configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Measured:
    """A measured number with its interval (``low``/``high`` None: no interval) and what kind the interval is."""

    value: float
    low: float | None = None
    high: float | None = None
    kind: str = ""

    @classmethod
    def of(cls, value: float, interval: stats.Interval | None) -> "Measured":
        if interval is None:
            return cls(float(value))
        level = f" {interval.level:.0%}" if interval.level else ""
        return cls(float(value), float(interval.low), float(interval.high), f"{interval.kind}{level}")

    def render(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.value:.5g} (no interval)"
        return f"{self.value:.5g} [{self.low:.5g}, {self.high:.5g}] ({self.kind})"


def interval_difference(a: Measured, b: Measured) -> Measured:
    """``a - b`` of two independent measurements, its interval from the two intervals' half-widths in quadrature (a
    normal approximation, for numbers that share no items: two MQAR settings, a unit set and random contexts)."""
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return Measured(a.value - b.value)
    half = (((a.high - a.low) / 2) ** 2 + ((b.high - b.low) / 2) ** 2) ** 0.5
    diff = a.value - b.value
    return Measured(diff, diff - half, diff + half, "normal from two intervals")


def verdict(measured: Measured | None, threshold: float, above: bool) -> str:
    """The verdict on "measured > threshold" (``above``) or "measured < threshold" (see the module docstring)."""
    if measured is None or measured.low is None or measured.high is None or math.isnan(measured.value):
        return INCONCLUSIVE
    if any(math.isnan(x) for x in (measured.low, measured.high)):
        return INCONCLUSIVE
    low, high = (measured.low, measured.high) if above else (-measured.high, -measured.low)
    threshold = threshold if above else -threshold
    if low > threshold:
        return REPRODUCED
    if high < threshold:
        return NOT_REPRODUCED
    return INCONCLUSIVE


@dataclass(frozen=True)
class Check:
    """One checked inequality: ``what`` (e.g. "attention, MQAR (64, 4) accuracy") above or below ``threshold``."""

    what: str
    threshold: float
    above: bool
    measured: Measured | None
    note: str = ""
    counts: bool = True  # False: reported beside the claim (a mixer the source did not test), not part of it
    #: a condition the claim needs of the protocol (the units specialise at this budget): unless it is reproduced,
    #: the target is inconclusive whatever its other checks say, since they would test nothing
    precondition: bool = False

    @property
    def expected(self) -> str:
        return f"{'>' if self.above else '<'} {self.threshold:g}"

    @property
    def verdict(self) -> str:
        return verdict(self.measured, self.threshold, self.above)


def overall(checks: Sequence[Check]) -> str:
    """A precondition not reproduced: inconclusive. Then every check reproduced: reproduced; any not reproduced:
    not reproduced; else inconclusive (no checks too)."""
    if any(c.precondition and c.verdict != REPRODUCED for c in checks):
        return INCONCLUSIVE
    verdicts = [c.verdict for c in checks if c.counts]
    if verdicts and all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    if NOT_REPRODUCED in verdicts:
        return NOT_REPRODUCED
    return INCONCLUSIVE


class Target:
    """A published claim and the protocol that checks it (see the module docstring)."""

    name: ClassVar[str]
    source: ClassVar[str] = ""  # paper and figure/table, or repository and file
    published: ClassVar[str] = ""  # the published claim, one sentence
    checked: ClassVar[str] = ""  # the claim as mixbench checks it: inequalities with their thresholds
    departures: ClassVar[str] = ""  # where the CPU protocol departs from the source's
    cost: ClassVar[str] = ""  # measured wall time at scale cpu on the reference machine (docs/reproductions.md)

    def __init__(self, cfg: Any = None):
        self.cfg = cfg

    def steps(self, scale: str) -> list[Step]:
        raise NotImplementedError

    def checks(self, runs: "RunIndex", scale: str) -> list[Check]:
        raise NotImplementedError

    def protocol(self, scale: str) -> str:
        """The steps at ``scale`` in one line each (``mixbench reproduce --list``)."""
        out = []
        for s in self.steps(scale):
            cfg = ", ".join(f"{k}={v}" for k, v in s.suite_config.items()) or "defaults"
            train = ", ".join(f"{k}={v}" for k, v in {**s.train, **s.data}.items())
            where = f"preset {s.preset}" + (f" ({train})" if train else "")
            controls = f" + controls {', '.join(s.controls)}" if s.controls else ""
            out.append(f"{s.suite} [{cfg}] on {', '.join(s.mixers)}{controls}, {where}")
        return "; ".join(out)


class RunIndex:
    """The stored runs of one target's steps, by suite and mixer (the first seed found, or every seed)."""

    def __init__(self, store: Any, run_ids: Sequence[str]):
        self._runs: dict[tuple[str, str], list[Any]] = {}
        for rid in sorted(set(run_ids)):
            if not store.has_run(rid):
                continue
            record = store.read_run(rid, samples=False)
            key = (record.manifest.suite, record.manifest.subject.mixer)
            self._runs.setdefault(key, []).append(record)

    def records(self, suite: str, mixer: str) -> list[Any]:
        return self._runs.get((suite, mixer), [])

    def metric(self, suite: str, mixer: str, name: str) -> Any | None:
        """The metric ``name`` of ``mixer``'s run of ``suite`` (its first seed), or None when there is none."""
        for record in self.records(suite, mixer):
            for m in record.metrics:
                if m.name == name:
                    return m
        return None

    def measured(self, suite: str, mixer: str, name: str) -> Measured | None:
        m = self.metric(suite, mixer, name)
        return None if m is None else Measured.of(m.value, m.interval)

    def paired_difference(self, suite: str, mixer_a: str, mixer_b: str, name: str) -> Measured | None:
        """``a - b`` of metric ``name`` on the items both runs share (paired bootstrap), or None without items."""
        a, b = self.metric(suite, mixer_a, name), self.metric(suite, mixer_b, name)
        if a is None or b is None or not a.items or not b.items:
            return None
        ia = dict(zip(a.items.ids, zip(a.items.values, a.items.weights or [1.0] * len(a.items.ids))))
        ib = dict(zip(b.items.ids, zip(b.items.values, b.items.weights or [1.0] * len(b.items.ids))))
        shared = sorted(set(ia) & set(ib))
        if len(shared) < 2:
            return None
        va, wa = np.array([ia[i][0] for i in shared]), np.array([ia[i][1] for i in shared])
        vb, wb = np.array([ib[i][0] for i in shared]), np.array([ib[i][1] for i in shared])
        r = stats.paired_difference(va, vb, wa, wb, n_resamples=2000, seed=0)
        return Measured.of(r.difference, r.interval)


#: the keys of a reproduce plan (plans/reproduce.yaml)
PLAN_KEYS = ("targets", "scales")


@dataclass(frozen=True)
class ReproducePlan:
    """Which targets a nightly checks, and per scale the device it runs on (``mixbench reproduce --plan``)."""

    targets: tuple[str, ...]
    devices: Mapping[str, str]  # scale -> device


def load_reproduce_plan(path: str) -> ReproducePlan:
    """Read a reproduce plan (YAML with ``targets`` and ``scales: {cpu: {device: cpu}, gpu: {device: cuda}}``);
    every name is checked before anything runs, and a bad file is one sentence."""
    from pathlib import Path

    from harness.errors import ConfigError
    from harness.registry import TARGETS
    from harness.running.plan import read_plan_yaml

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"reproduce plan {path} does not exist; pass a YAML file such as plans/reproduce.yaml.")
    raw = read_plan_yaml(file)
    if not isinstance(raw, dict) or set(raw) - set(PLAN_KEYS):
        raise ConfigError(f"reproduce plan {path} must be a mapping with the keys {', '.join(PLAN_KEYS)}.")
    targets = raw.get("targets")
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise ConfigError(f"reproduce plan {path}: 'targets' must be a list of target names.")
    for name in targets:
        TARGETS.get(name)
    devices = {}
    for scale, block in (raw.get("scales") or {}).items():
        if scale not in SCALES or not isinstance(block, dict) or not isinstance(block.get("device", "cpu"), str):
            raise ConfigError(f"reproduce plan {path}: 'scales' maps {', '.join(SCALES)} to {{device: NAME}}, got "
                              f"{scale!r}: {block!r}.")
        devices[scale] = block.get("device", "cpu")
    return ReproducePlan(tuple(targets), devices)


@dataclass
class TargetResult:
    name: str
    scale: str
    checks: list[Check]
    wall_s: float

    @property
    def verdict(self) -> str:
        return overall(self.checks)


def planned_steps(target: Target, scale: str, device: str = "cpu") -> list[Step]:
    """``target``'s steps at ``scale``, every mixer and suite config checked (nothing runs)."""
    from harness.registry import MIXERS
    from harness.running.planned import PlannedRun

    if scale not in SCALES:
        raise MixbenchError(f"reproduce: scale must be one of {', '.join(SCALES)}, got '{scale}'.")
    steps = target.steps(scale)
    for step in steps:
        for mixer in (*step.mixers, *step.controls):
            MIXERS.get(mixer)
        PlannedRun.make(step.suite, step.suite_config, device=device)
    return steps


def run_target(target: Target, scale: str, store: Any, device: str = "cpu", progress: bool = True,
               force: bool = False) -> TargetResult:
    """Run every step of ``target`` at ``scale`` (what the store holds is reused) and check its claim."""
    from harness.registry import SUITES
    from harness.running.evaluate import EvalOptions, evaluate
    from harness.running.planned import PlannedRun
    from harness.running.runner import GridRequest, JobOptions, run_requests

    t0 = time.perf_counter()
    steps = planned_steps(target, scale, device)
    run_ids: list[str] = []
    for i, step in enumerate(steps, 1):
        if progress:
            print(f"[mixbench] {target.name}: step {i}/{len(steps)}: {step.suite} on {', '.join(step.mixers)}",
                  file=sys.stderr, flush=True)
        if SUITES.get(step.suite).cls.scope == "mixer":
            for mixer in step.mixers:
                run = PlannedRun.make(step.suite, step.suite_config, device=device)
                out = evaluate(None, run, store, EvalOptions(force=force, progress=progress), mixer=mixer,
                               mixer_config=dict(step.mixer_configs.get(mixer, {})), preset=step.preset)
                run_ids.append(out.run_id)
            continue
        req = GridRequest(preset=step.preset, mixers=list(step.mixers), suites=[step.suite],
                          mixer_configs={m: dict(c) for m, c in step.mixer_configs.items()},
                          train_overrides=dict(step.train), data_overrides=dict(step.data), suite_overrides={step.suite: dict(step.suite_config)},
                          options=JobOptions(device=device, force=force, progress=progress),
                          controls=list(step.controls))
        report = run_requests([req], store)
        run_ids.extend(report.run_ids)
    checks = target.checks(RunIndex(store, run_ids), scale)
    return TargetResult(target.name, scale, checks, time.perf_counter() - t0)


def render_result(result: TargetResult) -> str:
    """Expected against measured, per check, and the target's verdict."""
    lines = [f"{result.name} (scale {result.scale}, {result.wall_s:.0f} s): {result.verdict.upper()}"]
    width = max([len(c.what) for c in result.checks] + [5])
    for c in result.checks:
        measured = c.measured.render() if c.measured is not None else "missing"
        note = f"  ({c.note})" if c.note else ""
        verdict = c.verdict if c.counts else f"({c.verdict}; reported only)"
        verdict = f"{verdict} [precondition]" if c.precondition else verdict
        lines.append(f"  {c.what:<{width}}  expected {c.expected:<10} measured {measured:<44} {verdict}{note}")
    return "\n".join(lines)


def render_listing(entries: Sequence[Any], scale: str = "cpu") -> str:
    """``mixbench reproduce --list``: each target's source, claims, protocol and cost."""
    blocks = []
    for entry in entries:
        t = entry.cls(entry.make_config())
        blocks.append("\n".join([
            entry.name,
            f"  source:     {t.source}",
            f"  published:  {t.published}",
            f"  checked:    {t.checked}",
            f"  protocol:   {t.protocol(scale)}",
            f"  departures: {t.departures}",
            f"  cost:       {t.cost}",
        ]))
    return "\n\n".join(blocks)
