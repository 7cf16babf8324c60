"""Plan files and executors: validation, skip-what-exists, resume, and the same grid on a process pool and Ray."""

from __future__ import annotations

import math
import os
import signal
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from harness.cli import main
from harness.config import content_hash
from harness.errors import ConfigError, MixbenchError
from harness.running.executors import ProcessExecutor, RayExecutor, make_executor
from harness.running.plan import Plan, Tolerance, load_plan
from harness.store.results import ResultsStore
from harness.running.runner import PhaseTimer, Resources, checkpoint_root, plan_jobs, run_requests
from harness.running.training import train

PLAN = """\
name: {name}
presets: [tiny]
mixers: [protot, attention]
controls: []  # the grid mechanics under test here; tests/test_controls.py covers the controls in grids
seeds: [0]
suites:
  perplexity: {{max_windows: 16, bootstrap: 100, splits: [test]}}
train: {{token_budget: 32768, lr: 0.003{train_extra}}}  # one learning rate: executors must agree to 1e-3, which a
                                                   # recipe's larger rates (tiny's 0.008) turn into thread noise
data: {{max_train_docs: 40}}
resources: {{cpus: 1}}
"""


def write_plan(tmp_path: Path, name: str = "tiny-grid", train_extra: str = "", text: str | None = None) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text if text is not None else PLAN.format(name=name, train_extra=train_extra))
    return path


def perplexities(store: ResultsStore) -> dict[str, float]:
    return {
        run.manifest.subject.mixer: next(m.value for m in run.metrics if m.name == "ppl")
        for run in store.iter_runs(samples=False) if run.manifest.suite == "perplexity"
    }


@pytest.fixture(scope="module")
def local_grid(tmp_path_factory):
    """The plan run once through the CLI with the default (local) executor: the reference for the others."""
    tmp = tmp_path_factory.mktemp("plan")
    plan, store = write_plan(tmp), tmp / "store"
    assert main(["run", str(plan), "--results", str(store), "--no-progress"]) == 0
    return plan, store


# ------------------------------------------------------------------------------------------------ validation


def test_plan_loads_with_list_and_mapping_forms(tmp_path):
    text = textwrap.dedent("""\
        preset: tiny
        mixers: {protot: {n_prototypes: 8}, attention: null}
        seeds: 3
        suites: [perplexity]
        resources: {cpus: 2, gpus: 0.5}
        nightly: {rel_tolerance: 0.05, suites: {perplexity: {ci_scale: 2}}}
        """)
    plan = load_plan(write_plan(tmp_path, "forms", text=text))
    assert plan.name == "forms" and plan.presets == ("tiny",) and plan.seeds == (3,)
    assert plan.mixers == ("protot", "attention")
    assert plan.mixer_configs == {"protot": {"n_prototypes": 8}, "attention": {}}
    assert plan.resources == Resources(2.0, 0.5)
    assert plan.nightly.for_suite("perplexity") == Tolerance(0.05, 0.0, 2.0)
    reqs = plan.requests("cpu")
    assert len(reqs) == 1 and reqs[0].mixer_configs["protot"] == {"n_prototypes": 8} and reqs[0].seeds == [3]


def test_the_shipped_example_plan_is_valid():
    from harness.registry import MIXERS, SUITES

    # check=False skips building mamba / deltanet on the meta device (their kernel imports take ~15 s here)
    plan = load_plan(Path(__file__).resolve().parents[1] / "plans" / "nightly-tiny.yaml", check=False)
    assert plan.name == "nightly-tiny" and plan.jobs == 12  # 4 mixers and the 2 controls, 2 seeds
    for mixer in plan.mixers:
        MIXERS.get(mixer)
    for suite in plan.suites:
        SUITES.get(suite).make_config(plan.suite_configs.get(suite))


@pytest.mark.parametrize(
    "text, message",
    [
        ("presets: [tiny]\nmixer: [protot]\nsuites: [perplexity]\n", "unknown key 'mixer'. Did you mean 'mixers'?"),
        ("presets: [tiny]\nmixers: [protott]\nsuites: [perplexity]\n", "Did you mean 'protot'?"),
        ("presets: [huge]\nmixers: [protot]\nsuites: [perplexity]\n", "unknown preset 'huge'"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: {perplexity: {windows: 3}}\n", "unknown config field(s) windows"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\nseeds: [0, 0]\n", "lists a value twice"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\ntrain: {seed: 1}\n", "set seeds with 'seeds"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\ntrain: {lr: -1}\n", "lr must be positive"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\nresources: {cpus: 0}\n", "cpus must be > 0"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\nresources: {gpus: 2}\n", "under torchrun"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\nresources: {cores: 2}\n", "unknown key 'cores'"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\nmixer_configs: {mamba: {}}\n", "does not run"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\nnightly: {rel_tolerance: -1}\n", ">= 0"),
        ("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\nkernel: nope\n", "kernel 'nope' is not one of"),
        ("presets: [tiny]\nsuites: [perplexity]\n", "'mixers' is required"),
        ("presets: [tiny\n", "not valid YAML"),
        ("- a list\n", "must be a mapping"),
    ],
)
def test_plan_mistakes_are_named_before_any_work(tmp_path, text, message):
    with pytest.raises(MixbenchError) as info:
        load_plan(write_plan(tmp_path, "bad", text=text))
    assert message in str(info.value)


def test_missing_plan_file_and_grid_flags_beside_a_plan_are_user_errors(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml"), "--results", str(tmp_path / "s")]) == 2
    assert "plan file" in capsys.readouterr().err
    plan = write_plan(tmp_path)
    assert main(["run", str(plan), "--mixers", "protot", "--lr", "0.1", "--results", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "--lr, --mixers cannot be combined with a plan file" in err
    assert not (tmp_path / "s").exists()  # refused before anything was written


def test_executor_options_must_match_the_executor():
    with pytest.raises(ConfigError, match="need --executor ray"):
        make_executor("local", address="auto")
    with pytest.raises(ConfigError, match="needs --executor process"):
        make_executor("ray", workers=2)
    with pytest.raises(ConfigError, match="only apply to a local cluster"):
        RayExecutor(address="auto", num_cpus=2)


# ------------------------------------------------------------------------------------------- skip and resume


def test_second_run_of_a_plan_trains_and_scores_nothing(local_grid, capsys):
    plan, store_dir = local_grid
    store = ResultsStore(store_dir)
    before = {r.run_id: r.manifest.written_at for r in store.iter_runs(samples=False)}
    ckpt_mtimes = {p: p.stat().st_mtime_ns for p in (store_dir / "checkpoints").rglob("*") if p.is_file()}
    assert len(before) == 2 and len(ckpt_mtimes) > 0
    t0 = time.perf_counter()
    assert main(["run", str(plan), "--results", str(store_dir), "--no-progress"]) == 0
    seconds = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert "2 job(s): 2 already complete, 0 model(s) trained, 0 run(s) written, 0 failed" in out
    assert {r.run_id: r.manifest.written_at for r in store.iter_runs(samples=False)} == before
    assert {p: p.stat().st_mtime_ns for p in (store_dir / "checkpoints").rglob("*") if p.is_file()} == ckpt_mtimes
    print(f"second run of the plan: {seconds:.2f} s")


def test_driver_predicts_the_run_ids_evaluate_writes(local_grid):
    plan_path, store_dir = local_grid
    store = ResultsStore(store_dir)
    jobs = plan_jobs(load_plan(plan_path).requests("cpu", progress=False), store, PhaseTimer(echo=False))
    predicted = {run.run_id for job in jobs for run in job.runs}
    assert predicted == {r.run_id for r in store.iter_runs(samples=False)}


def test_an_interrupted_job_resumes_from_its_checkpoint(tmp_path):
    plan = load_plan(write_plan(tmp_path, "resume", train_extra=", checkpoint_every: 8"))
    plan = Plan(**{**plan.__dict__, "mixers": ("protot",)})
    store = ResultsStore(tmp_path / "store")
    reqs = plan.requests("cpu", progress=False)
    (job,) = plan_jobs(reqs, store, PhaseTimer(echo=False))

    class Killed(Exception):
        pass

    def kill_at_20(step: int, loss: float) -> None:
        if step == 20:
            raise Killed

    from harness.running.corpora import corpus_for

    corpus = corpus_for(job.spec.data, False)
    with pytest.raises(Killed):  # stands in for a SIGKILL (tested in test_training): snapshot at 16 is kept
        train(job.spec, checkpoint_root(store) / job.model_id, corpus, progress=False, on_step=kill_at_20)
    report = run_requests(reqs, store)
    (outcome,) = report.outcomes
    assert outcome.trained and "resumed at step 16" in outcome.phases[0][0]
    uninterrupted = train(job.spec, tmp_path / "fresh", corpus, progress=False)
    resumed = train(job.spec, checkpoint_root(store) / job.model_id, corpus, progress=False)
    assert resumed.skipped and resumed.final_loss == uninterrupted.final_loss  # bit-for-bit on one machine


def test_memory_store_needs_the_local_executor():
    plan = Plan("m", ("tiny",), ("protot",), ("perplexity",), data={"max_train_docs": 40},
                train={"token_budget": 32768})
    store = ResultsStore(f"memory://plan-{uuid.uuid4().hex}")
    with pytest.raises(MixbenchError, match="use --executor local"):
        run_requests(plan.requests("cpu", progress=False), store, ProcessExecutor(1))


# ------------------------------------------------------------------------------------------------ executors


def _same_scores(store: ResultsStore, reference: ResultsStore) -> None:
    got, want = perplexities(store), perplexities(reference)
    assert got.keys() == want.keys() == {"protot", "attention"}
    for mixer in want:  # the same training; only the thread count may differ (1 thread per job there)
        assert math.isclose(got[mixer], want[mixer], rel_tol=1e-3), (mixer, got[mixer], want[mixer])
    # the same models (identities); the weights may differ in the last bits with one thread per job, and run ids
    # follow the weights, so they are compared by model identity
    def models(s: ResultsStore) -> set[str]:
        return {r.manifest.subject.row_id for r in s.iter_runs(samples=False)}

    assert models(store) == models(reference)


def _forget_gates_and_corpora(monkeypatch, mixers: tuple[str, ...]) -> None:
    """No gate verdict of ``mixers`` at preset tiny cached, and no corpus loaded in this process: a pool then
    prefetches both while the grid is planned."""
    from harness.model.conformance import GateConfig
    from harness.model.gate import _cache_file, gate_key
    from harness.model.specs import make_run_spec
    from harness.running import corpora

    for mixer in mixers:
        _cache_file(gate_key(make_run_spec(mixer, "tiny").model, "cpu", GateConfig())).unlink(missing_ok=True)
    monkeypatch.setattr(corpora, "_CORPORA", {})


def test_process_pool_runs_the_grid_and_makes_timings_alone_afterwards(local_grid, tmp_path, monkeypatch):
    """The same scores as in process; and since two jobs side by side would slow each other's timings, the
    device-dependent suite (throughput, added to the plan here) runs after both jobs' other suites, one at a time,
    and nothing is trained twice. The pool's workers load the data and run the gates while the driver plans."""
    plan_path, ref = local_grid
    text = plan_path.read_text().replace(
        "suites:\n", "suites:\n  throughput: {lengths: [16, 32], repeats: 1, modes: [prefill], reference: '', "
                     "floor: ''}\n")
    store = ResultsStore(tmp_path / "store")
    _forget_gates_and_corpora(monkeypatch, ("protot", "attention"))
    with ProcessExecutor(workers=2) as pool:
        assert pool.side_by_side([1, 2]) and not ProcessExecutor(workers=1).side_by_side([1, 2])
        report = run_requests(load_plan(write_plan(tmp_path, text=text)).requests("cpu", progress=False), store, pool)
    assert (report.jobs, report.trained, report.written, report.failures) == (2, 2, 4, [])
    _same_scores(store, ResultsStore(ref))
    names = [name for name, _ in report.phases]
    last_perplexity = max(i for i, n in enumerate(names) if n.startswith("eval perplexity"))
    timed = [i for i, n in enumerate(names) if n.startswith("eval throughput")]
    assert len(timed) == 2 and min(timed) > last_perplexity, names
    assert sum("(already trained)" in n for n in names) == 2
    # in the pool's workers, begun while the driver planned, and kept for the jobs
    assert "conformance gates of 2 mixer(s) side by side, begun beside the data" in names, names
    assert any(n.startswith("data + tokenizer") and "loaded by a pool worker" in n for n in names), names


def _die(_: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _square(x: int) -> int:
    return x * x


def test_a_worker_lost_in_a_prefetch_leaves_a_pool_that_still_runs_the_jobs():
    """A prefetch only fills caches: a worker killed there (out of memory, say) must not break the grid's maps."""
    with ProcessExecutor(workers=2) as pool:
        prefetch = pool.prefetch(_die, [None], like=[1, 2])
        prefetch.wait()
        assert dict(pool.map(_square, [2, 3])) == {2: 4, 3: 9}
    assert ProcessExecutor(workers=1).prefetch(_die, [None], like=[1, 2]) is None  # nothing runs side by side


def test_a_leaking_mixer_gated_ahead_of_the_driver_is_still_refused(monkeypatch, tmp_path):
    """The pool gates a mixer while the driver plans; a planted mixer that reads the future fails there, and the
    grid refuses its jobs from that cached verdict: nothing of it is trained or scored."""
    from harness.model.conformance import GateConfig
    from harness.model.gate import _cache_file, gate_key
    from harness.model.specs import make_run_spec
    from harness.running.runner import GridRequest, JobOptions
    import tests.adversaries  # noqa: F401  (registers the planted mixer here; the workers load it as a plugin)

    _forget_gates_and_corpora(monkeypatch, ())
    key = gate_key(make_run_spec("_adv_leak_past_40", "tiny").model, "cpu", GateConfig())
    _cache_file(key).unlink(missing_ok=True)
    req = GridRequest(preset="tiny", mixers=["_adv_leak_past_40"], suites=["perplexity"], seeds=[0, 1],
                      data_overrides={"max_train_docs": 40}, controls=[],
                      options=JobOptions(device="cpu", progress=False, plugins=("tests.adversaries",)))
    store = ResultsStore(tmp_path / "store")
    with ProcessExecutor(workers=2) as pool:
        report = run_requests([req], store, pool, keep_going=True)
    names = [name for name, _ in report.phases]
    assert "conformance gates of 1 mixer(s) side by side, begun beside the data" in names, names
    assert _cache_file(key).is_file()  # the verdict a worker wrote
    assert len(report.failures) == 2 and all("fails the conformance gate (causality" in f.error
                                              for f in report.failures)
    assert (report.trained, report.written) == (0, 0) and not list(store.iter_runs(samples=False))


def test_a_bad_option_found_while_planning_stops_the_pools_prefetch_at_once(monkeypatch, tmp_path):
    """The pool starts loading the data before every option is checked; a bad one stops its workers instead of
    waiting for the data."""
    from harness.running.runner import GridRequest, JobOptions

    _forget_gates_and_corpora(monkeypatch, ())
    req = GridRequest(preset="tiny", mixers=["protot", "attention"], suites=["perplexity"], seeds=[0],
                      mixer_configs={"attention": {"no_such_option": 1}}, data_overrides={"max_train_docs": 40},
                      options=JobOptions(device="cpu", progress=False), controls=[])
    pool = ProcessExecutor(workers=2)
    with pytest.raises(ConfigError, match="no_such_option"):
        run_requests([req], ResultsStore(tmp_path / "store"), pool)
    assert pool._pool is None  # shut down, its workers terminated


def test_gates_run_in_the_pools_workers_and_a_failing_mixer_is_still_refused():
    """The distinct gates run side by side in the pool (the driver only reads the verdicts they cached), and a
    mixer that fails there is refused as it is when the driver gates it."""
    from harness.model.conformance import GateConfig
    from harness.model.gate import _cache_file, gate_key
    from harness.model.specs import make_run_spec
    from harness.running.runner import GridReport, JobOptions, ModelJob, gate_jobs
    import tests.adversaries  # noqa: F401  (registers the planted mixer here; the workers load it as a plugin)

    options = JobOptions(device="cpu", progress=False, plugins=("tests.adversaries",))
    jobs = [ModelJob(make_run_spec(m, "tiny"), m, (), options) for m in ("attention", "_adv_leak_past_40")]
    keys = [gate_key(job.spec.model, "cpu", GateConfig()) for job in jobs]
    for key in keys:
        _cache_file(key).unlink(missing_ok=True)
    report = GridReport()
    with ProcessExecutor(workers=2) as pool:
        passed = gate_jobs(jobs, report, keep_going=True, executor=pool)
    assert [job.spec.model.mixer for job in passed] == ["attention"] and passed[0].gate.status == "passed"
    (failure,) = report.failures
    assert "_adv_leak_past_40" in failure.label and "fails the conformance gate (causality" in failure.error
    assert all(_cache_file(key).is_file() for key in keys)  # written by the workers
    names = [name for name, _ in report.phases]
    assert names == ["conformance gates of 2 mixer(s) side by side"], names  # none run again in the driver


def test_local_ray_cluster_runs_the_grid(local_grid, tmp_path):
    plan_path, ref = local_grid
    plan = load_plan(plan_path)
    store = ResultsStore(tmp_path / "store")
    t0 = time.perf_counter()
    with RayExecutor(num_cpus=2, object_store_memory=100 * 1024**2, log_to_driver=False) as ray_exec:
        report = run_requests(plan.requests("cpu", progress=False), store, ray_exec)
        seconds = time.perf_counter() - t0
        assert (report.jobs, report.trained, report.written, report.failures) == (2, 2, 2, [])
        again = run_requests(plan.requests("cpu", progress=False), store, ray_exec)
        assert (again.skipped, again.trained, again.written) == (2, 0, 0)
        too_big = Plan(**{**plan.__dict__, "resources": Resources(cpus=3)})
        with pytest.raises(ConfigError, match="asks for 3 CPU"):
            run_requests(too_big.requests("cpu", force=True, progress=False), store, ray_exec)
    import ray

    assert not ray.is_initialized()  # the cluster mixbench started is gone
    _same_scores(store, ResultsStore(ref))
    print(f"Ray grid (2 jobs, cluster start included): {seconds:.1f} s")


def test_failed_jobs_stop_the_grid_or_are_listed_with_keep_going(tmp_path, capsys):
    text = PLAN.format(name="diverge", train_extra="").replace("lr: 0.003", "lr: 1.0e+12").replace(
        "[protot, attention]", "[attention]")
    plan = write_plan(tmp_path, "diverge", text=text.replace("seeds: [0]", "seeds: [0, 1]"))
    store = tmp_path / "store"
    assert main(["run", str(plan), "--results", str(store), "--no-progress"]) == 2  # fail fast: a user error
    err = capsys.readouterr().err
    assert "lower the learning rate" in err
    assert len(list((store / "checkpoints").iterdir())) == 1  # the second job never started
    assert main(["run", str(plan), "--results", str(store), "--no-progress", "--keep-going"]) == 1
    out = capsys.readouterr().out
    assert "2 job(s): 0 already complete, 0 model(s) trained, 0 run(s) written, 2 failed" in out
    assert out.count("FAILED attention / tiny / seed") == 2 and "lower the learning rate" in out


def test_a_suite_that_fails_on_one_mixer_costs_neither_its_other_suites_nor_the_other_mixers(tmp_path, capsys):
    """A suite raising a bug on ProtoT models only: with --keep-going every other (model, suite) run is stored,
    the failure is listed with its traceback and the exit code is 1; without it the grid stops with exit 2."""
    from dataclasses import dataclass

    from harness import Suite, register_suite
    from harness.registry import SUITES
    from harness.suite import Metric, SuiteResult

    @dataclass(frozen=True)
    class NoConfig:
        pass

    @register_suite("_fails_on_protot", config=NoConfig)
    class FailsOnProtot(Suite):
        def run(self, model, ctx):
            if model.blocks[0].mixer.name == "protot":
                raise RuntimeError("planted bug for protot")
            return SuiteResult([Metric("x", 1.0, True, role="score")])

    try:
        text = PLAN.format(name="partial", train_extra="").replace("token_budget: 32768", "token_budget: 4096")
        text = text.replace("suites:\n", "suites:\n  _fails_on_protot: {}\n")
        plan = write_plan(tmp_path, "partial", text=text)
        store = tmp_path / "store"
        assert main(["run", str(plan), "--results", str(store), "--no-progress", "--keep-going"]) == 1
        out = capsys.readouterr().out
        assert "FAILED protot / tiny / seed 0 / _fails_on_protot" in out and "planted bug for protot" in out
        runs = {(r.manifest.subject.mixer, r.manifest.suite) for r in ResultsStore(store).iter_runs()}
        assert runs == {("protot", "perplexity"), ("attention", "perplexity"), ("attention", "_fails_on_protot")}
        assert main(["run", str(plan), "--results", str(store), "--no-progress"]) == 2
        assert "planted bug for protot" in capsys.readouterr().err
    finally:
        SUITES._entries.pop("_fails_on_protot", None)


def test_editing_a_mixers_source_reruns_that_mixers_runs_and_nothing_else(tmp_path, monkeypatch):
    """A plugin mixer and attention in one plan: unchanged code re-runs nothing; an edit of the plugin's source
    (its identity's fingerprint) re-trains and re-scores the plugin's model only."""
    import sys

    from harness.store.identity import core_fingerprint, source_fingerprint

    pkg = tmp_path / "editable_mix"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = (Path(__file__).parent / "adversaries.py").read_text().replace('"_adv_', '"_edit_')
    (pkg / "mixer.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    plan_file = write_plan(tmp_path, "edit", text=textwrap.dedent("""\
        preset: tiny
        mixers: [_edit_honest, attention]
        suites: {perplexity: {max_windows: 8, bootstrap: 50, splits: [test]}}
        train: {token_budget: 4096}
        data: {max_train_docs: 20}
        """))
    store = ResultsStore(tmp_path / "store")

    from harness.registry import load_plugins

    load_plugins(["editable_mix.mixer"])

    def run() -> tuple[int, int, set[str]]:
        source_fingerprint.cache_clear()
        core_fingerprint.cache_clear()
        reqs = load_plan(plan_file).requests("cpu", progress=False, plugins=("editable_mix.mixer",))
        report = run_requests(reqs, store)
        written = {o.label.split(" / ")[0] for o in report.outcomes if o.written}
        return report.trained, report.written, written

    try:
        assert run() == (4, 4, {"_edit_honest", "attention", "none", "mean"})  # with the controls
        assert run() == (0, 0, set())  # nothing changed: nothing re-runs
        (pkg / "mixer.py").write_text(source + "\n# an edit: the mixer's source changed\n")
        assert run() == (1, 1, {"_edit_honest"})  # only the edited mixer
        assert run() == (0, 0, set())
    finally:
        from harness.registry import MIXERS

        for name in [n for n in MIXERS._entries if n.startswith("_edit_")]:
            MIXERS._entries.pop(name)
        sys.modules.pop("editable_mix.mixer", None)


def test_a_job_loads_its_checkpoint_once_and_not_at_all_for_runs_in_the_store(tmp_path, monkeypatch):
    """Two suites of one model: the trained model is loaded (and its identity checked) once, not once per suite;
    with one suite's run already in the store, the job loads it once, for the other suite only, and with both,
    not at all. Each suite sees the model in eval mode with no gradients (the suite before may have
    back-propagated)."""
    from harness.running import runner
    from harness.model.checkpoint import load_model as real_load

    loads: list[str] = []

    def counting_load(path, device="cpu"):
        loads.append(str(path))
        return real_load(path, device)

    monkeypatch.setattr(runner, "load_model", counting_load)
    text = PLAN.format(name="once", train_extra="").replace("mixers: [protot, attention]", "mixers: [attention]")
    suites = "  perplexity: {max_windows: 16, bootstrap: 100, splits: [test]}\n"
    two = text.replace(suites, suites + "  throughput: {lengths: [16, 32], repeats: 1, warmup: 3, max_warmup: 3}\n")
    store = tmp_path / "store"
    assert main(["run", str(write_plan(tmp_path, text=text)), "--results", str(store), "--no-progress"]) == 0
    assert len(loads) == 1  # one suite
    loads.clear()
    assert main(["run", str(write_plan(tmp_path, "two", text=two)), "--results", str(store), "--no-progress"]) == 0
    assert len(loads) == 1  # perplexity's run is in the store: loaded once, for throughput
    loads.clear()
    assert main(["run", str(write_plan(tmp_path, "two", text=two)), "--results", str(store), "--no-progress"]) == 0
    assert loads == []
    runs = list(ResultsStore(store).iter_runs(samples=False))
    assert sorted(r.manifest.suite for r in runs) == ["perplexity", "throughput"]
    fresh = tmp_path / "fresh"  # both suites to run: still one load
    assert main(["run", str(write_plan(tmp_path, "two", text=two)), "--results", str(fresh), "--no-progress"]) == 0
    assert len(loads) == 1 and len(list(ResultsStore(fresh).iter_runs(samples=False))) == 2


def test_every_identity_in_a_store_is_reproduced_by_the_one_identity_function(local_grid):
    """Each run's id is harness.store.identity.run_identity of what its manifest records (the subject's id, the suite
    and its full config, the device where it counts); each subject's id is trained_identity of its model
    identity and weights: no second way of hashing a run exists to disagree with it."""
    from harness.store.identity import Identity, run_identity, trained_identity
    from harness.registry import SUITES

    _, store_dir = local_grid
    runs = list(ResultsStore(store_dir).iter_runs(samples=False))
    assert runs
    for run in runs:
        m = run.manifest
        parts = m.identity
        cfg = SUITES.get(m.suite).make_config(m.suite_config)
        again = run_identity(Identity(parts["subject"], {}), m.suite, cfg, parts.get("device"), parts.get("suite_inputs"))
        assert again.id == run.run_id
        subject = dict(parts["subject_parts"])
        weights = subject.pop("weights_sha256")
        model = Identity(content_hash(subject), subject)
        assert trained_identity(model, weights).id == parts["subject"] == m.subject.id


def test_a_mixer_scoped_run_goes_to_one_job_of_its_mixer(tmp_path):
    """A mixer-scoped suite's run is the same for every seed of its mixer: planned in one job only, so that jobs
    side by side never make it twice (two workers both wrote the synthetic run of a 3-seed quickstart)."""
    from harness.running.runner import GridRequest, JobOptions

    req = GridRequest(preset="tiny", mixers=["attention"], suites=["perplexity", "synthetic"], seeds=[0, 1],
                      data_overrides={"max_train_docs": 40}, controls=[], options=JobOptions(progress=False))
    jobs = plan_jobs([req], ResultsStore(tmp_path / "store"), PhaseTimer(echo=False))
    assert len(jobs) == 2
    assert [sorted(r.suite for r in job.runs) for job in jobs] == [["perplexity", "synthetic"], ["perplexity"]]
