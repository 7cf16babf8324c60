"""What a rating run (kind ``aggregate``) holds, and the text report of a rated pool.

Metrics per mixer (roles: ``elo`` is the suite's score, everything else a diagnostic):

* ``elo`` and ``elo_lc`` (Bradley–Terry on the Elo scale, plain and length-controlled), ``win_rate`` (mean soft
  outcome) and ``win_rate_vs_<opponent>``, with percentile bootstrap intervals over prompts; ``elo`` and
  ``win_rate`` carry per-prompt items (the mixer's mean soft outcome on each prompt), so the board can compare two
  mixers on the same prompts (in a round robin the Bradley–Terry order is the order of total score);
* the judge's reliability on this pool, the same in every row: ``canary_agreement`` (Wilson interval; chance 0.5),
  ``swap_consistency`` and ``position_bias`` (cluster bootstrap over prompts), ``unparsable_rate`` and
  ``failed_rate`` (Wilson).

When the canaries' interval includes chance (or they were not asked), every rating metric carries
``unreliable=<reason>``: shown, greyed, never voting. Samples: each comparison the mixer took part in, with both
outputs, both raw replies, both verdicts (the mixer's advantage when shown as A and as B), the order asked first,
the preference and the outcome; stored raw (escaping happens where they are rendered). The manifest (:func:`rating_manifest`) has the
subject and suite config of the mixer's generation run, so the board places the cells in that model's row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import stats
from harness.kit import Identity, Reply, RunManifest
from harness.suite import AggregateRun, ItemValues, Metric, SuiteResult
from suites.judge.judging import Session
from suites.judge.pools import Pool
from suites.judge.protocol import Outcome, ProtocolCounts
from suites.judge.ratings import Estimate, Ratings
from suites.judge.verdicts import describe

HEADLINE = ("elo", "elo_lc", "win_rate", "canary_agreement", "swap_consistency", "position_bias")


@dataclass
class PoolReport:
    """A pool's outcome: ratings and counts when rated, else why not."""

    pool: Pool
    status: str  # "rated", "up to date", "skipped: ..."
    ratings: Ratings | None = None
    counts: ProtocolCounts | None = None
    unparsable: int = 0
    replies: int = 0
    failed: int = 0
    presentations: int = 0
    run_ids: dict[str, str] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    unreliable: str | None = None
    judge_metrics: list[Metric] | None = None  # the pool-level reliability metrics, computed once
    to_write: list[AggregateRun] = field(default_factory=list)  # the rating runs, for the core to write

    def render(self) -> str:
        head = f"judge pool: {self.pool.label} — {self.status}"
        r, c = self.ratings, self.counts
        if r is None or c is None:
            return head
        flag = " (unreliable)" if self.unreliable else ""
        rows = [f"  {'mixer':<14} {'Elo [95% CI]' + flag:>28} {'LC Elo [95% CI]':>24} {'win rate':>9}"]
        for i in np.argsort(-r.elo.value):
            rows.append(f"  {r.players[i]:<14} {_ci(r.elo, i):>28} {_ci(r.elo_lc, i):>24} {r.win_rate.value[i]:>9.3f}")
        rows.append(
            f"  comparisons {c.complete}/{c.comparisons} complete over {r.n_prompts} prompts; swap consistency "
            f"{c.swap_consistency:.3f}; position bias {c.position_bias:.3f} (mean lean toward A {c.slot_lean:+.3f}); "
            f"unreadable {self.unparsable}/{self.replies} replies; failed calls {self.failed}/{self.presentations}"
        )
        return "\n".join([head, *rows])


def _ci(est: Estimate, i: int) -> str:
    iv = est.intervals[i]
    span = "" if iv is None else f" [{iv.low:.0f}, {iv.high:.0f}]"
    return f"{est.value[i]:.0f}{span}"


def _share(flags: list[bool], clusters: list[str], level: float, seed: int) -> tuple[float, stats.Interval | None]:
    """A share over complete comparisons with a cluster-bootstrap interval over prompts."""
    if not flags:
        return math.nan, None
    res = stats.cluster_bootstrap([np.array(flags, dtype=float)], clusters, np.mean, level=level, seed=seed)
    return res.point, res.interval


def _judge_metrics(report: PoolReport, session: Session, cfg: Any) -> list[Metric]:
    c = report.counts
    assert c is not None
    complete = [o for o in report.outcomes if o.complete]
    clusters = [o.comparison.prompt_id for o in complete]
    level = cfg.confidence
    consistency, consistency_iv = _share([o.consistent for o in complete], clusters, level, cfg.seed)
    bias, bias_iv = _share([o.same_slot for o in complete], clusters, level, cfg.seed)
    canary = session.canaries
    metrics = [
        Metric("swap_consistency", consistency, True, interval=consistency_iv, n=c.complete, unit="fraction",
               perfect=1.0),
        Metric("position_bias", bias, False, interval=bias_iv, n=c.complete, unit="fraction", perfect=0.0),
        Metric("unparsable_rate", _rate(report.unparsable, report.replies), False,
               interval=stats.wilson_interval(report.unparsable, report.replies, level), n=report.replies,
               unit="fraction"),
        Metric("failed_rate", _rate(report.failed, report.presentations), False,
               interval=stats.wilson_interval(report.failed, report.presentations, level), n=report.presentations,
               unit="fraction"),
        Metric("canary_agreement", canary.agreement if canary else math.nan, True,
               interval=canary.interval if canary else None, n=canary.decided if canary else 0, unit="fraction",
               chance=0.5, perfect=1.0),
    ]
    return metrics


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else math.nan


def _advantages(o: Outcome, mixer: str) -> tuple[float | None, float | None]:
    """The mixer's advantage (P(its slot) - P(the other slot)) when shown as A and when shown as B."""
    if mixer == o.comparison.left:
        return o.left_as_a, None if o.left_as_b is None else -o.left_as_b
    return o.left_as_b, None if o.left_as_a is None else -o.left_as_a


def rating_result(mixer: str, report: PoolReport, outcomes: list[Outcome], replies: dict[tuple[int, bool], Reply | None],
                  session: Session, cfg: Any) -> SuiteResult:
    """Metrics and samples of one mixer's rating run; ``replies[(id(comparison), left_as_a)]`` is the raw reply."""
    r, c = report.ratings, report.counts
    assert r is not None and c is not None and session.mode is not None
    if report.judge_metrics is None:
        report.judge_metrics = _judge_metrics(report, session, cfg)
    i = r.players.index(mixer)
    mine = [o for o in outcomes if mixer in (o.comparison.left, o.comparison.right)]
    complete = [o for o in mine if o.complete]
    reason = report.unreliable

    per_prompt: dict[str, list[float]] = {}
    for o in complete:
        s = o.score if mixer == o.comparison.left else 1.0 - o.score  # type: ignore[operator]
        per_prompt.setdefault(o.comparison.prompt_id, []).append(float(s))
    items = ItemValues(tuple(per_prompt), tuple(float(np.mean(v)) for v in per_prompt.values()),
                       tuple(float(len(v)) for v in per_prompt.values()))

    def rating(name: str, est: Estimate, unit: str, role: str = "diagnostic", with_items: bool = False) -> Metric:
        return Metric(name, float(est.value[i]), True, role=role, interval=est.intervals[i], n=len(complete),
                      unit=unit, items=items if with_items else None, unreliable=reason)

    metrics = [
        rating("elo", r.elo, "Elo", role="score", with_items=True),
        rating("elo_lc", r.elo_lc, "Elo"),
        rating("win_rate", r.win_rate, "fraction", with_items=True),
        *report.judge_metrics,
    ]
    for j, other in enumerate(r.players):
        if other != mixer and not math.isnan(r.matrix[i, j]):
            n_pair = sum(other in (o.comparison.left, o.comparison.right) for o in complete)
            metrics.append(Metric(f"win_rate_vs_{other}", float(r.matrix[i, j]), True, n=n_pair, unit="fraction",
                                  interval=r.matrix_intervals.get((i, j)), unreliable=reason))
    mode = session.mode.mode
    return SuiteResult(metrics=metrics, samples=[_sample(mixer, o, replies, mode) for o in mine])


def _sample(mixer: str, o: Outcome, replies: dict[tuple[int, bool], Reply | None], mode: str) -> dict[str, Any]:
    cmp_ = o.comparison
    left = cmp_.left == mixer
    as_a, as_b = _advantages(o, mixer)
    preference = None if as_a is None or as_b is None else (as_a + as_b) / 2.0
    outcome = ("incomplete" if preference is None else
               "win" if preference > 0 else "loss" if preference < 0 else "tie")
    reply_a, reply_b = replies[(id(cmp_), left)], replies[(id(cmp_), not left)]
    return {
        "prompt_id": cmp_.prompt_id, "prompt": cmp_.prompt, "mixer": mixer,
        "opponent": cmp_.right if left else cmp_.left,
        "output": cmp_.left_output if left else cmp_.right_output,
        "opponent_output": cmp_.right_output if left else cmp_.left_output,
        "reply_as_a": None if reply_a is None else reply_a.text, "verdict_as_a": describe(reply_a, mode),
        "advantage_as_a": as_a,
        "reply_as_b": None if reply_b is None else reply_b.text, "verdict_as_b": describe(reply_b, mode),
        "advantage_as_b": as_b,
        "asked_first": "as_a" if cmp_.left_first == left else "as_b",
        "preference": preference, "score": None if preference is None else (1.0 + preference) / 2.0,
        "outcome": outcome, "consistent": o.consistent, "same_slot": o.same_slot, "verdict_mode": mode,
    }


def _interval_json(iv: stats.Interval | None) -> dict[str, Any] | None:
    return None if iv is None else iv.to_json()


def rating_manifest(mixer: str, pool: Pool, session: Session, report: PoolReport, arena_config: Any,
                    rating_s: float, identity: Identity) -> RunManifest:
    """The rating run's manifest: the generation run's suite config, subject and gate (so the board places the
    row with the model's other judge cells), ``kind="aggregate"``, and the pool, judge and protocol in
    ``extra``."""
    from harness.kit import build_manifest
    from harness.registry import SUITES

    gen = pool.runs[mixer].manifest
    r, c = report.ratings, report.counts
    assert r is not None and c is not None and session.mode is not None
    canary = session.canaries
    t = session.template
    suite_info = {
        "generation_key": pool.generation_key,
        "players": list(r.players),
        "elo": dict(zip(r.players, r.elo.value.tolist())),
        "win_matrix": {p: dict(zip(r.players, row)) for p, row in zip(r.players, r.matrix.tolist())},
        "length_coef": r.length_coef,
        "fit_converged": r.converged,
        "verdict_mode": session.mode.mode,
        "comparisons": c.comparisons, "complete": c.complete, "consistent": c.consistent,
        "swap_consistency": c.swap_consistency, "same_slot": c.same_slot, "position_bias": c.position_bias,
        "slot_lean": c.slot_lean,
        "replies": report.replies, "unparsable": report.unparsable, "failed": report.failed,
        "presentations": report.presentations,
        "client": session.stats,
        "canaries": None if canary is None else {
            "agreement": canary.agreement, "agreed": canary.agreed, "decided": canary.decided,
            "asked": canary.asked, "interval": _interval_json(canary.interval), "drift": canary.drift,
            "session": canary.session, "fresh": canary.fresh,
            "by_kind": {k: {"agreed": a, "decided": d} for k, (a, d) in canary.by_kind().items()},
            "items": [item.to_json() for item in canary.items],
        },
        "unreliable": report.unreliable,
        "preference": "per comparison, the mean over both orders of the mixer's P(its slot) - P(other slot); "
                      "soft outcome (1 + preference) / 2; a constant position offset cancels",
    }
    extra = {
        "player": mixer,
        "generation_run": pool.runs[mixer].run_id,
        "pool": {m: run.run_id for m, run in pool.runs.items()},
        "judge": {
            "id": session.judge_id, "url": session.url, "local": session.local,
            "template_hash": t.hash, "system": t.system, "temperature": t.temperature, "max_tokens": t.max_tokens,
            "top_logprobs": t.top_logprobs, "verdict_mode": session.mode.mode,
            "verdict_mode_reason": session.mode.reason,
        },
        "arena": arena_config.record(),
    }
    timings = {"server_start_s": round(session.server_start_s, 3), "judging_s": round(session.judging_s, 3),
               "rating_s": round(rating_s, 3)}
    return build_manifest(SUITES.get("judge"), gen.suite_config, gen.config_source, gen.subject, gen.gate, identity,
                          SuiteResult(metrics=[], info=suite_info), timings=timings, data=gen.data,
                          kind="aggregate", extra=extra)
