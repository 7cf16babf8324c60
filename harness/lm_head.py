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

:func:`cross_entropy` takes this path when a gradient is wanted and no autocast is active (under autocast the
head's product runs in bf16, which the plain path keeps); otherwise it is ``F.cross_entropy`` on the logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: rows per block: 256 x 4,096 fp32 logits are 4 MiB, which stays in this machine's cache; 128-512 rows measured
#: within 4% of each other, 1,024 13% slower (benchmarks/lm_head.py)
BLOCK_ROWS = 256


def cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """Mean cross-entropy of ``hidden @ weight.T`` ([N, d] x [V, d]) against ``targets`` [N]."""
    wants_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if not wants_grad or torch.is_autocast_enabled(hidden.device.type):
        return F.cross_entropy((hidden @ weight.T).float(), targets, ignore_index=ignore_index)
    return _FusedHeadLoss.apply(hidden, weight, targets, ignore_index)


class _FusedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, ignore_index):
        counted = targets != ignore_index
        count = counted.sum()
        acc = torch.promote_types(hidden.dtype, torch.float32)
        scale = 1.0 / count.clamp(min=1).to(acc)
        d_hidden = torch.empty_like(hidden)
        d_weight = torch.zeros_like(weight)
        total = hidden.new_zeros((), dtype=acc)
        for start in range(0, hidden.shape[0], BLOCK_ROWS):
            rows = slice(start, start + BLOCK_ROWS)
            h, keep = hidden[rows], counted[rows]
            safe = torch.where(keep, targets[rows], 0)
            logits = h @ weight.T
            lse = torch.logsumexp(logits, dim=-1)
            total += ((lse - logits.gather(1, safe[:, None]).squeeze(1)) * keep).sum(dtype=acc)
            grad = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
            grad[torch.arange(grad.shape[0], device=grad.device), safe] -= 1.0
            grad.mul_((keep.to(grad.dtype) * scale.to(grad.dtype))[:, None])
            torch.mm(grad, weight, out=d_hidden[rows])
            d_weight.addmm_(grad.T, h)
        ctx.save_for_backward(d_hidden, d_weight)
        loss = total * scale
        return torch.where(count > 0, loss, torch.full_like(loss, float("nan")))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        d_hidden, d_weight = ctx.saved_tensors
        return d_hidden * grad_loss.to(d_hidden.dtype), d_weight * grad_loss.to(d_weight.dtype), None, None
