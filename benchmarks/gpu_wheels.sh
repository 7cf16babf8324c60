#!/usr/bin/env bash
# Run on THIS machine (the one with a package index) before a device call: puts into .whl/ (ignored by git) the
# packages the GPU machine's image lacks, at the versions constraints.txt pins, for its Python 3.12:
# flash-linear-attention and fla-core (pure Python + Triton wheels, ~1.5 MB) and mamba-ssm's source (~0.2 MB; it
# has no wheels: benchmarks/gpu_check.sh installs it there without compiling its CUDA extension, so Mamba's
# selective scan runs its torch path and Mamba-2 its Triton kernels). Then call the device tool with
# carry [".whl"] and the command `bash benchmarks/gpu_check.sh`.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
pin() { grep -i "^$1==" constraints.txt | head -1; }
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "$(pin flash-linear-attention)" "$(pin fla-core)"
MAMBA_SKIP_CUDA_BUILD=TRUE "$PY" -m pip download -q --no-deps --no-binary=:all: --no-build-isolation -d .whl \
  "$(pin mamba_ssm)"
ls -la .whl
