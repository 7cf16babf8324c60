#!/usr/bin/env bash
# One GPU, at most 9 minutes: every CUDA parity test of the six mixers (fp32, bf16, decode), the CUDA-only tests
# in tests/, training speed of the four paper mixers at paper-small (tokens/s, MFU, peak memory, loss), and the
# throughput grid 1k-64k of the four paper mixers (CUDA events, CUDA-graph decode), then ONE summary table. Each
# part runs under its own time limit and fails soft: its error is printed, the next part runs, and the summary
# says which parts failed. Exit status: 0 only if every part passed.
#
#   bash benchmarks/gpu_check.sh            # on the GPU machine, from anywhere
#   bash benchmarks/gpu_check.sh --dry-run  # the same plumbing on a CPU at tiny sizes (no GPU needed)
#
# Python: $PYTHON, else .venv/bin/python if it sees a GPU, else python3. Packages the machine lacks travel as
# wheels in .whl/ (benchmarks/gpu_wheels.sh fetches them); they are installed into /tmp/site first. Results and
# logs go to $OUT if set (the device tool brings them back), else a temporary folder.
set -u
cd "$(dirname "$0")/.."
REPO=$(pwd)
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
LOG=${OUT:-$(mktemp -d)}/gpu_check
mkdir -p "$LOG"
: >"$LOG/status"
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
START=$(date +%s)

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ] && .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() or $DRY else 1)" 2>/dev/null; then
  PY=.venv/bin/python
else PY=python3
fi

# run_part NAME LIMIT_S COMMAND...: runs COMMAND under a time limit, prints its output, records its exit status
run_part() {
  local name=$1 limit=$2 t0 rc
  shift 2
  echo
  echo "=== $name (limit ${limit} s): $*"
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$LOG/$name.log"
  rc=${PIPESTATUS[0]}
  echo "$name $rc $(( $(date +%s) - t0 ))" >>"$LOG/status"
  [ "$rc" -eq 0 ] || echo "=== $name FAILED (exit $rc); going on"
}

install_wheels() {
  [ -d .whl ] || { echo "no .whl/ folder: using the packages already installed"; return 0; }
  mkdir -p /tmp/site
  local wheels sdists
  wheels=$(ls .whl/*.whl 2>/dev/null)
  sdists=$(ls .whl/*.tar.gz 2>/dev/null)
  if [ -n "$wheels" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels || return 1
  fi
  if [ -n "$sdists" ]; then  # mamba-ssm ships no wheels: its Python and Triton parts, without compiling CUDA
    MAMBA_SKIP_CUDA_BUILD=TRUE CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE "$PY" -m pip install -q --no-index --no-deps \
      --no-build-isolation --no-cache-dir --target /tmp/site $sdists || return 1
  fi
  echo "installed into /tmp/site: $(ls .whl | tr '\n' ' ')"
}

environment() {
  install_wheels || echo "installing the carried packages failed; going on with what is installed"
  "$PY" - <<'EOF'
import importlib.metadata as md, json, os, platform, torch
cuda = torch.cuda.is_available()
gpus = torch.cuda.device_count() if cuda else 0
print(f"python {platform.python_version()}; torch {torch.__version__}; cuda available {cuda}; {gpus} GPU(s)")
if cuda:
    print(f"device {torch.cuda.get_device_name()}, capability {torch.cuda.get_device_capability()}")
packages = {}
for pkg in ("triton", "flash-linear-attention", "fla-core", "mamba-ssm", "causal-conv1d", "einops", "numpy", "scipy"):
    try:
        packages[pkg] = md.version(pkg)
    except md.PackageNotFoundError:
        packages[pkg] = None
    print(f"  {pkg} {packages[pkg] or 'MISSING'}")
with open(os.path.join(os.environ["LOG"], "env.json"), "w") as f:  # the summary's GPU count
    json.dump({"torch": torch.__version__, "cuda": cuda, "gpu_count": gpus,
               "devices": [torch.cuda.get_device_name(i) for i in range(gpus)], "packages": packages}, f, indent=1)
EOF
}

export PYTHONPATH="/tmp/site:$REPO${PYTHONPATH:+:$PYTHONPATH}"
if [ "$DRY" = 1 ]; then  # plumbing only: tiny sizes, two mixers in the grid, one thread
  DEVICE=cpu; LENGTHS=32,64; PRESET=tiny; KLEN=256; REPEATS=2; PARITY_T=40; GRID=protot,attention
  TRAIN_ARGS="--steps 4 --warmup-steps 1 --max-train-docs 40"
  export OMP_NUM_THREADS=1
else
  DEVICE=cuda; LENGTHS=1024,2048,4096,8192,16384,32768,65536; PRESET=paper-small; KLEN=4096; REPEATS=5; PARITY_T=96
  GRID=protot,attention,mamba,deltanet
  TRAIN_ARGS="--steps 60 --warmup-steps 10"  # the first run also trains the 16384-id BPE (~10 s, then cached)
fi
echo "gpu_check: python $PY, device $DEVICE, logs in $LOG"

export -f install_wheels environment
export PY LOG
# Time limits, 535 s (under 9 minutes) in all, so that the check with the machine's start and the transfers fits a
# lent GPU's 15 minutes with time left to rerun a part. The training part (150 s) was paid for by the others:
# env 60 -> 45, parity 150 -> 120, cuda-tests 90 -> 80, throughput 170 -> 140 (its grid starts no new point
# after 105 s instead of 130 s, so its longest lengths are the ones a slow GPU skips). Training runs before the
# throughput grid: its numbers are the ones `mixbench train` gets, and the grid is the part that trims itself.
run_part env 45 bash -c environment
run_part parity 120 "$PY" benchmarks/gpu_parity.py --device "$DEVICE" --seq-len "$PARITY_T" --json "$LOG/parity.json"
CUDA_TESTS=$(grep -l "torch.cuda.is_available" tests/test_*.py | tr '\n' ' ')
run_part cuda-tests 80 "$PY" -m pytest -q -p no:cacheprovider -rs -k cuda --junitxml "$LOG/pytest.xml" $CUDA_TESTS
# shellcheck disable=SC2086  # TRAIN_ARGS is a list of options
run_part train 150 "$PY" benchmarks/gpu_train.py --device "$DEVICE" --preset "$PRESET" --mixers "$GRID" $TRAIN_ARGS \
  --budget-s 110 --json "$LOG/train.json"
run_part throughput 140 "$PY" benchmarks/gpu_throughput.py --device "$DEVICE" --preset "$PRESET" --lengths "$LENGTHS" \
  --mixers "$GRID" --repeats "$REPEATS" --kernel-length "$KLEN" --budget-s 105 --json "$LOG/throughput.json"

echo
"$PY" benchmarks/gpu_report.py "$LOG" || echo "the summary itself failed; see the parts' output above"
echo "gpu_check: $(( $(date +%s) - START )) s in all; logs in $LOG"
! grep -qv " 0 " "$LOG/status"
