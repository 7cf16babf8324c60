"""Where a grid's jobs run (DESIGN §7): in this process, in a local process pool, or on a Ray cluster.

Every executor runs the same function (``harness.running.runner.execute_job``) on picklable jobs and yields
``(job, result_or_exception)`` as jobs finish, so the runner's bookkeeping (skips, failures, timings) is one
piece of code whatever the backend. A job needs only the store's root and the data, so it can run anywhere
that sees both: a shared folder or an fsspec URL for the store, the same data source, mixbench installed.

- ``local``: one job after the other, in this process (the default; errors keep their tracebacks).
- ``process``: a ``spawn`` process pool on this machine, as many workers as the jobs' ``cpus`` allow.
- ``ray``: one Ray task per job with the job's ``cpus`` / ``gpus`` as its resource request, so Ray places
  GPU jobs on GPU nodes. ``address=None`` starts a private local cluster (and stops it afterwards);
  ``address="auto"`` or ``ray://host:10001`` joins an existing one. A task killed with its node is retried
  by Ray, and the retry resumes from the checkpoint the job had written.

Threads: workers of ``process`` and ``ray`` share the machine's cores, so each gets its job's ``cpus`` as its
thread count (the pool never gives more threads than the cores allow side by side) and OpenMP's PASSIVE wait
policy, set in its environment before it starts (:func:`harness.store.provenance.worker_environment`); a spinning
thread there would burn a core another worker needs. ``local`` keeps the process's own policy.

Errors raised in a worker come back as the message a user needs (``MixbenchError``) or the worker's
traceback as text (anything else), since exception objects do not always survive pickling.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, MixbenchError
from harness.store.provenance import worker_environment

EXECUTORS = ("local", "process", "ray")
# Forwarded to Ray workers: the cache location and offline switches (never credentials). Thread settings are
# per task (harness.store.provenance.worker_environment), never the driver's own.
_FORWARD_ENV = ("MIXBENCH_", "HF_", "TOKENIZERS_PARALLELISM")


class WorkerError(RuntimeError):
    """A bug in a worker process, carried back as its formatted traceback."""


class Executor(ABC):
    name: str = ""
    needs_shared_store: bool = True  # workers open the store by its root: a memory:// store is invisible to them

    @abstractmethod
    def describe(self) -> str: ...

    @abstractmethod
    def map(self, fn: Callable[..., Any], jobs: Sequence[Any], *args: Any) -> Iterator[tuple[Any, Any]]:
        """Run ``fn(job, *args)`` for every job; yield ``(job, result or exception)`` in completion order."""

    def close(self) -> None:  # noqa: B027  (nothing to release by default)
        """Release workers or the cluster connection; safe to call twice."""

    def sees(self, store_root: str) -> bool:
        """Whether the workers can open the store at ``store_root``: a memory:// store lives in this process only."""
        return not (self.needs_shared_store and store_root.startswith("memory://"))

    def side_by_side(self, jobs: Sequence[Any]) -> bool:
        """Whether these jobs would run at the same time on this machine's cores: the grid then makes the
        runs of device-dependent suites (timings) afterwards, one at a time in this process, since a job beside
        them would slow them. A cluster's jobs reserve their own resources, so only a local pool says True."""
        return False

    def prefetch(self, fn: Callable[..., Any], items: Sequence[Any], like: Sequence[Any]) -> "Prefetch | None":
        """Start ``fn(item)`` for every item in the background, on the workers that jobs shaped ``like`` will get,
        where that costs them nothing: a local pool's workers would otherwise wait while the driver plans the
        grid. The work must be something the driver can redo (it fills a cache): a failure is the driver's to
        meet when it does. None here: the driver does the work itself when it needs it."""
        return None

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _threads_for(job: Any) -> int:
    resources = getattr(job, "resources", None)
    return max(1, int(getattr(resources, "cpus", 1) or 1))


@contextlib.contextmanager
def _environment(changes: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``changes`` applied inside the block: the environment a spawned process inherits.
    OpenMP reads its thread count and wait policy when torch loads, which in a spawned worker happens while it
    unpickles its first call, before any code of ours could run there."""
    saved = {k: os.environ.get(k) for k in changes}
    try:
        os.environ.update(changes)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _portable_call(fn: Callable[..., Any], job: Any, *args: Any, threads: int | None = None) -> Any:
    """``fn(job, *args)`` in a worker: torch uses ``threads`` (default: the job's CPUs), and errors come back in
    picklable form."""
    import torch

    torch.set_num_threads(threads or _threads_for(job))
    torch.set_flush_denormal(True)  # as the CLI does (see harness.cli.main)
    try:
        return fn(job, *args)
    except MixbenchError as exc:
        raise MixbenchError(str(exc)) from None  # subclasses with custom __init__ do not unpickle
    except Exception as exc:
        raise WorkerError("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()) from None


def _pid_noting_call(pids: str, index: int, fn: Callable[..., Any], job: Any, *args: Any, **kwargs: Any) -> Any:
    """:func:`_portable_call` in a pool worker that first notes its pid under ``pids``, so that the driver can say
    which job a worker killed by the kernel was running (the pool itself only says that one died)."""
    Path(pids, str(index)).write_text(str(os.getpid()))
    return _portable_call(fn, job, *args, **kwargs)


def _label(job: Any) -> str:
    return str(getattr(job, "label", job))


def _signal_text(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = "unknown"
    if signum == signal.SIGKILL:
        return f"was killed by the kernel, most likely out of memory (signal {signum}, {name})"
    return f"died from signal {signum} ({name})"


def _exit_code(proc: Any, timeout: float = 5.0) -> int | None:
    """``proc``'s exit status, waiting up to ``timeout`` s for it. The pool breaks when the worker's pipe closes, a
    moment before its exit status exists; and the pool's own manager thread reaps the same child while it shuts
    down, so one ``waitpid`` of the two gets the status and the other gets ECHILD (read as "still running") until
    the winner stores it. Hence the poll until the status is seen, not one read."""
    deadline = time.monotonic() + timeout
    proc.join(timeout=timeout)
    while (code := proc.exitcode) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return code


def _worker_death(index: int, jobs: Sequence[Any], pids: str, processes: dict[int, Any],
                  exc: BaseException) -> MixbenchError:
    """The sentence for a job whose pool broke: its worker's death (signal 9: the kernel's OOM killer) or, when
    another worker died, that one's; every unfinished job resumes from its checkpoint on a rerun. ``processes``
    (pid -> Process) is taken when the jobs were submitted: a broken pool empties its own table as it shuts
    down, racing this read."""
    ran_on: dict[int, int] = {}
    for note in Path(pids).iterdir():
        with contextlib.suppress(ValueError, OSError):
            ran_on[int(note.name)] = int(note.read_text())

    def death(i: int) -> str | None:  # a signal the pool's own shutdown (SIGTERM) did not send, or an exit status
        proc = processes.get(ran_on.get(i, -1))
        if proc is None:
            return None
        code = _exit_code(proc)
        if code is None or code == 0 or code == -signal.SIGTERM:
            return None
        return _signal_text(-code) if code < 0 else f"exited with status {code}"

    rerun = "give it more memory (or a smaller batch or context) and rerun: finished work is kept and it resumes"
    own = death(index)
    if own is not None:
        return MixbenchError(f"job {_label(jobs[index])} {own}; {rerun}.")
    for i, job in enumerate(jobs):
        other = death(i)
        if other is not None:
            return MixbenchError(
                f"job {_label(jobs[index])} was stopped because the worker running job {_label(job)} {other}; "
                "rerun to resume both."
            )
    return MixbenchError(
        f"job {_label(jobs[index])} did not finish: a worker process of the pool died abruptly ({exc}); rerun to "
        "resume it."
    )


class Prefetch:
    """Background work started by :meth:`Executor.prefetch`."""

    def __init__(self, futures: list[concurrent.futures.Future], abandon: Callable[[], None]):
        self._futures = futures
        self._abandon = abandon

    def __len__(self) -> int:
        return len(self._futures)

    def wait(self) -> None:
        """Until every item is done or has failed (the driver then meets the failure itself)."""
        concurrent.futures.wait(self._futures)

    def abandon(self) -> None:
        """Stop it now, the workers with it: the grid is not going to run (a bad option found while planning)."""
        self._abandon()


class LocalExecutor(Executor):
    """Jobs one after the other in this process: no start-up cost, full tracebacks, shares the loaded corpus."""

    name = "local"
    needs_shared_store = False

    def describe(self) -> str:
        return "this process (sequential)"

    def map(self, fn, jobs, *args):
        for job in jobs:
            try:
                result = fn(job, *args)
            except Exception as exc:  # KeyboardInterrupt passes through: the next run resumes
                result = exc
            yield job, result


class ProcessExecutor(Executor):
    """A pool of ``spawn``ed processes on this machine (fork would copy torch's thread pools and locks)."""

    name = "process"

    def __init__(self, workers: int | None = None):
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ConfigError(f"--workers must be a positive integer, got {workers!r}.")
        self.workers = workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._shape: tuple[int, int] | None = None  # (workers, threads) of the live pool

    def pool_size(self, jobs: Sequence[Any]) -> int:
        """``workers`` if given, else as many jobs as fit on this machine's cores at their ``cpus`` each."""
        if self.workers is not None:
            return self.workers
        widest = max((getattr(getattr(j, "resources", None), "cpus", 1.0) for j in jobs), default=1.0)
        return max(1, min(len(jobs), int((os.cpu_count() or 1) // max(widest, 1.0))))

    def worker_threads(self, jobs: Sequence[Any], pool_size: int) -> int:
        """Intra-op threads per worker: the widest job's ``cpus``, but never more than the cores allow for
        ``pool_size`` workers side by side (oversubscribed cores make every thread wait for descheduled ones)."""
        widest = max((_threads_for(j) for j in jobs), default=1)
        return max(1, min(widest, (os.cpu_count() or 1) // pool_size))

    def describe(self) -> str:
        return f"a local process pool ({self.workers or 'auto'} workers)"

    def side_by_side(self, jobs: Sequence[Any]) -> bool:
        return len(jobs) > 1 and self.pool_size(jobs) > 1

    @contextlib.contextmanager
    def _pool_for(self, jobs: Sequence[Any]) -> Iterator[tuple[concurrent.futures.ProcessPoolExecutor, int]]:
        """The live pool of the shape ``jobs`` want (a pool of another shape is shut down first) and the threads
        of each worker; submit inside the block: workers are spawned by the submits and inherit its environment."""
        size = self.pool_size(jobs)
        threads = self.worker_threads(jobs, size)
        if self._shape != (size, threads) or getattr(self._pool, "_broken", False):  # a worker died in a prefetch
            self.close()
        with _environment(worker_environment(threads)):
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    max_workers=size, mp_context=multiprocessing.get_context("spawn")
                )
                self._shape = (size, threads)
            yield self._pool, threads

    def prefetch(self, fn, items, like):
        """As :meth:`Executor.prefetch`: on the pool ``like`` (the grid's jobs to come) will use, when they run
        side by side; the grid's maps then find the same workers."""
        if not items or not self.side_by_side(like):
            return None
        with self._pool_for(like) as (pool, threads):
            futures = [pool.submit(_portable_call, fn, item, threads=threads) for item in items]
        return Prefetch(futures, lambda: self.close(wait=False))

    def map(self, fn, jobs, *args):
        """As :meth:`Executor.map`. The pool outlives the call: a second map of the same shape (the grid's jobs
        after the gates') finds its workers started, torch and the mixers' packages imported. It is shut down by
        :meth:`close`, and at once when a worker dies or the caller stops early."""
        if not jobs:
            return
        with self._pool_for(jobs) as (pool, threads):
            pids = tempfile.mkdtemp(prefix="mixbench-pool-")  # job index -> pid of the worker that runs it
            futures = {
                pool.submit(_pid_noting_call, pids, i, fn, job, *args, threads=threads): (i, job)
                for i, job in enumerate(jobs)
            }
            workers = dict(getattr(pool, "_processes", None) or {})  # spawned by the submits: pid -> Process
        completed = broken = False
        try:
            for future in concurrent.futures.as_completed(futures):
                index, job = futures[future]
                try:
                    result = future.result()
                except BrokenProcessPool as exc:  # a worker died: name the job and the signal that killed it
                    result = _worker_death(index, jobs, pids, workers, exc)
                    broken = True
                except Exception as exc:  # a job's error
                    result = exc
                yield job, result
            completed = True
        finally:
            if broken or not completed:  # a dead worker, or the caller stopped early: no job is left running
                self.close()
            shutil.rmtree(pids, ignore_errors=True)

    def close(self, wait: bool = True) -> None:
        """Shut the pool down after the running jobs (``wait``), or now, its workers terminated (their work is
        lost: what they had finished is kept, a checkpoint resumes the rest)."""
        if self._pool is None:
            return
        pool, self._pool, self._shape = self._pool, None, None
        if not wait:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()
        pool.shutdown(wait=wait, cancel_futures=True)


class RayExecutor(Executor):
    """One Ray task per job. Without ``address`` a local cluster is started with the given limits."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        object_store_memory: int | None = None,
        include_dashboard: bool = False,
        log_to_driver: bool = True,
    ):
        if address is not None and any(v is not None for v in (num_cpus, num_gpus, object_store_memory)):
            raise ConfigError(
                "--ray-cpus / --ray-gpus / object store size only apply to a local cluster started by mixbench; "
                f"the cluster at {address} already has its resources. Drop them or drop --address."
            )
        self.address, self.num_cpus, self.num_gpus = address, num_cpus, num_gpus
        self.object_store_memory, self.include_dashboard, self.log_to_driver = (
            object_store_memory, include_dashboard, log_to_driver,
        )
        self._started = False
        self._ray: Any = None

    def describe(self) -> str:
        return f"Ray at {self.address}" if self.address else "a local Ray cluster"

    def _connect(self) -> Any:
        if self._ray is not None:
            return self._ray
        try:
            import ray
        except ImportError:
            raise MixbenchError(
                "--executor ray needs Ray; install it with `python -m pip install -c constraints.txt ray==2.60.0`."
            ) from None
        if not ray.is_initialized():
            env = {
                k: v for k, v in os.environ.items()
                if k.startswith(_FORWARD_ENV) and not _is_secret(k)
            }
            kwargs: dict[str, Any] = {
                "include_dashboard": self.include_dashboard,
                "log_to_driver": self.log_to_driver,
                "runtime_env": {"env_vars": env},
            }
            if self.address:
                kwargs["address"] = self.address
            else:
                kwargs.update(
                    num_cpus=self.num_cpus, num_gpus=self.num_gpus, object_store_memory=self.object_store_memory
                )
            try:
                ray.init(**kwargs)
            except ConnectionError as exc:
                raise MixbenchError(
                    f"cannot reach the Ray cluster at {self.address} ({exc}); start it with `ray start --head` or "
                    "pass the right --address (omit it to start a local cluster)."
                ) from None
            self._started = True
        self._ray = ray
        return ray

    def _check_fits(self, jobs: Sequence[Any]) -> None:
        """A task asking for more than the whole cluster has would wait forever: refuse it up front."""
        total = self._ray.cluster_resources()
        for job in jobs:
            res = getattr(job, "resources", None)
            if res is None:
                continue
            for key, need in (("CPU", res.cpus), ("GPU", res.gpus)):
                if need > total.get(key, 0.0):
                    raise ConfigError(
                        f"job {getattr(job, 'label', job)} asks for {need:g} {key}(s) but the Ray cluster has "
                        f"{total.get(key, 0.0):g}; lower resources.{key.lower()}s in the plan or add nodes."
                    )

    def map(self, fn, jobs, *args):
        if not jobs:
            return
        ray = self._connect()
        self._check_fits(jobs)
        task = ray.remote(_portable_call)
        refs = {}
        for job in jobs:
            res = getattr(job, "resources", None)
            options: dict[str, Any] = {"num_cpus": res.cpus, "num_gpus": res.gpus} if res is not None else {}
            # per-task variables are merged with the job-level ones and set before the worker process starts
            options["runtime_env"] = {"env_vars": worker_environment(_threads_for(job))}
            refs[task.options(**options, name=f"mixbench {getattr(job, 'label', '')}").remote(fn, job, *args)] = job
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                ref = done[0]
                try:
                    result = ray.get(ref)
                except Exception as exc:  # RayTaskError wraps the worker's exception as .cause
                    cause = getattr(exc, "cause", None)
                    result = _ray_death(refs[ref], cause if isinstance(cause, BaseException) else exc)
                yield refs[ref], result
        finally:
            for ref in pending:  # the caller stopped early (fail-fast or Ctrl-C)
                ray.cancel(ref)

    def close(self) -> None:
        if self._ray is not None and self._started:
            self._ray.shutdown()
        self._ray, self._started = None, False


def _ray_death(job: Any, exc: BaseException) -> BaseException:
    """A Ray worker that died (its memory monitor's kill, or the kernel's) as a sentence; other errors unchanged."""
    kind = type(exc).__name__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else kind
    if kind == "OutOfMemoryError":
        return MixbenchError(
            f"job {_label(job)} was killed by Ray's memory monitor, out of memory ({first}); give the job more "
            "memory (or a smaller batch or context) and rerun: finished work is kept and it resumes."
        )
    if kind in ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError"):
        return MixbenchError(
            f"job {_label(job)}'s Ray worker died ({kind}: {first}), most often killed by the kernel for lack of "
            "memory (signal 9); give the job more memory (or a smaller batch or context) and rerun to resume it."
        )
    return exc


def _is_secret(name: str) -> bool:
    from harness.store.redaction import is_secret_key

    return is_secret_key(name)


def make_executor(
    name: str,
    address: str | None = None,
    workers: int | None = None,
    ray_cpus: int | None = None,
    ray_gpus: int | None = None,
    ray_object_store_mb: int | None = None,
) -> Executor:
    """The executor ``--executor NAME`` asks for, checking that its options belong to it."""
    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor '{name}'; choose one of {', '.join(EXECUTORS)}.")
    if name != "ray" and (address or ray_cpus or ray_gpus or ray_object_store_mb):
        raise ConfigError(f"--address and --ray-* options need --executor ray (got --executor {name}).")
    if name != "process" and workers is not None:
        raise ConfigError(f"--workers sizes the process pool; it needs --executor process (got --executor {name}).")
    if name == "local":
        return LocalExecutor()
    if name == "process":
        return ProcessExecutor(workers)
    store_bytes = ray_object_store_mb * 1024 * 1024 if ray_object_store_mb else None
    return RayExecutor(address, ray_cpus, ray_gpus, store_bytes)
