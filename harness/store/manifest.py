"""The typed run manifest (docs/DESIGN.md §6; docs/ARCHITECTURE.md "Runs and manifests").

Every run in the store has one :class:`RunManifest`, built by :func:`harness.running.evaluate` (suite runs, lm-eval runs)
or by a suite's cross-run step (the judge's ratings), and read back with validation: a corrupt or foreign record
is refused with a sentence naming the field, never half-read. ``schema`` versions the layout; a store written
before schema 2 (untyped manifests, identities without code fingerprints) is refused with a sentence saying how
to rebuild it, so old and new identities never mix on one board.

What a reader needs, and where it is:

* ``subject``: what was scored: a model (its identity, mixer, full mixer config and what differs from the
  mixer's defaults, preset, backbone/training configs, seed, checkpoint, parameters, state size, training speed
  and loss curve) or, for mixer-scoped suites, a mixer definition (no checkpoint);
* ``suite``/``suite_version``/``suite_config`` and ``config_source``: ``default`` (the suite's defaults),
  ``grid`` (the configuration a plan, ``run`` or the quickstart declared) or ``override`` (an ad-hoc
  ``--suite-config``): the board takes its cells from default and grid runs only;
* ``gate``: the conformance gate's verdict for the subject's mixer and config (passed / skipped), its version;
* ``identity``: the parts the run id hashes (see :mod:`harness.store.identity`), so two runs can be diffed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from harness.errors import MixbenchError

SCHEMA_VERSION = 2
KINDS = ("suite", "aggregate")
CONFIG_SOURCES = ("default", "grid", "override")
SUBJECT_KINDS = ("model", "mixer", "external")
#: ``model-checks``: an external model (docs/huggingface.md), which has no mixer for the gate to check, passed the
#: model-level checks instead (deterministic, causal, batch independent)
GATE_STATUSES = ("passed", "skipped", "model-checks")


class ManifestError(ValueError):
    """A manifest that does not validate; the message names the field."""


@dataclass(frozen=True)
class GateRecord:
    """The conformance gate's verdict for the scored mixer and config (a failing mixer is never scored)."""

    status: str  # passed | skipped (--skip-gate, recorded)
    version: int
    key: str = ""  # the gate cache key: mixer identity, backbone, gate config, device
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.status not in GATE_STATUSES:
            raise ManifestError(f"gate.status must be one of {', '.join(GATE_STATUSES)}, got {self.status!r}")


@dataclass(frozen=True)
class Subject:
    """What a run scored: a trained model, or (``checkpoint`` None, ``kind`` mixer) a mixer definition."""

    kind: str  # model | mixer | external (a transformers model mixbench did not train; docs/huggingface.md)
    id: str  # model identity, or mixer identity for mixer-scoped runs
    row_id: str  # the board row: the model identity without its seed (seeds of one configuration share a row)
    mixer_id: str  # the mixer identity (name, version, source, full config): joins mixer-scoped runs to rows
    mixer: str
    mixer_source: str
    mixer_config: dict[str, Any]  # full, defaults filled in
    config_diff: dict[str, Any]  # the fields that differ from the mixer's defaults
    preset: str | None = None
    backbone: dict[str, Any] | None = None
    backbone_diff: dict[str, Any] = field(default_factory=dict)  # differs from the preset's backbone
    train_diff: dict[str, Any] = field(default_factory=dict)  # differs from the preset's training config
    data_diff: dict[str, Any] = field(default_factory=dict)  # differs from the default data config
    seed: int | None = None
    checkpoint: str | None = None
    checkpoint_step: int | None = None
    weights_sha256: str | None = None
    parameters: int | None = None
    non_embedding_parameters: int | None = None  # what matched sizes compare (docs/protocol.md)
    state_floats: int | None = None
    train_flops: float | None = None
    #: train_flops uses the contract's 2-per-weight fallback (the mixer declares no flops_per_token, docs/flops.md):
    #: an undercount, marked wherever it is shown; None where it was not recorded
    train_flops_estimated: bool | None = None
    train_tokens_per_s: float | None = None
    kernel: str | None = None
    device: str | None = None
    dtype: str | None = None
    packages: dict[str, str] = field(default_factory=dict)
    loss_curve: list[dict[str, Any]] = field(default_factory=list)  # [{step, loss, val_loss?}]
    #: held-out loss at log-spaced steps (docs/scaling.md): [{step, tokens, flops, loss}]
    learning_curve: list[dict[str, Any]] = field(default_factory=list)
    control: bool = False  # the mixer is a control (docs/controls.md): a row below the ranked ones, never ranked
    context_free: bool = False  # ... whose outputs depend on one position each (the board's reference control)
    #: whether its training values are its preset's recipe (docs/protocol.md): tuned, overridden (a recipe exists,
    #: a value differs) or untuned (no recipe for this mixer config); "" for subjects that were not trained here
    recipe: str = ""
    #: who initialised the mixer's output projection: ``backbone`` (the one rule) or ``mixer`` (a plugin that
    #: declares none keeps its own); "" where it does not apply
    output_init: str = ""

    def __post_init__(self) -> None:
        if self.kind not in SUBJECT_KINDS:
            raise ManifestError(f"subject.kind must be one of {', '.join(SUBJECT_KINDS)}, got {self.kind!r}")
        if not isinstance(self.mixer, str) or not self.mixer:
            raise ManifestError(f"subject.mixer must be a mixer name, got {self.mixer!r}")
        for name in ("id", "row_id", "mixer_id"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ManifestError(f"subject.{name} must be an identity hash, got {getattr(self, name)!r}")
        for name in ("mixer_config", "config_diff", "backbone_diff", "train_diff", "data_diff", "packages"):
            if not isinstance(getattr(self, name), dict):
                raise ManifestError(f"subject.{name} must be a mapping, got {getattr(self, name)!r}")
        for name in ("control", "context_free"):
            if not isinstance(getattr(self, name), bool):
                raise ManifestError(f"subject.{name} must be true or false, got {getattr(self, name)!r}")
        if self.train_flops_estimated not in (None, True, False):
            raise ManifestError(f"subject.train_flops_estimated must be true, false or null, got "
                                f"{self.train_flops_estimated!r}")

    @property
    def external(self) -> bool:
        return self.kind == "external"

    @property
    def label(self) -> str:
        """The board's name for this model: the mixer, then whatever differs from the defaults; for an external
        model its name, revision and ``external``."""
        if self.external:
            revision = str(self.mixer_config.get("revision", ""))
            short = revision.split(":")[-1][:10]
            return f"{self.mixer} @{short} (external)" if short else f"{self.mixer} (external)"
        return _labelled(self.mixer, {**self.config_diff, **self.backbone_diff, **self.train_diff, **self.data_diff})

    @property
    def mixer_label(self) -> str:
        """The mixer and what differs from its default config, without the backbone, training or data: one name
        for one mixer config across models of several sizes and budgets (a scaling ladder's series)."""
        return _labelled(self.mixer, self.config_diff)


def _labelled(mixer: str, diff: dict[str, Any]) -> str:
    if not diff:
        return mixer
    return f"{mixer} ({', '.join(f'{k}={_short(v)}' for k, v in sorted(diff.items()))})"


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(_short(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class RunManifest:
    """Everything needed to trust, place and reproduce one run."""

    suite: str
    suite_version: int
    suite_config: dict[str, Any]
    config_source: str
    config_diff: dict[str, Any]  # the suite config's fields that differ from the suite's defaults
    subject: Subject
    gate: GateRecord
    identity: dict[str, Any]
    kind: str = "suite"
    headline: tuple[str, ...] = ()
    suite_info: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # fingerprint, held-out splits
    timings: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # a suite's own record fields (the judge's pool)
    run_id: str = ""  # set by the store
    written_at: str = ""  # set by the store
    plots: tuple[str, ...] = ()  # set by the store
    #: set by the store: every other file of the run with its size and sha256, so a reader can tell a complete
    #: run from one whose files were cut short or edited (a run written before this field has none)
    files: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ManifestError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.config_source not in CONFIG_SOURCES:
            raise ManifestError(f"config_source must be one of {', '.join(CONFIG_SOURCES)}, got {self.config_source!r}")
        if not isinstance(self.suite, str) or not self.suite:
            raise ManifestError(f"suite must be a suite name, got {self.suite!r}")
        for name in ("suite_config", "config_diff", "identity", "suite_info", "data", "timings", "provenance", "extra",
                     "files"):
            if not isinstance(getattr(self, name), dict):
                raise ManifestError(f"{name} must be a mapping, got {type(getattr(self, name)).__name__}")
        object.__setattr__(self, "headline", tuple(self.headline))
        object.__setattr__(self, "plots", tuple(self.plots))

    @property
    def canonical(self) -> bool:
        """Whether the board may take its cell from this run (not an ad-hoc override of the suite config)."""
        return self.config_source != "override"

    @property
    def config_label(self) -> str:
        return ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.config_diff.items())) or "default"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["headline"] = list(self.headline)
        out["plots"] = list(self.plots)
        return out

    @staticmethod
    def from_json(d: Any) -> "RunManifest":
        """Validate and build; raises :class:`LegacyManifest` for pre-schema-2 records, :class:`ManifestError` for
        anything else that does not fit (naming the field)."""
        if not isinstance(d, dict):
            raise ManifestError("the manifest is not a JSON object")
        if "schema" not in d:
            raise LegacyManifest("written by mixbench before typed manifests (no 'schema' field)")
        if d["schema"] != SCHEMA_VERSION:
            raise LegacyManifest(f"schema {d['schema']!r}; this mixbench reads schema {SCHEMA_VERSION}")
        known = {f.name for f in fields(RunManifest)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ManifestError(f"unknown field(s) {', '.join(unknown)}")
        missing = sorted(f.name for f in fields(RunManifest) if f.name not in d and f.name in _REQUIRED)
        if missing:
            raise ManifestError(f"missing field(s) {', '.join(missing)}")
        try:
            subject = _build(Subject, d["subject"], "subject")
            gate = _build(GateRecord, d["gate"], "gate")
            values = {**d, "subject": subject, "gate": gate}
            return RunManifest(**values)
        except TypeError as exc:
            raise ManifestError(str(exc)) from None


class LegacyManifest(ManifestError):
    """A manifest of an older layout: the store must be rebuilt (see :func:`legacy_store_error`)."""


_REQUIRED = {"suite", "suite_version", "suite_config", "config_source", "config_diff", "subject", "gate", "identity"}


def _build(cls: type, d: Any, where: str) -> Any:
    if not isinstance(d, dict):
        raise ManifestError(f"{where} must be a mapping, got {type(d).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ManifestError(f"{where} has unknown field(s) {', '.join(unknown)}")
    try:
        return cls(**d)
    except TypeError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def legacy_store_error(root: str, count: int, example: str, reason: str) -> MixbenchError:
    return MixbenchError(
        f"{count} run(s) in {root} were written by an older mixbench ({reason}; e.g. runs/{example}); their "
        f"identities cannot be compared with this version's. Move that store aside and rebuild it (e.g. "
        f"`mv {root} {root}.old` and rerun `mixbench quickstart` or your plan), or pass --results to a new folder."
    )


def diff_from(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` whose value differs from ``defaults`` (NaN equals NaN)."""
    out = {}
    for key, value in values.items():
        default = defaults.get(key, _MISSING)
        same = value == default or (
            isinstance(value, float) and isinstance(default, float) and math.isnan(value) and math.isnan(default)
        )
        if not same:
            out[key] = value
    return out


_MISSING = object()
