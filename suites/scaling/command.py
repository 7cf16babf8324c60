"""``mixbench scaling``: train a ladder's missing models, fit every ladder in the store, print the tables.

Declared on the suite (:attr:`harness.suite.Suite.commands`); the core's CLI registers it. Without ``--plan`` it
runs the default CPU ladder shipped with the suite (``suites/scaling/cpu-ladder.yaml``, about an hour on a 2-core
machine); ``--fit-only`` trains nothing and refits what the store holds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import ConfigError
from harness.suite import SuiteCommand

HELP = "train a scaling ladder's missing models, fit loss against compute per mixer, print fits and crossovers"
DEFAULT_LADDER = Path(__file__).with_name("cpu-ladder.yaml")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", default=None, help=f"plan file with a ladder: key (default: {DEFAULT_LADDER.name}, "
                                                "the suite's CPU ladder; plans/scaling-gpu.yaml for the paper's sizes)")
    p.add_argument("--fit-only", action="store_true", help="train nothing: refit the ladders the store holds")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the plan's, else cuda when available)")
    p.add_argument("--keep-going", action="store_true", help="a failed model does not stop the others")
    p.add_argument("--yes", action="store_true",
                   help="train rungs estimated to take longer than the time limit (docs/scaling.md)")
    p.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from harness.kit import ResultsStore, load_plan, run_plan_grid, write_aggregate
    from harness.registry import SUITES
    from suites.scaling.report import render_ladders

    plan = load_plan(args.plan or DEFAULT_LADDER)
    if "scaling" not in plan.suites:
        raise ConfigError(f"{plan.source}: a scaling study needs the scaling suite in its suites: list.")
    store = ResultsStore(args.results)
    entry = SUITES.get("scaling")
    suite = entry.cls(entry.make_config(plan.suite_configs.get("scaling")))
    if args.fit_only:
        write_aggregate(store, suite, progress=not args.no_progress)
    else:
        report = run_plan_grid(plan, store, args.device, progress=not args.no_progress, plugins=tuple(args.plugin),
                               yes=args.yes, keep_going=args.keep_going)  # fits every ladder at its end
        print(report.render())
        if report.failures:
            return 1
    print(render_ladders(store))
    return 0


SCALING_COMMAND = SuiteCommand("scaling", HELP, configure, run)
