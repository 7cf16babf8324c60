"""The toy setting of "Gradient Leading Terms" (docs/PAPERS.md §B.1, §B.4), reproduced on the embedded corpus.

A one-hot, attention-only, single-head, single-layer causal model with a residual stream and no embedding: every
matrix is |V| x |V| and
    F = (X + softmax(Mask(X W X^T + DM(P))) X V) W_O,
with P a T5-style relative-position vector (P[m] on the m-th lower diagonal). It starts at zero and is trained by
plain full-batch gradient descent (``torch.optim.SGD``, no momentum) on the mean next-token cross-entropy over
the N*T positions, while the Frobenius cosines of W_O, V, W and P with their leading terms B, Phi^T B^T, Q and
Delta (:mod:`suites.interpretability.basis`, computed from the same batch: full-batch GD is what the theorem is
about) are logged after every step, with the scale of each matrix relative to its predicted coefficient (s eta,
C(s,2) eta^2 and 3C(s,4)+2C(s,3) eta^4 after s steps).

Data: the paper's tokens (lower-cased words, punctuation marks and digits) of the training documents; the top
``vocab`` tokens form the vocabulary; each document is cut into consecutive chunks of T+1 tokens and ``samples``
chunks are drawn (seeded) from those with at most ``max_oov`` out-of-vocabulary tokens. The paper's
``tiny-self-attn-natural.py`` keeps only stories with none, which TinyStories allows; the embedded corpus does not
(its top 3000 words cover 88% of the text and 4 of its 25,801 chunks are fully covered). Two conventions for the
words outside the vocabulary (docs/faithfulness.md):

* ``paper`` (default): they all become one extra ``<unk>`` token, so the model has |V| = vocab + 1 and every
  position is an ordinary one-hot input and target, as in ``tiny-self-attn-bpe.py`` (a BPE vocabulary with its own
  ``<unk>``); the basis functions are then the paper's definition verbatim (centred by 1/|V|, all N*T positions).
* ``top-k``: an outside word is a zero input and an ignored target; the zero-init gradients are then the basis
  functions in :mod:`.basis`'s top-k convention. Both are exactly the theory's model (tested against autograd).

Cost: one step is ~3 dense |V|^3 products (V W_O and its two gradients) plus N T^2 |V| for the attention
read-out, so |V| = 3000, T = 200 costs a few seconds a step on one CPU core; the number of samples and steps is
what the CPU budget sets (see InterpConfig). The model has one layer (the released script's default).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import MixbenchError
from suites.interpretability.basis import Basis, basis_functions, frobenius_cosine

_WORD = re.compile(r"[^\W\d_]+|\S")  # a run of letters, or any other single non-space character


def word_tokens(text: str) -> list[str]:
    """The paper's tokenizer: lower-cased letter runs; every other non-space character is a token."""
    return _WORD.findall(text.lower())


#: the token every word outside the vocabulary becomes in the paper's convention (not a possible word token)
UNK = "<unk>"


@dataclass(frozen=True)
class ToyData:
    ids: torch.Tensor  # [N, T+1] vocabulary indices (-1 = outside, top-k convention only)
    vocab: list[str]  # ends with UNK in the paper's convention
    chunks_available: int  # chunks within the out-of-vocabulary limit, of which N were drawn
    chunks_total: int
    oov_fraction: float  # of the drawn tokens: words outside the top ``vocab_size`` (UNK or -1)


def toy_data(texts: Iterable[str], vocab_size: int, length: int, samples: int, seed: int, max_oov: float,
             unk: bool = True) -> ToyData:
    """``unk``: the paper's convention (outside words -> one UNK token); False: the top-k one (-1)."""
    docs = [word_tokens(t) for t in texts]
    counts = Counter(tok for doc in docs for tok in doc)
    vocab = [tok for tok, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:vocab_size]]
    index = {tok: i for i, tok in enumerate(vocab)}
    outside = len(vocab) if unk else -1
    span = length + 1
    chunks, total = [], 0
    for doc in docs:
        for s in range(0, len(doc) - span + 1, span):
            total += 1
            ids = [index.get(tok, outside) for tok in doc[s : s + span]]
            if ids.count(outside) <= max_oov * span:
                chunks.append(ids)
    if len(chunks) < samples:
        raise MixbenchError(
            f"toy: only {len(chunks)} chunks of {span} tokens have at most {max_oov:.0%} words outside the top "
            f"{vocab_size}; lower toy_samples or toy_len, or raise toy_vocab or toy_max_oov."
        )
    pick = np.sort(np.random.default_rng(seed).choice(len(chunks), size=samples, replace=False))
    ids = torch.tensor([chunks[i] for i in pick], dtype=torch.long)
    oov = float((ids == outside).float().mean())
    return ToyData(ids, vocab + [UNK] if unk else vocab, len(chunks), total, oov)


class OneHotAttention(nn.Module):
    """The paper's model with one layer, zero-initialised; inputs are vocabulary indices (-1 = zero input)."""

    def __init__(self, vocab_size: int, length: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        k = vocab_size
        self.W = nn.Parameter(torch.zeros(k, k, dtype=dtype))
        self.V = nn.Parameter(torch.zeros(k, k, dtype=dtype))
        self.P = nn.Parameter(torch.zeros(length, dtype=dtype))
        self.W_O = nn.Parameter(torch.zeros(k, k, dtype=dtype))
        offset = torch.arange(length)[:, None] - torch.arange(length)[None, :]  # query - key
        self.register_buffer("offset", offset, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [N, T]`` -> logits ``[N, T, k]``. One-hot products are gathers: X W X^T is W[x_t, x_j] and
        (A X V) W_O is A (V W_O)[x], so no [N, T, k] one-hot is ever built."""
        T = x.shape[1]
        valid = (x >= 0).to(self.W.dtype)
        xs = x.clamp(min=0)
        offset = self.offset[:T, :T]
        scores = self.W[xs[:, :, None], xs[:, None, :]] * valid[:, :, None] * valid[:, None, :]
        scores = (scores + self.P[offset.clamp(min=0)]).masked_fill(offset < 0, float("-inf"))
        attn = scores.softmax(-1)
        read = (self.V @ self.W_O)[xs] * valid[..., None]
        return self.W_O[xs] * valid[..., None] + attn @ read

    def loss(self, ids: torch.Tensor) -> torch.Tensor:
        """Cross-entropy summed over in-vocabulary targets, divided by all N*T positions (the mean when every
        target is in the vocabulary), which makes the zero-init gradients exactly the basis functions."""
        x, y = ids[:, :-1], ids[:, 1:]
        logits = self(x)
        nll = F.cross_entropy(logits.flatten(0, 1), y.flatten().clamp(min=0), reduction="none")
        return (nll * (y.flatten() >= 0)).sum() / y.numel()


def leading_coefficients(step: int, lr: float) -> dict[str, float]:
    """Predicted multiples of B, Phi^T B^T, Q and Delta after ``step`` steps from zero (Theorem 4.1)."""
    c4 = 3 * math.comb(step, 4) + 2 * math.comb(step, 3)
    return {"W_O": step * lr, "V": math.comb(step, 2) * lr**2, "W": c4 * lr**4, "P": c4 * lr**4}


@dataclass
class ToyRun:
    lr: float
    steps: list[dict[str, float]] = field(default_factory=list)  # per step: loss, cos_*, scale_*

    def min_cos(self, name: str, upto: int | None = None) -> float:
        vals = [s[f"cos_{name}"] for s in self.steps[:upto] if not math.isnan(s[f"cos_{name}"])]
        return min(vals) if vals else float("nan")


def train_toy(ids: torch.Tensor, vocab_size: int, lr: float, steps: int, basis: Basis | None = None,
              dtype: torch.dtype = torch.float32, progress=None) -> ToyRun:
    """Full-batch SGD from zero for ``steps`` steps, logging cosines and scales against ``basis`` of ``ids``."""
    basis = basis or basis_functions(ids, vocab_size)
    terms = {"W_O": basis.B, "V": basis.value_term, "W": basis.Q, "P": basis.Delta}
    model = OneHotAttention(vocab_size, ids.shape[1] - 1, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    run = ToyRun(lr)
    for s in range(1, steps + 1):
        opt.zero_grad(set_to_none=True)
        loss = model.loss(ids)
        loss.backward()
        opt.step()
        row = {"step": float(s), "loss": float(loss.detach())}  # the loss before this step's update
        coef = leading_coefficients(s, lr)
        for name, term in terms.items():
            w = getattr(model, name).detach().double()
            row[f"cos_{name}"] = frobenius_cosine(w, term)
            denom = coef[name] * float((term * term).sum())
            row[f"scale_{name}"] = float((w * term).sum()) / denom if denom > 0 else float("nan")
        run.steps.append(row)
        if progress is not None:
            progress(s)
    return run


def plot_runs(runs: list[ToyRun], path) -> Path:
    """Cosine with the leading term per step (one panel per learning rate) and the loss: the run's curve."""
    from harness.kit import figure, save

    fig, axes = figure(4.2 * (len(runs) + 1), 3.6, cols=len(runs) + 1)
    labels = {"W_O": r"cos($W_O$, $\bar B$)", "V": r"cos($V$, $\bar\Phi^T\bar B^T$)", "W": r"cos($W$, $\bar Q$)",
              "P": r"cos($P$, $\Delta$)"}
    for ax, run in zip(axes[0], runs):
        for name, label in labels.items():
            pts = [(r["step"], r[f"cos_{name}"]) for r in run.steps if not math.isnan(r[f"cos_{name}"])]
            if pts:
                ax.plot(*zip(*pts), "-o", ms=3, label=label)
        ax.set_title(f"leading terms, lr {run.lr:g}")
        ax.set_xlabel("full-batch SGD step")
        ax.set_ylabel("Frobenius cosine")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    ax = axes[0][-1]
    for run in runs:
        ax.plot([r["step"] for r in run.steps], [r["loss"] for r in run.steps], "-", label=f"lr {run.lr:g}")
    ax.set_title("training loss")
    ax.set_xlabel("step")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, path)
