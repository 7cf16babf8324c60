"""The tied vocabulary head and its training loss, fused: mean next-token cross-entropy from the final hidden
states without the [B * T, V] logits ever existing at once (docs/cpu_kernels.md, "The vocabulary head").

In training the head is the largest matrix product of a small model (V = 4,096 against d = 128 at preset quick),
and the loss around it is pure memory traffic: autograd keeps the logits, their log-softmax, a zero-filled
gradient and the log-softmax backward, four passes over 67 MB per step. Here the rows go through in blocks that
stay in cache: per block, the logits, their log-sum-exp and loss, then in place the gradient of the mean loss
with respect to them (softmax minus the one-hot target, over the count of counted targets), and at once its
products with the weights and the hidden states. The forward thus computes the gradients (the same three
matrix products autograd would, no recomputation) and the backward only scales them by the incoming gradient.
Targets equal to ``ignore_index`` count neither in the loss nor in its mean, as in ``F.cross_entropy``; when
none counts the loss is NaN, as there.

Between the products, the softmax and its loss are one compiled C loop per row (fp32 CPU, where a C compiler
is available; :mod:`harness.model.compiled`): a row of 4,096 logits is 16 KB, so its max, its exponentials and their
sum, and the scaling into the gradient are three passes over the L1 cache, where torch's ``logsumexp`` and the
in-place ops around it are seven passes over the block, each with its own temporary. A row with a non-finite
logit gets a NaN loss and a NaN gradient, so a diverged model stops training instead of training on garbage.
Elsewhere (float64, no compiler) the same block step runs as torch operations; ``compiled=False`` asks for it.

:func:`cross_entropy` takes this path when a gradient is wanted and no autocast is active (under autocast the
head's product runs in bf16, which the plain path keeps); otherwise it is ``F.cross_entropy`` on the logits.
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F

from harness.model.compiled import EXP_NONPOSITIVE, CompiledLibrary, pointer

#: rows per block: 128 x 4,096 fp32 logits are 2 MiB, which stay in this machine's cache. With the compiled
#: softmax, 128 rows ran 4% faster than 256 in two runs, 512 4-8% slower, 2,048 23% slower (benchmarks/lm_head.py)
BLOCK_ROWS = 128

SOURCE = EXP_NONPOSITIVE + r"""
/* logits [rows, V], overwritten with the gradient of sum_r weight[r] * loss_r with respect to them:
   weight[r] (softmax(row) - onehot(target[r])); loss[r] = logsumexp(row) - row[target[r]]. Rows with weight 0
   (targets that do not count) get a zero gradient and loss 0. A row with a NaN or infinite logit gets NaN
   in its loss and all its gradient. */
void softmax_xent(long rows, long V, float *logits, const int64_t *target, const float *weight, float *loss) {
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        float *x = logits + r * V;
        float wr = weight[r];
        if (wr == 0.0f) { memset(x, 0, V * sizeof *x); loss[r] = 0.0f; continue; }
        float m = -INFINITY, finite = 0.0f;
        #pragma omp simd reduction(max:m) reduction(+:finite)
        for (long i = 0; i < V; i++) { m = x[i] > m ? x[i] : m; finite += x[i] * 0.0f; }
        if (finite != 0.0f) {  /* NaN: some logit is NaN or infinite */
            for (long i = 0; i < V; i++) x[i] = NAN;
            loss[r] = NAN;
            continue;
        }
        float picked = x[target[r]], s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (long i = 0; i < V; i++) { float e = exp_nonpositive(x[i] - m); x[i] = e; s += e; }
        loss[r] = (m + logf(s)) - picked;
        float c = wr / s;
        #pragma omp simd
        for (long i = 0; i < V; i++) x[i] *= c;
        x[target[r]] -= wr;
    }
}
"""

_LIBRARY = CompiledLibrary("lm_head", SOURCE, {"softmax_xent": [ctypes.c_long, ctypes.c_long] + [ctypes.c_void_p] * 4},
                           flags=["-fno-math-errno", "-fno-trapping-math", "-mprefer-vector-width=512"], openmp=True)


def cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ignore_index: int,
                  compiled: bool | None = None) -> torch.Tensor:
    """Mean cross-entropy of ``hidden @ weight.T`` ([N, d] x [V, d]) against ``targets`` [N]. ``compiled``: the
    C softmax where it can run (None, the default), required (True: an error where it cannot), or never."""
    wants_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if not wants_grad or torch.is_autocast_enabled(hidden.device.type):
        return F.cross_entropy((hidden @ weight.T).float(), targets, ignore_index=ignore_index)
    usable = hidden.device.type == "cpu" and hidden.dtype == weight.dtype == torch.float32 and _LIBRARY.get() is not None
    if compiled and not usable:
        raise ValueError(f"the compiled head loss takes float32 CPU tensors and a C compiler "
                         f"({_LIBRARY.unavailable_reason() or hidden.dtype})")
    return _FusedHeadLoss.apply(hidden, weight, targets, ignore_index, usable if compiled is None else compiled)


def _softmax_xent_torch(logits: torch.Tensor, safe: torch.Tensor, row_weight: torch.Tensor) -> torch.Tensor:
    """What the C loop does, as torch operations: ``logits`` becomes the weighted gradient; returns the row losses."""
    lse = torch.logsumexp(logits, dim=-1)
    loss = lse - logits.gather(1, safe[:, None]).squeeze(1)
    grad = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
    grad[torch.arange(grad.shape[0], device=grad.device), safe] -= 1.0
    grad.mul_(row_weight[:, None])
    return torch.where(row_weight != 0, loss, torch.zeros_like(loss))


def _softmax_xent_compiled(logits: torch.Tensor, safe: torch.Tensor, row_weight: torch.Tensor) -> torch.Tensor:
    assert logits.is_contiguous() and safe.dtype == torch.int64
    safe, row_weight = safe.contiguous(), row_weight.contiguous()
    loss = torch.empty_like(row_weight)
    _LIBRARY.get().softmax_xent(logits.shape[0], logits.shape[1], pointer(logits), safe.data_ptr(),
                                pointer(row_weight), pointer(loss))
    return loss


class _FusedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, ignore_index, compiled):
        counted = targets != ignore_index
        safe = torch.where(counted, targets, 0)
        if safe.numel() and (int(safe.min()) < 0 or int(safe.max()) >= weight.shape[0]):
            raise IndexError(f"a target is outside the vocabulary of {weight.shape[0]} (and not the ignore index "
                             f"{ignore_index}): min {int(targets.min())}, max {int(targets.max())}")
        count = counted.sum()
        acc = torch.promote_types(hidden.dtype, torch.float32)
        scale = 1.0 / count.clamp(min=1).to(acc)
        row_weight = counted.to(hidden.dtype) * scale.to(hidden.dtype)
        softmax_xent = _softmax_xent_compiled if compiled else _softmax_xent_torch
        d_hidden = torch.empty_like(hidden)
        d_weight = torch.zeros_like(weight)
        total = hidden.new_zeros((), dtype=acc)
        for start in range(0, hidden.shape[0], BLOCK_ROWS):
            rows = slice(start, start + BLOCK_ROWS)
            h = hidden[rows]
            logits = h @ weight.T
            total += softmax_xent(logits, safe[rows], row_weight[rows]).sum(dtype=acc)
            torch.mm(logits, weight, out=d_hidden[rows])  # logits now hold their gradient
            d_weight.addmm_(logits.T, h)
        ctx.save_for_backward(d_hidden, d_weight)
        loss = total * scale
        return torch.where(count > 0, loss, torch.full_like(loss, float("nan")))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        d_hidden, d_weight = ctx.saved_tensors
        return d_hidden * grad_loss.to(d_hidden.dtype), d_weight * grad_loss.to(d_weight.dtype), None, None, None
