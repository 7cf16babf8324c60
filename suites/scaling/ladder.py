"""A ladder read back from the store: every ``scaling`` run's model as a point (compute, per-document loss).

A **ladder** is the set of models that differ only in width, depth, token budget, seed and mixer: same data,
context, vocabulary, preset and other training settings, scored with the same suite config. Anything else would
put models of different problems on one curve, so each such set is fitted on its own (docs/scaling.md).
A **series** is one mixer with one config (its board label); a **rung** is one (width, depth, tokens) setting.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from harness.config import PRESETS, content_hash
from harness.kit import RunRecord, si

#: the per-model metric the fits read: the token-weighted mean NLL, with per-document items
LOSS_METRIC = "loss"
#: backbone fields a ladder varies; every other backbone field must agree within a ladder
RUNG_BACKBONE = ("d_model", "n_layers", "ffn_hidden")


@dataclass(frozen=True)
class Rung:
    """Width, depth and token budget of a model: the ladder's x position before compute is counted."""

    d_model: int
    n_layers: int
    tokens: int

    @property
    def label(self) -> str:
        return f"d{self.d_model} x {self.n_layers}L, {si(self.tokens)} tokens"  # 328k, 1.31M: as the board writes


@dataclass(frozen=True)
class Point:
    """One trained model of a ladder: its compute and its held-out loss per document."""

    series: str
    mixer: str
    control: bool
    rung: Rung
    seed: int | None
    flops: float
    parameters: int | None
    doc_ids: tuple[str, ...]
    doc_loss: np.ndarray  # mean NLL per document (nats/token)
    doc_tokens: np.ndarray  # the document's scored tokens: its weight
    run: RunRecord

    @property
    def loss(self) -> float:
        return float(np.average(self.doc_loss, weights=self.doc_tokens))


@dataclass
class Ladder:
    key: str
    points: list[Point]

    @property
    def series(self) -> dict[str, list[Point]]:
        out: dict[str, list[Point]] = defaultdict(list)
        for p in sorted(self.points, key=lambda p: (p.flops, p.seed or 0)):
            out[p.series].append(p)
        return dict(sorted(out.items()))

    @property
    def rungs(self) -> list[Rung]:
        return sorted({p.rung for p in self.points}, key=lambda r: (r.tokens * r.d_model ** 2 * r.n_layers, r.tokens))

    @property
    def controls(self) -> set[str]:
        return {p.series for p in self.points if p.control}

    def aligned(self) -> "Ladder":
        """The ladder with every point restricted to the documents every point scored, in one order, so that
        comparisons and the bootstrap pair on the same documents."""
        if not self.points:
            return self
        common = set(self.points[0].doc_ids)
        for p in self.points[1:]:
            common &= set(p.doc_ids)
        order = sorted(common)
        points = []
        for p in self.points:
            index = {d: i for i, d in enumerate(p.doc_ids)}
            keep = np.array([index[d] for d in order], dtype=int)
            points.append(Point(p.series, p.mixer, p.control, p.rung, p.seed, p.flops, p.parameters, tuple(order),
                                p.doc_loss[keep], p.doc_tokens[keep], p.run))
        return Ladder(self.key, points)


def token_budget(run: RunRecord) -> int | None:
    """The tokens the model trained on: the learning curve's last point, else the preset's budget as overridden."""
    s = run.manifest.subject
    if s.learning_curve:
        return int(s.learning_curve[-1]["tokens"])
    if "token_budget" in s.train_diff:
        return int(s.train_diff["token_budget"])
    preset = PRESETS.get(s.preset or "")
    return int(preset.train["token_budget"]) if preset is not None else None


def ladder_key(run: RunRecord) -> str:
    """What must agree for two models to share a ladder (see the module docstring)."""
    m, s = run.manifest, run.manifest.subject
    backbone = {k: v for k, v in (s.backbone or {}).items() if k not in RUNG_BACKBONE}
    train = {k: v for k, v in s.train_diff.items() if k not in ("token_budget", "seed")}
    parts = {"suite_config": m.suite_config, "data": m.data.get("fingerprint"), "preset": s.preset,
             "backbone": backbone, "train": train, "data_diff": s.data_diff}
    return content_hash(parts, 12)


def point_of(run: RunRecord) -> Point | None:
    """The run as a ladder point, or None when it lacks what a fit needs (no FLOPs, no per-document items)."""
    s = run.manifest.subject
    metric = run.metric(LOSS_METRIC)
    tokens = token_budget(run)
    if s.kind != "model" or metric is None or metric.items is None or not s.train_flops or tokens is None:
        return None
    backbone = s.backbone or {}
    items = metric.items
    weights = np.asarray(items.weights if items.weights is not None else [1.0] * len(items), dtype=float)
    return Point(s.mixer_label, s.mixer, s.control, Rung(int(backbone["d_model"]), int(backbone["n_layers"]), tokens),
                 s.seed, float(s.train_flops), s.parameters, items.ids, np.asarray(items.values, dtype=float),
                 weights, run)


def collect_ladders(runs: Iterable[RunRecord], suite: str) -> list[Ladder]:
    """Every ladder among the per-model runs of ``suite`` (aggregate runs are skipped), documents aligned.

    A model scored more than once (a rerun after a suite change) counts once: its newest run."""
    newest: dict[str, RunRecord] = {}
    for run in runs:
        m = run.manifest
        if m.suite != suite or m.kind != "suite" or m.subject.kind != "model":
            continue
        key = f"{ladder_key(run)}/{m.subject.id}"
        if key not in newest or m.written_at > newest[key].manifest.written_at:
            newest[key] = run
    ladders: dict[str, list[Point]] = defaultdict(list)
    for run in newest.values():
        point = point_of(run)
        if point is not None:
            ladders[ladder_key(run)].append(point)
    return [Ladder(key, pts).aligned() for key, pts in sorted(ladders.items())]
