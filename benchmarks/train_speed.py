"""Training tokens/s of mixers at a preset's backbone (default: quick), side by side in one process, interleaved.

One training step = forward + loss + backward + AdamW on random tokens (what ``mixbench train`` does per step).
Each entry is ``mixer`` (its default kernel on this device) or ``mixer:kernel``, so a kernel can be compared with
the one it replaces in the same run. All entries are timed by :func:`harness.timing.interleaved`: one step each
per round, the order alternating, after a warm-up until the timings settle. Printed: median seconds per step
with the min-max over rounds, tokens/s, and each entry's time ratio to the first entry and, for ``mixer:kernel``
entries of one mixer, to that mixer's first entry (paired per round: median and 95% bootstrap interval).

    python benchmarks/train_speed.py [--mixers protot,attention,mamba:cpu-scan,mamba:fused] [--rounds 5]
"""

from __future__ import annotations

import argparse

import harness  # noqa: F401  (first: the threading policy is set before torch loads)

import _common
from harness.timing import Candidate, interleaved
from harness.running.training import adamw, param_groups

DEFAULT = "protot,attention,mamba:cpu-scan,mamba,deltanet:naive-chunk,deltanet"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default=DEFAULT)
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=0, help="0 = the preset's")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = parser.parse_args()
    _common.set_threads(args.threads)

    backbone, preset_batch = _common.quick_backbone(args.preset)
    batch = args.batch_size or preset_batch
    tokens = _common.random_tokens(backbone, batch)
    runs = {}
    for entry in args.mixers.split(","):
        mixer, _, kernel = entry.partition(":")
        model = _common.build(mixer, backbone, kernel or None)
        runs[entry] = (model, adamw(param_groups(model, 0.1), lr=1e-3))

    start = _common.machine_line()
    timings = interleaved([Candidate(e, _common.train_step(*runs[e], tokens)) for e in runs], args.rounds)
    print(f"preset {args.preset}: d_model {backbone.d_model}, {backbone.n_layers} layers, context "
          f"{backbone.context}, batch {batch}, vocab {backbone.vocab_size}; {args.rounds} interleaved rounds after "
          f"{timings.warmup_rounds} warm-up rounds{'' if timings.settled else ' (not settled)'}")
    print(f"at start: {start}\nat end:   load average {_common.load_average()}")
    first = next(iter(runs))
    name_w = max(len("entry"), *(len(e) for e in runs)) + 2
    kernel_w = max(len("kernel"), *(len(str(m.kernel)) for m, _ in runs.values())) + 2
    first_w = max(len("time / " + first), len("0.00 [0.00, 0.00]")) + 2
    print(f"{'entry':<{name_w}}{'kernel':<{kernel_w}}{'s/step':>8}{'min-max':>13}{'tokens/s':>10}"
          f"{'time / ' + first:>{first_w}}{'time / same mixer first':>26}")
    firsts: dict[str, str] = {}
    for entry, (model, _) in runs.items():
        mixer = entry.split(":")[0]
        firsts.setdefault(mixer, entry)
        s = timings.seconds[entry]
        med = timings.median(entry)
        vs_mixer = _common.fmt_ratio(timings.ratio(entry, firsts[mixer])) if firsts[mixer] != entry else "-"
        print(f"{entry:<{name_w}}{str(model.kernel):<{kernel_w}}{med:>8.3f}{f'{min(s):.2f}-{max(s):.2f}':>13}"
              f"{batch * backbone.context / med:>10,.0f}{_common.fmt_ratio(timings.ratio(entry, first)):>{first_w}}"
              f"{vs_mixer:>26}")
    for note in timings.notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
