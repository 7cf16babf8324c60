"""Scoring a checkpoint (or, for mixer-scoped suites, a mixer definition) with a suite into the results store.

What is scored and how is a :class:`harness.running.planned.PlannedRun`; its id is :func:`harness.store.identity.run_identity`
of the scored model's identity and the suite's name, version, source fingerprint and full config (plus the device
for device-dependent suites): the same model scored the same way by the same code is the same run, and re-running
it is a no-op unless forced. The mixer
must have passed the conformance gate (:func:`harness.model.gate.require_gate`) before anything is computed or
written; ``skip_gate`` scores anyway and records it.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.corpus.protocol import recording_reads, selecting
from harness.model.checkpoint import Checkpoint, load_model
from harness.config import PRESETS, BackboneConfig, DataConfig, ModelSpec, RunSpec, TrainConfig, get_preset, to_dict
from harness.model.recipes import UNTUNED, recipe_status
from harness.model.specs import preset_defaults
from harness.errors import MixbenchError
from harness.model.gate import require_gate
from harness.store.identity import Identity, mixer_identity, model_identity, row_identity, trained_identity
from harness.store.manifest import GateRecord, RunManifest, Subject, diff_from
from harness.store.provenance import provenance
from harness.reporting.scored import note_runs
from harness.running.planned import PlannedRun
from harness.registry import MIXERS, SUITES, Entry
from harness.store.results import ResultsStore
from harness.suite import AggregateRun, SuiteContext, SuiteResult


@dataclass
class EvalOutcome:
    run_id: str
    suite: str
    skipped: bool
    seconds: float


def checkpoint_identity(ckpt: Checkpoint, data_fingerprint: str) -> Identity:
    """The identity stored when the checkpoint was trained (verified against its config on load), or, for a
    checkpoint written before identities were stored, the identity this code gives its spec."""
    stored = ckpt.meta.get("model_identity")
    if isinstance(stored, dict) and isinstance(stored.get("id"), str):
        return Identity(stored["id"], dict(stored.get("parts") or {}))
    print(f"[mixbench] {ckpt.path} was trained before model identities were recorded; its identity is computed "
          "from its config and today's code.", file=sys.stderr)
    return model_identity(ckpt.spec, data_fingerprint)


def checkpoint_subject(ckpt: Checkpoint, data_fingerprint: str) -> Identity:
    """What a model-scoped run of ``ckpt`` scores: its model identity and the hash of its weights."""
    return trained_identity(checkpoint_identity(ckpt, data_fingerprint), ckpt.meta.get("weights_sha256"))


@dataclass(frozen=True)
class EvalOptions:
    """How a planned run is made, apart from what it is: the kernel, whether to redo a stored run, progress
    output, whether the gate is skipped (recorded), whether the suite's cross-run step follows (``aggregate``; a
    grid aggregates once at its end), and a work folder to keep (default: a temporary one)."""

    kernel: str | None = None
    force: bool = False
    progress: bool = True
    skip_gate: bool = False
    aggregate: bool = True
    work_dir: Path | None = None


def evaluate(
    checkpoint: Path | str | None,
    run: PlannedRun,
    store: ResultsStore,
    options: EvalOptions = EvalOptions(),
    *,
    corpus=None,
    gate: GateRecord | None = None,
    loaded: tuple[Any, Checkpoint] | None = None,
    mixer: str | None = None,
    mixer_config: dict[str, Any] | None = None,
    preset: str = "tiny",
) -> EvalOutcome:
    """Make the planned ``run`` on ``checkpoint``; every input is validated, and the gate passed, before any work.

    A mixer-scoped suite may instead take ``mixer`` (+ ``mixer_config``): it trains its own small models, and
    the gate checks the mixer at ``preset``'s backbone. With ``options.aggregate``, the suite's cross-run step
    (:meth:`Suite.aggregate`) follows, also when the run was already in the store; a grid passes False and
    aggregates once at its end. ``gate`` is a verdict the caller already holds (a grid gates in its driver);
    ``loaded`` the ``(model, checkpoint)`` of ``checkpoint`` already loaded (a grid job loads it once for all its
    suites): it is put back in eval mode with no gradients and the kernel asked for before the suite sees it.
    """
    outcome = _evaluate(checkpoint, run, store, options, corpus=corpus, gate=gate, loaded=loaded, mixer=mixer,
                        mixer_config=mixer_config, preset=preset)
    note_runs(store, [outcome.run_id])  # the command ends with its numbers (harness.reporting.scored)
    return outcome


def evaluate_checkpoint(checkpoint: Path | str, suite: str, overrides: dict[str, Any], store: ResultsStore,
                        device: str | None = None, force: bool = False, skip_gate: bool = False) -> EvalOutcome:
    """``mixbench eval --suite SUITE`` for a suite's own command (``mixbench lm-eval``): the planned run of
    ``suite`` at ``overrides`` on ``device`` (None: cuda when available), scored through :func:`evaluate`."""
    from harness.model.devices import resolve_device

    run = PlannedRun.make(suite, overrides, device=resolve_device(device))
    return evaluate(checkpoint, run, store, EvalOptions(force=force, skip_gate=skip_gate))


def _evaluate(checkpoint: Path | str | None, run: PlannedRun, store: ResultsStore, options: EvalOptions, *, corpus,
              gate: GateRecord | None, loaded: tuple[Any, Checkpoint] | None, mixer: str | None,
              mixer_config: dict[str, Any] | None, preset: str) -> EvalOutcome:
    entry = SUITES.get(run.suite)
    suite_obj = entry.cls(run.config())
    device, progress = run.device, options.progress
    if checkpoint is None:
        if entry.cls.scope != "mixer" or mixer is None:
            raise MixbenchError(
                f"suite '{run.suite}' scores a trained model: pass --checkpoint DIR"
                + (" (or --mixer NAME, since it trains its own models)" if entry.cls.scope == "mixer" else "") + "."
            )
        return _evaluate_mixer(run, suite_obj, mixer, mixer_config or {}, preset, store, options, gate)
    model, ckpt = loaded if loaded is not None else load_model(checkpoint, device)
    model.eval().zero_grad(set_to_none=True)  # a suite before this one may have trained or back-propagated
    if options.kernel is not None:
        model.set_kernel(options.kernel)
    if gate is None:  # taken in score_run once the suite has checked its inputs: a bad config fails before it
        def gate() -> GateRecord:
            return require_gate(ckpt.spec.model, ckpt.spec.preset or "custom", device, options.skip_gate,
                                progress=progress)
    if entry.cls.scope == "mixer":  # a checkpoint names the mixer; the suite trains its own models of it
        return _evaluate_mixer(run, suite_obj, ckpt.spec.model.mixer, ckpt.spec.model.mixer_config, ckpt.spec.preset,
                               store, options, gate)
    from harness.corpus.data import load_corpus

    if corpus is None:
        corpus = load_corpus(ckpt.spec.data, progress=progress)
    trained_on = ckpt.meta.get("corpus_fingerprint")
    if trained_on is not None and trained_on != corpus.fingerprint:
        raise MixbenchError(
            f"the data or tokenizer of {ckpt.spec.data.source} changed since {ckpt.path} was trained "
            f"(fingerprint {corpus.fingerprint} vs {trained_on}); retrain the checkpoint."
        )
    subject_id = checkpoint_subject(ckpt, corpus.fingerprint)
    return score_run(run.bind(subject_id), suite_obj, store, options, gate,
                     lambda: model_subject(ckpt, model, subject_id, device), model=model, corpus=corpus,
                     seed=ckpt.spec.train.seed, timings={"train_s": ckpt.meta.get("train_seconds")})


def score_run(run: PlannedRun, suite_obj, store: ResultsStore, options: EvalOptions,
              gate: GateRecord | Callable[[], GateRecord], subject: Callable[[], Subject], *, model=None, mixer: tuple[str, dict[str, Any]] | None = None,
              corpus=None, seed: int = 0, timings: dict[str, Any] | None = None) -> EvalOutcome:
    """The one place a run is made, whatever route it came by (a checkpoint, a mixer definition, an external
    model, a grid, ``reproduce``): a run already in the store is not made again (unless forced); otherwise the
    suite validates the ``model`` once, the gate's verdict is taken (``gate`` may be a function: run only now, so a
    bad input is refused before the gate's work), the suite scores the model (or, mixer-scoped, trains and scores
    its own models of ``mixer``) in a work folder, and the manifest is built and written here; the suite's
    cross-run step follows with ``options.aggregate``. ``run`` is bound to its subject; ``subject`` describes it,
    built only when needed."""
    assert run.identity is not None and (model is None) != (mixer is None)
    if store.has_run(run.identity.id) and not options.force:
        if options.aggregate:
            write_aggregate(store, suite_obj, options.progress)
        return EvalOutcome(run.identity.id, run.suite, True, 0.0)
    entry = SUITES.get(run.suite)
    if model is not None:
        suite_obj.validate(model)
    store.check_writable()  # creates nothing: a mixer the gate refuses leaves the store untouched
    if callable(gate):
        gate = gate()
    store.ensure_writable()
    with tempfile.TemporaryDirectory(prefix=f"mixbench-{run.suite}-") as scratch:
        ctx = SuiteContext(corpus, Path(options.work_dir or scratch), seed, run.device, options.progress)
        t0 = time.perf_counter()
        with recording_reads() as reads:
            result = suite_obj.run(model, ctx) if mixer is None else suite_obj.run_mixer(mixer[0], dict(mixer[1]), ctx)
        seconds = time.perf_counter() - t0
        data = {} if corpus is None else \
            {"fingerprint": corpus.fingerprint, "splits": corpus.split_doc_ids(), **protocol_record(reads)}
        manifest = build_manifest(entry, suite_obj.cfg, run.config_source, subject(), gate, run.identity, result,
                                  timings={**(timings or {}), "eval_s": round(seconds, 3)}, data=data)
        store.write_run(run.identity.id, manifest, result, force=options.force)
    if options.aggregate:
        write_aggregate(store, suite_obj, options.progress)
    return EvalOutcome(run.identity.id, run.suite, False, seconds)


def _evaluate_mixer(run: PlannedRun, suite_obj, mixer: str, mixer_config: dict[str, Any], preset: str,
                    store: ResultsStore, options: EvalOptions,
                    gate: GateRecord | Callable[[], GateRecord] | None) -> EvalOutcome:
    """A mixer-scoped run: the gate at ``preset``'s backbone unless the caller holds a verdict (or its function)."""
    if gate is None:
        p = get_preset(preset)
        spec = ModelSpec(mixer, dict(mixer_config), BackboneConfig(vocab_size=p.vocab_size, **p.backbone))

        def gate() -> GateRecord:
            return require_gate(spec, preset, run.device, options.skip_gate, progress=options.progress)
    subject_id = mixer_identity(mixer, mixer_config)
    return score_run(run.bind(subject_id), suite_obj, store, options, gate,
                     lambda: mixer_subject(mixer, mixer_config, subject_id), mixer=(mixer, dict(mixer_config)))


def protocol_record(reads: set[str]) -> dict[str, Any]:
    """What a run's manifest says of the protocol it scored under (docs/protocol.md, "Splits"): the held-out
    splits it read and whether it selected (tuning) or scored."""
    purpose = selecting()
    return {"splits_read": sorted(reads), "protocol": f"selection: {purpose}" if purpose else "scoring"}


def write_aggregate(store: ResultsStore, suite_obj: Any, progress: bool) -> list[str]:
    """Run ``suite_obj``'s cross-run step and write the runs it returns: with :func:`evaluate`, the only place
    runs reach the store (suites read it and return typed results). Returns the ids written."""
    return store_runs(store, suite_obj.aggregate(store, progress))


def store_runs(store: ResultsStore, runs: list[AggregateRun]) -> list[str]:
    """Write runs a suite made outside :func:`evaluate` (its cross-run step, or its own command)."""
    if runs:
        store.ensure_writable()
    for run in runs:
        store.write_run(run.run_id, run.manifest, run.result, force=run.replace or store.has_run(run.run_id))
    note_runs(store, [run.run_id for run in runs])
    return [run.run_id for run in runs]


# ---------------------------------------------------------------------------------------------- manifests


def _mixer_parts(mixer: str, mixer_config: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    mix = MIXERS.get(mixer)
    config = mix.make_config(mixer_config)
    return mix.source, to_dict(config), _config_diff(mix.cls, config, mix.config_cls())


def _config_diff(cls: type, config: Any, default: Any) -> dict[str, Any]:
    """The config's fields that differ from the defaults (the board's label). A mixer built of other mixers (a
    hybrid's parts, docs/hybrids.md) differs part by part, ``attention.n_heads=2``, not by its parts' whole JSON."""
    components = getattr(cls, "components", None)
    if components is None:
        return diff_from(to_dict(config), to_dict(default))
    defaults = dict(components(default))
    return {f"{part}.{k}": v for part, values in components(config)
            for k, v in diff_from(values, defaults[part]).items()}


def control_flags(mixer: str) -> dict[str, bool]:
    """What the board needs to know of a control (docs/controls.md), read off the mixer's class flags."""
    cls = MIXERS.get(mixer).cls
    return {"control": bool(cls.control), "context_free": bool(cls.context_free)}


def model_subject(ckpt: Checkpoint, model, identity: Identity, device: str) -> Subject:
    """What the board needs to know about a scored checkpoint: who it is and what it costs."""
    from harness.reporting.mixer_table import flops_estimated

    spec = ckpt.spec
    source, full, diff = _mixer_parts(spec.model.mixer, spec.model.mixer_config)
    preset_backbone, preset_train, preset_data = _preset_defaults(spec)
    backbone = to_dict(spec.model.backbone)
    train = to_dict(spec.train)
    return Subject(
        kind="model",
        id=identity.id,
        row_id=row_identity(identity),
        mixer_id=mixer_identity(spec.model.mixer, spec.model.mixer_config).id,
        mixer=spec.model.mixer,
        mixer_source=source,
        mixer_config=full,
        config_diff=diff,
        preset=spec.preset,
        backbone=backbone,
        # widths compared as the MLP width they give (0 = the default width), so a matched or default width is no
        # difference and an unmatched one reads ffn_hidden=336
        backbone_diff={k: v for k, v in diff_from({**backbone, "ffn_hidden": spec.model.backbone.ffn_dim},
                                                  preset_backbone).items() if k != "vocab_size"},
        train_diff={k: v for k, v in diff_from(train, preset_train).items() if k != "seed"},
        data_diff=diff_from(to_dict(spec.data), preset_data),
        seed=spec.train.seed,
        checkpoint=str(ckpt.path),
        checkpoint_step=ckpt.step,
        weights_sha256=ckpt.meta.get("weights_sha256"),
        parameters=model.num_parameters(),
        non_embedding_parameters=model.num_parameters(exclude_embedding=True),
        state_floats=model.state_size(spec.model.backbone.context),
        train_flops=ckpt.meta.get("train_flops"),
        train_flops_estimated=None if ckpt.meta.get("train_flops") is None
        else any(flops_estimated(m) for m in model.mixers),
        train_tokens_per_s=ckpt.meta.get("tokens_per_s"),
        # a hybrid's layers run their own kernels (docs/hybrids.md): each distinct one, in layer order
        kernel="+".join(dict.fromkeys(m.kernel for m in model.mixers)),
        device=device,
        dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
        packages={k: v for m in model.mixers for k, v in m.package_versions().items()},
        loss_curve=[dict(r) for r in ckpt.meta.get("history", [])],
        learning_curve=[dict(r) for r in ckpt.meta.get("learning_curve", [])],
        recipe=recipe_status(spec.preset, spec.model.mixer, spec.model.mixer_config, train,
                             to_dict(spec.model.backbone))
        if spec.preset in PRESETS else UNTUNED,
        output_init=model.output_init,
        **control_flags(spec.model.mixer),
    )


def mixer_subject(mixer: str, mixer_config: dict[str, Any], identity: Identity) -> Subject:
    source, full, diff = _mixer_parts(mixer, mixer_config)
    return Subject(kind="mixer", id=identity.id, row_id=identity.id, mixer_id=identity.id, mixer=mixer,
                   mixer_source=source, mixer_config=full, config_diff=diff, **control_flags(mixer))


def _preset_defaults(spec: RunSpec) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The backbone, training and data values a model of this mixer config has by default at its preset (for the
    board's labels): the MLP width matched at the model's own backbone and its recipe's training values are
    defaults, not differences (:func:`harness.model.specs.preset_defaults`)."""
    if spec.preset not in PRESETS:
        return {}, {}, {}
    p = PRESETS[spec.preset]
    default = BackboneConfig(vocab_size=p.vocab_size, **p.backbone)
    backbone = {**to_dict(default), "ffn_hidden": default.ffn_dim}
    try:
        matched, train = preset_defaults(spec.preset, spec.model.mixer, spec.model.mixer_config,
                                         dataclasses.replace(spec.model.backbone, ffn_hidden=0))
        backbone["ffn_hidden"] = matched.ffn_dim
    except MixbenchError:  # a mixer that cannot be matched at this backbone: its width is its own
        backbone["ffn_hidden"] = spec.model.backbone.ffn_dim
        train = dict(p.train)
    return backbone, to_dict(TrainConfig(**train)), to_dict(DataConfig(vocab_size=p.vocab_size))


def build_manifest(
    entry: Entry, cfg: Any, source: str, subject: Subject, gate: GateRecord, identity: Identity,
    result: SuiteResult | None, timings: dict[str, Any] | None = None, data: dict[str, Any] | None = None,
    kind: str = "suite", extra: dict[str, Any] | None = None,
) -> RunManifest:
    """The one place a manifest is built (suite runs, lm-eval runs, a suite's cross-run records)."""
    full = to_dict(cfg)
    return RunManifest(
        suite=entry.name,
        suite_version=int(entry.cls.version),
        suite_config=full,
        config_source=source,
        config_diff=diff_from(full, to_dict(entry.config_cls())),
        subject=subject,
        gate=gate,
        identity=identity.parts,
        kind=kind,
        headline=tuple(entry.cls.headline),
        suite_info=dict(result.info) if result is not None else {},
        data=dict(data or {}),
        timings=dict(timings or {}),
        provenance=provenance(),
        extra=dict(extra or {}),
    )

