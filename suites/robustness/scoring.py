"""Per-pair numbers from batched forward passes.

Each sentence is scored as ``[eos] + tokens`` (the end-of-text token is the document separator the models were
trained with, so the first word has a context). Positions are compared where the two sequences agree from there to
the end, i.e. over their longest common token suffix: position ``n - j`` of the original and ``m - j`` of the
perturbed sentence (``j = 1 .. s``) read the same token and are followed by the same tokens, so any difference in
their predictions is the edit's doing. The *distance* of such a position is how many tokens it lies after the last
differing token (1 = the first token after the edit). Per pair:

* ``jsd_final``: JSD at the final position (the prediction of what follows the sentence; defined for every pair);
* ``jsd_after``: mean JSD over the aligned positions (NaN when the edit touches the last token);
* ``topk``, ``spearman``, ``top1``: top-k overlap, Spearman over the union of both top-k sets, and top-1 agreement, at
  the final position;
* ``nll_delta`` / ``suffix_tokens``: summed negative log-likelihood (nats) of the shared suffix tokens under the
  perturbed minus under the original context, and how many tokens that is;
* ``dist_sum`` / ``dist_count``: JSD summed and counted per distance bucket;
* ``route_write`` / ``route_read``: mean JSD between routing gate distributions (ProtoT's write and read gates, every
  layer) at the aligned positions, for mixers that expose units and record these gates.

Identical texts are forwarded once per batch, so an unchanged pair compares a row with itself and scores exactly 0.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from harness.recording import Recorder
from suites.robustness.metrics import jsd, spearman_union, top1_agreement, topk_overlap
from suites.robustness.pairs import Pair

#: distance buckets in tokens after the last edit (inclusive; None = no upper end)
DISTANCE_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, None))
ROUTING = ("write_gate", "read_gate")
NEXT_SHOWN = 5  # next-token candidates kept per pair for the samples


def bucket_name(lo: int, hi: int | None) -> str:
    return f"d{lo}" if hi == lo else f"d{lo}-{hi}" if hi is not None else f"d{lo}+"


@dataclass
class Scores:
    scored: np.ndarray  # bool: False for pairs longer than the model's context
    jsd_final: np.ndarray
    jsd_after: np.ndarray
    topk: np.ndarray
    spearman: np.ndarray
    top1: np.ndarray
    nll_delta: np.ndarray
    suffix_tokens: np.ndarray
    dist_sum: np.ndarray  # [pairs, buckets]
    dist_count: np.ndarray
    route_write: np.ndarray
    route_read: np.ndarray
    next_original: list[list[tuple[int, float]]]
    next_perturbed: list[list[tuple[int, float]]]
    routing: bool  # whether the model recorded routing gates

    @staticmethod
    def empty(n: int) -> Scores:
        """Nothing scored yet: NaN statistics, zero sums."""
        nb = len(DISTANCE_BUCKETS)
        return Scores(
            scored=np.zeros(n, bool),
            jsd_final=np.full(n, np.nan),
            jsd_after=np.full(n, np.nan),
            topk=np.full(n, np.nan),
            spearman=np.full(n, np.nan),
            top1=np.full(n, np.nan),
            nll_delta=np.zeros(n),
            suffix_tokens=np.zeros(n, np.int64),
            dist_sum=np.zeros((n, nb)),
            dist_count=np.zeros((n, nb), np.int64),
            route_write=np.full(n, np.nan),
            route_read=np.full(n, np.nan),
            next_original=[[] for _ in range(n)],
            next_perturbed=[[] for _ in range(n)],
            routing=False,
        )


def common_suffix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _bucket_of(distance: int) -> int:
    for i, (lo, hi) in enumerate(DISTANCE_BUCKETS):
        if distance >= lo and (hi is None or distance <= hi):
            return i
    raise ValueError(f"distance {distance} < 1")


def _batches(order: list[int], pairs: list[Pair], batch_size: int) -> list[list[int]]:
    """Consecutive pairs grouped so that each group has at most ``batch_size`` distinct texts (a text shared by
    several pairs, e.g. one original in several slices, is forwarded once)."""
    groups: list[list[int]] = [[]]
    texts: set[str] = set()
    for i in order:
        new = {pairs[i].original, pairs[i].perturbed} - texts
        if groups[-1] and len(texts) + len(new) > batch_size:
            groups.append([])
            texts = set()
            new = {pairs[i].original, pairs[i].perturbed}
        groups[-1].append(i)
        texts |= new
    return [g for g in groups if g]


@torch.no_grad()
def score_pairs(model, tokenizer, pairs: list[Pair], batch_size: int, top_k: int, progress: bool = False) -> Scores:
    texts = sorted({t for p in pairs for t in (p.original, p.perturbed)})
    eos = tokenizer.eos_id
    ids = {t: (eos, *enc) for t, enc in zip(texts, tokenizer.encode_batch(texts), strict=True)}
    out = Scores.empty(len(pairs))
    limit = model.config.context
    order = sorted(
        (i for i, p in enumerate(pairs) if max(len(ids[p.original]), len(ids[p.perturbed])) <= limit),
        key=lambda i: (len(ids[pairs[i].original]), pairs[i].original, i),
    )
    device = next(model.parameters()).device
    wants_routing = any(m.units() for m in model.mixers)
    model.eval()
    bar = tqdm(total=len(order), desc="robustness", unit="pair", disable=not progress, leave=False)
    for group in _batches(order, pairs, batch_size):
        seqs = list(dict.fromkeys(t for i in group for t in (pairs[i].original, pairs[i].perturbed)))
        row = {t: r for r, t in enumerate(seqs)}
        width = max(len(ids[t]) for t in seqs)
        batch = torch.full((len(seqs), width), tokenizer.pad_id, dtype=torch.long)
        for r, t in enumerate(seqs):
            batch[r, : len(ids[t])] = torch.tensor(ids[t])
        recorder = Recorder(set(ROUTING)) if wants_routing else None
        with recorder if recorder is not None else contextlib.nullcontext():
            logits, _ = model(batch.to(device))
        logits = logits.float().cpu()
        logp = torch.log_softmax(logits, dim=-1)
        gates = _gates(recorder, len(model.mixers))
        out.routing = out.routing or bool(gates)
        _score_group(out, pairs, group, ids, row, logits, logp, gates, top_k)
        bar.update(len(group))
    bar.close()
    return out


def _gates(recorder: Recorder | None, n_layers: int) -> dict[str, list[torch.Tensor]]:
    """Recorded gate distributions ``[B, T, R]`` per name, one per layer; empty when none were recorded."""
    if recorder is None:
        return {}
    found = {}
    for name in ROUTING:
        layers = [recorder.get(layer, name) for layer in range(n_layers) if (layer, name) in recorder.records]
        if layers:
            found[name] = layers
    return found


def _log_prob64(logits: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor,
                chunk: int = 512) -> torch.Tensor:
    """log p(token) at (row, position) in float64. ``nll_delta`` is a small difference of two sums of ~5-nat
    log-probabilities; float32 log-softmax rounds each term by ~1e-7 relative, which alone moved it by 1e-6 nats
    (3e-4 relative) on a 10-token suffix, so these terms are normalised in float64 from the logits."""
    out = torch.empty(len(rows), dtype=torch.float64)
    for s in range(0, len(rows), chunk):
        picked = logits[rows[s : s + chunk], positions[s : s + chunk]].double()
        out[s : s + chunk] = picked.gather(-1, tokens[s : s + chunk, None])[:, 0] - picked.logsumexp(-1)
    return out


def _score_group(out: Scores, pairs, group, ids, row, logits, logp, gates, top_k) -> None:
    """Fill ``out`` for the pairs ``group`` from the batch's ``logits`` and log-probabilities ``logp [B, T, V]``."""
    idx = np.asarray(group)
    layout = []  # (row of the original, row of the perturbed, their lengths, common suffix length, original ids)
    for i in group:
        a, b = ids[pairs[i].original], ids[pairs[i].perturbed]
        layout.append((row[pairs[i].original], row[pairs[i].perturbed], len(a), len(b), common_suffix(a, b), a))
    ro, rp = torch.tensor([x[0] for x in layout]), torch.tensor([x[1] for x in layout])
    final_o = logp[ro, torch.tensor([x[2] - 1 for x in layout])]
    final_p = logp[rp, torch.tensor([x[3] - 1 for x in layout])]
    out.scored[idx] = True
    out.jsd_final[idx] = jsd(final_o.exp(), final_p.exp()).numpy()
    out.topk[idx] = topk_overlap(final_o, final_p, top_k).numpy()
    out.top1[idx] = top1_agreement(final_o, final_p).numpy()
    fo, fp = final_o.numpy(), final_p.numpy()
    shown_o, shown_p = _shown(final_o), _shown(final_p)
    for k, i in enumerate(group):
        out.spearman[i] = spearman_union(fo[k], fp[k], top_k)
        out.next_original[i], out.next_perturbed[i] = shown_o[k], shown_p[k]

    # shared suffix tokens a[n-j] (j = 1..), predicted at n-j-1 and m-j-1; the leading eos is never a target
    targets = np.array(
        [(k, r_o, n - j - 1, r_p, m - j - 1, a[n - j]) for k, (r_o, r_p, n, m, s, a) in enumerate(layout)
         for j in range(1, min(s, n - 1, m - 1) + 1)],
        dtype=np.int64,
    ).reshape(-1, 6)  # fmt: skip
    if len(targets):
        k, t = targets[:, 0], torch.from_numpy(targets)
        delta = _log_prob64(logits, t[:, 1], t[:, 2], t[:, 5]) - _log_prob64(logits, t[:, 3], t[:, 4], t[:, 5])
        out.nll_delta[idx] = np.bincount(k, delta.numpy(), minlength=len(group))
        out.suffix_tokens[idx] = np.bincount(k, minlength=len(group))

    # aligned positions n-j / m-j (j = 1..s), at distance s-j+1 after the last differing token
    aligned = np.array(
        [(k, r_o, n - j, r_p, m - j, s - j + 1) for k, (r_o, r_p, n, m, s, _) in enumerate(layout)
         for j in range(1, s + 1)],
        dtype=np.int64,
    ).reshape(-1, 6)  # fmt: skip
    if not len(aligned):
        return
    k, t = aligned[:, 0], torch.from_numpy(aligned)
    counts = np.bincount(k, minlength=len(group))
    has = counts > 0

    def per_pair_mean(values: np.ndarray) -> np.ndarray:
        return (np.bincount(k, values, minlength=len(group)) / np.maximum(counts, 1))[has]

    values = jsd(logp[t[:, 1], t[:, 2]].exp(), logp[t[:, 3], t[:, 4]].exp()).double().numpy()
    out.jsd_after[idx[has]] = per_pair_mean(values)
    bucket = np.array([_bucket_of(int(d)) for d in aligned[:, 5]], dtype=np.int64)
    np.add.at(out.dist_sum, (idx[k], bucket), values)
    np.add.at(out.dist_count, (idx[k], bucket), 1)
    for name, target in (("write_gate", out.route_write), ("read_gate", out.route_read)):
        if name in gates:
            shift = torch.stack([jsd(g[t[:, 1], t[:, 2]], g[t[:, 3], t[:, 4]]) for g in gates[name]])
            target[idx[has]] = per_pair_mean(shift.mean(0).double().numpy())


def _shown(logp: torch.Tensor) -> list[list[tuple[int, float]]]:
    """The ``NEXT_SHOWN`` most likely next tokens of each row, with their probabilities."""
    top = logp.topk(NEXT_SHOWN, dim=-1)
    return [
        list(zip(ids, probs, strict=True))
        for ids, probs in zip(top.indices.tolist(), top.values.exp().tolist(), strict=True)
    ]
