"""The two recurrences of ProtoT's chunked CPU kernel as compiled C loops: the masses and the carried states.

:mod:`mixers.protot.kernel` does the heavy work in batched matmuls; what is left are two scans that PyTorch can
only run as one small operation per step (docs/protot_kernels.md, "Compiled recurrences"). The masses' pass also
does the per-position work around the products that reads the same elements: forward, the factored tensors
(``w`` and ``q`` times their decay tables); backward, the read and write gradients assembled from the products'
outputs and the decay's per-position terms.

* **masses**, per sequence and channel, over every position: ``M_t = beta M_{t-1} + w_t``, read strictly before
  each write as ``q_t = rho_t / max(M_{t-1}, floor)``. This is the definition itself, one multiply-add per
  element in sequence, so no power of beta is ever formed for it and no decay is too steep. Its backward walks
  the positions in reverse with the adjoint ``g_{t-1} = beta g_t - [M_{t-1} >= floor] q_t dq_t / M_{t-1}``,
  giving the gradients of w (``g_t``), rho and the initial mass, and the masses' share of the kernel's
  closed-form decay gradient, in the same pass;
* **carried states**, per sequence and channel, over the chunks: ``H_{j+1} = beta^C H_j + inc_j``; backward
  ``dH_j = d_read_j + beta^C dH_{j+1}``, with the per-channel products ``<H_{j+1}, dH_{j+1}>`` the decay's
  gradient needs, summed over the value columns in the same pass.

Layouts are contiguous float32: [B, T, R] per position, [B, n, R, m] per chunk. The loops run on torch's own
OpenMP threads (:mod:`harness.model.compiled`), over (sequence, channel block) pairs. Inside them denormal floats are
flushed to zero, as ``torch.set_flush_denormal(True)`` does for the rest of the kernel (a mass or state below
1e-38 reads as 0; a mass that small is floored anyway). The masses and their adjoint are carried in double: in
fp32 a sequential sum over ~1 / (1 - beta) positions loses that many roundings (1e-5 relative at beta = 0.999,
where the chunked products lose ~3e-7), and inputs and outputs stay fp32.
"""

from __future__ import annotations

import ctypes

import torch

from harness.kit import CompiledLibrary, pointer

SOURCE = r"""
#include <math.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#define FLUSH_BEGIN unsigned int csr_ = _mm_getcsr(); _mm_setcsr(csr_ | 0x8040); /* FTZ | DAZ */
#define FLUSH_END _mm_setcsr(csr_);
#else
#define FLUSH_BEGIN
#define FLUSH_END
#endif
#define KB 16 /* channels per work item of the mass loops */

/* w, rho: [B, T, R]; q, m_prev and the four factored tensors: [B, TP, R] (TP >= T; rows T.. are written as
   zeros); lb: [R]; m0, m_last: [B, R]; tables [C, R] (pq, pk NULL on the steep path: kf, qf are not written).
   m_prev[t] = M_{t-1} (unclamped), q[t] = rho[t] / max(M_{t-1}, floor); with s = t mod C: kf = w pk[s],
   w_end = w to_end[s] (last_to_end in the last chunk), qf = q pq[s], q_into = q into[s]. */
void masses_forward(int B, int T, int TP, int R, int C, const float *w, const float *rho, const float *lb,
                    const float *m0, const float *pq, const float *pk, const float *into, const float *to_end,
                    const float *last_to_end, float floor_, float *q, float *m_prev, float *m_last, float *kf,
                    float *w_end, float *qf, float *q_into) {
    int nkb = (R + KB - 1) / KB;
    int last_start = ((T - 1) / C) * C;
    #pragma omp parallel
    {
        FLUSH_BEGIN
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kb = 0; kb < nkb; kb++) {
                int k0 = kb * KB, W = R - k0 < KB ? R - k0 : KB;
                double beta[KB], M[KB];
                for (int i = 0; i < W; i++) { beta[i] = exp((double)lb[k0 + i]); M[i] = m0[(long)b * R + k0 + i]; }
                const float *wb = w + (long)b * T * R + k0, *rb = rho + (long)b * T * R + k0;
                long ob = (long)b * TP * R + k0;
                for (int t = 0; t < T; t++) {
                    long o = (long)t * R, x = ob + o, tab = (long)(t % C) * R + k0;
                    const float *te = t >= last_start ? last_to_end : to_end;
                    #pragma omp simd
                    for (int i = 0; i < W; i++) {
                        double m = M[i];
                        float wk = wb[o + i], qk = (float)(rb[o + i] / (m < floor_ ? (double)floor_ : m));
                        m_prev[x + i] = (float)m;
                        q[x + i] = qk;
                        q_into[x + i] = qk * into[tab + i];
                        w_end[x + i] = wk * te[tab + i];
                        if (pq) { qf[x + i] = qk * pq[tab + i]; kf[x + i] = wk * pk[tab + i]; }
                        M[i] = beta[i] * m + wk;
                    }
                }
                for (int t = T; t < TP; t++)
                    for (int i = 0; i < W; i++) {
                        long x = ob + (long)t * R + i;
                        q[x] = 0.f; m_prev[x] = 0.f; q_into[x] = 0.f; w_end[x] = 0.f;
                        if (pq) { qf[x] = 0.f; kf[x] = 0.f; }
                    }
                for (int i = 0; i < W; i++) m_last[(long)b * R + k0 + i] = (float)M[i];
            }
        FLUSH_END
    }
}

/* The backward's per-position work after the batched products, in one pass per (sequence, channel block):
   the read weights' gradient dq = dq_scores * pq + dq_read * into, the writes' gradient through the scores and the
   state increments dw_state = dw_scores * pk + dw_inc * to_end (last_to_end in the last chunk); on the steep
   path pq and pk are ones (its scores' gradients already include their decays). Then the masses' reverse pass,
   adding g_t to dw.
   All [B, TP, R] except the tables [C, R], d_mlast (NULL: zero), d_m0 and d_lb [B, R] (per sequence; the caller
   sums). d_lb is the closed-form decay gradient of mixers/protot/kernel.py but for its chunk states' term, with
   chunk-local positions s = t mod C: sum_t -(s + 1) w_t dw_t + [M_{t-1} < floor] s q_t dq_t, plus at each
   chunk's last position (chunk length) M_t g_t -- not sum_t g_t beta M_{t-1}, which equals the masses' share
   but cancels against the read weights' (the non-floored q dq terms), losing digits in fp32. dw may be
   dw_scores (in place). */
void masses_backward(int B, int T, int TP, int R, int C, const float *w, const float *dq_scores,
                     const float *dq_read, const float *dw_scores, const float *dw_inc, const float *pq,
                     const float *pk, const float *into, const float *to_end, const float *last_to_end,
                     const float *q, const float *m_prev, const float *lb, const float *d_mlast, float floor_,
                     float *dw, float *d_rho, float *d_m0, float *d_lb) {
    int nkb = (R + KB - 1) / KB;
    int last_start = ((T - 1) / C) * C, last_len = T - last_start;
    #pragma omp parallel
    {
        FLUSH_BEGIN
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kb = 0; kb < nkb; kb++) {
                int k0 = kb * KB, W = R - k0 < KB ? R - k0 : KB;
                double beta[KB], g[KB], acc[KB];
                for (int i = 0; i < W; i++) {
                    beta[i] = exp((double)lb[k0 + i]);
                    g[i] = d_mlast ? d_mlast[(long)b * R + k0 + i] : 0.f;
                    acc[i] = 0.0;
                }
                long base = (long)b * TP * R + k0;
                for (int t = T - 1; t >= 0; t--) {
                    long o = base + (long)t * R, tab = (long)(t % C) * R + k0;
                    int s = t % C;
                    double end_len = t == T - 1 ? last_len : (s == C - 1 ? C : 0);
                    const float *te = t >= last_start ? last_to_end : to_end;
                    #pragma omp simd
                    for (int i = 0; i < W; i++) {
                        float dqk = dq_scores[o + i] * pq[tab + i] + dq_read[o + i] * into[tab + i];
                        float dws = dw_scores[o + i] * pk[tab + i] + dw_inc[o + i] * te[tab + i];
                        double m = m_prev[o + i], wk = w[o + i], gk = g[i], qk = q[o + i];
                        int open = m >= floor_;
                        double dr = dqk / (open ? m : (double)floor_);
                        acc[i] += -(s + 1) * wk * (dws + gk) + (open ? 0.0 : s * qk * dqk)
                                  + end_len * (beta[i] * m + wk) * gk;
                        dw[o + i] = (float)(dws + gk);
                        d_rho[o + i] = (float)dr;
                        g[i] = beta[i] * gk - (open ? dr * qk : 0.0);
                    }
                }
                for (int t = T; t < TP; t++)
                    for (int i = 0; i < W; i++) d_rho[base + (long)t * R + i] = 0.f;
                for (int i = 0; i < W; i++) {
                    long o = (long)b * R + k0 + i;
                    d_m0[o] = (float)g[i]; d_lb[o] = (float)acc[i];
                }
            }
        FLUSH_END
    }
}

/* inc, before: [B, n, R, m]; s0, final: [B, R, m]; decay: [R] (beta^C), last: [R] (the last chunk's decay).
   before[j] = the state entering chunk j; final = the state after the last chunk. */
void states_forward(int B, int n, int R, int m, const float *inc, const float *s0, const float *decay,
                    const float *last, float *before, float *final) {
    long RM = (long)R * m;
    #pragma omp parallel
    {
        FLUSH_BEGIN
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int r = 0; r < R; r++) {
                long off = (long)b * n * RM + (long)r * m;
                const float *x = inc + off;
                float *h = before + off;
                for (int c = 0; c < m; c++) h[c] = s0[(long)b * RM + (long)r * m + c];
                for (int j = 0; j < n; j++) {
                    float d = j == n - 1 ? last[r] : decay[r];
                    const float *hj = h + (long)j * RM, *xj = x + (long)j * RM;
                    float *out = j == n - 1 ? final + (long)b * RM + (long)r * m : h + (long)(j + 1) * RM;
                    for (int c = 0; c < m; c++) out[c] = d * hj[c] + xj[c];
                }
            }
        FLUSH_END
    }
}

/* d_read, before, d_after: [B, n, R, m]; d_final (NULL: zero), final, d_s0: [B, R, m]; dots: [B, n, R].
   d_after[j] = the gradient of the state after chunk j; dots[b, j, r] = <state after chunk j, d_after[j]>. */
void states_backward(int B, int n, int R, int m, const float *d_read, const float *d_final, const float *decay,
                     const float *last, const float *before, const float *final, float *d_after, float *d_s0,
                     float *dots) {
    long RM = (long)R * m;
    #pragma omp parallel
    {
        FLUSH_BEGIN
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int r = 0; r < R; r++) {
                long off = (long)b * n * RM + (long)r * m, soff = (long)b * RM + (long)r * m;
                float *g = d_after + off, *db = dots + (long)b * n * R + r;
                const float *h = before + off, *x = d_read + off, *fin = final + soff;
                float *gl = g + (long)(n - 1) * RM, s = 0.f;
                #pragma omp simd reduction(+:s)
                for (int c = 0; c < m; c++) {
                    float y = d_final ? d_final[soff + c] : 0.f;
                    gl[c] = y;
                    s += y * fin[c];
                }
                db[(long)(n - 1) * R] = s;
                for (int j = n - 1; j >= 0; j--) {
                    float d = j == n - 1 ? last[r] : decay[r];
                    const float *gj = g + (long)j * RM, *xj = x + (long)j * RM, *hj = h + (long)j * RM;
                    float *out = j == 0 ? d_s0 + soff : g + (long)(j - 1) * RM;
                    s = 0.f;
                    #pragma omp simd reduction(+:s)
                    for (int c = 0; c < m; c++) {
                        float y = xj[c] + d * gj[c];
                        out[c] = y;
                        s += y * hj[c];  /* hj: the state entering chunk j = the state after chunk j - 1 */
                    }
                    if (j > 0) db[(long)(j - 1) * R] = s;
                }
            }
        FLUSH_END
    }
}
"""


def _signatures() -> dict[str, list]:
    i, p, f = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
    return {
        "masses_forward": [i] * 5 + [p] * 9 + [f] + [p] * 7,
        "masses_backward": [i] * 5 + [p] * 14 + [f] + [p] * 4,
        "states_forward": [i] * 4 + [p] * 6,
        "states_backward": [i] * 4 + [p] * 9,
    }


_LIBRARY = CompiledLibrary("protot_recurrences", SOURCE, _signatures(),
                           flags=["-fno-math-errno", "-fno-trapping-math"], openmp=True)


def usable(*tensors: torch.Tensor) -> bool:
    """Whether these tensors can take the compiled loops: float32 on the CPU, and the library builds here."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors) and _LIBRARY.get() is not None


def unavailable_reason() -> str | None:
    return _LIBRARY.unavailable_reason()


def _call(function: str, sizes: tuple[int, ...], tensors: tuple, floor: float | None = None, n_before: int = 0):
    """Call a C function with ``sizes`` (ints), then the tensors' pointers (each made contiguous float32 first,
    None as NULL; ``floor``, when given, goes after the first ``n_before`` of them). The contiguous copies are
    held here until the call returns, so no pointer outlives its tensor."""
    held = [None if t is None else t.contiguous() for t in tensors]
    pointers = [pointer(t) for t in held]
    extra = [] if floor is None else [floor]
    getattr(_LIBRARY.get(), function)(*sizes, *pointers[:n_before], *extra, *pointers[n_before:])


def masses_forward(w, rho, log_beta, M0, floor: float, padded_length: int, C: int, tables):
    """Read weights and masses at every position, with the factored tensors the batched products take, from one
    pass (see the C source): (q, m_prev, M_T, Kf, w_end, Qf, q_into), all [B, padded_length, R] with zero rows
    past T but M_T [B, R] (the mass after the last position); ``tables`` are (pq, pk, into, to_end, last_to_end),
    each [C, R] (pq, pk None on the steep path: Kf, Qf None)."""
    B, T, R = w.shape
    q, m_prev, w_end, q_into = (w.new_empty(B, padded_length, R) for _ in range(4))
    kf, qf = (w.new_empty(B, padded_length, R) if tables[0] is not None else None for _ in range(2))
    m_last = w.new_empty(B, R)
    _call("masses_forward", (B, T, padded_length, R, C), (w, rho, log_beta, M0, *tables, q, m_prev, m_last, kf,
                                                           w_end, qf, q_into), floor, 9)
    return q, m_prev, m_last, kf, w_end, qf, q_into


def masses_backward(w, dq_scores, dq_read, dw_scores, dw_inc, tables, q, m_prev, log_beta, d_M_last,
                    floor: float, T: int, C: int):
    """(dw, d_rho, d_M0, d_log_beta) from the backward's batched products (see the C source): ``tables`` are
    (pq, pk, into, to_end, last_to_end), each [C, R] (pq, pk None on the steep path: ones). ``dw`` is written into
    ``dw_scores`` (contiguous); ``d_log_beta`` is the decay's gradient but for the chunk states' term, summed over
    sequences."""
    B, TP, R = q.shape
    assert dw_scores.is_contiguous() and dw_scores.shape == q.shape
    d_rho = torch.empty_like(q)
    d_M0, d_lb = q.new_empty(B, R), q.new_empty(B, R)
    if tables[0] is None:
        ones = q.new_ones(tables[2].shape)
        tables = (ones, ones, *tables[2:])
    inputs = (w, dq_scores, dq_read, dw_scores, dw_inc, *tables, q, m_prev, log_beta, d_M_last)
    _call("masses_backward", (B, T, TP, R, C), (*inputs, dw_scores, d_rho, d_M0, d_lb), floor, len(inputs))
    return dw_scores, d_rho, d_M0, d_lb.sum(0)


def states_forward(inc, S0, decay, last_decay):
    """(before, final): the state entering every chunk [B, n, R, m] and the state after the last one [B, R, m]."""
    B, n, R, m = inc.shape
    before, final = inc.new_empty(B, n, R, m), inc.new_empty(B, R, m)
    _call("states_forward", (B, n, R, m), (inc, S0, decay, last_decay, before, final))
    return before, final


def states_backward(d_read, d_final, decay, last_decay, before, final):
    """(d_after, d_S0, dots): the gradient of the state after every chunk [B, n, R, m], of the initial state, and
    ``<state after chunk j, its gradient>`` summed over sequences and value columns [n, R]."""
    B, n, R, m = before.shape
    d_after, d_S0 = torch.empty_like(before), torch.empty_like(final)
    dots = before.new_empty(B, n, R)
    _call("states_backward", (B, n, R, m), (d_read, d_final, decay, last_decay, before, final, d_after, d_S0, dots))
    return d_after, d_S0, dots.sum(0)
