"""One ladder's analysis: per-mixer fits with intervals, crossovers of every pair, orderings at every rung.

The statistics are :mod:`harness.scaling_laws`' (robust log-scale fit, two-level paired bootstrap over documents
and ladder points, crossover verdicts, the board's tie groups); this module applies them to a ladder read from
the store and keeps the result as plain JSON for the store, the site and the command's tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.scaling_laws import (
    MIN_POINTS, FitWithIntervals, LadderPoint, ScalingLawError, bootstrap_fits, crossover_interval, ordering_at,
)
from harness.stats import Interval
from suites.scaling.ladder import Ladder, Point, Rung

#: log-spaced computes at which each fitted curve and its band are drawn
BAND_POINTS = 40


@dataclass(frozen=True)
class Target:
    """A compute the fits are asked about: a named (width, depth, tokens) setting, per series its own FLOPs."""

    name: str
    d_model: int
    n_layers: int
    tokens: int


#: the ProtoT paper's two settings (docs/PAPERS.md): what each fit predicts there, on this ladder's data
PAPER_TARGETS = (Target("paper-small", 256, 6, 250_000_000), Target("paper-large", 512, 12, 1_000_000_000))


def _interval_json(iv: Interval | None) -> list[float] | None:
    return None if iv is None else [iv.low, iv.high]


def _percentile_interval(samples: np.ndarray, level: float) -> Interval | None:
    samples = samples[np.isfinite(samples)]
    if samples.size < 2:
        return None
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return Interval(float(low), float(high), "bootstrap", level)


def predict_with_interval(fit: FitWithIntervals, compute: float, level: float) -> tuple[float, Interval | None]:
    """The fitted loss at ``compute`` and the percentile interval of the replicates' predictions there."""
    point = float(fit.fit.predict(compute))
    e, a_ref, alpha = fit.replicates.T
    with np.errstate(over="ignore", invalid="ignore"):
        reps = np.exp(e) + np.exp(a_ref) * (compute / fit.fit.reference_compute) ** (-alpha)
    return point, _percentile_interval(reps, level)


@dataclass
class LadderAnalysis:
    key: str
    fits: dict[str, FitWithIntervals]
    unfitted: dict[str, str]  # series -> why it has no fit
    json: dict[str, Any]


def _ladder_point(p: Point) -> LadderPoint:
    return LadderPoint(p.flops, p.doc_loss, p.doc_tokens, p.doc_ids)


def _rung_json(r: Rung) -> dict[str, Any]:
    return {"label": r.label, "d_model": r.d_model, "n_layers": r.n_layers, "tokens": r.tokens}


def analyze(ladder: Ladder, n_boot: int, level: float, extrapolate: float, seed: int,
            target_flops: dict[str, dict[str, float]] | None = None) -> LadderAnalysis:
    """Fit every series of ``ladder`` with at least :data:`MIN_POINTS` distinct computes, cross every fitted pair,
    order the series at every rung; ``target_flops`` (series -> target name -> FLOPs) adds predictions there."""
    series = ladder.series
    computes = [p.flops for p in ladder.points]
    c_lo, c_hi = min(computes), max(computes) * extrapolate
    grid = np.geomspace(c_lo, c_hi, BAND_POINTS)
    fittable = {name: pts for name, pts in series.items() if len({p.flops for p in pts}) >= MIN_POINTS}
    unfitted = {name: f"{len({p.flops for p in pts})} distinct compute(s); a fit needs {MIN_POINTS}"
                for name, pts in series.items() if name not in fittable}
    fits: dict[str, FitWithIntervals] = {}
    if fittable:
        try:
            fits = bootstrap_fits({n: [_ladder_point(p) for p in pts] for n, pts in fittable.items()}, n_boot, seed,
                                  level, predict_at=tuple(grid))
        except ScalingLawError as exc:
            unfitted.update({n: str(exc) for n in fittable})
    crossovers = []
    names = sorted(fits)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            c = crossover_interval(fits[a], fits[b], c_lo, max(computes), level=level)
            crossovers.append({
                "a": a, "b": b, "verdict": c.verdict, "sentence": c.sentence, "compute": c.point.compute,
                "interval": _interval_json(c.interval), "share": c.share,
                "better_below": c.point.better_below, "better_above": c.point.better_above,
            })
    orderings = []
    for rung in ladder.rungs:
        at = {p.series: p for p in ladder.points if p.rung == rung}
        if len(at) < 2:
            continue
        o = ordering_at({n: _ladder_point(p) for n, p in at.items()}, seed=seed)
        orderings.append({**_rung_json(rung), "order": list(o.order), "losses": o.losses, "groups": o.groups,
                          "tie_groups": [list(g) for g in o.tie_groups]})
    out_series: dict[str, Any] = {}
    for name, pts in series.items():
        entry: dict[str, Any] = {
            "control": any(p.control for p in pts), "mixer": pts[0].mixer,
            "points": [{**_rung_json(p.rung), "flops": p.flops, "loss": p.loss, "seed": p.seed,
                        "parameters": p.parameters, "run": p.run.run_id} for p in pts],
            "fit": None, "why_not": unfitted.get(name),
        }
        fit = fits.get(name)
        if fit is not None:
            f = fit.fit
            entry["fit"] = {
                "E": f.E, "A": f.A, "alpha": f.alpha, "A_ref": f.A_ref, "reference_compute": f.reference_compute,
                "E_interval": _interval_json(fit.E), "A_interval": _interval_json(fit.A),
                "alpha_interval": _interval_json(fit.alpha), "A_ref_interval": _interval_json(fit.A_ref),
                "converged": f.converged, "at_bounds": list(f.at_bounds), "redraws": fit.redraws,
                "band": [[p.compute, p.loss, *(_interval_json(p.interval) or [None, None])]
                         for p in fit.predictions],
                "targets": {},
            }
            for target, flops in (target_flops or {}).get(name, {}).items():
                loss, iv = predict_with_interval(fit, flops, level)
                entry["fit"]["targets"][target] = {"flops": flops, "loss": loss, "interval": _interval_json(iv)}
        out_series[name] = entry
    json_out = {
        "ladder": ladder.key, "bootstrap": n_boot, "confidence": level, "seed": seed,
        "range": [c_lo, c_hi], "extrapolate": extrapolate,
        "rungs": [_rung_json(r) for r in ladder.rungs], "series": out_series,
        "crossovers": crossovers, "orderings": orderings,
        "interval_kind": "percentile bootstrap: documents resampled once per replicate for every series (paired), "
                         "ladder points resampled per series",
    }
    return LadderAnalysis(ladder.key, fits, unfitted, json_out)
