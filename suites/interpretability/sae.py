"""The SAE baseline: a top-k sparse autoencoder on the residual stream (Gao et al. 2024 style), sized for a CPU.

z = TopK(ReLU(W_enc (x - b_dec) + b_enc)), x_hat = W_dec z + b_dec, trained with Adam on the reconstruction error
of inputs scaled to unit mean squared norm per dimension; decoder rows are kept at unit norm (so a feature's
activation is its coefficient along a unit direction) and b_dec starts at the data mean. Top-k fixes the sparsity
(L0 = k) instead of tuning an L1 penalty. Features are scored like any unit: their activation on a token is z.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


class TopKSAE(nn.Module):
    def __init__(self, d: int, features: int, k: int, scale: float, mean: torch.Tensor, generator: torch.Generator):
        super().__init__()
        self.k = k
        self.scale = scale  # inputs are multiplied by this before encoding
        dec = torch.randn(features, d, generator=generator)
        dec = dec / dec.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(dec)
        self.W_enc = nn.Parameter(dec.T.clone())
        self.b_enc = nn.Parameter(torch.zeros(features))
        self.b_dec = nn.Parameter(mean * scale)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        pre = torch.relu((x * self.scale - self.b_dec) @ self.W_enc + self.b_enc)
        vals, idx = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter_(-1, idx, vals)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.W_dec + self.b_dec

    @torch.no_grad()
    def fraction_of_variance_unexplained(self, x: torch.Tensor) -> float:
        xs = x * self.scale
        err = (self.decode(self.encode(x)) - xs).pow(2).sum()
        return float(err / (xs - xs.mean(0)).pow(2).sum())


@dataclass(frozen=True)
class SAEStats:
    fvu_train: float
    fvu_heldout: float
    steps: int


def train_sae(x: torch.Tensor, features: int, k: int, steps: int, seed: int, batch: int = 1024,
              lr: float = 1e-3) -> TopKSAE:
    """Train on the rows of ``x [N, d]`` (float32) for ``steps`` Adam steps of ``batch`` random rows."""
    gen = torch.Generator().manual_seed(seed)
    x = x.float()
    scale = float(x.shape[1] / x.pow(2).sum(1).mean()) ** 0.5
    sae = TopKSAE(x.shape[1], features, k, scale, x.mean(0), gen)
    opt = torch.optim.Adam(sae.parameters(), lr=lr)
    for _ in range(steps):
        rows = x[torch.randint(0, len(x), (min(batch, len(x)),), generator=gen)]
        loss = (sae.decode(sae.encode(rows)) - rows * sae.scale).pow(2).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            sae.W_dec /= sae.W_dec.norm(dim=1, keepdim=True).clamp(min=1e-8)
    return sae.eval()
