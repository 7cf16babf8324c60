"""Small C kernels compiled on first use with the system's C compiler and loaded with ctypes (CPU only).

Why: a recurrence over time (a scan, a decayed running sum) is, in PyTorch, a handful of separate operations per
step, each a dispatch and a pass over memory; as one C loop it costs about what reading its inputs costs
(docs/cpu_kernels.md). Each kernel module keeps its C source as a string and a :class:`CompiledLibrary`.

A source is compiled once per machine into ``$MIXBENCH_CACHE/kernels/`` under a name that hashes the source,
this CPU's model and flags, the compiler and the flags (``-march=native`` code must never run on another CPU
sharing the cache); the file appears atomically, so concurrent builders never load half of one. Where there is no
compiler or the build fails, :meth:`CompiledLibrary.get` returns None and callers use their PyTorch path;
:meth:`CompiledLibrary.unavailable_reason` says why.

OpenMP: a source built with ``openmp=True`` parallelises with ``#pragma omp``. Its ``libgomp.so.1`` resolves to
the copy torch has already loaded (same soname), so the C loops run on torch's own intra-op threads, at
``torch.get_num_threads()``: no second pool competes for the cores with torch's waiting threads. (A torch built
on another OpenMP runtime gets the system's libgomp beside its own: the same results, two pools sharing the
cores.) Without OpenMP support the build is retried without it and the loops run on one thread.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Sequence

import torch

from harness.store.storage import cache_dir


#: C helper for sources that need exponentials in vectorised loops (prepend it to the source): glibc's vector
#: ``expf`` needs -ffast-math, which would also let the compiler assume no NaN and drop the checks that catch a
#: diverged model.
EXP_NONPOSITIVE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(x) for finite x <= 0, about 1 ulp from expf, in a form the compiler vectorises without -ffast-math:
   x = n ln2 + r (Cody-Waite split of ln2), exp(r) by Cephes' degree-7 polynomial, 2^n from the exponent bits.
   Below -87 it returns 0 (exp(-87) = 1.6e-38, the edge of normal floats: flushed to zero, as torch does with
   set_flush_denormal). NaN is not kept: callers check for it themselves. */
static inline float exp_nonpositive(float x) {
    float xc = x > -87.0f ? x : -87.0f;
    float n = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return x < -87.0f ? 0.0f : p * two_n;
}
"""


def _machine_key() -> str:
    """This CPU's model and flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
    except OSError:
        lines = []
    return "".join(lines)


class CompiledLibrary:
    """One C source, built and loaded on the first :meth:`get`; ``signatures`` maps each function to its ctypes
    argument types (every function returns void)."""

    def __init__(self, name: str, source: str, signatures: dict[str, Sequence], flags: Sequence[str] = (),
                 openmp: bool = False):
        self.name, self.source, self.signatures = name, source, signatures
        self.flags, self.openmp = list(flags), openmp
        self._lock = threading.Lock()
        self._lib: ctypes.CDLL | None = None
        self._failed: str | None = None

    def get(self) -> ctypes.CDLL | None:
        """The loaded library, or None where it cannot be built here."""
        if self._lib is not None or self._failed is not None:
            return self._lib
        with self._lock:
            if self._lib is None and self._failed is None:
                try:
                    self._lib = self._load()
                except (OSError, subprocess.SubprocessError) as exc:
                    self._failed = str(exc)
        return self._lib

    def unavailable_reason(self) -> str | None:
        self.get()
        return self._failed

    def _load(self) -> ctypes.CDLL:
        compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
        if compiler is None:
            raise OSError("no C compiler (cc/gcc) on PATH")
        base = [compiler, "-O3", "-march=native", "-fPIC", "-shared", *self.flags]
        attempts = [[*base, "-fopenmp"], base] if self.openmp else [base]
        key = hashlib.sha256("\0".join([self.source, _machine_key(), *attempts[0]]).encode()).hexdigest()[:16]
        lib = cache_dir() / "kernels" / f"{self.name}_{key}.so"
        if not lib.exists():
            self._compile(lib, attempts)
        handle = ctypes.CDLL(str(lib))
        for function, argtypes in self.signatures.items():
            getattr(handle, function).argtypes = list(argtypes)
            getattr(handle, function).restype = None
        return handle

    def _compile(self, lib: Path, attempts: list[list[str]]) -> None:
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
            src, out = Path(tmp) / f"{self.name}.c", Path(tmp) / f"{self.name}.so"
            src.write_text(self.source)
            errors = []
            for cmd in attempts:  # each with libmvec (vectorised exponentials) first, then without
                for libs in (["-lmvec", "-lm"], ["-lm"]):
                    done = subprocess.run([*cmd, str(src), "-o", str(out), *libs], capture_output=True, text=True,
                                          timeout=120, check=False)
                    if done.returncode == 0:
                        out.replace(lib)  # atomic: concurrent builders never load a half-written file
                        return
                    errors.append(done.stderr.strip())
            raise OSError(f"building the {self.name} kernel failed: {errors[-1][:300]}")


def pointer(t: torch.Tensor | None) -> int | None:
    """The address of a float32, contiguous CPU tensor (None for None), to pass as a ``c_void_p``."""
    if t is None:
        return None
    assert t.dtype == torch.float32 and t.is_contiguous() and t.device.type == "cpu"
    return t.data_ptr()
