"""Scoring a ``transformers`` causal LM that mixbench did not train (``mixbench eval --suite S --hf-model M``).

The model is loaded with its own tokenizer (:func:`harness.hf.external.load_external`); the held-out documents
of the data source are tokenized with it, so perplexity's bits per byte compares it with mixbench's rows on the
same documents. Only suites that declare :attr:`harness.suite.Suite.external` score it; instead of the conformance
gate (which checks a mixer) it must pass the model-level checks (:func:`harness.hf.external.model_checks`). Its
runs go through the same write path as every run (:func:`harness.running.evaluate.score_run`), with a subject
of kind ``external`` naming the model, its revision and its size (docs/huggingface.md).
"""

from __future__ import annotations

import sys
from dataclasses import asdict

from harness.config import DataConfig
from harness.errors import MixbenchError
from harness.registry import SUITES
from harness.reporting.scored import note_runs
from harness.running.evaluate import EvalOptions, EvalOutcome, score_run
from harness.running.planned import PlannedRun
from harness.store.identity import external_identity
from harness.store.manifest import GateRecord, Subject
from harness.store.results import ResultsStore

#: bump when the model-level checks change
CHECKS_VERSION = 1


def external_suites() -> list[str]:
    return [name for name in SUITES.names() if getattr(SUITES.get(name).cls, "external", False)]


def evaluate_external(source: str, run: PlannedRun, store: ResultsStore, options: EvalOptions = EvalOptions(), *,
                      revision: str | None = None, data: DataConfig | None = None,
                      trust_remote_code: bool = False) -> EvalOutcome:
    """Score the ``transformers`` model ``source`` (a folder or a hub name) with the planned ``run``."""
    from harness.corpus.data import load_corpus
    from harness.hf.external import load_external, model_checks

    entry = SUITES.get(run.suite)
    if not getattr(entry.cls, "external", False):
        raise MixbenchError(
            f"suite '{run.suite}' scores mixbench models only (it reads their mixers or trains models from a mixer "
            f"definition); suites that score a transformers model: {', '.join(external_suites())}."
        )
    suite_obj = entry.cls(run.config())
    model = load_external(source, revision, run.device, trust_remote_code)
    if options.kernel is not None:
        print(f"[mixbench] --kernel {options.kernel} is ignored for a transformers model.", file=sys.stderr)
    failures = model_checks(model)
    if failures and not options.skip_gate:
        raise MixbenchError(f"{model.descriptor.name} failed the model-level checks ({'; '.join(failures)}); its "
                            "scores would not mean what they say (--skip-gate scores it anyway, recorded).")
    gate = GateRecord("skipped" if failures else "model-checks", CHECKS_VERSION, "external")
    corpus = load_corpus(data or DataConfig(), progress=options.progress, tokenizer=model.tokenizer)
    descriptor = asdict(model.descriptor)
    descriptor.pop("source")  # where it was read from does not change what it is
    identity = external_identity(descriptor, corpus.fingerprint)
    run = run.bind(identity)
    assert run.identity is not None
    note_runs(store, [run.identity.id])  # found or written: the command ends with its numbers
    return score_run(run, suite_obj, store, options, gate, lambda: external_subject(model, identity.id, run.device),
                     model=model, corpus=corpus)


def external_subject(model, identity: str, device: str) -> Subject:
    d = model.descriptor
    return Subject(
        kind="external", id=identity, row_id=identity, mixer_id=identity, mixer=d.name,
        mixer_source=f"transformers.{d.model_class}",
        mixer_config={"revision": d.revision, "model_class": d.model_class, "source": d.source},
        config_diff={}, checkpoint=d.source, weights_sha256=d.revision, parameters=d.parameters,
        kernel=model.kernel, device=device, dtype=d.dtype, packages={"transformers": d.transformers},
    )
