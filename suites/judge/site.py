"""The judge suite's section of the published site (:meth:`suites.judge.Judge.site_section`).

Per rated pool: how far the judge can be trusted (verdict mode, canary agreement with its Wilson interval, swap
consistency, position bias, unreadable and failed replies, and whether the ratings vote), the ratings, the gold
canaries one by one, and the judged pairs with both verdicts; then a sample of each pool's generations. Built
only from the site kit's helpers, which escape every value (model text and judge replies are hostile input).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from harness.kit import RunRecord
    from harness.suite import Metric, SiteKit

MAX_PAIRS = 60  # judged pairs shown per pool
MAX_GENERATION_PROMPTS = 8


def _num(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _with_interval(m: "Metric | None", digits: int = 3) -> str:
    if m is None:
        return "n/a"
    iv = m.interval
    span = "" if iv is None else f" [{iv.low:.{digits}f}, {iv.high:.{digits}f}] ({iv.kind}{'' if iv.level is None else f' {iv.level:.0%}'})"
    return _num(m.value, digits) + span


def _player(run: "RunRecord") -> str:
    return str(run.manifest.extra.get("player") or run.manifest.subject.label)


def _newest_first(runs: list["RunRecord"]) -> list["RunRecord"]:
    return sorted(runs, key=lambda r: r.manifest.written_at, reverse=True)


def site_section(runs: list["RunRecord"], kit: "SiteKit") -> str:
    e = kit.escape
    ratings = [r for r in runs if r.manifest.kind == "aggregate"]
    # one section per pool and judge (id, verdict mode), with the newest rating run of each player
    pools: dict[tuple[str, ...], dict[str, "RunRecord"]] = defaultdict(dict)
    for r in _newest_first(ratings):
        judge = r.manifest.extra.get("judge") or {}
        key = (str(r.manifest.subject.preset), str(r.manifest.subject.seed),
               json.dumps(r.manifest.extra.get("pool") or {}, sort_keys=True), str(judge.get("id")),
               str(judge.get("verdict_mode")))
        pools[key].setdefault(_player(r), r)
    parts: list[str] = []
    for (preset, seed, *_), members in sorted(pools.items()):
        parts.append(_pool_section(preset, seed, list(members.values()), kit))
    generations = [r for r in runs if r.manifest.kind != "aggregate" and r.samples]
    if generations:
        parts.append("<h2>Generations</h2>")
        by_pool: dict[tuple[str, str, str], dict[str, "RunRecord"]] = defaultdict(dict)
        for r in _newest_first(generations):
            m = r.manifest
            key = (str(m.subject.preset), str(m.subject.seed), str(m.suite_info.get("generation_key")))
            by_pool[key].setdefault(m.subject.label, r)
        for (preset, seed, gkey), newest in sorted(by_pool.items()):
            rows = []
            prompts: dict[str, str] = {}
            for mixer, r in sorted(newest.items()):
                for s in r.samples:
                    prompts.setdefault(str(s.get("prompt_id")), str(s.get("prompt", "")))
            shown = list(prompts)[:MAX_GENERATION_PROMPTS]
            for pid in shown:
                for mixer, r in sorted(newest.items()):
                    out = next((s.get("output", "") for s in r.samples if str(s.get("prompt_id")) == pid), "")
                    rows.append((pid, prompts[pid], mixer, out))
            parts.append(kit.table(("prompt", "text", "mixer", "continuation"), rows,
                                   caption=f"preset {preset}, seed {seed}, prompts {gkey}: "
                                           f"{len(shown)} of {len(prompts)} prompts"))
    if not parts:
        return ""
    return "\n".join([f"<h2>{e('LLM-judge ratings')}</h2>", *parts])


def _pool_section(preset: str, seed: str, members: list["RunRecord"], kit: "SiteKit") -> str:
    e = kit.escape
    members = sorted(members, key=_player)
    first = members[0]
    judge = first.manifest.extra.get("judge") or {}
    info = first.manifest.suite_info
    metrics = {m.name: m for m in first.metrics}
    reason = info.get("unreliable")
    title = f"preset {preset}, seed {seed} — judge {judge.get('id', '')}, {judge.get('verdict_mode', 'text')} verdicts"
    parts = [f"<h3>{e(title)}</h3>"]
    reliability = [
        ("verdicts", f"{judge.get('verdict_mode', 'text')}: {judge.get('verdict_mode_reason', '')}"),
        ("canary agreement", _with_interval(metrics.get("canary_agreement"))),
        ("swap consistency", _with_interval(metrics.get("swap_consistency"))),
        ("position bias", _with_interval(metrics.get("position_bias"))),
        ("mean lean toward A", _num(info.get("slot_lean"))),
        ("unreadable replies", _with_interval(metrics.get("unparsable_rate"))),
        ("failed calls", _with_interval(metrics.get("failed_rate"))),
        ("ratings", f"unreliable, do not vote: {reason}" if reason else "reliable: canary agreement above chance"),
    ]
    parts.append(kit.table(("judge reliability", "value"), reliability, caption="how far this judge can be trusted"))
    rows = []
    for r in members:
        m = {x.name: x for x in r.metrics}
        rows.append((_player(r), _with_interval(m.get("elo"), 0), _with_interval(m.get("elo_lc"), 0),
                     _with_interval(m.get("win_rate")), "unreliable" if reason else "votes"))
    parts.append(kit.table(("mixer", "Elo", "length-controlled Elo", "win rate", "status"), rows,
                           caption="Bradley–Terry ratings on soft preferences; percentile bootstrap over prompts"))
    parts.append("<p>" + " ".join(kit.run_link(r, f"{_player(r)} rating run") for r in members) + "</p>")
    canaries = (info.get("canaries") or {}).get("items") or []
    if canaries:
        parts.append(kit.table(
            ("canary", "kind", "text", "gold continuation", "worse continuation", "P(A)-P(B), gold as A",
             "P(A)-P(B), gold as B", "preference for gold"),
            [(c.get("id"), c.get("kind"), c.get("prefix"), c.get("good"), c.get("bad"), _num(c.get("good_as_a")),
              _num(c.get("good_as_b")), _num(c.get("preference"))) for c in canaries],
            caption="gold canary pairs (a preference above 0 agrees with gold)",
        ))
    seen, shown = set(), []
    for r in members:
        for s in r.samples:
            pair = (str(s.get("prompt_id")), frozenset((str(s.get("mixer")), str(s.get("opponent")))))
            if pair not in seen:
                seen.add(pair)
                shown.append(s)
    if shown:
        parts.append(kit.table(
            ("prompt", "text", "mixer", "continuation", "opponent", "opponent's continuation", "verdict, mixer as A",
             "verdict, mixer as B", "preference", "outcome"),
            [(s.get("prompt_id"), s.get("prompt"), s.get("mixer"), s.get("output"), s.get("opponent"),
              s.get("opponent_output"), f"{s.get('verdict_as_a')} (advantage {_num(s.get('advantage_as_a'))})",
              f"{s.get('verdict_as_b')} (advantage {_num(s.get('advantage_as_b'))})", _num(s.get("preference")),
              s.get("outcome")) for s in shown[:MAX_PAIRS]],
            caption=f"judged pairs: {min(len(shown), MAX_PAIRS)} of {len(shown)}, both presentations",
        ))
    return "\n".join(parts)
