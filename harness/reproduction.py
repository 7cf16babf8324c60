"""What a reproduction target declares and what its verdict is: the public API of ``mixbench reproduce``
(docs/reproductions.md), beside :mod:`harness.suite` and :mod:`harness.mixer`.

A :class:`Target` states a published claim (its source, the claim in one sentence, the claim as mixbench checks
it, where its CPU protocol departs from the source's, what it cost on the reference machine); :meth:`Target.steps`
says which mixers to score with which suite config at a scale (``tiny`` for the tests, ``cpu`` for this machine,
``gpu`` for the source's own scale), and :meth:`Target.checks` turns the stored runs (a :class:`RunIndex`) into
:class:`Check`s. :mod:`harness.running.reproduce` runs the steps; a :class:`ReproductionRecord` is what a run of a
target leaves in the results store (``reproductions/<scale>/<target>.json``) for the site's Reproductions page.

Verdicts (:func:`verdict`): a check is *reproduced* when its whole interval lies on the claimed side of the
threshold, *not reproduced* when its whole interval lies on the other side, and *inconclusive* when the interval
straddles it or there is no interval (a number without an interval proves nothing either way). A target is
reproduced when every check is, not reproduced when any check is not, and inconclusive otherwise; a precondition
check (what the protocol must give for the claim to be testable at all, such as units that specialise) that is not
reproduced makes the target inconclusive.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from harness import stats
from harness.errors import MixbenchError

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
SCALES = ("tiny", "cpu", "gpu")
#: scales whose runs only exercise the pipeline: a verdict there is said to mean nothing wherever it is shown
SMOKE_SCALES = ("tiny",)
SMOKE_NOTE = "a smoke run: the verdict means nothing at this scale; docs/reproductions.md"


def verdict_note(scale: str) -> str:
    """What a verdict line at ``scale`` must say beside the verdict ("" at a scale whose verdicts mean something):
    a bare REPRODUCED at scale tiny read as a result."""
    return SMOKE_NOTE if scale in SMOKE_SCALES else ""


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
        """The steps at ``scale``, those that share a suite config, preset and training in one part with every
        mixer of them (each with its own mixer config): a target that scores two configs of one mixer and a
        control under one suite config used to repeat that config three times (``mixbench reproduce --list``)."""
        parts: dict[str, list[str]] = {}
        for s in self.steps(scale):
            cfg = ", ".join(f"{k}={v}" for k, v in s.suite_config.items()) or "defaults"
            train = ", ".join(f"{k}={v}" for k, v in {**s.train, **s.data}.items())
            where = f"preset {s.preset}" + (f" ({train})" if train else "")
            mixers = parts.setdefault(f"{s.suite} [{cfg}]\0{where}", [])
            for mixer in s.mixers:
                config = ", ".join(f"{k}={v}" for k, v in s.mixer_configs.get(mixer, {}).items())
                mixers.append(f"{mixer} ({config})" if config else mixer)
            mixers += [f"control {c}" for c in s.controls]
        out = []
        for key, mixers in parts.items():
            suite, where = key.split("\0")
            out.append(f"{suite} on {', '.join(dict.fromkeys(mixers))}, {where}")
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


#: where a target's latest verdict at a scale lives in the results store (beside ``runs/``)
RECORDS_DIR = "reproductions"
#: a record file larger than this is not read (a store is untrusted input; a real record is a few kB)
MAX_RECORD_BYTES = 1 << 20
RECORD_VERSION = 1


def record_path(scale: str, target: str) -> str:
    """``reproductions/<scale>/<target>.json`` (a target name that is not a plain file name is refused)."""
    if scale not in SCALES:
        raise MixbenchError(f"reproduce: scale must be one of {', '.join(SCALES)}, got '{scale}'.")
    if not target or not all(c.isalnum() or c in "-_." for c in target) or target.startswith("."):
        raise MixbenchError(f"reproduction target name {target!r} is not a plain file name (letters, digits, - _ .).")
    return f"{RECORDS_DIR}/{scale}/{target}.json"


@dataclass(frozen=True)
class ReproductionRecord:
    """What one run of a target leaves in the results store: the claim, every check with its measured interval,
    the runs behind them, and where and when it ran. The verdict is recomputed from the checks, never read back."""

    target: str
    scale: str
    checks: tuple[Check, ...]
    wall_s: float
    written_at: str  # ISO 8601, UTC
    git: str | None  # the code's revision (None: an installed package)
    device: str
    source: str
    published: str
    checked: str
    protocol: str
    departures: str
    run_ids: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        return overall(self.checks)

    def to_json(self) -> str:
        checks = [{"what": c.what, "threshold": c.threshold, "above": c.above, "expected": c.expected,
                   "measured": None if c.measured is None else _finite_or_none(vars(c.measured)),
                   "verdict": c.verdict, "note": c.note, "counts": c.counts, "precondition": c.precondition}
                  for c in self.checks]
        body = {"version": RECORD_VERSION, "target": self.target, "scale": self.scale, "verdict": self.verdict,
                "verdict_note": verdict_note(self.scale), "checks": checks, "wall_s": self.wall_s,
                "written_at": self.written_at, "git": self.git, "device": self.device, "source": self.source,
                "published": self.published, "checked": self.checked, "protocol": self.protocol,
                "departures": self.departures, "run_ids": list(self.run_ids)}
        return json.dumps(body, indent=1, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> "ReproductionRecord":
        """Parse a stored record; anything malformed (a store is untrusted input) is one sentence naming ``where``."""
        def bad(why: str) -> MixbenchError:
            return MixbenchError(f"{where} is not a reproduction record ({why}); rerun `mixbench reproduce` to "
                                 "rewrite it.")

        if len(raw) > MAX_RECORD_BYTES:
            raise bad(f"{len(raw)} bytes, more than {MAX_RECORD_BYTES}")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise bad(f"not JSON: {exc}") from None
        if not isinstance(body, dict) or body.get("version") != RECORD_VERSION:
            raise bad(f"not a version {RECORD_VERSION} object")
        text = {k: body.get(k) for k in ("target", "scale", "written_at", "device", "source", "published",
                                         "checked", "protocol", "departures")}
        if not all(isinstance(v, str) for v in text.values()) or text["scale"] not in SCALES:
            raise bad("a text field is missing or not text")
        git, wall = body.get("git"), body.get("wall_s")
        if git is not None and not isinstance(git, str):
            raise bad("git is not text")
        if not _is_number(wall) or wall < 0:
            raise bad("wall_s is not a duration")
        run_ids, checks = body.get("run_ids"), body.get("checks")
        if not isinstance(run_ids, list) or not all(isinstance(r, str) for r in run_ids):
            raise bad("run_ids is not a list of run ids")
        if not isinstance(checks, list):
            raise bad("checks is not a list")
        return cls(text["target"], text["scale"], tuple(_check_from(c, bad) for c in checks), float(wall),
                   text["written_at"], git, text["device"], text["source"], text["published"], text["checked"],
                   text["protocol"], text["departures"], tuple(run_ids))


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _finite_or_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def _check_from(d: Any, bad) -> Check:
    if not isinstance(d, dict):
        raise bad("a check is not an object")
    what, note, threshold = d.get("what"), d.get("note", ""), d.get("threshold")
    flags = [d.get(k) for k in ("above", "counts", "precondition")]
    if not isinstance(what, str) or not isinstance(note, str) or not _is_number(threshold) or \
            not all(isinstance(f, bool) for f in flags):
        raise bad("a check lacks what, threshold, above, counts or precondition")
    m = d.get("measured")
    measured = None
    if m is not None:
        if not isinstance(m, dict) or not isinstance(m.get("kind", ""), str):
            raise bad(f"the measurement of {what!r} is not an object")
        nums = [m.get(k) for k in ("value", "low", "high")]
        if any(x is not None and not _is_number(x) for x in nums):
            raise bad(f"the measurement of {what!r} holds a value that is not a number")
        value, low, high = nums
        measured = Measured(math.nan if value is None else float(value), None if low is None else float(low),
                            None if high is None else float(high), m.get("kind", ""))
    return Check(what, float(threshold), flags[0], measured, note, flags[1], flags[2])


def load_records(store: Any) -> tuple[list[ReproductionRecord], list[str]]:
    """Every reproduction record in ``store`` (ordered by scale, then target) and a sentence per file that could not
    be read (the site shows them instead of failing)."""
    records, problems = [], []
    for rel in store.list_files(RECORDS_DIR):
        if not rel.endswith(".json"):
            continue
        try:
            raw = store.read_file(rel)
            if raw is None:
                continue
            records.append(ReproductionRecord.from_json(raw, rel))
        except MixbenchError as exc:
            problems.append(str(exc))
    records.sort(key=lambda r: (SCALES.index(r.scale), r.target))
    return records, problems
