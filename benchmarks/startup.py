"""Start-up time of every ``mixbench`` subcommand's ``--help`` (and of the listings and an argument error), median
of a few runs, for one or two checkouts side by side (interleaved: one run of each in turn).

    python benchmarks/startup.py                      # this checkout
    python benchmarks/startup.py --before /tmp/old    # an older checkout (e.g. `git worktree add /tmp/old HEAD~3`)

Each command runs in a fresh interpreter with the checkout first on ``PYTHONPATH``; the listing cache is warmed
by one untimed run first (a cold cache costs one full import, once per code change).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = [["--help"], ["mixers"], ["suites"], ["run", "--bogus"], ["mixers", "--config", "protot"]] + [
    [name, "--help"] for name in ("mixers", "suites", "check", "train", "eval", "run", "leaderboard", "publish",
                                  "quickstart", "nightly", "show", "compare", "judge")
]


def _time(root: Path, args: list[str], cache: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(root), "MIXBENCH_CACHE": cache}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=root, env=env, capture_output=True, timeout=120)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, default=None, help="another checkout, timed beside this one")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    roots = {"now": Path(__file__).resolve().parents[1]}
    if args.before:
        roots = {"before": args.before.resolve(), **roots}
    caches = {name: tempfile.mkdtemp(prefix=f"startup-{name}-") for name in roots}
    print(f"{'command':<28}" + "".join(f"{name + ' (s)':>12}" for name in roots))
    for command in COMMANDS:
        times: dict[str, list[float]] = {name: [] for name in roots}
        for name, root in roots.items():
            _time(root, command, caches[name])  # warm the listing cache and the OS file cache
        for _ in range(args.repeats):
            for name, root in roots.items():
                times[name].append(_time(root, command, caches[name]))
        print(f"{' '.join(command):<28}" + "".join(f"{statistics.median(t):>12.2f}" for t in times.values()),
              flush=True)


if __name__ == "__main__":
    main()
