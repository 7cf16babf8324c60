"""``mixbench run PLAN.yaml``, ``mixbench nightly PLAN.yaml`` and the executor options they share.

Kept apart from :mod:`harness.cli` so the CLI module stays a table of small commands; the parser calls
:func:`add_executor_args` and :func:`add_nightly_parser`, and dispatches to the ``cmd_*`` functions here.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.errors import MixbenchError

# Options of `mixbench run` that a plan file may sit beside; every other grid option belongs in the plan.
_PLAN_COMPATIBLE = {
    "command", "plan", "results", "plugin", "executor", "address", "workers", "ray_cpus", "ray_gpus",
    "ray_object_store_mb", "force", "no_progress", "device", "keep_going", "skip_gate", "yes",
}


def add_executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", default="local", choices=["local", "process", "ray"],
                   help="where jobs run: this process (default), a local process pool, or Ray")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join (e.g. auto or ray://head:10001); without it a local cluster is started")
    p.add_argument("--workers", type=int, default=None, help="process pool size (default: cores / job cpus)")
    p.add_argument("--ray-cpus", type=int, default=None, help="CPUs of the local Ray cluster (default: all)")
    p.add_argument("--ray-gpus", type=int, default=None, help="GPUs of the local Ray cluster (default: all)")
    p.add_argument("--ray-object-store-mb", type=int, default=None, help="object store of the local Ray cluster")


def add_nightly_parser(sub, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "nightly", parents=parents,
        help="run a plan's missing work, snapshot its metrics, compare with the last night (exit 1 on regressions)",
    )
    p.add_argument("plan", help="plan file (YAML)")
    p.add_argument("--publish", default=None, metavar="DIR", help="republish the static site into DIR afterwards")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the plan's, else cuda when available)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--skip-gate", action="store_true",
                   help="score mixers that fail the conformance gate (for debugging; recorded in every result)")
    p.add_argument("--yes", action="store_true",
                   help="train models estimated to take longer than the time limit (docs/cli.md)")
    add_executor_args(p)


def executor_from_args(args: argparse.Namespace):
    from harness.running.executors import make_executor

    return make_executor(
        getattr(args, "executor", "local") or "local", getattr(args, "address", None), getattr(args, "workers", None),
        getattr(args, "ray_cpus", None), getattr(args, "ray_gpus", None), getattr(args, "ray_object_store_mb", None),
    )


def plan_device(plan, requested: str | None, executor: str = "local") -> str:
    """The device jobs train on. On this machine it is checked here; on Ray the workers' GPUs count, not the
    driver's: ``auto`` means cuda when the plan gives each job a GPU, and each job checks its own node."""
    from harness.model.devices import resolve_device as _device

    wanted = requested if requested is not None else (None if plan.device == "auto" else plan.device)
    if executor == "ray":
        if wanted is None:
            return "cuda" if plan.resources.gpus > 0 else "cpu"
        if not wanted.startswith(("cpu", "cuda")):
            raise MixbenchError(f"unknown device '{wanted}'; use cpu or cuda.")
        return wanted
    return _device(wanted)


def check_no_grid_flags(args: argparse.Namespace, defaults: argparse.Namespace) -> None:
    """Refuse grid options beside a plan file (``defaults``: what ``mixbench run`` parses to with no options)."""
    given = sorted(
        f"--{k.replace('_', '-')}" for k, v in vars(args).items()
        if k not in _PLAN_COMPATIBLE and getattr(defaults, k, v) != v
    )
    if given:
        raise MixbenchError(
            f"{', '.join(given)} cannot be combined with a plan file, which fixes the grid; put the setting in "
            f"{args.plan} (keys: presets, mixers, controls, seeds, suites, train, data, backbone, kernel) or drop the plan."
        )


def cmd_run_plan(args: argparse.Namespace) -> int:
    from harness.running.plan import load_plan
    from harness.store.results import ResultsStore
    from harness.running.runner import run_requests
    from harness.running.training_time import check_requests_time
    from harness.running.tune import run_sweep

    plan = load_plan(args.plan)
    store = ResultsStore(args.results)
    device = plan_device(plan, args.device, args.executor)
    yes = getattr(args, "yes", False)
    reqs = plan.requests(device, force=args.force, progress=not args.no_progress, plugins=tuple(args.plugin),
                         skip_gate=args.skip_gate, yes=yes)
    check_requests_time(reqs)  # before the sweep, which trains too
    run_sweep(plan, store, device, not args.no_progress, args.skip_gate, yes)
    with executor_from_args(args) as executor:
        report = run_requests(reqs, store, executor, keep_going=args.keep_going)
    print(report.render())
    return 1 if report.failures else 0


def run_plan_grid(plan, store, device: str | None = None, progress: bool = True, plugins: tuple[str, ...] = (),
                  yes: bool = False, keep_going: bool = False):
    """Run ``plan``'s grid in this process (the jobs the store lacks, each suite's cross-run step at the end) on
    ``device`` (None: the plan's, else cuda when available): the grid a suite's own command runs
    (``mixbench scaling``). Returns the runner's report."""
    from harness.running.runner import run_requests

    reqs = plan.requests(plan_device(plan, device), progress=progress, plugins=plugins, yes=yes)
    return run_requests(reqs, store, keep_going=keep_going)


def cmd_nightly(args: argparse.Namespace) -> int:
    from harness.running.nightly import run_nightly
    from harness.running.plan import load_plan
    from harness.store.results import ResultsStore

    plan = load_plan(args.plan)
    store = ResultsStore(args.results)
    publish = Path(os.path.expanduser(args.publish)) if args.publish else None
    with executor_from_args(args) as executor:
        result = run_nightly(
            plan, store, executor, device=plan_device(plan, args.device, args.executor), progress=not args.no_progress,
            plugins=tuple(args.plugin), publish_dir=publish, skip_gate=args.skip_gate, yes=args.yes,
        )
    print(result.render())
    return result.exit_code
