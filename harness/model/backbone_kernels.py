"""The backbone's elementwise layers, RMSNorm and SwiGLU's gated activation, as compiled C loops on the CPU.

Why: at preset quick (d_model 128) these layers do little arithmetic but many passes over memory. Autograd runs
RMSNorm as about fifteen separate operations forward and backward, each a pass over the [tokens, d] activations
with a temporary, and ``silu(a) * b`` as five; nine norms and four activations per step cost about as much as
the mixer (docs/cpu_kernels.md, "The backbone's elementwise layers"). Each is one C pass forward and one backward
here, on torch's OpenMP threads (:mod:`harness.model.compiled`).

The compiled path takes float32 CPU tensors outside autocast, where a C compiler is available; everything else
(CUDA, bf16, float64, no compiler, ``compiled=False``) runs the same maths as torch operations, which the tests
compare against. Both give the same numbers up to rounding: the loops compute in fp32 in the same order of
operations as the torch expressions.
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F

from harness.model.compiled import EXP_NONPOSITIVE, CompiledLibrary, pointer

SOURCE = EXP_NONPOSITIVE + r"""
/* x, y: [N, D]; w: [D]; rstd: [N]. y = (x * rstd) * w with rstd = 1 / sqrt(mean(x^2) + eps). */
void rmsnorm_forward(long N, long D, const float *x, const float *w, float eps, float *y, float *rstd) {
    #pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const float *xr = x + n * D;
        float *yr = y + n * D, ss = 0.0f;
        #pragma omp simd reduction(+:ss)
        for (long i = 0; i < D; i++) ss += xr[i] * xr[i];
        float r = 1.0f / sqrtf(ss / (float)D + eps);
        rstd[n] = r;
        #pragma omp simd
        for (long i = 0; i < D; i++) yr[i] = (xr[i] * r) * w[i];
    }
}

/* dx_j = r dy_j w_j - x_j r^3 / D sum_i dy_i w_i x_i;  dw = sum over rows of dy x r, as P partial sums
   dw_parts [P, D] (rows split into P contiguous parts; the caller adds them). */
void rmsnorm_backward(long N, long D, long P, const float *dy, const float *x, const float *w, const float *rstd,
                      float *dx, float *dw_parts) {
    #pragma omp parallel for schedule(static)
    for (long p = 0; p < P; p++) {
        float *acc = dw_parts + p * D;
        for (long i = 0; i < D; i++) acc[i] = 0.0f;
        for (long n = N * p / P; n < N * (p + 1) / P; n++) {
            const float *g = dy + n * D, *xr = x + n * D;
            float *gx = dx + n * D, r = rstd[n], dot = 0.0f;
            #pragma omp simd reduction(+:dot)
            for (long i = 0; i < D; i++) dot += g[i] * w[i] * xr[i];
            float c = dot * r * r * r / (float)D;
            #pragma omp simd
            for (long i = 0; i < D; i++) {
                gx[i] = r * g[i] * w[i] - c * xr[i];
                acc[i] += g[i] * xr[i] * r;
            }
        }
    }
}

static inline float sigmoid(float a) {
    float e = exp_nonpositive(-fabsf(a));
    return a >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

/* a, b, h: [N, H]; h = silu(a) * b. A NaN in a or b reaches h. */
void silu_mul_forward(long NH, const float *a, const float *b, float *h) {
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < NH; i++) h[i] = a[i] * sigmoid(a[i]) * b[i];
}

/* da = dh b s (1 + a (1 - s)), db = dh silu(a), with s = sigmoid(a); all [N, H]. */
void silu_mul_backward(long NH, const float *a, const float *b, const float *dh, float *da, float *db) {
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < NH; i++) {
        float s = sigmoid(a[i]);
        da[i] = dh[i] * b[i] * (s * (1.0f + a[i] * (1.0f - s)));
        db[i] = dh[i] * (a[i] * s);
    }
}
"""

_l, _p, _f = ctypes.c_long, ctypes.c_void_p, ctypes.c_float
_LIBRARY = CompiledLibrary("backbone_layers", SOURCE, {
    "rmsnorm_forward": [_l, _l, _p, _p, _f, _p, _p],
    "rmsnorm_backward": [_l, _l, _l, _p, _p, _p, _p, _p, _p],
    "silu_mul_forward": [_l, _p, _p, _p],
    "silu_mul_backward": [_l, _p, _p, _p, _p, _p],
}, flags=["-fno-math-errno", "-fno-trapping-math", "-mprefer-vector-width=512"], openmp=True)

#: row parts of the norm's weight gradient: more than threads, so static scheduling stays balanced
_WEIGHT_PARTS = 8


def _usable(compiled: bool | None, *tensors: torch.Tensor) -> bool:
    """Whether to take the C loops; ``compiled=True`` where they cannot run is an error."""
    ok = (all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)
          and not torch.is_autocast_enabled("cpu") and _LIBRARY.get() is not None)
    if compiled and not ok:
        raise ValueError("the compiled backbone layers take float32 CPU tensors outside autocast and a C compiler "
                         f"({_LIBRARY.unavailable_reason() or [t.dtype for t in tensors]})")
    return ok if compiled is None else bool(compiled)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, compiled: bool | None = None) -> torch.Tensor:
    """``(x * rsqrt(mean(x^2, -1) + eps)) * weight``: normalised in fp32, then cast to x's dtype and scaled by
    ``weight`` [x.shape[-1]] (the C loop reads exactly that many weights, so any other shape is an error)."""
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"rms_norm: weight of shape {tuple(weight.shape)} for inputs of shape {tuple(x.shape)}")
    if _usable(compiled, x, weight):
        return _RMSNorm.apply(x, weight, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def silu_mul(a: torch.Tensor, b: torch.Tensor, compiled: bool | None = None) -> torch.Tensor:
    """``silu(a) * b``: SwiGLU's gate applied to its up projection."""
    if a.shape != b.shape:
        raise ValueError(f"silu_mul takes the gate and the up projection of one shape, not {a.shape} and {b.shape}")
    if _usable(compiled, a, b):
        return _SiluMul.apply(a, b)
    return F.silu(a) * b


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        shape, D = x.shape, x.shape[-1]
        x2 = x.reshape(-1, D).contiguous()
        w = weight.contiguous()
        y, rstd = torch.empty_like(x2), x2.new_empty(x2.shape[0])
        _LIBRARY.get().rmsnorm_forward(x2.shape[0], D, pointer(x2), pointer(w), eps, pointer(y), pointer(rstd))
        ctx.save_for_backward(x2, w, rstd)
        return y.view(shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x2, w, rstd = ctx.saved_tensors
        N, D = x2.shape
        dy2 = dy.reshape(N, D).contiguous()
        dx, parts = torch.empty_like(x2), x2.new_empty(_WEIGHT_PARTS, D)
        _LIBRARY.get().rmsnorm_backward(N, D, _WEIGHT_PARTS, pointer(dy2), pointer(x2), pointer(w), pointer(rstd),
                                        pointer(dx), pointer(parts))
        return dx.view(dy.shape), parts.sum(0), None


class _SiluMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        a, b = a.contiguous(), b.contiguous()
        h = torch.empty_like(a)
        _LIBRARY.get().silu_mul_forward(a.numel(), pointer(a), pointer(b), pointer(h))
        ctx.save_for_backward(a, b)
        return h

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dh):
        a, b = ctx.saved_tensors
        dh = dh.contiguous()
        da, db = torch.empty_like(a), torch.empty_like(b)
        _LIBRARY.get().silu_mul_backward(a.numel(), pointer(a), pointer(b), pointer(dh), pointer(da), pointer(db))
        return da, db
