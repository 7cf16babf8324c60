"""Mamba-1's selective scan as a small C loop, compiled on first use with the system's C compiler, for CPU.

Why C: the scan is a recurrence over time on a [batch, D, N] state whose every step is a few multiply-adds and an
exponential per element. In PyTorch each step is a handful of separate operations (a dispatch each, a pass over
memory each); as one loop per sequence, with the [D, N] state of one sequence in the L1 cache and the exponentials
vectorised, the whole scan costs about what reading its inputs costs (docs/cpu_kernels.md).

The source below is compiled once per machine (``cc -O3 -ffast-math -march=native``, about a second, by
:class:`harness.model.compiled.CompiledLibrary`) and loaded with ctypes; torch tensors are passed by pointer (float32,
contiguous, time-major). Sequences (or channel blocks, for a single sequence) run in parallel on torch's own
OpenMP threads, ``torch.get_num_threads()`` of them (:mod:`harness.model.compiled`).
:func:`available` is False where there is no compiler or the build fails; callers then use the PyTorch scan of
:mod:`mixers.mamba.kernel`. Numbers: the recurrence and its adjoint in fp32, as ``selective_scan_ref``
(same results to ~1e-6; sums over the state dimension are reordered by vectorisation).

Forward, per sequence b and channel d, states n, with ``dt = softplus(delta + bias)``: ``h = exp(dt A) h + dt u B_t;
out_t = (C_t . h + D u) * silu(z)`` (with ``neg``, Grazzi et al.'s transition ``2 exp(dt A) - 1`` in (-1, 1) in place of
``exp(dt A)``: the mamba mixer's ``allow_neg_eigval``), keeping the state before every :data:`SEGMENT`-th step. Backward
walks segments from the last: it recomputes a segment's states from its checkpoint, then runs the adjoint ``g = C_t dy_t
+ exp(dt_{t+1} A) g`` backwards through it, with every elementwise part (softplus, skip, gate) differentiated in the
same loop, accumulating the gradients of every input and of the initial state.
"""

from __future__ import annotations

import ctypes

import torch

from harness.kit import CompiledLibrary, pointer
from mixers.common.short_conv import blocks

#: steps between the states the forward pass keeps for the backward pass
SEGMENT = 32

SOURCE = r"""
#include <math.h>
#include <string.h>
#include <stdlib.h>

/* Time-major, contiguous float32 (z: rows of ldz floats, its first D used). u, delta, z, out: [T, Bt, D];
   bias, Dv: [D]; Bm, Cm: [T, Bt, N]; AT: [N, D] (A transposed); h0, h_last: [Bt, D, N]; ck: [nseg, Bt, N, D].
   dt = softplus(delta + bias) (torch's threshold of 20); out = (C . h + Dv u) * silu(z).
   Inside, the state of one sequence is kept state-major, [N][W] for the W channels d0..d1-1, so every inner loop
   runs over contiguous channels and vectorises (exponentials included), with no per-channel horizontal sums. */
static inline float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }
static inline float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

static void load_state(float *restrict h, const float *restrict src, int D, int N, int d0, int W) {
    for (int i = 0; i < W; i++)
        for (int n = 0; n < N; n++) h[(long)n * W + i] = src[(long)(d0 + i) * N + n];
}
static void store_state(float *restrict dst, const float *restrict h, int D, int N, int d0, int W) {
    for (int i = 0; i < W; i++)
        for (int n = 0; n < N; n++) dst[(long)(d0 + i) * N + n] = h[(long)n * W + i];
}

void scan_forward(int T, int Bt, int D, int N, int seg, int ldz, int neg,
                  const float *restrict u, const float *restrict delta, const float *restrict bias,
                  const float *restrict AT, const float *restrict Bm, const float *restrict Cm,
                  const float *restrict Dv, const float *restrict z, const float *restrict h0,
                  float *restrict out, float *restrict y_skip, float *restrict h_last, float *restrict ck,
                  int b0, int b1, int d0, int d1) {
    int W = d1 - d0;
    long SN = (long)W * N;
    float *h = (float *)malloc(sizeof(float) * SN);
    float *dt = (float *)malloc(sizeof(float) * W), *x = (float *)malloc(sizeof(float) * W);
    float *y = (float *)malloc(sizeof(float) * W);
    for (int b = b0; b < b1; b++) {
        load_state(h, h0 + (long)b * D * N, D, N, d0, W);
        for (int t = 0; t < T; t++) {
            if (t % seg == 0) {
                float *c = ck + ((long)(t / seg) * Bt + b) * N * D;
                for (int n = 0; n < N; n++) memcpy(c + (long)n * D + d0, h + (long)n * W, sizeof(float) * W);
            }
            const float *Bt_ = Bm + ((long)t * Bt + b) * N;
            const float *Ct_ = Cm + ((long)t * Bt + b) * N;
            long row = ((long)t * Bt + b) * D + d0;
            for (int i = 0; i < W; i++) {
                dt[i] = softplus(delta[row + i] + bias[d0 + i]);
                x[i] = dt[i] * u[row + i];
                y[i] = 0.f;
            }
            for (int n = 0; n < N; n++) {
                const float *An = AT + (long)n * D + d0;
                float *hn = h + (long)n * W, bn = Bt_[n], cn = Ct_[n];
                for (int i = 0; i < W; i++) {
                    float a = expf(dt[i] * An[i]);
                    if (neg) a = 2.f * a - 1.f;  /* Grazzi et al.: the transition in (-1, 1) */
                    float v = a * hn[i] + x[i] * bn;
                    hn[i] = v;
                    y[i] += cn * v;
                }
            }
            const float *zr = z + ((long)t * Bt + b) * ldz + d0;
            for (int i = 0; i < W; i++) {
                float zv = zr[i], ys = y[i] + Dv[d0 + i] * u[row + i];
                y_skip[row + i] = ys;  /* kept for the backward pass: the gate's gradient needs it */
                out[row + i] = ys * zv * sigmoid(zv);
            }
        }
        store_state(h_last + (long)b * D * N, h, D, N, d0, W);
    }
    free(h); free(dt); free(x); free(y);
}

/* Gradients. d_out: [T, Bt, D]; g_last: [Bt, D, N] (dL/d h_last). Written: d_u, d_delta, d_z [T, Bt, D],
   d_h0 [Bt, D, N]. Accumulated (the caller zeroes them; dB, dC one buffer per channel block): dAT_part [Bt, N, D],
   dD_part [Bt, D], dB, dC [T, Bt, N]. */
void scan_backward(int T, int Bt, int D, int N, int seg, int ldz, int neg,
                   const float *restrict u, const float *restrict delta, const float *restrict bias,
                   const float *restrict AT, const float *restrict Bm, const float *restrict Cm,
                   const float *restrict Dv, const float *restrict z, const float *restrict ck,
                   const float *restrict y_skip, const float *restrict d_out, const float *restrict g_last,
                   float *restrict d_u, float *restrict d_delta, float *restrict d_z,
                   float *restrict dAT_part, float *restrict dD_part, float *restrict dB, float *restrict dC,
                   float *restrict d_h0,
                   int b0, int b1, int d0, int d1) {
    int W = d1 - d0;
    long SN = (long)W * N;
    float *g = (float *)malloc(sizeof(float) * SN);
    float *hs = (float *)malloc(sizeof(float) * (seg + 1) * SN);  /* hs[0] = state before the segment */
    float *dec = (float *)malloc(sizeof(float) * seg * SN);
    float *dts = (float *)malloc(sizeof(float) * seg * W);       /* the segment's step sizes */
    float *x = (float *)malloc(sizeof(float) * W), *dy = (float *)malloc(sizeof(float) * W);
    float *ax = (float *)malloc(sizeof(float) * W), *adt = (float *)malloc(sizeof(float) * W);
    int nseg = (T + seg - 1) / seg;
    for (int b = b0; b < b1; b++) {
        load_state(g, g_last + (long)b * D * N, D, N, d0, W);
        float *dAT = dAT_part + (long)b * N * D, *dD = dD_part + (long)b * D + d0;
        for (int s = nseg - 1; s >= 0; s--) {
            int t0 = s * seg, t1 = t0 + seg < T ? t0 + seg : T;
            const float *c = ck + ((long)s * Bt + b) * N * D;
            for (int n = 0; n < N; n++) memcpy(hs + (long)n * W, c + (long)n * D + d0, sizeof(float) * W);
            for (int t = t0; t < t1; t++) {  /* recompute the segment's step sizes, decays and states */
                const float *Bt_ = Bm + ((long)t * Bt + b) * N;
                long row = ((long)t * Bt + b) * D + d0;
                float *dt = dts + (long)(t - t0) * W;
                for (int i = 0; i < W; i++) {
                    dt[i] = softplus(delta[row + i] + bias[d0 + i]);
                    x[i] = dt[i] * u[row + i];
                }
                const float *hp = hs + (long)(t - t0) * SN;
                float *hn = hs + (long)(t - t0 + 1) * SN, *de = dec + (long)(t - t0) * SN;
                for (int n = 0; n < N; n++) {
                    const float *An = AT + (long)n * D + d0;
                    long o = (long)n * W;
                    float bn = Bt_[n];
                    for (int i = 0; i < W; i++) {
                        float a = expf(dt[i] * An[i]);
                        if (neg) a = 2.f * a - 1.f;
                        de[o + i] = a;
                        hn[o + i] = a * hp[o + i] + x[i] * bn;
                    }
                }
            }
            for (int t = t1 - 1; t >= t0; t--) {  /* the adjoint, backwards */
                const float *Bt_ = Bm + ((long)t * Bt + b) * N;
                const float *Ct_ = Cm + ((long)t * Bt + b) * N;
                float *dBt = dB + ((long)t * Bt + b) * N, *dCt = dC + ((long)t * Bt + b) * N;
                long row = ((long)t * Bt + b) * D + d0;
                const float *hp = hs + (long)(t - t0) * SN, *hn = hp + SN, *de = dec + (long)(t - t0) * SN;
                const float *dt = dts + (long)(t - t0) * W;
                for (int i = 0; i < W; i++) { ax[i] = 0.f; adt[i] = 0.f; x[i] = dt[i] * u[row + i]; }
                const float *zr = z + ((long)t * Bt + b) * ldz + d0;
                for (int i = 0; i < W; i++) {  /* the gate and the skip */
                    float zv = zr[i], sz = sigmoid(zv), go = d_out[row + i], uv = u[row + i];
                    d_z[row + i] = go * y_skip[row + i] * sz * (1.f + zv * (1.f - sz));
                    dy[i] = go * zv * sz;  /* dL/d y_skip */
                    dD[i] += dy[i] * uv;
                }
                for (int n = 0; n < N; n++) {
                    long o = (long)n * W;
                    const float *An = AT + (long)n * D + d0;
                    float *gn = g + o, *dAn = dAT + (long)n * D + d0;
                    float bn = Bt_[n], cn = Ct_[n], sum_c = 0.f, sum_b = 0.f;
                    for (int i = 0; i < W; i++) {
                        float gv = gn[i] + dy[i] * cn;         /* dL/dh_t */
                        sum_c += dy[i] * hn[o + i];
                        ax[i] += gv * bn;
                        sum_b += gv * x[i];
                        /* dL/d(dt A): the transition's derivative is exp(dt A) = a, or 2 exp(dt A) = a + 1 */
                        float dlog = gv * (neg ? de[o + i] + 1.f : de[o + i]) * hp[o + i];
                        adt[i] += dlog * An[i];
                        dAn[i] += dlog * dt[i];
                        gn[i] = gv * de[o + i];                 /* carried to step t - 1 */
                    }
                    dCt[n] += sum_c;
                    dBt[n] += sum_b;
                }
                for (int i = 0; i < W; i++) {  /* x = dt u: ax is dL/dx; dt also enters through the decays */
                    float uv = u[row + i], pre = delta[row + i] + bias[d0 + i];
                    d_u[row + i] = dy[i] * Dv[d0 + i] + ax[i] * dt[i];
                    d_delta[row + i] = (adt[i] + ax[i] * uv) * sigmoid(pre);
                }
            }
        }
        store_state(d_h0 + (long)b * D * N, g, D, N, d0, W);
    }
    free(g); free(hs); free(dec); free(dts); free(x); free(dy); free(ax); free(adt);
}

/* OpenMP drivers: one block of the work split per iteration, on torch's own threads (harness/model/compiled.py), with
   denormals flushed as torch.set_flush_denormal(True) does. blk holds (b0, b1, d0, d1) per block; each block's
   accumulators (dB and dC: nbc floats) are stacked. */
#if defined(__SSE__)
#include <xmmintrin.h>
#define FLUSH_BEGIN unsigned int csr_ = _mm_getcsr(); _mm_setcsr(csr_ | 0x8040);
#define FLUSH_END _mm_setcsr(csr_);
#else
#define FLUSH_BEGIN
#define FLUSH_END
#endif
void scan_forward_blocks(int T, int Bt, int D, int N, int seg, int ldz, int neg, const float *u, const float *delta,
                         const float *bias, const float *AT, const float *Bm, const float *Cm, const float *Dv,
                         const float *z, const float *h0, float *out, float *y_skip, float *h_last, float *ck,
                         int nblk, const int *blk) {
    #pragma omp parallel
    {
        FLUSH_BEGIN
        #pragma omp for schedule(static, 1)
        for (int i = 0; i < nblk; i++)
            scan_forward(T, Bt, D, N, seg, ldz, neg, u, delta, bias, AT, Bm, Cm, Dv, z, h0, out, y_skip, h_last, ck,
                         blk[4 * i], blk[4 * i + 1], blk[4 * i + 2], blk[4 * i + 3]);
        FLUSH_END
    }
}
void scan_backward_blocks(int T, int Bt, int D, int N, int seg, int ldz, int neg, const float *u, const float *delta,
                          const float *bias, const float *AT, const float *Bm, const float *Cm, const float *Dv,
                          const float *z, const float *ck, const float *y_skip, const float *d_out,
                          const float *g_last, float *d_u, float *d_delta, float *d_z, float *dAT_part,
                          float *dD_part, float *dB, float *dC, float *d_h0, long nbc, int nblk, const int *blk) {
    #pragma omp parallel
    {
        FLUSH_BEGIN
        #pragma omp for schedule(static, 1)
        for (int i = 0; i < nblk; i++)
            scan_backward(T, Bt, D, N, seg, ldz, neg, u, delta, bias, AT, Bm, Cm, Dv, z, ck, y_skip, d_out, g_last,
                          d_u, d_delta, d_z, dAT_part, dD_part, dB + i * nbc, dC + i * nbc, d_h0,
                          blk[4 * i], blk[4 * i + 1], blk[4 * i + 2], blk[4 * i + 3]);
        FLUSH_END
    }
}
"""

def _signatures() -> dict[str, list]:
    i, p, q = ctypes.c_int, ctypes.c_void_p, ctypes.c_long
    return {
        "scan_forward_blocks": [i] * 7 + [p] * 13 + [i, p],
        "scan_backward_blocks": [i] * 7 + [p] * 20 + [q, i, p],
    }


_LIBRARY = CompiledLibrary("selective_scan", SOURCE, _signatures(), flags=["-ffast-math"], openmp=True)


def available() -> bool:
    """Whether the compiled kernel can be used here (builds it on the first call)."""
    return _LIBRARY.get() is not None


def unavailable_reason() -> str | None:
    return _LIBRARY.unavailable_reason()


def _rows(t: torch.Tensor) -> tuple[int, int]:
    """Pointer and row stride of a [T, Bt, D] tensor whose rows may be wider (a view of a wider tensor's first
    columns, as ``xz[..., :D]``): every dimension but the last may be strided by whole rows."""
    assert t.dtype == torch.float32 and t.device.type == "cpu" and t.stride(-1) == 1
    T, Bt, _ = t.shape
    ld = t.stride(1)
    assert t.stride(0) == Bt * ld or T == 1, "rows must be evenly spaced"
    return t.data_ptr(), ld


def _work_split(Bt: int, D: int) -> list[tuple[int, int, int, int]]:
    """(b0, b1, d0, d1) blocks for the worker threads: whole sequences when there are enough, else channel blocks."""
    workers = max(1, torch.get_num_threads())
    if Bt >= workers or D < 2 * workers:
        per = -(-Bt // workers)
        return [(b, min(b + per, Bt), 0, D) for b in range(0, Bt, per)]
    per = -(-D // workers)
    return [(0, Bt, d, min(d + per, D)) for d in range(0, D, per)]


def forward(u, delta, bias, A, B, C, Dv, z, h0, neg: bool = False):
    """``out = (C . h + Dv u) * silu(z)`` [T, Bt, D], the last state [Bt, D, N] and what the backward needs (the
    checkpoints and ``C . h + Dv u``), with
    ``dt = softplus(delta + bias)``; every input float32, contiguous, time-major (``z`` may be the first columns
    of a wider tensor, see :func:`_rows`)."""
    lib = _LIBRARY.get()
    T, Bt, D = u.shape
    N = A.shape[1]
    out, y_skip = torch.empty_like(u), torch.empty_like(u)
    h_last = torch.empty_like(h0)
    ck = u.new_empty(-(-T // SEGMENT), Bt, N, D)
    AT = A.t().contiguous()
    z_ptr, ldz = _rows(z)
    args = (T, Bt, D, N, SEGMENT, ldz, int(neg), pointer(u), pointer(delta), pointer(bias), pointer(AT), pointer(B),
            pointer(C), pointer(Dv), z_ptr, pointer(h0), pointer(out), pointer(y_skip), pointer(h_last), pointer(ck))
    lib.scan_forward_blocks(*args, *blocks(_work_split(Bt, D)))
    return out, h_last, (ck, y_skip)


def backward(u, delta, bias, A, B, C, Dv, z, saved, d_out, g_last, neg: bool = False):
    """Gradients of u, delta, bias, A, B, C, Dv, z and the initial state; ``saved`` is what :func:`forward`
    returned third (the checkpoints and the ungated outputs)."""
    ck, y_skip = saved
    lib = _LIBRARY.get()
    T, Bt, D = u.shape
    N = A.shape[1]
    split = _work_split(Bt, D)
    d_u, d_delta, d_z = torch.empty_like(u), torch.empty_like(u), torch.empty_like(u)
    dAT_part = u.new_zeros(Bt, N, D)
    dD_part = u.new_zeros(Bt, D)
    d_h0 = u.new_empty(Bt, D, N)
    AT = A.t().contiguous()
    # B and C are shared by all channels: one accumulator per channel block, summed afterwards
    dB = B.new_zeros(len(split), *B.shape)
    dC = C.new_zeros(len(split), *C.shape)
    z_ptr, ldz = _rows(z)
    lib.scan_backward_blocks(T, Bt, D, N, SEGMENT, ldz, int(neg), pointer(u), pointer(delta), pointer(bias),
                             pointer(AT), pointer(B), pointer(C), pointer(Dv), z_ptr, pointer(ck), pointer(y_skip),
                             pointer(d_out), pointer(g_last), pointer(d_u), pointer(d_delta), pointer(d_z),
                             pointer(dAT_part), pointer(dD_part), pointer(dB), pointer(dC), pointer(d_h0), B.numel(),
                             *blocks(split))
    return (d_u, d_delta, d_delta.sum((0, 1)), dAT_part.sum(0).t(), dB.sum(0), dC.sum(0), dD_part.sum(0), d_z,
            d_h0)
