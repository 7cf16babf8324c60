"""The board's first lines: what a reader must know before reading a rank (docs/protocol.md).

* whether anything on the board tells the mixers apart (:meth:`harness.reporting.board.Board.headline`);
* per preset, the budget: training tokens per model, tokens per parameter, the parameter counts and whether they
  are matched, and how many seeds each row averages (one seed says that differences smaller than the seed spread
  are not claimed, and what that spread is);
* the backbone rule every row shares (residual gates, who initialised the output projections) and which rows were
  trained without their tuned recipe;
* whether any mixer uses context beyond the first position buckets (:mod:`harness.reporting.context_use`).

:func:`lead_sentence` says in one sentence what the board claims and how firmly (who leads, on which voting
columns, in which tie groups, with what rank interval; which suites do not vote and why), for any renderer to open
with; :func:`difference_words` and :func:`veto_reason` state who came out ahead of a null, with the p-value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.model.matching import MATCH_TOLERANCE
from harness.model.recipes import OVERRIDDEN, UNTUNED
from harness.reporting.context_use import context_lines

if TYPE_CHECKING:
    from harness.reporting.board import Board

#: the mark after the label of a row trained without its tuned recipe (untuned or overridden)
UNTUNED_MARK = "*"


def preamble(board: "Board") -> list[str]:
    """The board's first lines (see the module docstring), in order."""
    from harness.reporting.numbers import si

    lines = []
    first = board.headline()
    if first:
        lines.append(first)
    table = board.table
    presets = sorted({r.preset for r in table.rows if not r.external})
    for preset in presets:
        rows = [r for r in table.rows if r.preset == preset and not r.external]
        where = f"preset {preset}" if len(presets) > 1 or preset not in ("", "—") else "this board"
        parts = []
        budgets = sorted({r.budget for r in rows if r.budget})
        params = [r.parameters for r in rows if r.parameters]
        if budgets:
            parts.append(f"{'/'.join(si(b) for b in budgets)} training tokens per model")
            if params:
                ratios = [b / p for b in budgets for p in params]
                low, high = _ratio(min(ratios)), _ratio(max(ratios))
                parts.append(f"{low}{'' if low == high else f'-{high}'} tokens per parameter")
        if params:
            low, high = si(min(params)), si(max(params))
            parts.append(f"{low}-{high} parameters" if low != high else f"{low} parameters")
        matched = [r.non_embedding_parameters for r in rows if r.non_embedding_parameters]
        if len(matched) >= 2:
            spread = (max(matched) - min(matched)) / min(matched)
            parts.append(f"non-embedding parameters within {max(spread, 0.001):.1%} of each other (matched)"
                         if spread <= MATCH_TOLERANCE
                         else f"sizes NOT matched: non-embedding parameters differ by up to {spread:.0%}")
        seeds = sorted({len(r.seeds) for r in rows if r.seeds})
        parts.insert(0, _seed_text(board, preset, seeds))
        lines.append(f"{where}: " + "; ".join(parts))
        lines.append(_backbone_text(rows))
    lines += context_lines(board.context)
    return lines


def _ratio(x: float) -> str:
    """Two significant digits below 10 (0.39), whole numbers above (330)."""
    return f"{x:.2g}" if x < 10 else f"{x:,.0f}"


def _seed_text(board: "Board", preset: str, seeds: list[int]) -> str:
    if not seeds:
        return "seeds unknown"
    if seeds == [1]:
        noise = next((n for (p, name), n in board.seed_noise.items()
                      if p == preset and n is not None and (v := board.verdicts.get(name)) is not None
                      and v.column.role == "score"), None)
        spread = "" if noise is None else (f" (seed SD up to {noise.sd:.3g} on the items' scale, from {noise.source})")
        return ("ONE training seed per row: differences smaller than the seed spread are not claimed" + spread
                + "; columns without a measured spread count item noise only (3 seeds: `make reference-board`)")
    text = f"{'/'.join(map(str, seeds))} training seeds per row (ties and vetoes count the spread between them)"
    if 1 in seeds:
        text += "; rows of ONE seed claim no difference smaller than the seed spread"
    return text


def _backbone_text(rows: list) -> str:
    gates = sorted({r.residual_gates for r in rows if r.residual_gates})
    gate_text = {"none": "no residual gates", "mixer": "a learnable gate on the mixer branch only",
                 "all": "learnable gates on every residual branch (mixer and MLP)"}
    parts = ["backbone: " + (", ".join(gate_text.get(g, g) for g in gates) or "residual gates unknown")]
    own = sorted(r.label for r in rows if r.output_init == "mixer")
    parts.append("every mixer's output projection initialised by the backbone, N(0, 0.02/sqrt(2L))" if not own else
                 f"output projections initialised by the backbone except {', '.join(own)} (its own)")
    untuned = sorted(r.label for r in rows if r.recipe in (UNTUNED, OVERRIDDEN))
    tuned = [r for r in rows if r.recipe == "tuned"]
    if tuned and not untuned:
        parts.append("every row at its learning rate tuned on validation (`mixbench tune`)")
    elif untuned:
        parts.append(f"{UNTUNED_MARK} trained without a tuned recipe (untuned, or its values overridden): "
                     f"{', '.join(untuned)}")
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------- the lead sentence


def lead_sentence(board: "Board") -> str:
    """One sentence from the board: who leads each preset, on which voting columns, how sure (tie groups, rank
    interval), and which suites do not vote and why; when nothing votes, that. Any renderer can open with it: a
    reader who reads one line should learn what the board claims and how firmly (issue 50)."""
    table = board.table
    if table.empty:
        return "No results yet: the store holds no runs."
    silent = _silent_text(board)
    if not any(not r.control and not r.external for r in table.rows):
        return "No mixer on this board yet, only controls or external models" + silent + "."
    if not board.voting:
        reasons = _reasons(silent_suites(board))
        return ("Nothing on this board tells the mixers apart: no column votes" + (f" ({reasons})" if reasons else "")
                + ", so no mixer is ranked.")
    presets = list(dict.fromkeys(r.preset for r in table.rows if not r.control and not r.external))
    clauses = [c for p in presets if (c := _preset_lead(board, p, len(presets)))]
    if not clauses:
        lacking = sorted(set(board.unranked.values()))
        return "No mixer is ranked" + (f": every one {' or '.join(lacking)}" if lacking else "") + silent + "."
    return "; ".join(clauses) + silent + "."


def _preset_lead(board: "Board", preset: str, n_presets: int) -> str:
    table = board.table
    mixers = [r for r in table.rows if r.preset == preset and not r.control and not r.external]
    ranked = sorted((r for r in mixers if board.rank.get(r.key) is not None),
                    key=lambda r: (board.rank[r.key], r.label))
    if not ranked:
        return ""
    where = f"at preset {preset}" if preset not in ("", "—", None) or n_presets > 1 else "on this board"
    leaders = [r for r in ranked if board.rank[r.key] == 1]
    voting = [c for c in board.voting if any(board.verdicts[c.name].groups.get(r.key) for r in mixers)]
    on = f" on {_columns_text(voting)}" if voting else ""
    if len(leaders) > 1:
        intervals = ", ".join(f"{r.label} {_interval(board, r)}" for r in leaders)
        text = f"{_and([r.label for r in leaders])} share the lead {where}{on} (rank intervals {intervals})"
    else:
        lead = leaders[0]
        lo, hi = board.rank_interval.get(lead.key) or (1, 1)
        overlap = [r.label for r in ranked if r is not lead and _overlaps(board.rank_interval.get(r.key), (lo, hi))]
        sure = (f", overlapping {_and(overlap)}: the lead is not settled" if overlap else "")
        text = f"{lead.label} leads {where}{on}, {_groups_text(board, lead, mixers, voting)} " \
               f"(rank interval {lo}–{hi}{sure})"
    unranked = [r for r in mixers if r.key in board.unranked]
    if unranked:
        text += ", " + ", ".join(f"{r.label} not ranked ({board.unranked[r.key]})" for r in unranked)
    return text


def _groups_text(board: "Board", lead, mixers: list, voting: list) -> str:
    """Where the leader stands in each voting column's tie groups: ``alone in tie group a`` when that holds for
    all, else per column (``tie group a on ppl with deltanet, b on ood_ppl``)."""
    parts, alone_a = [], True
    for c in voting:
        groups = board.verdicts[c.name].groups
        g = groups.get(lead.key)
        peers = [r.label for r in mixers if r is not lead and g is not None and groups.get(r.key) == g]
        below = board.not_above(lead, c)
        alone_a &= g == "a" and not peers and not below
        where = f"{g or '—'} on {c.metric}" + (f" with {_and(peers)}" if peers else "")
        parts.append(where + (" (not better than its null)" if below else ""))
    if alone_a:
        return "alone in tie group a" + (" of each" if len(voting) > 1 else "")
    return "in tie group " + _and(parts)


def _columns_text(columns: list) -> str:
    """``perplexity (ppl, ood_ppl) and glue (sst2/acc)``: voting columns by suite."""
    by_suite: dict[str, list[str]] = {}
    for c in columns:
        by_suite.setdefault(c.suite, []).append(c.metric)
    return _and([f"{s} ({', '.join(m)})" for s, m in by_suite.items()])


def _interval(board: "Board", row) -> str:
    lo, hi = board.rank_interval.get(row.key) or (board.rank[row.key],) * 2
    return f"{lo}–{hi}"


def _overlaps(a: tuple[int, int] | None, b: tuple[int, int]) -> bool:
    return a is not None and not (a[1] < b[0] or b[1] < a[0])


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def silent_suites(board: "Board") -> list[tuple[str, str]]:
    """The suites on the board of which no column votes, each with a short reason (its score columns' most
    common one; a suite without a score column measures something else than quality)."""
    table = board.table
    shown = table.shown_configs()
    voting = {c.suite for c in board.voting}
    out = []
    for suite in dict.fromkeys(c.suite for c in table.columns):
        if suite in voting:
            continue
        columns = [c for c in table.columns if c.suite == suite and c.config == shown[suite]]
        scores = [c for c in columns if c.role == "score"]
        if not scores:
            out.append((suite, f"{_and(sorted({ROLE_WORDS.get(c.role, c.role) for c in columns}))}, not quality"))
            continue
        reasons = [short_reason(board.verdicts[c.name].reason) for c in scores if c.name in board.verdicts]
        common = sorted(set(reasons), key=lambda r: (-reasons.count(r), reasons.index(r)))
        out.append((suite, " or ".join(common[:2]) + (", by column" if len(common) > 1 else "")
                    if common else "no reason recorded"))
    return out


def _silent_text(board: "Board") -> str:
    silent = silent_suites(board)
    if not silent:
        return ""
    verb = "does" if len(silent) == 1 else "do"
    return f"; {_and([s for s, _ in silent])} {verb} not vote ({_reasons(silent)})"


def _reasons(silent: list[tuple[str, str]]) -> str:
    """``glue: no row beats chance; lm-eval and robustness: ...``: suites that share a reason named together."""
    by_reason: dict[str, list[str]] = {}
    for suite, why in silent:
        by_reason.setdefault(why, []).append(suite)
    return "; ".join(f"{_and(suites)}: {why}" for why, suites in by_reason.items())


#: what a column of a role other than ``score`` holds, for a reason it does not vote
ROLE_WORDS = {"speed": "speed", "diagnostic": "diagnostics", "baseline": "baselines"}
#: a column's reason for not voting (harness/reporting/board.py), shortened for one sentence: (prefix, short text)
_SHORT = (
    ("no mixer beats its own null", "no mixer beats its untrained null model"),
    ("every mixer cell is ‡", "no mixer cell beats its null after Holm's correction"),
    ("no null can veto it", "no control or null model to test it against"),
    ("its null model", "its null model is missing for some rows"),
    ("no row is better than chance", "no row beats chance"),
    ("unreliable", "unreliable"),
    ("produced for some rows", "missing for some rows"),
    ("its runs use an ad-hoc config", "ad-hoc config only (diagnostic)"),
    ("computed over unequal numbers of units", "unequal numbers of units"),
    ("not the suite's canonical config", "not the canonical config"),
)


def short_reason(reason: str) -> str:
    """A few words for why a column does not vote (the board's full reason is in the column list)."""
    if reason.startswith("no mixer beats the "):
        return reason.partition(":")[0]
    if reason.startswith("role "):
        role = reason.removeprefix("role ")
        return f"{ROLE_WORDS.get(role, role)}, not quality"
    for prefix, text in _SHORT:
        if reason.startswith(prefix):
            return text
    head = reason.split(":")[0].split(" (")[0]
    return head if len(head) <= 60 else head[:59] + "…"


# ---------------------------------------------------------------------------------------------- directions


def p_text(p: float) -> str:
    """``p = 0.08``, ``p = 0.0023``, ``p < 0.001``."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def difference_words(d, higher: bool, alpha: float, mine: str = "mixer", other: str = "control",
                     significant: bool | None = None, family: str = "") -> str:
    """A paired difference (``mine - other``, :class:`harness.reporting.differences.CellDifference`) in words, its
    direction first: ``control better, p = 0.002`` or ``mixer better but not significant (p = 0.08)``. The reader
    should not have to work out from a sign and a p-value who came out ahead. ``significant`` overrides
    ``p < alpha`` (a Holm-corrected decision); ``family`` names the correction (``over 4 mixers``)."""
    import math

    if d.difference is None or not math.isfinite(d.difference):
        return f"no comparison ({other} has no value)"
    sig = d.p_value < alpha if significant is None else significant
    if d.difference == 0:
        return f"no difference ({p_text(d.p_value)})"
    ahead = mine if (d.difference > 0) == higher else other
    if sig:
        return f"{ahead} better, {p_text(d.p_value)}"
    corrected = f" after Holm's correction {family}" if family and d.p_value < alpha else ""
    return f"{ahead} better but not significant{corrected} ({p_text(d.p_value)})"


def null_words(board: "Board", row, column) -> str:
    """How a mixer's cell fares against its null (the reference controls, else its own untrained model), in
    words with the p-value, significance decided as the board decides it (Holm over the column's mixers): what a ‡
    cell means in this case."""
    alpha = board.config.alpha
    higher = column.higher_is_better
    mixers = [r for r in board.table.rows if r.preset == row.preset and not r.control and not r.external]
    family = f"over the column's {len(mixers)} mixers" if len(mixers) > 1 else ""
    parts = []
    for comp in board.vs_controls.get((row.key, column.name), []):
        if comp.label not in board.reference_controls:
            continue
        same = [c for r in mixers for c in board.vs_controls.get((r.key, column.name), []) if c.control == comp.control]
        parts.append(f"vs {comp.label}: " + difference_words(comp.difference, higher, alpha,
                                                             significant=_rejected(comp, same, alpha), family=family))
    if not parts and (d := board.vs_null.get((row.key, column.name))) is not None:
        same = [n for r in mixers if (n := board.vs_null.get((r.key, column.name))) is not None]
        parts.append("vs its untrained null: " + difference_words(d, higher, alpha, other="null",
                                                                  significant=_rejected(d, same, alpha),
                                                                  family=family))
    return "; ".join(parts)


def _rejected(one, family: list, alpha: float) -> bool:
    """Whether Holm's correction over ``family`` (comparisons or differences, ``one`` among them) rejects ``one``."""
    from harness import stats

    def p(x) -> float:
        return x.difference.p_value if hasattr(x, "control") else x.p_value

    reject, _ = stats.holm([p(x) for x in family], alpha)
    return next((bool(r) for x, r in zip(family, reject) if x is one), p(one) < alpha)


def veto_reason(board: "Board", column) -> str:
    """The board's reason why ``column`` does not vote, with the direction of the difference that vetoed it
    stated in words (``control better, p = 0.002``) where a null vetoed it; other reasons as the board gives them."""
    verdict = board.verdicts.get(column.name)
    if verdict is None or verdict.votes:
        return ""
    reason = verdict.reason
    found = _veto_finding(board, column, reason)
    if found is None:
        return reason
    head, words, d = found
    iv = "" if d.interval is None else f" [{d.interval.low:.4g}, {d.interval.high:.4g}]"
    scale = "items'" if d.scale == "items" else "values'"
    return f"{head}: {words}; difference {d.difference:+.4g}{iv} on the {scale} scale"


def _veto_finding(board: "Board", column, reason: str):
    """(the reason's lead, the vetoing difference in words, that difference) for a column a null vetoed, by the
    board's own rule (harness/reporting/board.py: best mixer against each control, Holm over the controls; or
    against its own null model); None for the other reasons."""
    import math

    from harness import stats

    table, cfg = board.table, board.config
    higher = column.higher_is_better
    kind = ("control" if reason.startswith("no mixer beats the ") else "null" if
            reason.startswith("no mixer beats its own null") else "marked" if reason.startswith("every mixer cell")
            else "")
    if not kind:
        return None
    for preset in dict.fromkeys(r.preset for r in table.rows):
        rows = [r for r in table.rows if r.preset == preset]
        cells = {r.key: c for r in rows if not r.control and not r.external
                 and (c := table.cell(r, column)) is not None and math.isfinite(c.value)}
        if not cells:
            continue
        best_key = sorted(cells, key=lambda k: (-cells[k].value if higher else cells[k].value, k))[0]
        best = next(r for r in rows if r.key == best_key)
        if kind == "null":
            d = board.vs_null.get((best_key, column.name))
            if d is None or (d.p_value < cfg.alpha and (d.difference > 0) == higher):
                continue
            return (f"no mixer beats its own null model; the best, {best.label}, against its untrained null",
                    difference_words(d, higher, cfg.alpha, other="null"), d)
        comps = [c for c in board.vs_controls.get((best_key, column.name), [])
                 if math.isfinite(c.difference.difference)]
        if kind == "marked":
            comp = next((c for c in comps if c.label in board.reference_controls), None)
            if comp is None:
                continue
            same = [c for k in cells for c in board.vs_controls.get((k, column.name), []) if c.control == comp.control]
            return (f"every mixer cell is ‡; the best, {best.label}, against {comp.label}",
                    difference_words(comp.difference, higher, cfg.alpha, significant=_rejected(comp, same, cfg.alpha),
                                     family=f"over the column's {len(cells)} mixers"), comp.difference)
        controls = {r.key: c for r in rows if r.control and (c := table.cell(r, column)) is not None
                    and math.isfinite(c.value)}
        order = [c for k in sorted(controls, key=lambda k: (-controls[k].value if higher else controls[k].value, k))
                 for c in comps if c.control == k]
        reject, _ = stats.holm([c.difference.p_value for c in order], cfg.alpha)
        for comp, rej in zip(order, reject):
            if rej and (comp.difference.difference > 0) == higher:
                continue
            ctrl = next(r for r in rows if r.key == comp.control)
            what = "context-free control" if ctrl.context_free else "control"
            family = f"over {len(order)} controls" if len(order) > 1 else ""
            return (f"no mixer beats the {what} {ctrl.label}; the best mixer, {best.label}, against it",
                    difference_words(comp.difference, higher, cfg.alpha, significant=bool(rej), family=family),
                    comp.difference)
    return None
