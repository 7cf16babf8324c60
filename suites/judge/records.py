"""What a ``judge-rating`` run holds, and the text report of a rated pool.

Metrics per mixer: ``elo`` and ``elo_lc`` (Bradley–Terry on the Elo scale, plain and length-controlled) and
``win_rate`` with bootstrap CIs over prompts, ``win_rate_vs_<opponent>`` (the win-rate matrix row), and the
judge's own numbers on this pool, the same in every row: ``position_bias``, ``inconsistent_rate``,
``unparsable_rate``, ``failed_rate``, ``canary_agreement``. Samples: each comparison the mixer took part in, with
both outputs, both raw replies and verdicts, which order was asked first and the outcome; stored raw (escaping
happens where they are rendered). The manifest copies the model fields of the mixer's generation run, so the
leaderboard places the row like any other run of that model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.config import to_dict
from harness import stats
from harness.provenance import provenance
from harness.suite import Metric, SuiteResult
from suites.judge.judging import Session
from suites.judge.pools import Pool
from suites.judge.protocol import Outcome, ProtocolCounts
from suites.judge.ratings import Interval, Ratings

HEADLINE = ("elo", "elo_lc", "win_rate", "position_bias")
_MODEL_FIELDS = (
    "mixer", "mixer_config", "preset", "seed", "train_id", "run_spec", "checkpoint", "checkpoint_step",
    "weights_sha256", "parameters", "state_floats", "train_flops", "train_tokens_per_s", "kernel", "device", "dtype",
    "data",
)  # fmt: skip


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

    def render(self) -> str:
        head = f"judge pool: {self.pool.label} — {self.status}"
        r, c = self.ratings, self.counts
        if r is None or c is None:
            return head
        rows = [f"  {'mixer':<14} {'Elo [95% CI]':>24} {'LC Elo [95% CI]':>24} {'win rate':>9}"]
        for i in np.argsort(-r.elo.value):
            rows.append(f"  {r.players[i]:<14} {_ci(r.elo, i):>24} {_ci(r.elo_lc, i):>24} {r.win_rate.value[i]:>9.3f}")
        rows.append(
            f"  comparisons {c.complete}/{c.comparisons} complete over {r.n_prompts} prompts; position bias "
            f"{c.position_bias:.3f} (A chosen in {c.a_preference:.3f} of decisive verdicts); inconsistent "
            f"{c.inconsistent_rate:.3f}; unparsable {self.unparsable}/{self.replies} replies; failed calls "
            f"{self.failed}/{self.presentations}"
        )
        return "\n".join([head, *rows])


def _ci(iv: Interval, i: int) -> str:
    return f"{iv.value[i]:.0f} [{iv.low[i]:.0f}, {iv.high[i]:.0f}]"


def rating_result(mixer: str, report: PoolReport, outcomes: list[Outcome], replies: dict[tuple[int, bool], str | None],
                  session: Session) -> SuiteResult:
    """Metrics and samples of one mixer's rating run; ``replies[(id(comparison), left_as_a)]`` is the raw reply."""
    r, c = report.ratings, report.counts
    assert r is not None and c is not None
    i = r.players.index(mixer)
    mine = [o for o in outcomes if mixer in (o.comparison.left, o.comparison.right)]
    n_mine = sum(o.complete for o in mine)

    def with_ci(name: str, iv: Interval, unit: str, role: str = "diagnostic") -> Metric:
        interval = stats.Interval(float(iv.low[i]), float(iv.high[i]), "bootstrap", 0.95)
        return Metric(name, float(iv.value[i]), True, role=role, interval=interval, n=n_mine, unit=unit)

    def rate_of(part: int, whole: int) -> float:
        return part / whole if whole else math.nan

    canary = session.canaries
    metrics = [
        with_ci("elo", r.elo, "Elo", role="score"),
        with_ci("elo_lc", r.elo_lc, "Elo"),
        with_ci("win_rate", r.win_rate, "fraction"),
        Metric("position_bias", c.position_bias, False, n=c.complete, unit="fraction"),
        Metric("inconsistent_rate", c.inconsistent_rate, False, n=c.complete, unit="fraction"),
        Metric("unparsable_rate", rate_of(report.unparsable, report.replies), False, n=report.replies, unit="fraction"),
        Metric("failed_rate", rate_of(report.failed, report.presentations), False, n=report.presentations,
               unit="fraction"),
        Metric("canary_agreement", canary.agreement if canary else math.nan, True, n=canary.parsed if canary else 0,
               unit="fraction", chance=0.5, perfect=1.0),
    ]
    for j, other in enumerate(r.players):
        if other != mixer and not math.isnan(r.matrix[i, j]):
            n_pair = sum(o.complete and other in (o.comparison.left, o.comparison.right) for o in mine)
            metrics.append(Metric(f"win_rate_vs_{other}", float(r.matrix[i, j]), True, n=n_pair, unit="fraction"))
    return SuiteResult(metrics=metrics, samples=[_sample(mixer, o, replies) for o in mine])


def _sample(mixer: str, o: Outcome, replies: dict[tuple[int, bool], str | None]) -> dict[str, Any]:
    cmp_ = o.comparison
    left = cmp_.left == mixer
    score = o.score
    outcome = "incomplete" if score is None else {1.0: "win", 0.0: "loss", 0.5: "tie"}[score if left else 1 - score]
    return {
        "prompt_id": cmp_.prompt_id, "prompt": cmp_.prompt, "mixer": mixer,
        "opponent": cmp_.right if left else cmp_.left,
        "output": cmp_.left_output if left else cmp_.right_output,
        "opponent_output": cmp_.right_output if left else cmp_.left_output,
        "reply_as_a": replies[(id(cmp_), left)], "verdict_as_a": o.left_as_a if left else o.left_as_b,
        "reply_as_b": replies[(id(cmp_), not left)], "verdict_as_b": o.left_as_b if left else o.left_as_a,
        "asked_first": "as_a" if cmp_.left_first == left else "as_b",
        "outcome": outcome, "consistent": o.consistent,
    }


def rating_manifest(mixer: str, pool: Pool, session: Session, report: PoolReport, arena_config: Any,
                    rating_s: float) -> dict[str, Any]:
    gen = pool.runs[mixer].manifest
    r, c = report.ratings, report.counts
    assert r is not None and c is not None
    canary = session.canaries
    return {
        "kind": "judge-rating",
        "suite": "judge",
        "suite_config": {"generation": gen.get("suite_config"), "arena": to_dict(arena_config)},
        "headline": list(HEADLINE),
        **{k: gen.get(k) for k in _MODEL_FIELDS},
        "generation_run": pool.runs[mixer].run_id,
        "pool": {m: run.run_id for m, run in pool.runs.items()},
        "judge": {
            "id": session.judge_id, "url": session.url, "local": session.local,
            "template_hash": session.template.hash, "system": session.template.system,
            "temperature": session.template.temperature, "max_tokens": session.template.max_tokens,
        },
        "suite_info": {
            "generation_key": pool.generation_key,
            "players": list(r.players),
            "elo": dict(zip(r.players, r.elo.value.tolist())),
            "win_matrix": {p: dict(zip(r.players, row)) for p, row in zip(r.players, r.matrix.tolist())},
            "length_coef": r.length_coef,
            "fit_converged": r.converged,
            "comparisons": c.comparisons, "complete": c.complete, "inconsistent": c.inconsistent,
            "same_slot": c.same_slot, "a_preference": c.a_preference,
            "replies": report.replies, "unparsable": report.unparsable, "failed": report.failed,
            "presentations": report.presentations,
            "client": session.stats,
            "canaries": None if canary is None else {
                "agreement": canary.agreement, "parsed": canary.parsed, "asked": canary.asked,
                "drift": canary.drift, "session": canary.session, "fresh": canary.fresh,
            },
            "ties": "a tie, and a disagreement between the two orders, count as half a win for each side",
        },
        "timings": {"server_start_s": round(session.server_start_s, 3), "judging_s": round(session.judging_s, 3),
                    "rating_s": round(rating_s, 3)},
        "provenance": provenance(),
    }
