"""The paper's Pythia protocol (docs/PAPERS.md §B.4): a model with embeddings compared with the basis functions in
token space, from single-token forwards.

Each retained token is fed alone (a length-1 sequence). Per layer l this gives, as n x d matrices over the tokens:
the residual stream after the block (``resid``: E_post), and the residual before the block plus the mixer's output
(``mixer``: the paper's no-MLP variant, E_attn), both compared with the value leading term Phi^T B^T; and a token x
token key-query map (``kq``) compared with Q. The key-query map is what the mixer's public parts give:

* attention: E_in (mean over heads of W_Q^h W_K^h^T) E_in^T with E_in the mixer's (normalised) input, RoPE
  ignored as in the paper (read from the attention mixer's q/k projections, the weights the paper compares);
* ProtoT (gates recorded): rho pi^T, read gate of the query token against write gate of the key token, i.e. how
  strongly one token reads what another writes, before decay and mass normalisation;
* other mixers: none (their key/query analogues are inside third-party kernels), stated in the result.

Two model-level maps (the same for every mixer) complete the set of basis functions:

* ``bigram``: the next-token logits of the single-token forward restricted to the retained tokens (n x n), compared
  with the bigram map B (rows: current token) -- what the output map W_O learns first in the toy model;
* ``embedding``: the tied (input and output) embedding rows of the retained tokens (n x d), compared with the
  interchangeability Sigma = B^T B through the theory matrix B^T (rows: next tokens described by what precedes
  them; the covariance of its normalised rows is Sigma's normalised, centred counterpart): tokens that can follow
  the same tokens should get similar output embeddings.

Comparison: the theory matrix's rows are scaled to unit L2 norm (zero rows stay zero); for both sides the n x n
covariance of rows (rows centred, Gram / (columns - 1)) is Frobenius-normalised, and the score is their Frobenius
cosine. Note a ProtoT layer's output at the first position is exactly zero (it reads only the strict past), so
its ``mixer`` map equals the residual before the block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.recording import Recorder


def covariance(m: torch.Tensor) -> torch.Tensor:
    """Row covariance of ``m [n, c]``: (rows centred) Gram / (c - 1), Frobenius-normalised."""
    m = m.double()
    c = m - m.mean(1, keepdim=True)
    cov = c @ c.T / max(m.shape[1] - 1, 1)
    norm = cov.norm()
    return cov / norm if norm > 0 else cov


def row_normalise(m: torch.Tensor) -> torch.Tensor:
    norms = m.double().norm(dim=1, keepdim=True)
    return torch.where(norms > 0, m.double() / norms.clamp(min=1e-300), torch.zeros_like(m, dtype=torch.float64))


def protocol_cosine(actual: torch.Tensor, theory_cov: torch.Tensor) -> float:
    """Frobenius cosine of the normalised covariances (``theory_cov`` from :func:`theory_covariance`)."""
    a = covariance(actual)
    return float((a * theory_cov).sum() / (a.norm() * theory_cov.norm()).clamp(min=1e-300))


def theory_covariance(theory: torch.Tensor) -> torch.Tensor:
    return covariance(row_normalise(theory))


@torch.no_grad()
def token_maps(model, token_ids: torch.Tensor) -> tuple[list[dict[str, torch.Tensor]], dict[str, torch.Tensor], str]:
    """Per layer {"resid", "mixer"[, "kq"]} for the tokens ``token_ids [n]``, the model-level {"bigram",
    "embedding"} maps, and why "kq" is absent ("" if not)."""
    model.eval()
    ids = token_ids.long()[:, None]
    n_layers = len(model.blocks)
    inputs, outputs = [None] * n_layers, [None] * n_layers
    hooks = []
    for i, block in enumerate(model.blocks):
        hooks.append(block.mixer.register_forward_pre_hook(lambda m, a, i=i: inputs.__setitem__(i, a[0])))
        hooks.append(block.mixer.register_forward_hook(lambda m, a, out, i=i: outputs.__setitem__(i, out[0])))
    try:
        with Recorder({"write_gate", "read_gate"}) as rec:
            hidden = model.hidden_states(ids)
    finally:
        for h in hooks:
            h.remove()
    logits = model.norm(hidden[-1][:, 0]) @ model.embed.weight.T  # the LM head of the single-token forward
    maps = []
    for i, block in enumerate(model.blocks):
        layer = {"resid": hidden[i + 1][:, 0], "mixer": (hidden[i] + outputs[i])[:, 0]}
        kq = _key_query(block.mixer, inputs[i][:, 0], rec, i)
        if kq is not None:
            layer["kq"] = kq
        maps.append(layer)
    model_maps = {"bigram": logits[:, token_ids.long()], "embedding": model.embed.weight[token_ids.long()]}
    reason = "" if "kq" in maps[0] else (
        f"mixer '{model.spec.mixer}' exposes no key-query map (neither attention projections nor recorded gates)"
    )
    return maps, model_maps, reason


def _key_query(mixer, x: torch.Tensor, rec: Recorder, layer: int) -> torch.Tensor | None:
    if (layer, "write_gate") in rec.records:
        write = rec.get(layer, "write_gate")[:, 0]
        read = rec.get(layer, "read_gate")[:, 0] if (layer, "read_gate") in rec.records else write
        return read.double() @ write.double().T
    if mixer.name == "attention":
        h, kv, hd = mixer.n_heads, mixer.n_kv_heads, mixer.head_dim
        q = F.linear(x, mixer.q_proj.weight).view(len(x), h, hd)
        k = F.linear(x, mixer.k_proj.weight).view(len(x), kv, hd).repeat_interleave(h // kv, dim=1)
        return torch.einsum("ihd,jhd->ij", q.double(), k.double()) / h
    return None
