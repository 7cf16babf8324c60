"""Fine-tuning a copy of the pretrained backbone with a classification or regression head.

Inputs are ``[eos] a [eos]`` or ``[eos] a [eos] b [eos]``: the leading end-of-text gives the first token a
context (as in pretraining) and the closing one, the default pooling position, has seen the whole input.
Batches are right-padded, which is exact for every mixer because all are causal (recurrent ones too): a pad
only follows the tokens it could disturb. The pretrained model is deep-copied for each run and never changed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from harness.kit import MixerLM, Tokenizer, adamw
from suites.glue.config import GlueConfig
from suites.glue.loading import Example

_SORT_CHUNK = 32  # batches per length-sorted chunk of the shuffled data: little padding, still random batches


@dataclass(frozen=True)
class Encoded:
    ids: list[np.ndarray]  # token ids per example, already truncated
    labels: np.ndarray  # int64 class ids or float32 scores
    truncated: int  # examples that lost tokens

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(x) for x in self.ids])


def _fit(la: int, lb: int, budget: int) -> tuple[int, int]:
    """Lengths after longest-first truncation (as BERT-style pair encoders do) to ``budget`` tokens."""
    while la + lb > budget:
        if la >= lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


def encode(examples: Sequence[Example], tokenizer: Tokenizer, max_length: int, regression: bool) -> Encoded:
    """Token ids of each example, truncated so that with its end-of-text markers it fits ``max_length``."""
    eos = tokenizer.eos_id
    a = tokenizer.encode_batch([e.text_a for e in examples])
    pair = examples[0].text_b is not None
    b = tokenizer.encode_batch([e.text_b or "" for e in examples]) if pair else [[] for _ in examples]
    budget = max_length - (3 if pair else 2)
    ids, truncated = [], 0
    for ta, tb in zip(a, b, strict=True):
        la, lb = _fit(len(ta), len(tb), budget)
        truncated += (la, lb) != (len(ta), len(tb))
        seq = [eos, *ta[:la], eos, *tb[:lb], eos] if pair else [eos, *ta[:la], eos]
        ids.append(np.asarray(seq, dtype=np.int64))
    labels = np.array([e.label for e in examples], dtype=np.float32 if regression else np.int64)
    return Encoded(ids, labels, truncated)


def collate(seqs: Sequence[np.ndarray], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``ids [B, T]`` and ``lengths [B]``."""
    lengths = torch.tensor([len(s) for s in seqs])
    ids = torch.full((len(seqs), int(lengths.max())), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.from_numpy(s)
    return ids, lengths


def train_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch of index batches: shuffled, then sorted by length within chunks of batches, then the batches
    shuffled, so each batch holds similar lengths (little padding) and the order is still random."""
    perm = rng.permutation(len(lengths))
    batches = []
    for start in range(0, len(perm), batch_size * _SORT_CHUNK):
        chunk = perm[start : start + batch_size * _SORT_CHUNK]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


class SequenceClassifier(nn.Module):
    """Backbone + pooled final-norm hidden state + dropout + linear head (one output for regression)."""

    def __init__(self, backbone: MixerLM, num_outputs: int, pooling: str, dropout: float):
        super().__init__()
        self.backbone = backbone
        self.pooling = pooling
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(backbone.config.d_model, num_outputs)
        nn.init.normal_(self.head.weight, 0.0, backbone.config.init_std)
        nn.init.zeros_(self.head.bias)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h = self.backbone.norm(self.backbone.hidden_states(ids)[-1])  # [B, T, D]
        if self.pooling == "last":
            pooled = h[torch.arange(len(ids), device=h.device), lengths - 1]
        else:
            mask = (torch.arange(ids.shape[1], device=h.device)[None, :] < lengths[:, None]).to(h.dtype)
            pooled = (h * mask[..., None]).sum(1) / lengths[:, None].to(h.dtype)
        return self.head(self.dropout(pooled))


def _loss(out: torch.Tensor, labels: torch.Tensor, regression: bool) -> torch.Tensor:
    return F.mse_loss(out.squeeze(-1).float(), labels) if regression else F.cross_entropy(out.float(), labels)


def fine_tune(
    model: MixerLM,
    data: Encoded,
    num_outputs: int,
    lr: float,
    seed: int,
    cfg: GlueConfig,
    pad_id: int,
    desc: str = "fine-tune",
    progress: bool = False,
) -> SequenceClassifier:
    """Train a copy of ``model`` with a new head on ``data``: AdamW (decay on matrices only), linear warm-up and
    decay to zero, gradient clipping. Deterministic given ``seed``; the global RNG state is left as it was."""
    device = next(model.parameters()).device
    regression = num_outputs == 1
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        clf = SequenceClassifier(copy.deepcopy(model), num_outputs, cfg.pooling, cfg.dropout).to(device).train()
        rng = np.random.default_rng(seed)
        lengths = data.lengths
        batches = [b for _ in range(cfg.epochs) for b in train_batches(lengths, cfg.batch_size, rng)]
        params = [p for p in clf.parameters() if p.requires_grad]
        opt = adamw(
            [
                {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
                {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
            ],
            lr=lr,
        )
        total = len(batches)
        warmup = math.ceil(cfg.warmup_frac * total)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / max(1, total - warmup))
        )
        labels = torch.from_numpy(data.labels)
        for batch in tqdm(batches, desc=desc, unit="step", disable=not progress, leave=False):
            ids, lens = collate([data.ids[i] for i in batch], pad_id)
            loss = _loss(clf(ids.to(device), lens.to(device)), labels[batch].to(device), regression)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            sched.step()
    return clf.eval()


@torch.no_grad()
def predict(clf: SequenceClassifier, data: Encoded, batch_size: int, pad_id: int) -> np.ndarray:
    """Class ids (argmax) or regression scores, in ``data`` order; batches are sorted by length."""
    device = next(clf.parameters()).device
    clf.eval()
    order = np.argsort(data.lengths, kind="stable")
    outputs = []
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        ids, lens = collate([data.ids[i] for i in idx], pad_id)
        outputs.append(clf(ids.to(device), lens.to(device)).float().cpu())
    out = torch.cat(outputs)
    pred = out.squeeze(-1).numpy() if out.shape[1] == 1 else out.argmax(-1).numpy()
    result = np.empty_like(pred)
    result[order] = pred
    return result
