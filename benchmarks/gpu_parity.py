"""Each mixer's CUDA path against its CPU reference path, with the same weights (see mixers/common/parity.py).

For every mixer and mode (fp32, bf16 autocast, prefill + decode) prints the kernel used on the GPU, the max
absolute and max relative error (max |cuda - ref| / max |ref| over outputs and all gradients) and the tolerance;
exits 1 if any comparison fails, and with a message when there is no CUDA device. One failing comparison is
printed and the others still run. ``--json PATH`` also writes the rows (for ``benchmarks/gpu_report.py``);
``--device cpu`` compares the CPU default kernels instead (the script's plumbing on a machine without a GPU).

    python benchmarks/gpu_parity.py [--mixers mamba,mamba2,deltanet,gated-deltanet,protot,attention] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch

from mixers.common import parity

ALL = "protot,attention,mamba,mamba2,deltanet,gated-deltanet"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default=ALL)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=96)
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu to check the plumbing")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_parity: no CUDA device here, so there is no CUDA path to compare; run it on a GPU machine.",
              file=sys.stderr)
        return 1
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"{name}; torch {torch.__version__}; d_model {args.d_model}, T {args.seq_len}")
    print(f"{'mixer':<16}{'kernel':<13}{'mode':<8}{'max abs':>11}{'max rel':>11}{'tolerance':>11}{'s':>7}  result")
    rows, failed = [], 0
    for mixer in args.mixers.split(","):
        for mode in parity.MODES:
            t0 = time.perf_counter()
            try:
                r = parity.compare(mixer, mode, device=args.device, d_model=args.d_model, seq_len=args.seq_len)
            except Exception as exc:  # one broken kernel must not hide the others' results
                error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
                print(f"{mixer:<16}{'':<13}{mode:<8}  raised {error}")
                rows.append({"mixer": mixer, "mode": mode, "passed": False, "error": error})
                failed += 1
                continue
            seconds = time.perf_counter() - t0
            failed += not r.passed
            rows.append({"mixer": mixer, "mode": mode, "kernel": r.kernel, "max_abs": r.max_abs, "max_rel": r.max_rel,
                         "tolerance": r.tolerance, "passed": r.passed, "seconds": seconds})
            print(f"{mixer:<16}{r.kernel:<13}{mode:<8}{r.max_abs:>11.2e}{r.max_rel:>11.2e}{r.tolerance:>11.0e}"
                  f"{seconds:>7.1f}  {'ok' if r.passed else 'FAIL'}", flush=True)
            if args.json:  # after every row: a part cut short by its time limit still leaves what it measured
                _write(args.json, name, rows)
    if args.json:
        _write(args.json, name, rows)
    return 1 if failed else 0


def _write(path: str, device: str, rows: list[dict]) -> None:
    with open(path, "w") as f:
        json.dump({"device": device, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
