"""One ladder's analysis: per-mixer fits with intervals, crossovers of every pair, orderings at every rung.

The statistics are :mod:`suites.scaling.fit` (a joint robust log-scale fit with one E for the mixers, a paired
bootstrap over documents and seeds), :mod:`suites.scaling.crossover` (crossovers in the data's range, extrapolated
ones named so) and :mod:`suites.scaling.ordering` (tie groups per rung); this module applies them to a ladder read
from the store and keeps the result as plain JSON for the store, the site and the command's tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.errors import MixbenchError
from harness.stats import Interval
from suites.scaling.crossover import crossover_interval
from suites.scaling.fit import MIN_POINTS, FitWithIntervals, LadderPoint, ScalingLawError, SeedNoise, bootstrap_fits
from suites.scaling.ladder import Ladder, Point, Rung
from suites.scaling.ordering import ordering_at

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
    return LadderPoint(p.flops, p.doc_loss, p.doc_tokens, p.doc_ids, p.seed)


def preset_noise(preset: str | None) -> SeedNoise | None:
    """The preset's measured seed spread of the held-out loss (its recipe file, docs/protocol.md "Seeds"): the
    fallback for rungs trained with one seed."""
    from harness.kit import NLL_SCALE, seed_spread

    try:
        spread = seed_spread(preset or "")
    except MixbenchError:
        return None
    if spread is None or spread.scale != NLL_SCALE:
        return None
    return SeedNoise(spread.sd, spread.df, spread.sd_upper,
                     f"preset {preset}'s seed spread ({len(spread.seeds)} seeds, {', '.join(spread.splits)})")


def _tokens_per_parameter(points: list[Point]) -> float | None:
    p = points[0]
    return p.rung.tokens / p.parameters if p.parameters else None


def _rung_json(r: Rung) -> dict[str, Any]:
    return {"label": r.label, "d_model": r.d_model, "n_layers": r.n_layers, "tokens": r.tokens}


def analyze(ladder: Ladder, n_boot: int, level: float, extrapolate: float, seed: int,
            target_flops: dict[str, dict[str, float]] | None = None, noise: SeedNoise | None = None) -> LadderAnalysis:
    """Fit every series of ``ladder`` with at least :data:`MIN_POINTS` distinct computes (the mixers with one E,
    each control its own), cross every fitted pair, order the series at every rung; ``target_flops`` (series ->
    target name -> FLOPs) adds predictions there; ``noise`` is the seed spread for one-seed rungs (default: the
    ladder's preset's)."""
    series = ladder.series
    computes = [p.flops for p in ladder.points]
    c_lo, c_top = min(computes), max(computes)
    c_hi = c_top * extrapolate
    grid = np.geomspace(c_lo, c_hi, BAND_POINTS)
    fittable = {name: pts for name, pts in series.items() if len({p.flops for p in pts}) >= MIN_POINTS}
    unfitted = {name: f"{len({p.flops for p in pts})} distinct compute(s); a fit needs {MIN_POINTS}"
                for name, pts in series.items() if name not in fittable}
    if noise is None and ladder.points:
        noise = preset_noise(ladder.points[0].run.manifest.subject.preset)
    fits: dict[str, FitWithIntervals] = {}
    if fittable:
        try:
            fits = bootstrap_fits({n: [_ladder_point(p) for p in pts] for n, pts in fittable.items()}, n_boot, seed,
                                  level, predict_at=tuple(grid),
                                  shared=[n for n in fittable if n not in ladder.controls], noise=noise)
        except ScalingLawError as exc:
            unfitted.update({n: str(exc) for n in fittable})
    used = next(iter(fits.values())).noise if fits else noise
    crossovers = []
    names = sorted(fits)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            c = crossover_interval(fits[a], fits[b], c_lo, c_top, level=level, extrapolation=extrapolate)
            crossovers.append({
                "a": a, "b": b, "verdict": c.verdict, "sentence": c.sentence,
                "compute": c.point.compute if c.verdict != "extrapolated" else None, "beyond": c.beyond,
                "beyond_share": c.beyond_share, "interval": _interval_json(c.interval), "share": c.share,
                "better_below": c.point.better_below, "better_above": c.point.better_above,
            })
    orderings = []
    for rung in ladder.rungs:
        at: dict[str, list[Point]] = {}
        for p in ladder.points:
            if p.rung == rung:
                at.setdefault(p.series, []).append(p)
        if len(at) < 2:
            continue
        o = ordering_at({n: [_ladder_point(p) for p in pts] for n, pts in sorted(at.items())}, noise=used, seed=seed)
        orderings.append({**_rung_json(rung), "order": list(o.order), "losses": o.losses, "groups": o.groups,
                          "tie_groups": [list(g) for g in o.tie_groups], "seeds": o.seeds,
                          "tokens_per_parameter": {n: _tokens_per_parameter(pts) for n, pts in at.items()}})
    out_series: dict[str, Any] = {}
    for name, pts in series.items():
        entry: dict[str, Any] = {
            "control": any(p.control for p in pts), "mixer": pts[0].mixer,
            "points": [{**_rung_json(p.rung), "flops": p.flops, "loss": p.loss, "seed": p.seed,
                        "tokens_per_parameter": _tokens_per_parameter([p]),
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
                "converged": f.converged, "at_bounds": list(f.at_bounds), "shared_E": list(f.shared_with),
                "huber_delta": f.delta, "seeds_per_rung": list(fit.seeds_per_rung),
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
        "range": [c_lo, c_hi], "data_range": [c_lo, c_top], "extrapolate": extrapolate,
        "seed_noise": None if used is None else {"sd": used.sd, "df": used.df, "upper": used.upper,
                                                 "source": used.source},
        "rungs": [_rung_json(r) for r in ladder.rungs], "series": out_series,
        "crossovers": crossovers, "orderings": orderings,
        "interval_kind": "percentile bootstrap: documents resampled once per replicate for every series (paired), "
                         "seeds resampled within each rung (one-seed rungs: a normal draw at the seed spread), "
                         "the mixers refitted jointly with one E",
    }
    return LadderAnalysis(ladder.key, fits, unfitted, json_out)
