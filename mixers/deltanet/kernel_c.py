"""The UT transform's inverse for the chunked delta rule as a compiled C loop: ``(I + strictly-lower(A))^-1``
for a batch of small [C, C] matrices (:mod:`mixers.deltanet.kernel`).

Why: ``torch.linalg.solve_triangular`` against the identity costs about 5 us per 32 x 32 matrix here (LAPACK's
per-matrix setup dominates at this size): 2.6 ms of the 14 ms forward of one DeltaNet layer at preset quick.
Forward substitution, row ``i`` of the inverse being ``e_i - sum_{j<i} A_ij T_j`` over rows already final, is
``C^3 / 6`` multiply-adds in vectorised loops that stay in L1. Built with :class:`harness.model.compiled.CompiledLibrary`
(on torch's OpenMP threads); without a compiler, or off fp32 CPU, the caller uses ``solve_triangular``.
"""

from __future__ import annotations

import ctypes

import torch

from harness.kit import CompiledLibrary, pointer

SOURCE = r"""
#include <string.h>

/* One matrix: row i of T = (I + strictly-lower(A))^-1 is e_i - sum_{j<i} A_ij T_j over rows already final.
   The row accumulates in a local array (in registers once C is a constant after inlining): updating it in T
   itself made every step wait on the last one's store, 5x slower. Row j of T is zero past column j; the
   inner loop still runs over all C columns, a fixed trip count that vectorises without remainders. */
static inline void inverse_one(const float *A, float *T, const long C) {
    for (long i = 0; i < C; i++) {
        float acc[C];
        for (long c = 0; c < C; c++) acc[c] = c == i ? 1.0f : 0.0f;
        for (long j = 0; j < i; j++) {
            float aij = A[i * C + j];
            const float *Tj = T + j * C;
            #pragma omp simd
            for (long c = 0; c < C; c++) acc[c] -= aij * Tj[c];
        }
        memcpy(T + i * C, acc, C * sizeof(float));
    }
}

/* a, t: [n, C, C]; a's diagonal and upper part are never read. */
void unit_lower_inverse(long n, long C, const float *a, float *t) {
    #pragma omp parallel for schedule(static)
    for (long b = 0; b < n; b++) {
        const float *A = a + b * C * C;
        float *T = t + b * C * C;
        switch (C) {  /* the chunk lengths in use, as constants */
            case 16: inverse_one(A, T, 16); break;
            case 32: inverse_one(A, T, 32); break;
            case 64: inverse_one(A, T, 64); break;
            default: inverse_one(A, T, C);
        }
    }
}
"""

_LIBRARY = CompiledLibrary("delta_rule_inverse", SOURCE,
                           {"unit_lower_inverse": [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]},
                           flags=["-fno-math-errno", "-fno-trapping-math", "-mprefer-vector-width=512"], openmp=True)


def usable(a: torch.Tensor) -> bool:
    return a.device.type == "cpu" and a.dtype == torch.float32 and _LIBRARY.get() is not None


def unit_lower_inverse(a: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``(I + strictly-lower(a))^-1`` for ``a`` [..., C, C] float32 on the CPU (see :func:`usable`), into ``out``
    (contiguous, a's shape) when given; no autograd."""
    a = a.detach().contiguous()
    t = torch.empty_like(a) if out is None else out
    assert t.shape == a.shape and t.is_contiguous() and t.dtype == a.dtype
    C = a.shape[-1]
    _LIBRARY.get().unit_lower_inverse(a.numel() // (C * C) if C else 0, C, pointer(a), pointer(t))
    return t
