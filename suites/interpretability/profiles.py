"""Unit profiles: top-activating tokens and contexts, dead units, ProtoT's read-versus-write lag.

* Top positions: the ``top_positions`` tokens with the highest activation; end-of-text and pad tokens, the first
  ``context_left`` positions of each window (which start mid-document: no context yet, and none to show) and
  positions where the unit is silent (activation <= 0: an SAE feature that fires rarely) are left out. Their token
  ids give the unit's top tokens (with their share) and its token entropy (bits; 0 = one token).
* Contexts: the ``n_contexts`` highest-activation positions, no two of the same window closer than
  ``context_left`` tokens (so contexts do not repeat one passage). A context is the ``context_left`` tokens before
  the activating token and the token itself, which is all a causal unit sees there (what coherence embeds), plus
  ``context_right`` tokens after it for the reader of a card.
* Dead: the unit's largest activation is at most ``dead_threshold`` of the largest of any unit of its layer and set
  (for a softmax gate: a prototype nobody writes to; for an SAE feature: one that never fires).
* Read-versus-write lag (ProtoT): for each prototype the lag L in [-max_lag, max_lag] maximising the correlation of
  its read gate at t with its write gate at t + L (series centred over all positions, pairs inside a window);
  L = +1 means the prototype is read one token before it is written ("predict-and-consolidate"). Layers whose
  read gate is the write gate (shared routing) have no lag.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from harness.kit import Tokenizer
from suites.interpretability.activations import Gates, UnitSet


@dataclass
class Context:
    left: str
    token: str
    right: str
    activation: float

    @property
    def seen(self) -> str:
        """The text a causal unit saw: left context and the activating token."""
        return self.left + self.token


@dataclass
class UnitProfile:
    unit_set: str
    unit_kind: str
    layer: int
    index: int
    attrs: dict[str, float]
    max_activation: float
    mean_activation: float
    dead: bool
    top_tokens: list[tuple[str, float]]  # token text, share of the top positions
    top_token_ids: list[int]
    token_entropy: float
    contexts: list[Context]
    scores: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        prefix = {"prototype": "P", "head": "H", "channel": "C"}.get(self.unit_kind, "F")
        return f"L{self.layer} {prefix}{self.index}"

    def to_json(self) -> dict:
        d = asdict(self)
        d["label"] = self.label
        d["token_entropy"] = _finite(self.token_entropy)
        d["attrs"] = {k: _finite(v) for k, v in self.attrs.items()}
        d["scores"] = {k: _finite(v) for k, v in self.scores.items()}
        return d


def _finite(v: float) -> float | None:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def build_profiles(unit_set: UnitSet, ids: torch.Tensor, tokenizer: Tokenizer, n_contexts: int, left: int,
                   right: int, top_positions: int, dead_threshold: float) -> list[UnitProfile]:
    """One profile per unit of ``unit_set``, whose activations were taken on the input windows ``ids [n, T]``."""
    n, T, U = unit_set.acts.shape
    acts = unit_set.acts.reshape(n * T, U).float()
    special = (ids == tokenizer.eos_id) | (ids == tokenizer.pad_id)
    excluded = special.clone()
    excluded[:, : min(left, T - 1)] = True
    ranked = acts.masked_fill(excluded.reshape(-1, 1), float("-inf"))
    maxima = ranked.max(0).values
    layer_max: dict[int, float] = {}
    for u, unit in enumerate(unit_set.units):
        layer_max[unit.layer] = max(layer_max.get(unit.layer, 0.0), float(maxima[u]))
    flat_ids = ids.reshape(-1)
    n_top = min(top_positions, n * T)
    n_candidates = min(n * T, max(n_top, 8 * n_contexts))
    top_vals, top_pos = ranked.topk(n_candidates, dim=0)
    profiles = []
    for u, unit in enumerate(unit_set.units):
        fired = top_vals[:n_top, u] > 0  # a position where the unit is silent says nothing about it
        tokens = flat_ids[top_pos[:n_top, u][fired]].tolist()
        counts: dict[int, int] = {}
        for t in tokens:
            counts[t] = counts.get(t, 0) + 1
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        shares = np.array([c for _, c in ordered], dtype=np.float64) / max(len(tokens), 1)
        contexts = _contexts(top_pos[:, u].tolist(), top_vals[:, u].tolist(), ids, tokenizer, n_contexts, left, right)
        profiles.append(UnitProfile(
            unit_set=unit_set.name, unit_kind=unit_set.kind, layer=unit.layer, index=unit.index, attrs=dict(unit.attrs),
            max_activation=float(maxima[u]), mean_activation=float(acts[:, u][~special.reshape(-1)].mean()),
            dead=float(maxima[u]) <= dead_threshold * layer_max[unit.layer],
            top_tokens=[(tokenizer.decode([t]), float(s)) for (t, _), s in zip(ordered[:10], shares)],
            top_token_ids=[t for t, _ in ordered[:10]],
            token_entropy=float(-(shares * np.log2(shares)).sum()) if tokens else float("nan"),
            contexts=contexts,
        ))
    return profiles


def _contexts(positions, values, ids, tokenizer, n_contexts, left, right) -> list[Context]:
    T = ids.shape[1]
    chosen: list[tuple[int, int]] = []
    out = []
    for pos, val in zip(positions, values):
        if not math.isfinite(val) or val <= 0:  # ranked: the rest are excluded positions or silent ones
            break
        w, t = divmod(pos, T)
        if any(w == cw and abs(t - ct) <= left for cw, ct in chosen):
            continue
        chosen.append((w, t))
        row = ids[w].tolist()
        out.append(Context(tokenizer.decode(row[max(0, t - left) : t]), tokenizer.decode([row[t]]),
                           tokenizer.decode(row[t + 1 : t + 1 + right]), float(val)))
        if len(out) == n_contexts:
            break
    return out


def read_write_lag(gates: Gates, max_lag: int = 8) -> dict[tuple[int, int], tuple[int, float]]:
    """(layer, prototype) -> (lag, correlation at the lag) for every layer with its own read gate."""
    out = {}
    for layer, write in gates.write.items():
        read = gates.read.get(layer)
        if read is None or torch.equal(read, write):
            continue
        w = (write - write.mean((0, 1))).double()
        r = (read - read.mean((0, 1))).double()
        T = w.shape[1]
        norm = (w.pow(2).sum((0, 1)) * r.pow(2).sum((0, 1))).sqrt().clamp(min=1e-30)
        lags = list(range(-max_lag, max_lag + 1))
        corr = []
        for L in lags:  # read at t, write at t + L
            if L >= 0:
                c = (r[:, : T - L] * w[:, L:]).sum((0, 1))
            else:
                c = (r[:, -L:] * w[:, : T + L]).sum((0, 1))
            corr.append(c / norm)
        corr = torch.stack(corr)  # [lags, R]
        best = corr.argmax(0)
        for k in range(w.shape[-1]):
            out[(layer, k)] = (lags[int(best[k])], float(corr[best[k], k]))
    return out
