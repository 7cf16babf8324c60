"""Corpus-statistics basis functions of "Gradient Leading Terms" (docs/PAPERS.md §B), in the Addendum's conventions.

The input is a batch of sequences of *vocabulary indices* ``ids [N, T+1]`` over a retained vocabulary of k tokens,
with -1 marking a token outside it. Inputs are x = ids[:, :-1], targets y = ids[:, 1:]; X and Y are their one-hot
matrices over the k tokens (an out-of-vocabulary token is a zero row), R = Y - c is the centred target, A0 is
uniform causal attention (A0[t, m] = 1/(t+1) for m <= t, the current token included, every position counted), and
every statistic is divided by N*T (all positions):

* B     = (1/NT) sum_n X_n^T R_n                 rows: current token, columns: next token
* Sigma = B^T B                                  next x next
* Phi   = (1/NT) sum_n R_n^T A0 X_n              rows: next token, columns: prefix token
* Q     = (1/NT) sum_n X_n^T Q_n X_n             rows: query token, columns: key token (the orientation of W),
          with M_n = R_n Sigma Phi X_n^T and Q_n[t, j] = (M_n[t, j] - mean_{m<=t} M_n[t, m]) / (t+1) for j <= t
* Delta[m] = sum of the m-th lower diagonal of (1/NT) sum_n Q_n   (the relative-position term)

Two conventions for a restricted (top-k) vocabulary (docs/faithfulness.md):

* ``paper`` (``full_vocab=|V|``, the default of the suite): c = 1/|V| of the *full* vocabulary, and a position whose
  target is outside the k tokens keeps a zero one-hot row (R = -1/|V| there), still counted in N*T; this is what the
  released ``pythia.py`` computes (its ``r = y_onehot - 1/d_vocab`` over the top-k columns). Rows of B and columns
  of Phi then sum to P(in vocabulary) - k/|V| rather than 0.
* ``top-k`` (``full_vocab=None``): c = 1/k and positions whose target is outside the vocabulary are dropped (R = 0
  there). It matches none of the released scripts; it is the exact zero-init gradient of the one-hot toy model
  whose out-of-vocabulary inputs are zero vectors and whose loss skips out-of-vocabulary targets, so rows of B and
  columns of Phi sum to zero on a top-k vocabulary.

With no out-of-vocabulary token and |V| = k both are the paper's definition verbatim (``tiny-self-attn-*.py``). The
released scripts' quirks (Q without 1/NT, a transposed B and Q in the Pythia script, its padding with token 0) are
not copied. Everything is computed in float64 with counts and gathers, never a dense [N, T, k] one-hot of targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Basis:
    """The basis functions of one batch of sequences (float64 tensors)."""

    B: torch.Tensor  # [k, k] current -> next
    Sigma: torch.Tensor  # [k, k] next x next
    Phi: torch.Tensor  # [k, k] next x prefix
    Q: torch.Tensor  # [k, k] query x key
    Delta: torch.Tensor  # [T] relative offset m = query position - key position
    n_sequences: int
    length: int

    @property
    def value_term(self) -> torch.Tensor:
        """Phi^T B^T: the leading term of the value matrix V (prefix token x current-token space)."""
        return self.Phi.T @ self.B.T


def basis_functions(ids: torch.Tensor, k: int, chunk: int = 16, full_vocab: int | None = None) -> Basis:
    """B, Sigma, Phi, Q and Delta of ``ids`` ([N, T+1] vocabulary indices, -1 = outside the k retained tokens).

    ``full_vocab``: the size of the full vocabulary for the paper's convention (centre with 1/|V|, keep positions
    whose target is outside the k tokens); None for the top-k convention (centre with 1/k, drop them)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dim() != 2 or ids.shape[1] < 2:
        raise ValueError(f"ids must be [N, T+1] with T >= 1, got shape {tuple(ids.shape)}")
    if int(ids.max()) >= k or int(ids.min()) < -1:
        raise ValueError(f"vocabulary indices must be in [-1, {k}), got [{int(ids.min())}, {int(ids.max())}]")
    if full_vocab is not None and full_vocab < k:
        raise ValueError(f"full_vocab ({full_vocab}) must be at least the retained vocabulary k = {k}")
    x, y = ids[:, :-1], ids[:, 1:]
    N, T = x.shape
    nt = float(N * T)
    vx, vy = x >= 0, y >= 0
    keep = vy if full_vocab is None else torch.ones_like(vy)  # positions whose centred target counts
    c = 1.0 / (k if full_vocab is None else full_vocab)  # the centring constant of every target one-hot
    f64 = torch.float64

    both = vx & vy
    B = torch.zeros(k * k, dtype=f64).index_add_(0, x[both] * k + y[both], torch.ones(int(both.sum()), dtype=f64))
    rows_kept = torch.zeros(k, dtype=f64).index_add_(0, x[vx & keep], torch.ones(int((vx & keep).sum()), dtype=f64))
    B = (B.view(k, k) - rows_kept[:, None] * c) / nt

    inv_pos = 1.0 / torch.arange(1, T + 1, dtype=f64)
    Phi = torch.zeros(k, k, dtype=f64)
    for s in range(0, N, chunk):
        xc, yc, vxc, vyc, kc = (a[s : s + chunk] for a in (x, y, vx, vy, keep))
        prefix = _one_hot(xc, vxc, k).cumsum(1) * inv_pos[None, :, None]  # A0 X: [c, T, k]
        Phi.index_add_(0, yc[vyc], prefix[vyc])  # the one-hot part: positions with an in-vocabulary target
        Phi -= prefix[kc].sum(0)[None, :] * c  # the centring: every kept position
    Phi /= nt

    Sigma = B.T @ B
    G = Sigma @ Phi  # next x prefix: M[t, j] = R_t . G[:, x_j] = G[y_t, x_j] [y_t in vocab] - c sum_a G[a, x_j]
    col_centre = G.sum(0) * c
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    Q = torch.zeros(k * k, dtype=f64)
    Q_positions = torch.zeros(T, T, dtype=f64)
    for s in range(0, N, chunk):
        xc, yc, vxc, vyc, kc = (a[s : s + chunk] for a in (x, y, vx, vy, keep))
        xs, ys = xc.clamp(min=0), yc.clamp(min=0)
        M = G[ys[:, :, None], xs[:, None, :]] * vyc[:, :, None] - col_centre[xs][:, None, :]  # [c, T(query), T(key)]
        M = M * (kc[:, :, None] & vxc[:, None, :])
        M = M * causal
        row_mean = M.sum(-1) * inv_pos  # mean over the t+1 keys m <= t
        Qn = (M - row_mean[..., None]) * causal * inv_pos[None, :, None]
        Q_positions += Qn.sum(0)
        pair = vxc[:, :, None] & vxc[:, None, :] & causal
        flat = (xs[:, :, None] * k + xs[:, None, :])[pair]
        Q.index_add_(0, flat, Qn[pair])
    Q = Q.view(k, k) / nt
    Q_positions /= nt
    Delta = torch.stack([Q_positions.diagonal(offset=-m).sum() for m in range(T)])
    return Basis(B, Sigma, Phi, Q, Delta, N, T)


def _one_hot(idx: torch.Tensor, valid: torch.Tensor, k: int) -> torch.Tensor:
    out = torch.zeros(*idx.shape, k, dtype=torch.float64)
    out.scatter_(-1, idx.clamp(min=0)[..., None], valid[..., None].to(torch.float64))
    return out


def frobenius_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """tr(A^T B) / (|A|_F |B|_F); NaN when either matrix is zero (e.g. a weight still at its zero init)."""
    a, b = a.double(), b.double()
    na, nb = a.norm(), b.norm()
    if na == 0 or nb == 0:
        return float("nan")
    return float((a * b).sum() / (na * nb))


def neighbours(matrix: torch.Tensor, row: int, k: int, exclude: int | None = None) -> list[tuple[int, float]]:
    """The k columns of ``matrix[row]`` with the largest entries (column, value), largest first; ``exclude`` leaves
    one column out (a token's own column of Sigma). The paper's qualitative check reads these per basis function:
    B (what follows the token), Sigma (tokens interchangeable with it), Phi (what precedes it in the prefix)."""
    values = matrix[row].clone().double()
    if exclude is not None:
        values[exclude] = -math.inf
    top = values.topk(min(k, len(values) - (exclude is not None)))
    return [(int(i), float(v)) for v, i in zip(top.values, top.indices)]
