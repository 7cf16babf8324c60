"""Train-and-score grids: ``mixbench run --preset P``, ``mixbench run PLAN.yaml`` and ``mixbench quickstart``.

A grid is cut into :class:`ModelJob` units, one per trained model: train (mixer, preset, seed) into
``<checkpoints>/<train id>`` (resuming a partial checkpoint, skipping a complete one), then score it with each
suite (skipping runs already in the store). Jobs are independent, so an executor (``harness.running.executors``: in
process, a process pool, or Ray) may run them anywhere that sees the store and the data; the cross-run step
of a suite (:meth:`Suite.aggregate`, e.g. the judge's ratings) runs once in the driver after every job.

Before any job is dispatched, every request is validated and the run id of every (model, suite) pair is
computed in the driver, so a job whose runs are all in the store is skipped without loading a model, and a
second run of the same grid trains and scores nothing. The wall time of each phase is reported so budgets
can be checked.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config import RunSpec
from harness.errors import ConfigError, MixbenchError
from harness.reporting.scored import note_runs
from harness.running.evaluate import EvalOptions, evaluate, write_aggregate
from harness.model.conformance import GateConfig
from harness.model.gate import GateFailed, gate_key, require_gate, verdict_cached
from harness.model.checkpoint import final_weights_hash, load_model
from harness.store.identity import mixer_identity, model_identity, trained_identity
from harness.running.corpora import corpus_for, is_loaded, prefetch_corpora
from harness.running.planned import PlannedRun
from harness.store.manifest import GateRecord
from harness.model.memory import check_training
from harness.running.training_time import check_training_time, grid_cost_line, training_label
from harness.store.storage import cache_dir
from harness.registry import SUITES
from harness.store.results import ResultsStore
from harness.model.specs import bind_vocab, data_config, make_run_spec
from harness.suite import Suite
from harness.running.training import train

if TYPE_CHECKING:  # pragma: no cover
    from harness.running.executors import Executor, Prefetch


#: models one grid may ask for: larger grids are a typo (a seed range pasted out), or belong in several plans
MAX_GRID_MODELS = 1000


def check_grid_size(models: int, where: str) -> None:
    """Refuse a grid of more than :data:`MAX_GRID_MODELS` models before anything is built for it."""
    if models > MAX_GRID_MODELS:
        raise ConfigError(
            f"{where} asks for {models:,} models (presets x mixers x seeds), more than the {MAX_GRID_MODELS:,} one "
            "grid may hold; check the seeds and mixers, or split the grid into several plans."
        )


@dataclass(frozen=True)
class Resources:
    """What one job needs on the machine that runs it (Ray schedules on it; the process pool sizes itself)."""

    cpus: float = 1.0
    gpus: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cpus", "gpus"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"resources: {name} must be a number >= 0, got {value!r}.")
            object.__setattr__(self, name, float(value))
        if self.cpus <= 0:
            raise ConfigError(f"resources: cpus must be > 0 (a job needs a core to run on), got {self.cpus}.")
        if self.gpus > 1:
            raise ConfigError(
                f"resources: gpus must be at most 1 per job, got {self.gpus}; a model on several GPUs trains "
                "under torchrun (`torchrun --nproc-per-node N -m harness.cli train ...`)."
            )


@dataclass(frozen=True)
class JobOptions:
    """How every job of a request runs (its device and kernel, whether to redo work, what to print, what it asks
    of a scheduler, which ``--plugin`` modules a worker imports first, whether the gate is skipped, whether a
    training estimated past the time limit starts anyway: ``--yes``, :mod:`harness.running.training_time`)."""

    device: str = "cpu"
    kernel: str | None = None
    force: bool = False
    progress: bool = True
    resources: Resources = field(default_factory=Resources)
    plugins: tuple[str, ...] = ()
    skip_gate: bool = False
    yes: bool = False


@dataclass
class GridRequest:
    """What one preset's grid trains and scores (a plan makes one per preset); ``options`` says how its jobs run."""

    preset: str
    mixers: list[str]
    suites: list[str]
    seeds: list[int] = field(default_factory=lambda: [0])
    mixer_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    backbone_overrides: dict[str, Any] = field(default_factory=dict)
    train_overrides: dict[str, Any] = field(default_factory=dict)
    data_overrides: dict[str, Any] = field(default_factory=dict)
    suite_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    options: JobOptions = field(default_factory=JobOptions)
    #: controls trained and scored beside the mixers, once per seed (docs/controls.md): None = every registered
    #: control, [] = none. They take the grid's backbone, training and data overrides, and their default config.
    controls: list[str] | None = None
    #: ``params`` / ``none``: whether each model's MLP width matches the reference's parameters (None: the
    #: preset's; docs/protocol.md, "Matched sizes")
    match: str | None = None

    def planned_runs(self) -> tuple[PlannedRun, ...]:
        """Each suite's run as this request declares it (validated; bound to a subject per job)."""
        return tuple(PlannedRun.make(s, self.suite_overrides.get(s), device=self.options.device, grid=True)
                     for s in self.suites)

    def all_mixers(self) -> list[str]:
        """The mixers, then each control the grid does not already list."""
        from harness.registry import resolve_controls

        return [*self.mixers, *(c for c in resolve_controls(self.controls) if c not in self.mixers)]


@dataclass(frozen=True)
class ModelJob:
    """One unit of a grid: train one model, then score it with each suite. Picklable, so it can travel."""

    spec: RunSpec  # vocabulary already bound to the tokenizer's
    model_id: str  # harness.store.identity.model_identity of spec on its data: names the checkpoint folder
    runs: tuple[PlannedRun, ...]  # one per suite, bound to the model where the driver knows its weights
    options: JobOptions = field(default_factory=JobOptions)
    gate: GateRecord | None = None  # the driver's verdict (set before dispatch), so workers never re-run it

    @property
    def resources(self) -> Resources:
        """What the job asks of an executor (harness/running/executors.py reads it)."""
        return self.options.resources

    @property
    def label(self) -> str:
        return f"{self.spec.model.mixer} / {self.spec.preset} / seed {self.spec.train.seed}"


@dataclass
class JobOutcome:
    """What a job did: phase timings, whether it trained, and the run id each suite wrote or found."""

    label: str
    trained: bool
    phases: list[tuple[str, float]] = field(default_factory=list)
    runs: dict[str, str] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)  # suites whose run this job wrote (not found in the store)
    host: str = ""
    failures: list["JobFailure"] = field(default_factory=list)  # suites that failed; the others still ran


@dataclass
class JobFailure:
    label: str
    error: str  # the user-facing message, or a traceback for a bug


@dataclass
class PhaseTimer:
    phases: list[tuple[str, float]] = field(default_factory=list)
    echo: bool = True

    def add(self, name: str, seconds: float, echo: bool = True) -> None:
        """Record a phase; ``echo=False`` when its line was printed already (the gate prints its own verdict)."""
        self.phases.append((name, seconds))
        if self.echo and echo:
            print(f"[mixbench] {name}: {seconds:.1f} s", file=sys.stderr, flush=True)

    def render(self) -> str:
        total = sum(s for _, s in self.phases)
        rows = [f"  {name:<40} {s:8.1f} s" for name, s in self.phases]
        return "\n".join(["phase timings:", *rows, f"  {'total':<40} {total:8.1f} s"])


@dataclass
class GridReport(PhaseTimer):
    """The phase timings plus what each job did; ``failures`` is non-empty only with ``keep_going``."""

    jobs: int = 0
    skipped: int = 0  # jobs whose runs were all in the store: nothing loaded, trained or scored
    trained: int = 0  # models trained (or resumed) in this call
    written: int = 0  # suite runs written in this call
    wall_s: float = 0.0
    outcomes: list[JobOutcome] = field(default_factory=list)
    failures: list[JobFailure] = field(default_factory=list)
    run_ids: set[str] = field(default_factory=set)  # every suite run of the grid (found, written or expected)

    def summary(self) -> str:
        line = (
            f"{self.jobs} job(s): {self.skipped} already complete, {self.trained} model(s) trained, "
            f"{self.written} run(s) written, {len(self.failures)} failed; {self.wall_s:.1f} s wall"
        )
        failed = [f"  FAILED {f.label}: {f.error}" for f in self.failures]
        return "\n".join([line, *failed])

    def render(self) -> str:
        return "\n".join([super().render(), self.summary()])


def checkpoint_root(store: ResultsStore) -> Path:
    """Checkpoints live beside a local store, or in the cache for a remote one (they are large)."""
    local = store.local_path
    if local is not None:
        return Path(local) / "checkpoints"
    return cache_dir() / "checkpoints"


def plan_runs(spec: RunSpec, data_fingerprint: str, runs: Sequence[PlannedRun],
              weights_sha256: str | None) -> tuple[PlannedRun, ...]:
    """``runs`` bound to the subject they score, where the driver knows it: the mixer for mixer-scoped suites,
    the trained model for model-scoped ones once its checkpoint exists (``weights_sha256``; before training there
    is nothing to bind and the job runs). A device-dependent suite is bound to this machine's descriptor, and
    left unbound when this machine lacks the device (a CPU-only Ray head planning GPU jobs): the worker binds it.
    A wrong or missing binding costs a dispatched job that finds its checkpoint and runs in place, never a wrong
    skip of another run."""
    bound = []
    for run in runs:
        if run.scope == "mixer":
            subject = mixer_identity(spec.model.mixer, spec.model.mixer_config)
        elif weights_sha256 is None:
            bound.append(run)
            continue
        else:
            subject = trained_identity(model_identity(spec, data_fingerprint), weights_sha256)
        try:
            bound.append(run.bind(subject))
        except (RuntimeError, AssertionError, ValueError):  # no such device here
            bound.append(run)
    return tuple(bound)


def _prefetch_gates(pending: list[tuple[GridRequest, RunSpec, Any]], executor: "Executor",
                    like: list[Any]) -> "Prefetch | None":
    """The gates whose verdict is not cached, started in the pool as soon as the models are planned: a gate is
    blind to the data and the vocabulary, so it need not wait for the corpus (:func:`gate_jobs` then finds the
    verdicts in the cache)."""
    first_of: dict[str, ModelJob] = {}
    for req, spec, _ in pending:
        if not req.options.skip_gate:
            job = ModelJob(spec, "", (), req.options)  # not yet bound to the data: no model id
            first_of.setdefault(_gate_key(job), job)
    todo = [job for job in first_of.values() if not verdict_cached(job.spec.model, job.options.device)]
    return executor.prefetch(gate_job, todo, like)


def plan_jobs(reqs: Sequence[GridRequest], store: ResultsStore, timer: PhaseTimer,
              executor: "Executor | None" = None) -> list[ModelJob]:
    """Validate every request and cut it into jobs (nothing is trained; data and tokenizers are loaded).

    Every name and config value is checked before the store is touched, and the store is proven writable
    before the (possibly long) data loading and tokenizer training is waited for. A local pool (``executor``)
    loads the data meanwhile, from the start, and runs the gates once the models are planned; an error (a bad
    option) stops its workers at once.
    """
    pending: list[tuple[GridRequest, RunSpec, Any]] = []
    check_grid_size(sum(len(r.all_mixers()) * len(r.seeds) for r in reqs), "the grid")
    ahead = executor if executor is not None and executor.sees(store.root) else None  # workers may work ahead
    like = [r.options for r in reqs for _ in r.all_mixers() for _ in r.seeds]  # the jobs to come: the pool's shape
    data = None
    if ahead is not None:
        configs = [data_config(r.preset, r.data_overrides) for r in reqs]
        data = prefetch_corpora(configs, any(r.options.progress for r in reqs), ahead, like)
    gates = None
    try:
        for req in reqs:
            planned = req.planned_runs()  # fails on an unknown suite or bad suite option before any work
            for mixer in req.all_mixers():
                for seed in req.seeds:
                    spec = make_run_spec(mixer, req.preset, mixer_config=req.mixer_configs.get(mixer),
                                         backbone_overrides=req.backbone_overrides,
                                         train_overrides={**req.train_overrides, "seed": seed},
                                         data_overrides=req.data_overrides, match=req.match)
                    check_training(spec.model.backbone, spec.train.batch_size, req.options.device,
                                   f"training {mixer} at preset {req.preset}")
                    check_training_time(spec, req.options.device, req.options.yes, training_label(spec))
                    pending.append((req, spec, planned))
        store.ensure_writable()
        gates = _prefetch_gates(pending, ahead, like) if ahead is not None else None
        jobs = _bind_jobs(pending, store, timer, data)
        if gates is not None:
            t0 = time.perf_counter()
            gates.wait()  # a gate a worker could not finish is run by the driver (gate_jobs)
            timer.add(f"conformance gates of {len(gates)} mixer(s) side by side, begun beside the data",
                      time.perf_counter() - t0)
    except BaseException:
        for started in (data, gates):
            if started is not None:
                started.abandon()
        raise
    return jobs


def _bind_jobs(pending: list[tuple[GridRequest, RunSpec, Any]], store: ResultsStore, timer: PhaseTimer,
               data: "Prefetch | None") -> list[ModelJob]:
    """The planned models bound to their data (a corpus ``data`` is loading is waited for): one job per distinct
    model, each with the runs no other job makes."""
    jobs, seen, planned_ids = [], set(), set()
    for req, spec, planned in pending:
        if not is_loaded(spec.data):
            t0 = time.perf_counter()
            if data is not None:  # the worker's failure, if any, is met again here
                data.wait()
            corpus = corpus_for(spec.data, req.options.progress)
            where = ", loaded by a pool worker while the grid was planned" if data is not None else ""
            timer.add(f"data + tokenizer ({corpus.tokenizer.vocab_size} tokens vocab{where})",
                      time.perf_counter() - t0)
        corpus = corpus_for(spec.data, req.options.progress)
        spec = bind_vocab(spec, corpus.tokenizer.vocab_size)
        model_id = model_identity(spec, corpus.fingerprint).id
        if model_id in seen:  # the same model asked twice (e.g. by two plan entries): train it once
            continue
        seen.add(model_id)
        weights = final_weights_hash(checkpoint_root(store) / model_id)
        # a run bound before training (a mixer-scoped suite's: the same for every seed of its mixer) is given to
        # one job only, so that jobs side by side never make the same run twice
        runs = tuple(r for r in plan_runs(spec, corpus.fingerprint, planned, weights)
                     if r.run_id is None or r.run_id not in planned_ids)
        planned_ids.update(r.run_id for r in runs if r.run_id is not None)
        jobs.append(ModelJob(spec, model_id, runs, req.options))
    return jobs


def _gate_key(job: ModelJob) -> str:
    """What :func:`require_gate` keys its verdict by, and whether the gate is skipped."""
    return gate_key(job.spec.model, job.options.device, GateConfig()) + str(job.options.skip_gate)


def gate_job(job: ModelJob) -> None:
    """The gate of ``job``'s mixer and config, run in a worker: its verdict lands in the gate cache on disk, which
    the driver then reads (:func:`gate_jobs`)."""
    from harness.registry import load_plugins

    load_plugins(job.options.plugins)
    try:
        require_gate(job.spec.model, job.spec.preset, job.options.device, progress=job.options.progress)
    except GateFailed:
        pass  # the verdict is cached; the driver raises it for every job of the mixer


def gate_jobs(jobs: list[ModelJob], report: "GridReport", keep_going: bool,
              executor: "Executor | None" = None) -> list[ModelJob]:
    """Run (or read from the cache) the conformance gate of every job's mixer and config before any training.

    With an executor that runs jobs side by side on this machine (a local process pool), the distinct gates run
    there first, one per worker, and the workers stay up for the grid's jobs; the driver then reads each verdict
    from the cache they share (a gate a worker could not finish is run here). A failing mixer's jobs are failures
    (raised, or recorded with ``keep_going``): nothing of it is trained or scored. Returns the jobs that may run,
    each carrying its verdict.
    """
    first_of: dict[str, ModelJob] = {}
    for job in jobs:
        if not job.options.skip_gate:
            first_of.setdefault(_gate_key(job), job)
    distinct = [job for job in first_of.values() if not verdict_cached(job.spec.model, job.options.device)]
    if executor is not None and executor.side_by_side(distinct):
        t0 = time.perf_counter()
        for _ in executor.map(gate_job, distinct):  # an error in a worker: the driver runs that gate below
            pass
        report.add(f"conformance gates of {len(distinct)} mixer(s) side by side", time.perf_counter() - t0)
    verdicts: dict[str, GateRecord | BaseException] = {}
    passed = []
    for job in jobs:
        opts = job.options
        key = _gate_key(job)
        if key not in verdicts:
            t0 = time.perf_counter()
            try:
                verdicts[key] = require_gate(job.spec.model, job.spec.preset, opts.device, opts.skip_gate,
                                             progress=opts.progress)
            except GateFailed as exc:
                verdicts[key] = exc
            if time.perf_counter() - t0 > 0.5:  # with progress, require_gate printed "conformance gate passed in"
                report.add(f"conformance gate of {job.spec.model.mixer}", time.perf_counter() - t0,
                           echo=not opts.progress)
        verdict = verdicts[key]
        if isinstance(verdict, BaseException):
            if not keep_going:
                raise verdict
            report.failures.append(JobFailure(job.label, str(verdict)))
            continue
        passed.append(dataclasses.replace(job, gate=verdict))
    return passed


def job_is_complete(job: ModelJob, store: ResultsStore) -> bool:
    """True when every suite's run of this model is already in the store (and nothing is forced)."""
    return not job.options.force and all(r.run_id is not None and store.has_run(r.run_id) for r in job.runs)


def execute_job(job: ModelJob, store_root: str) -> JobOutcome:
    """Train one model (resuming its checkpoint) and score it with each suite; runs in any process.

    Called by every executor with the store's root (a path or URL), never a live object, so it works in a
    fresh worker process or on another Ray node that sees the same store.
    """
    import platform

    from harness.registry import load_plugins

    opts = job.options
    load_plugins(opts.plugins)
    if opts.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise MixbenchError(
                f"job {job.label} needs {opts.device} but {platform.node()} has no usable GPU; give the plan "
                "resources: {gpus: 1} so Ray places it on a GPU node, or run it with device: cpu."
            )
    store = ResultsStore(store_root)
    spec = job.spec
    corpus = corpus_for(spec.data, opts.progress)
    outcome = JobOutcome(job.label, trained=False, host=platform.node())
    out = checkpoint_root(store) / job.model_id
    t0 = time.perf_counter()
    result = train(spec, out, corpus, device=opts.device, kernel=opts.kernel, progress=opts.progress,
                   force=opts.force)
    label = f"train {spec.model.mixer} seed {spec.train.seed}"
    if result.skipped:
        label += " (already trained)"
    else:
        outcome.trained = True
        resumed = f", resumed at step {result.resumed_from}" if result.resumed_from else ""
        label += f" ({result.tokens_per_s:,.0f} tokens/s, final loss {result.final_loss:.3f}{resumed})"
    outcome.phases.append((label, time.perf_counter() - t0))
    loaded = None  # the trained model, loaded (and its identity verified) once for all of the job's suites
    eval_options = EvalOptions(opts.kernel, opts.force, opts.progress, opts.skip_gate, aggregate=False)
    for run in job.runs:  # the grid aggregates once, at its end
        t0 = time.perf_counter()
        name = f"eval {run.suite} on {spec.model.mixer} seed {spec.train.seed}"
        if run.run_id is not None and not opts.force and store.has_run(run.run_id):  # nothing to load for it
            outcome.runs[run.suite] = run.run_id
            outcome.phases.append((f"{name} (already in the store)", time.perf_counter() - t0))
            continue
        try:  # one suite's failure (a bug in it, or a mixer it cannot score) must not cost the model's others
            if loaded is None:
                loaded = load_model(out, opts.device)
            ev = evaluate(out, run, store, eval_options, corpus=corpus, gate=job.gate, loaded=loaded)
        except Exception as exc:  # noqa: BLE001 - recorded with its traceback, reported by the grid
            outcome.failures.append(JobFailure(f"{job.label} / {run.suite}", failure_text(exc)))
            outcome.phases.append((f"{name} (FAILED)", time.perf_counter() - t0))
            continue
        outcome.runs[run.suite] = ev.run_id
        if not ev.skipped:
            outcome.written.append(run.suite)
        outcome.phases.append((name + (" (already in the store)" if ev.skipped else ""), time.perf_counter() - t0))
    return outcome


def failure_text(exc: BaseException) -> str:
    """A user error's own sentence; a bug keeps its traceback so it can be fixed."""
    if isinstance(exc, MixbenchError):
        return str(exc)
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


def _say_cost(todo: list[ModelJob], store: ResultsStore) -> None:
    """One line before any training: what the grid trains (models, steps, tokens, time at the measured speed) and
    how many suite runs follow (issue: "costs are known before they are spent")."""
    untrained = [job.spec for job in todo if final_weights_hash(checkpoint_root(store) / job.model_id) is None]
    suite_runs = sum(1 for job in todo for run in job.runs if run.run_id is None or not store.has_run(run.run_id))
    line = grid_cost_line(untrained, suite_runs, todo[0].options.device) if untrained else (
        f"[mixbench] every model is trained already; {suite_runs} suite run(s) to score")
    print(line, file=sys.stderr, flush=True)


def run_requests(
    reqs: Sequence[GridRequest],
    store: ResultsStore,
    executor: "Executor | None" = None,
    keep_going: bool = False,
) -> GridReport:
    """Run every job of ``reqs`` that is not already complete through ``executor`` (default: in process).

    With ``keep_going`` a failed job is recorded in the report and the others still run; without it the
    first failure stops the grid and is raised (finished jobs stay in the store, so a rerun resumes). Within a
    job, a failing suite never stops the model's other suites; its failure counts as the job's.
    """
    from harness.running.executors import LocalExecutor

    wall0 = time.perf_counter()
    report = GridReport()
    executor = executor or LocalExecutor()
    jobs = plan_jobs(reqs, store, report, executor)
    report.jobs = len(jobs)
    todo = []
    for job in jobs:
        report.run_ids.update(r.run_id for r in job.runs if r.run_id is not None)
        if job_is_complete(job, store):
            report.skipped += 1
            report.add(f"{job.label}: every suite already in the store", 0.0)
        else:
            todo.append(job)
    if todo and not executor.sees(store.root):
        raise MixbenchError(
            f"the results store {store.root} lives in this process's memory, so {executor.name} workers "
            "cannot see it; use --executor local or a folder / shared URL for --results."
        )
    todo = gate_jobs(todo, report, keep_going, executor)
    if todo:
        _say_cost(todo, store)
        timed = [job for job in todo if any(r.device_dependent for r in job.runs)]
        if executor.side_by_side(todo) and timed:  # timings are made alone, after the jobs that would slow them
            first = [dataclasses.replace(job, runs=tuple(r for r in job.runs if not r.device_dependent)) for job in todo]
            later = [dataclasses.replace(job, runs=tuple(r for r in job.runs if r.device_dependent)) for job in timed]
            print(f"[mixbench] {len(todo)} of {len(jobs)} job(s) to run on {executor.describe()}; the "
                  f"device-dependent runs of {len(later)} after them, one at a time in this process",
                  file=sys.stderr, flush=True)
            failed = _run_jobs(executor, first, store, report, reqs, keep_going, trained=True)
            executor.close()  # no worker process is left beside the timings
            _run_jobs(LocalExecutor(), [job for job in later if job.label not in failed], store, report, reqs,
                      keep_going, trained=False)
        else:
            print(f"[mixbench] {len(todo)} of {len(jobs)} job(s) to run on {executor.describe()}",
                  file=sys.stderr, flush=True)
            _run_jobs(executor, todo, store, report, reqs, keep_going, trained=True)
    suites_seen: dict[str, dict[str, Any] | None] = {}
    for req in reqs:
        for suite in req.suites:
            suites_seen.setdefault(suite, req.suite_overrides.get(suite))
    progress = any(r.options.progress for r in reqs)
    for suite, overrides in suites_seen.items():  # cross-run steps (the judge's ratings) once every run is in
        entry = SUITES.get(suite)
        if entry.cls.aggregate is not Suite.aggregate:
            t0 = time.perf_counter()
            write_aggregate(store, entry.cls(entry.make_config(overrides)), progress)
            report.add(f"aggregate {suite}", time.perf_counter() - t0)
    report.wall_s = time.perf_counter() - wall0
    # the command ends with the grid's numbers, noted here in the driver whichever executor ran the jobs
    planned = [r.run_id for job in jobs for r in job.runs]
    note_runs(store, [*planned, *(rid for outcome in report.outcomes for rid in outcome.runs.values())])
    return report


def _run_jobs(executor: "Executor", jobs: list[ModelJob], store: ResultsStore, report: "GridReport",
              reqs: Sequence[GridRequest], keep_going: bool, trained: bool) -> set[str]:
    """Run ``jobs`` through ``executor`` into ``report``; ``trained``: count their trainings (a second pass over
    models already trained does not). Returns the labels of the jobs that failed whole (with ``keep_going``)."""
    failed: set[str] = set()
    for done, (job, result) in enumerate(executor.map(execute_job, jobs, store.root), 1):
        state = "failed" if isinstance(result, BaseException) else f"done on {result.host}"
        print(f"[mixbench] job {done}/{len(jobs)} {state}: {job.label}", file=sys.stderr, flush=True)
        if isinstance(result, BaseException):
            if not keep_going:
                raise result
            report.failures.append(JobFailure(job.label, failure_text(result)))
            report.add(f"{job.label}: FAILED", 0.0)
            failed.add(job.label)
            continue
        report.outcomes.append(result)
        if any(r.options.progress for r in reqs):
            _print_headlines(store, [result.runs[suite] for suite in result.written])
        report.run_ids.update(result.runs.values())
        report.trained += int(result.trained and trained)
        report.written += len(result.written)
        for name, seconds in result.phases:
            report.add(name, seconds)
        report.failures.extend(result.failures)
        if result.failures and not keep_going:
            raise MixbenchError("; ".join(f"{f.label} failed: {f.error}" for f in result.failures))
    return failed


def _print_headlines(store: ResultsStore, run_ids: list[str]) -> None:
    """Each run a job wrote, as the table every scoring command ends with (:mod:`harness.reporting.scored`)."""
    from harness.reporting.scored import numbers_table

    runs = []
    for rid in run_ids:
        try:
            runs.append(store.read_run(rid, samples=False))
        except MixbenchError as exc:  # the table is a courtesy: a run that cannot be read back is reported
            print(f"[mixbench] run {rid} cannot be read back: {exc}", file=sys.stderr, flush=True)
    if runs:
        print(numbers_table(runs) + "\n", flush=True)


def run_grid(
    req: GridRequest, store: ResultsStore, executor: "Executor | None" = None, keep_going: bool = False
) -> GridReport:
    """One preset's grid (``mixbench run --preset P``); see :func:`run_requests`."""
    return run_requests([req], store, executor, keep_going)
