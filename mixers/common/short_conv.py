"""The short convolution of Mamba and DeltaNet on CPU: a depthwise causal Conv1d and its SiLU as compiled C loops.

Both mamba-ssm's Mamba-1 and fla's DeltaNet put a depthwise causal convolution of width W (4) and a SiLU before
their recurrence (fla's ``ShortConvolution``, mamba-ssm's ``conv1d`` + ``act``). In PyTorch that is a padded
Conv1d, a SiLU and two layout changes per call; here it is one loop forward and one backward that read the inputs
in whatever layout the caller holds them (time- or batch-major, any strides over time and batch, contiguous
channels), with the last W inputs before the chunk (``hist``) as the decode state (docs/cpu_kernels.md).

Compiled on first use by :class:`harness.model.compiled.CompiledLibrary` (``-O3 -ffast-math``, OpenMP on torch's
own threads, whole sequences per thread); :func:`available` is False without a C compiler, and callers fall back
to PyTorch's convolution. The results equal ``silu(conv1d(...))`` to float32 rounding (tests/test_cpu_kernels.py).
"""

from __future__ import annotations

import ctypes

import torch

from harness.kit import CompiledLibrary, pointer

SOURCE = r"""
#include <math.h>
#include <stdlib.h>
#include <string.h>
/* Depthwise causal convolution + SiLU over time. Element (t, b, d) of x is x[t * xt + b * xb + d] (any
   layout with contiguous channels: time-major [T, Bt, D] rows, batch-major [Bt, T, D], a view of a wider tensor's
   first D columns); out, d_out and d_x likewise with their own strides. wT: [W, D] (the weight transposed);
   bias: [D] or NULL; hist: [Bt, D, W] (the last W inputs before x) or NULL (zeros).
   out[t] = silu(bias + sum_j wT[j] x[t - W + 1 + j]). */
static inline const float *conv_input(const float *x, long xt, long xb, const float *hist, int D, int W, int tt,
                                      int b, float *tmp) {
    if (tt >= 0) return x + tt * xt + b * xb;
    if (hist == NULL) return NULL;
    for (int d = 0; d < D; d++) tmp[d] = hist[((long)b * D + d) * W + W + tt];
    return tmp;
}

/* The causal depthwise conv's pre-activation at (t, b) into acc [D]; tmp [D] is scratch for conv_input. */
static void conv_preact(const float *restrict x, long xt, long xb, const float *restrict wT,
                        const float *restrict bias, const float *restrict hist, int D, int W, int t, int b,
                        float *restrict acc, float *restrict tmp) {
    for (int d = 0; d < D; d++) acc[d] = bias ? bias[d] : 0.f;
    for (int j = 0; j < W; j++) {
        const float *xr = conv_input(x, xt, xb, hist, D, W, t - W + 1 + j, b, tmp);
        if (xr == NULL) continue;
        const float *wj = wT + (long)j * D;
        for (int d = 0; d < D; d++) acc[d] += wj[d] * xr[d];
    }
}

void conv_forward(int T, int Bt, int D, int W, const float *restrict x, long xt, long xb,
                  const float *restrict wT, const float *restrict bias, const float *restrict hist,
                  float *restrict out, long ot, long ob, int b0, int b1) {
    float *acc = (float *)malloc(sizeof(float) * D), *tmp = (float *)malloc(sizeof(float) * D);
    for (int b = b0; b < b1; b++)
        for (int t = 0; t < T; t++) {
            conv_preact(x, xt, xb, wT, bias, hist, D, W, t, b, acc, tmp);
            float *o = out + t * ot + b * ob;
            for (int d = 0; d < D; d++) o[d] = acc[d] / (1.f + expf(-acc[d]));
        }
    free(acc); free(tmp);
}

/* Written: d_x (strides dxt, dxb), d_hist [Bt, D, W] (if hist and d_hist). Accumulated (zeroed by the caller, one
   buffer per sequence block): d_wT [W, D], d_bias [D] (if bias). */
void conv_backward(int T, int Bt, int D, int W, const float *restrict x, long xt, long xb,
                   const float *restrict wT, const float *restrict bias, const float *restrict hist,
                   const float *restrict d_out, long gt, long gb, float *restrict d_x, long dxt, long dxb,
                   float *restrict d_hist, float *restrict d_wT, float *restrict d_bias, int b0, int b1) {
    float *acc = (float *)malloc(sizeof(float) * D), *tmp = (float *)malloc(sizeof(float) * D);
    float *dp = (float *)malloc(sizeof(float) * D);
    for (int b = b0; b < b1; b++) {
        for (int t = 0; t < T; t++) {
            float *dx = d_x + t * dxt + b * dxb;
            for (int d = 0; d < D; d++) dx[d] = 0.f;
        }
        if (hist && d_hist)
            for (int k = 0; k < D * W; k++) d_hist[(long)b * D * W + k] = 0.f;
        for (int t = 0; t < T; t++) {
            conv_preact(x, xt, xb, wT, bias, hist, D, W, t, b, acc, tmp);
            const float *go = d_out + t * gt + b * gb;
            for (int d = 0; d < D; d++) {
                float s = 1.f / (1.f + expf(-acc[d]));
                dp[d] = go[d] * s * (1.f + acc[d] * (1.f - s));
            }
            if (d_bias) for (int d = 0; d < D; d++) d_bias[d] += dp[d];
            for (int j = 0; j < W; j++) {
                int tt = t - W + 1 + j;
                const float *xr = conv_input(x, xt, xb, hist, D, W, tt, b, tmp);
                if (xr == NULL) continue;
                const float *wj = wT + (long)j * D;
                float *dwj = d_wT + (long)j * D;
                for (int d = 0; d < D; d++) dwj[d] += dp[d] * xr[d];
                if (tt >= 0) {
                    float *dx = d_x + tt * dxt + b * dxb;
                    for (int d = 0; d < D; d++) dx[d] += wj[d] * dp[d];
                } else if (d_hist) {
                    for (int d = 0; d < D; d++) d_hist[((long)b * D + d) * W + W + tt] += wj[d] * dp[d];
                }
            }
        }
    }
    free(acc); free(tmp); free(dp);
}

/* OpenMP drivers: one block of sequences (b0, b1) per iteration, on torch's own threads
   (harness/model/compiled.py), with denormals flushed as torch.set_flush_denormal(True) does; each block's
   accumulators (d_wT: W * D; d_bias: D) are stacked. */
#if defined(__SSE__)
#include <xmmintrin.h>
#define FLUSH_BEGIN unsigned int csr_ = _mm_getcsr(); _mm_setcsr(csr_ | 0x8040);
#define FLUSH_END _mm_setcsr(csr_);
#else
#define FLUSH_BEGIN
#define FLUSH_END
#endif
void conv_forward_blocks(int T, int Bt, int D, int W, const float *x, long xt, long xb, const float *wT,
                         const float *bias, const float *hist, float *out, long ot, long ob, int nblk,
                         const int *blk) {
    #pragma omp parallel
    {
        FLUSH_BEGIN
        #pragma omp for schedule(static, 1)
        for (int i = 0; i < nblk; i++)
            conv_forward(T, Bt, D, W, x, xt, xb, wT, bias, hist, out, ot, ob, blk[2 * i], blk[2 * i + 1]);
        FLUSH_END
    }
}
void conv_backward_blocks(int T, int Bt, int D, int W, const float *x, long xt, long xb, const float *wT,
                          const float *bias, const float *hist, const float *d_out, long gt, long gb, float *d_x,
                          long dxt, long dxb, float *d_hist, float *d_wT, float *d_bias, int nblk, const int *blk) {
    #pragma omp parallel
    {
        FLUSH_BEGIN
        #pragma omp for schedule(static, 1)
        for (int i = 0; i < nblk; i++)
            conv_backward(T, Bt, D, W, x, xt, xb, wT, bias, hist, d_out, gt, gb, d_x, dxt, dxb, d_hist,
                          d_wT + (long)i * W * D, d_bias ? d_bias + (long)i * D : NULL, blk[2 * i], blk[2 * i + 1]);
        FLUSH_END
    }
}
"""


def _signatures() -> dict[str, list]:
    i, p, q = ctypes.c_int, ctypes.c_void_p, ctypes.c_long
    return {
        "conv_forward_blocks": [i] * 4 + [p, q, q, p, p, p, p, q, q] + [i, p],
        "conv_backward_blocks": [i] * 4 + [p, q, q, p, p, p, p, q, q, p, q, q, p, p, p] + [i, p],
    }


_LIBRARY = CompiledLibrary("short_conv", SOURCE, _signatures(), flags=["-ffast-math"], openmp=True)


def available() -> bool:
    """Whether the compiled loops can be used here (builds them on the first call)."""
    return _LIBRARY.get() is not None


def blocks(split: list[tuple[int, ...]]) -> tuple[int, ctypes.Array]:
    """A work split as the C drivers take it: the number of blocks and their bounds, flattened."""
    flat = [x for block in split for x in block]
    return len(split), (ctypes.c_int * len(flat))(*flat)


def _batch_split(Bt: int) -> list[tuple[int, int]]:
    workers = max(1, min(torch.get_num_threads(), Bt))
    per = -(-Bt // workers)
    return [(b, min(b + per, Bt)) for b in range(0, Bt, per)]


def _time_batch(t: torch.Tensor) -> tuple[int, int, int]:
    """Pointer and element strides over time and batch of a [T, Bt, D] tensor (or view) with contiguous channels."""
    assert t.dtype == torch.float32 and t.device.type == "cpu" and t.stride(-1) == 1
    return t.data_ptr(), t.stride(0), t.stride(1)


def _conv_params(weight, bias):
    """The C loops' layout of a depthwise Conv1d's parameters: weight [D, 1, W] as [W, D], both fp32, contiguous."""
    D, W = weight.shape[0], weight.shape[-1]
    wT = weight.detach().reshape(D, W).t().contiguous().float()
    return wT, (bias.detach().float().contiguous() if bias is not None else None)


def conv_forward(x, weight, bias, hist, out=None):
    """``silu(depthwise causal conv(x))`` over time: ``x`` indexed [T, Bt, D] (any strides over time and batch, see
    :data:`SOURCE`; ``x.transpose(0, 1)`` of a batch-major tensor works), ``weight`` [D, 1, W] (a Conv1d's),
    ``bias`` [D] or None, ``hist`` [Bt, D, W] (the last W inputs) or None. The result is time-major [T, Bt, D],
    or written into ``out`` (indexed [T, Bt, D], e.g. a transposed batch-major buffer)."""
    lib = _LIBRARY.get()
    T, Bt, D = x.shape
    W = weight.shape[-1]
    wT, bias_f = _conv_params(weight, bias)
    out = x.new_empty(T, Bt, D) if out is None else out
    args = (T, Bt, D, W, *_time_batch(x), pointer(wT), pointer(bias_f), pointer(hist), *_time_batch(out))
    lib.conv_forward_blocks(*args, *blocks(_batch_split(Bt)))
    return out


def conv_backward(x, weight, bias, hist, d_out, d_x=None):
    """Gradients of ``x`` (time-major, or written into ``d_x``), the weight [D, 1, W], the bias and the history of
    :func:`conv_forward`; ``d_out`` indexed [T, Bt, D] with any strides over time and batch."""
    lib = _LIBRARY.get()
    T, Bt, D = x.shape
    W = weight.shape[-1]
    wT, bias_f = _conv_params(weight, bias)
    d_x = x.new_empty(T, Bt, D) if d_x is None else d_x
    d_hist = torch.empty_like(hist) if hist is not None else None
    split = _batch_split(Bt)
    d_wT = x.new_zeros(len(split), W, D)
    d_bias = x.new_zeros(len(split), D)
    lib.conv_backward_blocks(T, Bt, D, W, *_time_batch(x), pointer(wT), pointer(bias_f), pointer(hist),
                             *_time_batch(d_out), *_time_batch(d_x), pointer(d_hist), pointer(d_wT),
                             pointer(d_bias) if bias is not None else None, *blocks(split))
    d_w = d_wT.sum(0).t().reshape(D, 1, W)
    return d_x, d_w, (d_bias.sum(0) if bias is not None else None), d_hist


class ConvSiLU(torch.autograd.Function):
    """A depthwise causal conv + SiLU (:func:`conv_forward` / :func:`conv_backward`) as one autograd node.

    ``x`` is indexed [T, Bt, D]; with ``batch_major`` the output (and the input's gradient) is allocated
    [Bt, T, D] and returned as its [T, Bt, D] view, so a caller working batch-major (``x = y.transpose(0, 1)``)
    gets contiguous tensors back after transposing."""

    @staticmethod
    def forward(ctx, x, weight, bias, hist, batch_major=False):
        T, Bt, D = x.shape
        out = x.new_empty(Bt, T, D).transpose(0, 1) if batch_major else None
        ctx.save_for_backward(x, weight, bias, hist)
        ctx.batch_major = batch_major
        return conv_forward(x, weight, bias, hist, out)

    @staticmethod
    def backward(ctx, d_out):
        x, weight, bias, hist = ctx.saved_tensors
        T, Bt, D = x.shape
        if d_out.stride(-1) != 1:
            d_out = d_out.contiguous()
        d_x = x.new_empty(Bt, T, D).transpose(0, 1) if ctx.batch_major else None
        return (*conv_backward(x, weight, bias, hist, d_out, d_x), None)
