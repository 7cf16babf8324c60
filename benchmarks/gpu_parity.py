"""Each mixer's CUDA path against its CPU reference path, with the same weights (see mixers/parity.py).

For every mixer and mode (fp32, bf16 autocast, prefill + decode) prints the kernel used on the GPU, the max
absolute and max relative error (max |cuda - ref| / max |ref| over outputs and all gradients) and the tolerance;
exits 1 if any comparison fails, and with a message when there is no CUDA device.

    python benchmarks/gpu_parity.py [--mixers mamba,mamba2,deltanet,gated-deltanet,protot,attention]
"""

from __future__ import annotations

import argparse
import sys

import torch

from mixers import parity

ALL = "mamba,mamba2,deltanet,gated-deltanet,protot,attention"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default=ALL)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=96)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_parity: no CUDA device here, so there is no CUDA path to compare; run it on a GPU machine.",
              file=sys.stderr)
        return 1
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; d_model {args.d_model}, T {args.seq_len}")
    print(f"{'mixer':<16}{'cuda kernel':<13}{'mode':<8}{'max abs':>11}{'max rel':>11}{'tolerance':>11}  result")
    failed = 0
    for name in args.mixers.split(","):
        for mode in parity.MODES:
            try:
                r = parity.compare(name, mode, d_model=args.d_model, seq_len=args.seq_len)
            except Exception as exc:  # one broken kernel must not hide the others' results
                print(f"{name:<16}{'':<13}{mode:<8}  raised {type(exc).__name__}: {exc}")
                failed += 1
                continue
            failed += not r.passed
            print(f"{name:<16}{r.kernel:<13}{mode:<8}{r.max_abs:>11.2e}{r.max_rel:>11.2e}{r.tolerance:>11.0e}  "
                  f"{'ok' if r.passed else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
