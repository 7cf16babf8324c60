"""The scaling suite's cross-run step: every ladder in the store fitted, one aggregate run per fitted mixer.

Each run sits on the board row of its mixer's largest model (the subject of that model's own scaling run), holds
the fit's parameters and predictions as diagnostic metrics, and the whole ladder's analysis in ``suite_info``
(every run of a ladder carries the same copy, so any one of them draws the ladder). Its id is keyed by the ladder
and the mixer, not by the models in it: a refit after a new rung replaces the run instead of leaving a stale one.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from harness.config import ModelSpec, content_hash, from_dict, BackboneConfig
from harness.errors import MixbenchError
from harness.registry import SUITES
from harness.kit import Identity, cache_dir, run_identity
from harness.suite import AggregateRun, Metric, SuiteResult
from suites.scaling.analysis import PAPER_TARGETS, LadderAnalysis, analyze
from suites.scaling.ladder import Ladder, collect_ladders


def target_flops(ladder: Ladder) -> dict[str, dict[str, float]]:
    """Per series, the training FLOPs of each paper target: its width, depth and tokens with this ladder's mixer
    config, context and vocabulary (docs/scaling.md, "Predictions at the paper's sizes")."""
    from harness.kit import spec_flops_per_token

    out: dict[str, dict[str, float]] = {}
    for name, points in ladder.series.items():
        s = points[-1].run.manifest.subject
        try:
            backbone = from_dict(BackboneConfig, dict(s.backbone or {}))
            out[name] = {}
            for t in PAPER_TARGETS:
                spec = ModelSpec(s.mixer, dict(s.mixer_config),
                                 dataclasses.replace(backbone, d_model=t.d_model, n_layers=t.n_layers))
                out[name][t.name] = spec_flops_per_token(spec).total * t.tokens
        except (MixbenchError, ValueError, TypeError, KeyError) as exc:  # a plugin mixer that is not loaded here
            print(f"[mixbench] scaling: no paper-size predictions for {name}: {exc}", file=sys.stderr)
            out.pop(name, None)
    return out


def _metrics(analysis: LadderAnalysis, name: str) -> list[Metric]:
    fit = analysis.fits[name]
    info = analysis.json["series"][name]["fit"]
    extrapolate = analysis.json["extrapolate"]
    band = info["band"][-1]  # the last band point is the range's top: extrapolate x the ladder's largest compute
    from harness.stats import Interval

    def interval(pair) -> Interval | None:
        return None if pair is None or None in pair else Interval(pair[0], pair[1], "bootstrap",
                                                                  analysis.json["confidence"])

    n = len(fit.computes)
    out = [
        Metric("alpha", fit.fit.alpha, True, interval=fit.alpha, n=n, unit="exponent"),
        Metric("E", fit.fit.E, False, interval=fit.E, n=n, unit="nats/token"),
        Metric(f"loss_at_{extrapolate:g}x", band[1], False, interval=interval(band[2:]), n=n, unit="nats/token"),
    ]
    for target, pred in info["targets"].items():
        out.append(Metric(f"loss_at_{target}", pred["loss"], False, interval=interval(pred["interval"]), n=n,
                          unit="nats/token"))
    return out


def ladder_runs(store, cfg: Any, suite: str, progress: bool) -> list[AggregateRun]:
    """Fit every ladder of ``suite``'s runs in ``store``; the runs to write (the core writes them)."""
    from harness.kit import build_manifest
    from suites.scaling.plots import draw_ladder

    entry = SUITES.get(suite)
    out = []
    for ladder in collect_ladders(store.iter_runs(samples=False), suite):
        if not ladder.points:
            continue
        analysis = analyze(ladder, cfg.bootstrap, cfg.confidence, cfg.extrapolate, cfg.seed, target_flops(ladder))
        if progress:
            fitted = ", ".join(sorted(analysis.fits)) or "none"
            print(f"[mixbench] scaling: ladder {ladder.key}: {len(ladder.points)} models, fitted {fitted}",
                  file=sys.stderr, flush=True)
        if not analysis.fits:
            continue
        plot = cache_dir() / "scaling-plots" / f"{ladder.key}.png"
        draw_ladder(analysis.json, plot)
        for name in sorted(analysis.fits):
            largest = ladder.series[name][-1].run
            m = largest.manifest
            subject = Identity(content_hash({"ladder": ladder.key, "series": name}),
                               {"ladder": ladder.key, "series": name})
            identity = run_identity(subject, suite, cfg)
            result = SuiteResult(metrics=_metrics(analysis, name), plots=[plot], info=analysis.json)
            manifest = build_manifest(entry, cfg, m.config_source, m.subject, m.gate, identity, result,
                                      data=m.data, kind="aggregate", extra={"series": name, "ladder": ladder.key})
            out.append(AggregateRun(identity.id, manifest, result, replace=True))
    return out
