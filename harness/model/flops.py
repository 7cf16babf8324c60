"""FLOPs per token of a whole model and of its training, from each mixer's own count (docs/flops.md).

Per token of a training sequence of ``context`` tokens: every block's mixer (:meth:`harness.mixer.Mixer.flops_per_token`:
its projections and its sequence kernel), every block's SwiGLU FFN (gate, up and down: ``6 d ffn_dim``) and the
tied vocabulary head (``2 V d``); backward twice the forward. The embedding is a lookup (no FLOPs); norms,
activations, residual additions and the loss's softmax are elementwise and not counted. Training records
``train_flops`` = tokens x (forward + backward) per token in every checkpoint (``estimate_train_flops``).
"""

from __future__ import annotations

import torch

from harness.config import ModelSpec
from harness.mixer import FlopCount
from harness.model.backbone import MixerLM


def model_flops_per_token(model: MixerLM, context: int | None = None) -> FlopCount:
    """FLOPs per token of ``model`` at ``context`` (default: the backbone's), averaged over a sequence's positions."""
    cfg = model.config
    context = cfg.context if context is None else context
    d = cfg.d_model
    total = FlopCount.training(2.0 * cfg.vocab_size * d)  # the tied head
    ffn = FlopCount.training(6.0 * d * cfg.ffn_dim)
    for mixer in model.mixers:
        total = total + ffn + mixer.flops_per_token(context)
    return total


def train_flops(model: MixerLM, context: int, tokens: int) -> float:
    """Training FLOPs of ``tokens`` tokens in sequences of ``context``: forward + backward per token, times tokens."""
    return tokens * model_flops_per_token(model, context).total


def spec_flops_per_token(spec: ModelSpec) -> FlopCount:
    """:func:`model_flops_per_token` of the model ``spec`` defines at its own context, built on the meta device
    (no memory, no weights): what the scaling suite needs of a ladder's points before any is trained."""
    with torch.device("meta"):
        model = MixerLM(spec)
    return model_flops_per_token(model, spec.backbone.context)
