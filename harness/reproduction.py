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

Negatives: a target declares the same protocol with a subject for which its claim must fail (:class:`Negative`: a
fixed-state mixer in attention's role, eigenvalues in [0, 1] for [-1, 1]); a target whose negative is reproduced
too could not have failed, so its verdict is void (:data:`CANNOT_FAIL`, :func:`final_verdict`). Kinds: a
``reproduction`` checks a published claim, a ``check`` a property of this harness (docs/reproductions.md).
"""

from __future__ import annotations

import copy
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
#: a target whose negative passed too: the protocol cannot tell the claim from its opposite, the verdict is void
CANNOT_FAIL = "cannot fail"
#: a target's kind: a published claim, or a property of this harness (listed apart everywhere)
REPRODUCTION, CHECK = "reproduction", "check"
KINDS = (REPRODUCTION, CHECK)
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

    @classmethod
    def of(cls, suite: str, subjects: Sequence["Subject"], suite_config: Mapping[str, Any] | None = None,
           **kwargs: Any) -> "Step":
        """A step scoring ``subjects`` (each with its mixer config). Two configs of one mixer cannot share a step
        (the grid keys configs by mixer name): give each its own step."""
        configs: dict[str, Mapping[str, Any]] = {}
        for s in subjects:
            if s.mixer in configs and dict(configs[s.mixer]) != dict(s.config):
                raise MixbenchError(f"a reproduction step cannot score two configs of {s.mixer}; give each its own "
                                    "step.")
            configs[s.mixer] = s.config
        return cls(suite, tuple(configs), dict(suite_config or {}),
                   mixer_configs={m: dict(c) for m, c in configs.items() if c}, **kwargs)


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


def final_verdict(verdict: str, negative_verdicts: Sequence[str]) -> str:
    """The target's verdict once its negatives ran: :data:`CANNOT_FAIL` when any negative is reproduced (the
    protocol passes a subject for which the claim must fail), else the target's own verdict."""
    return CANNOT_FAIL if REPRODUCED in negative_verdicts else verdict


@dataclass(frozen=True)
class Subject:
    """One model of a protocol: a registered mixer and the mixer config it runs with."""

    mixer: str
    config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        items = ", ".join(f"{k}={v}" for k, v in self.config.items())
        return f"{self.mixer} ({items})" if items else self.mixer

    def to_json(self) -> dict[str, Any]:
        return {"mixer": self.mixer, "config": dict(self.config)}


@dataclass(frozen=True)
class Negative:
    """The target's protocol with ``swaps`` (role -> subject) and ``settings`` (name -> value) replaced: a subject
    or setting for which the claim must fail (``why``). Its verdict must not be reproduced."""

    label: str
    why: str
    swaps: Mapping[str, Subject] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)


class Target:
    """A published claim and the protocol that checks it (see the module docstring).

    Steps and checks name their models through :meth:`subject` and their protocol choices through :meth:`setting`,
    never directly, so that a :class:`Negative` (or a user's ``--subject ROLE=MIXER``) swaps them in both."""

    name: ClassVar[str]
    kind: ClassVar[str] = REPRODUCTION
    #: role -> the subject the claim is about (attention in "attention solves MQAR")
    subjects: ClassVar[Mapping[str, Subject]] = {}
    #: name -> a protocol value a negative may replace (the toy's learning rate)
    settings: ClassVar[Mapping[str, Any]] = {}
    source: ClassVar[str] = ""  # paper and figure/table, or repository and file
    published: ClassVar[str] = ""  # the published claim, one sentence
    checked: ClassVar[str] = ""  # the claim as mixbench checks it: inequalities with their thresholds
    departures: ClassVar[str] = ""  # where the CPU protocol departs from the source's
    cost: ClassVar[str] = ""  # measured wall time at scale cpu on the reference machine (docs/reproductions.md)

    def __init__(self, cfg: Any = None):
        self.cfg = cfg
        self._swaps: dict[str, Subject] = {}
        self._setting_swaps: dict[str, Any] = {}

    def subject(self, role: str) -> Subject:
        """The subject of ``role``: the declared one unless swapped (an unknown role is a bug in the target)."""
        if role not in self.subjects:
            raise MixbenchError(f"target {self.name!r} has no subject role {role!r}; its roles: "
                                f"{', '.join(self.subjects) or 'none'}.")
        return self._swaps.get(role, self.subjects[role])

    def setting(self, name: str) -> Any:
        if name not in self.settings:
            raise MixbenchError(f"target {self.name!r} has no setting {name!r}; its settings: "
                                f"{', '.join(self.settings) or 'none'}.")
        return self._setting_swaps.get(name, self.settings[name])

    def with_subjects(self, swaps: Mapping[str, Subject], settings: Mapping[str, Any] | None = None) -> "Target":
        """A copy of this target with roles (and settings) replaced: what a negative, or ``--subject``, runs."""
        for role in swaps:
            self.subject(role)
        for key in settings or {}:
            self.setting(key)
        twin = copy.copy(self)
        twin._swaps = {**self._swaps, **swaps}
        twin._setting_swaps = {**self._setting_swaps, **(settings or {})}
        return twin

    def negative_target(self, negative: Negative) -> "Target":
        return self.with_subjects(negative.swaps, negative.settings)

    def negatives(self, scale: str) -> list[Negative]:
        """The runs for which this target's claim must fail (docs/reproductions.md: every built-in has one)."""
        return []

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

    def records(self, suite: str, mixer: "str | Subject") -> list[Any]:
        """The runs of ``mixer`` under ``suite``; a :class:`Subject` keeps only runs whose recorded mixer config
        holds every item of its config (two configs of one mixer are told apart)."""
        if isinstance(mixer, str):
            return self._runs.get((suite, mixer), [])
        return [r for r in self._runs.get((suite, mixer.mixer), [])
                if all((r.manifest.subject.mixer_config or {}).get(k) == v for k, v in mixer.config.items())]

    def metric(self, suite: str, mixer: "str | Subject", name: str) -> Any | None:
        """The metric ``name`` of ``mixer``'s run of ``suite`` (its first seed), or None when there is none."""
        for record in self.records(suite, mixer):
            for m in record.metrics:
                if m.name == name:
                    return m
        return None

    def measured(self, suite: str, mixer: "str | Subject", name: str) -> Measured | None:
        m = self.metric(suite, mixer, name)
        return None if m is None else Measured.of(m.value, m.interval)

    def paired_difference(self, suite: str, mixer_a: "str | Subject", mixer_b: "str | Subject",
                          name: str) -> Measured | None:
        """``a - b`` of metric ``name`` on the items both runs share (paired bootstrap), or None without items."""
        return _paired(self.metric(suite, mixer_a, name), self.metric(suite, mixer_b, name))

    def paired_metrics(self, suite: str, mixer: "str | Subject", name_a: str, name_b: str) -> Measured | None:
        """``a - b`` of two metrics of one run on the items they share (two units masked on the same prompts)."""
        return _paired(self.metric(suite, mixer, name_a), self.metric(suite, mixer, name_b))


def _paired(a: Any | None, b: Any | None) -> Measured | None:
    """The paired bootstrap difference of two metrics' per-item values on their shared items (None: too few)."""
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
RECORD_VERSION = 2
#: versions a store may hold: version 1 predates kinds and negatives (read as a reproduction whose negatives did
#: not run)
READABLE_VERSIONS = (1, 2)


def record_path(scale: str, target: str) -> str:
    """``reproductions/<scale>/<target>.json`` (a target name that is not a plain file name is refused)."""
    if scale not in SCALES:
        raise MixbenchError(f"reproduce: scale must be one of {', '.join(SCALES)}, got '{scale}'.")
    if not target or not all(c.isalnum() or c in "-_." for c in target) or target.startswith("."):
        raise MixbenchError(f"reproduction target name {target!r} is not a plain file name (letters, digits, - _ .).")
    return f"{RECORDS_DIR}/{scale}/{target}.json"


@dataclass(frozen=True)
class NegativeResult:
    """A negative's run: what was swapped, why the claim must fail for it, and its checks (its verdict must not
    be reproduced)."""

    label: str
    why: str
    swaps: Mapping[str, Subject]
    settings: Mapping[str, Any]
    checks: tuple[Check, ...]

    @property
    def verdict(self) -> str:
        return overall(self.checks)

    @property
    def passed(self) -> bool:
        """True when the negative did what it must: its claim was not reproduced."""
        return self.verdict != REPRODUCED

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "why": self.why, "verdict": self.verdict,
                "swaps": {role: s.to_json() for role, s in self.swaps.items()},
                "settings": dict(self.settings), "checks": [_check_json(c) for c in self.checks]}


def target_verdict(checks: Sequence[Check], negatives: Sequence[NegativeResult] | None) -> str:
    """The verdict of a target's own checks, void (:data:`CANNOT_FAIL`) when a negative that ran passed too."""
    return final_verdict(overall(checks), [n.verdict for n in negatives or ()])


class Verdicts:
    """A target's two verdicts, from its ``checks`` and ``negatives``: the same for a result in hand
    (:class:`harness.running.reproduce.TargetResult`) and a stored record."""

    checks: Sequence[Check]
    #: None: the negatives were not run (``reproduce`` without ``--negatives``); the verdict then stands unchecked
    negatives: tuple[NegativeResult, ...] | None

    @property
    def own_verdict(self) -> str:
        """The verdict of the target's own checks, before its negatives are counted."""
        return overall(self.checks)

    @property
    def verdict(self) -> str:
        return target_verdict(self.checks, self.negatives)


@dataclass(frozen=True)
class ReproductionRecord(Verdicts):
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
    kind: str = REPRODUCTION
    negatives: tuple[NegativeResult, ...] | None = None

    def to_json(self) -> str:
        body = {"version": RECORD_VERSION, "target": self.target, "kind": self.kind, "scale": self.scale,
                "verdict": self.verdict, "own_verdict": self.own_verdict,
                "verdict_note": verdict_note(self.scale), "checks": [_check_json(c) for c in self.checks],
                "negatives": None if self.negatives is None else [n.to_json() for n in self.negatives],
                "wall_s": self.wall_s,
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
        if not isinstance(body, dict) or body.get("version") not in READABLE_VERSIONS:
            raise bad(f"not a version {' or '.join(map(str, READABLE_VERSIONS))} object")
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
        kind = body.get("kind", REPRODUCTION)
        if kind not in KINDS:
            raise bad(f"kind is not one of {', '.join(KINDS)}")
        negatives = body.get("negatives")
        if negatives is not None and not isinstance(negatives, list):
            raise bad("negatives is not a list")
        return cls(text["target"], text["scale"], tuple(_check_from(c, bad) for c in checks), float(wall),
                   text["written_at"], git, text["device"], text["source"], text["published"], text["checked"],
                   text["protocol"], text["departures"], tuple(run_ids), kind,
                   None if negatives is None else tuple(_negative_from(n, bad) for n in negatives))


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _finite_or_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def _check_json(c: Check) -> dict[str, Any]:
    return {"what": c.what, "threshold": c.threshold, "above": c.above, "expected": c.expected,
            "measured": None if c.measured is None else _finite_or_none(vars(c.measured)),
            "verdict": c.verdict, "note": c.note, "counts": c.counts, "precondition": c.precondition}


def _negative_from(d: Any, bad) -> NegativeResult:
    if not isinstance(d, dict) or not isinstance(d.get("label"), str) or not isinstance(d.get("why"), str):
        raise bad("a negative lacks its label or why")
    swaps, settings, checks = d.get("swaps", {}), d.get("settings", {}), d.get("checks")
    if not isinstance(swaps, dict) or not isinstance(settings, dict) or not isinstance(checks, list):
        raise bad(f"negative {d['label']!r} lacks swaps, settings or checks")
    subjects = {}
    for role, s in swaps.items():
        if not isinstance(s, dict) or not isinstance(s.get("mixer"), str) or not isinstance(s.get("config", {}), dict):
            raise bad(f"negative {d['label']!r} swaps {role!r} for something that is not a subject")
        subjects[str(role)] = Subject(s["mixer"], dict(s.get("config", {})))
    return NegativeResult(d["label"], d["why"], subjects, dict(settings), tuple(_check_from(c, bad) for c in checks))


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
