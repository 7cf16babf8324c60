"""OpenMP wait policies side by side: ProtoT and attention prefill at T=512, decode, and training steps.

``OMP_WAIT_POLICY`` is read once, when torch loads its OpenMP runtime, so one process cannot compare policies:
this script starts a fresh child process per (round, policy), the policies alternating (A B, then B A, ...), and
each child times every workload with :func:`harness.timing.interleaved` (warm-up until settled, then repeats)
and reports its medians. Per workload, the ratio of a policy's time to the first policy's is taken per round
(paired: the two children of a round ran back to back) and summarised by its median and a bootstrap interval
over rounds. Workloads are the throughput suite's, at the preset's backbone (default: quick).

    python benchmarks/omp_policy.py [--policies default,passive] [--rounds 4] [--preset quick] [--workloads train]

Policies: ``default`` (OMP_WAIT_POLICY unset: libgomp spins a while, then sleeps), ``passive``, ``active``,
``spinN`` (unset policy, GOMP_SPINCOUNT=N), each optionally ``@T`` for T intra-op threads (``passive@1``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

WORKLOADS = (  # (name, mixer, mode, length, batch): batch 0 = the preset's training batch
    ("protot prefill T=512", "protot", "prefill", 512, 1),
    ("attention prefill T=512", "attention", "prefill", 512, 1),
    ("protot decode @512", "protot", "decode", 512, 1),
    ("attention decode @512", "attention", "decode", 512, 1),
    ("protot train step", "protot", "train", 0, 0),
    ("attention train step", "attention", "train", 0, 0),
    # the compiled C kernels (Mamba's scan, DeltaNet's conv) run their own threads beside OpenMP's
    ("mamba train step", "mamba", "train", 0, 0),
    ("deltanet train step", "deltanet", "train", 0, 0),
)


def policy_env(policy: str) -> dict[str, str]:
    """The environment of a child for ``policy`` (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    name, _, threads = policy.partition("@")
    if name == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif name == "active":
        env["OMP_WAIT_POLICY"] = "ACTIVE"
    elif name.startswith("spin"):
        env["GOMP_SPINCOUNT"] = str(int(name[4:]))
    elif name != "default":
        raise SystemExit(f"omp_policy: unknown policy {policy!r}")
    if threads:
        env["OMP_NUM_THREADS"] = str(int(threads))
    return env


def selected(names: str) -> tuple[tuple, ...]:
    """The workloads whose name contains one of the comma-separated ``names`` (all for "")."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    chosen = tuple(w for w in WORKLOADS if not wanted or any(n in w[0] for n in wanted))
    if not chosen:
        raise SystemExit(f"omp_policy: no workload matches {names!r}; names: {', '.join(w[0] for w in WORKLOADS)}")
    return chosen


def child(preset: str, repeats: int, workloads: tuple[tuple, ...]) -> None:
    """Time each workload in this process (its policy is its environment's) and print the medians as JSON."""
    import torch

    import _common
    from harness.timing import Candidate, interleaved
    from suites.throughput.measure import workload

    torch.set_flush_denormal(True)  # as the CLI does
    backbone, train_batch = _common.quick_backbone(preset)
    models = {m: _common.build(m, backbone) for m in {w[1] for w in workloads}}
    device = torch.device("cpu")
    out = {}
    for name, mixer, mode, length, batch in workloads:
        model = models[mixer]
        model.train(mode == "train")
        work = workload(model, mode, length or backbone.context, batch or train_batch, device, decode_tokens=8)
        timings = interleaved([Candidate(name, work.call, work.setup)], repeats=repeats)
        out[name] = timings.median(name) / work.per_call
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="default,passive")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per workload in each child")
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--workloads", default="", help="comma-separated parts of workload names (default: all)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workloads = selected(args.workloads)
    if args.child:
        child(args.preset, args.repeats, workloads)
        return
    import _common
    from harness.timing import Timings

    policies = args.policies.split(",")
    for p in policies:
        policy_env(p)  # fail on a typo before the first child
    load_start = _common.load_average()
    seconds: dict[str, dict[str, list[float]]] = {w[0]: {p: [] for p in policies} for w in workloads}
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for p in policies if r % 2 == 0 else list(reversed(policies)):
            cmd = [sys.executable, __file__, "--child", "--preset", args.preset, "--repeats", str(args.repeats),
                   "--workloads", args.workloads]
            done = subprocess.run(cmd, env=policy_env(p), capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"child for policy {p} failed:\n{done.stderr[-3000:]}")
            for name, s in json.loads(done.stdout.strip().splitlines()[-1]).items():
                seconds[name][p].append(s)
            print(f"  round {r + 1}/{args.rounds} {p}: done ({time.perf_counter() - t0:.0f} s, load "
                  f"{_common.load_average()})", file=sys.stderr, flush=True)
    base = policies[0]
    print(f"OMP wait policies, preset {args.preset}; {args.rounds} rounds of one child process per policy "
          f"(alternating order), {args.repeats} timed calls per workload per child; load average at start "
          f"{load_start}, at end {_common.load_average()}")
    header = f"{'workload':<26}" + "".join(f"{p + ' ms':>14}" for p in policies)
    header += "".join(f"{p + ' / ' + base:>26}" for p in policies[1:])
    print(header)
    for name, per_policy in seconds.items():
        timings = Timings(per_policy, warmup_rounds=0)
        row = f"{name:<26}" + "".join(f"{timings.median(p) * 1e3:>14.2f}" for p in policies)
        row += "".join(f"{_common.fmt_ratio(timings.ratio(p, base)):>26}" for p in policies[1:])
        print(row)
    print("ratios: per-round time ratio (children of one round ran back to back), median [95% bootstrap interval "
          "over rounds]; < 1 means faster than " + base)


if __name__ == "__main__":
    main()
