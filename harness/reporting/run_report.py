"""What a run measured, as text for a terminal: ``mixbench show RUN_ID`` (one run's metrics and provenance) and
``mixbench compare A B`` (two models' paired differences on their shared items). docs/cli.md describes the commands;
the table every scoring command ends with is :mod:`harness.reporting.scored`'s.

Every number is printed with its interval and the interval's kind (DESIGN §6): a value alone would invite a
reader to compare two numbers whose uncertainty they cannot see.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

from harness.errors import MixbenchError
from harness.store.results import ResultsStore, RunRecord
from harness.suite import Metric

#: widest a printed run id prefix may be shortened to and still be asked for
MIN_PREFIX = 4


def _number(x: float | None) -> str:
    from harness.reporting.numbers import fmt

    return fmt(x)


def interval_text(metric: Metric) -> str:
    """``[low, high] kind level`` (``range`` has no level), or ``—`` without an interval."""
    iv = metric.interval
    if iv is None:
        return "—"
    level = f" {iv.level:.0%}" if iv.level is not None else ""
    return f"[{_number(iv.low)}, {_number(iv.high)}] {iv.kind}{level}"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]).rstrip()


def metrics_table(run: RunRecord, headline_only: bool = False) -> str:
    """The run's metrics (its headline ones first, marked ``*``): value, interval, n, direction, unit."""
    from harness.reporting.table import _headline_rank, _is_headline

    headline = tuple(run.manifest.headline)  # patterns (nll_ctx_*), as the board reads them
    chosen = [m for m in run.metrics if not headline_only or _is_headline(m.name, headline)]
    chosen.sort(key=lambda m: _headline_rank(m.name, headline))
    rows = []
    for m in chosen:
        flags = ("*" if headline and _is_headline(m.name, headline) else "") + (" unreliable" if m.unreliable else "")
        rows.append([
            m.name + flags.split(" ")[0], _number(m.value), interval_text(m), "" if m.n is None else str(m.n),
            "higher" if m.higher_is_better else "lower", m.unit,
        ])  # fmt: skip
    text = _table(["metric", "value", "interval", "n", "better", "unit"], rows, {1, 3})
    unreliable = [f"{m.name}: {m.unreliable}" for m in chosen if m.unreliable]
    if unreliable:
        text += "\nunreliable (shown, never votes): " + "; ".join(unreliable)
    return text


def find_run(store: ResultsStore, prefix: str) -> RunRecord:
    """The run whose id starts with ``prefix`` (at least :data:`MIN_PREFIX` characters, one match)."""
    if len(prefix) < MIN_PREFIX:
        raise MixbenchError(f"give at least {MIN_PREFIX} characters of a run id, got '{prefix}'.")
    store.require_existing()
    matches = [r for r in store.run_ids() if r.startswith(prefix)]
    if not matches:
        raise MixbenchError(f"no run '{prefix}' in {store.root}; `mixbench leaderboard --suite S --format json` "
                            "lists runs with their ids.")
    if len(matches) > 1:
        raise MixbenchError(f"run id '{prefix}' is ambiguous in {store.root}: {', '.join(sorted(matches)[:5])}"
                            f"{' ...' if len(matches) > 5 else ''}; give more characters.")
    return store.read_run(matches[0])


def show_text(store: ResultsStore, prefix: str) -> str:
    """``mixbench show``: the run's subject, config, gate, timings and provenance, then every metric."""
    run = find_run(store, prefix)
    m, s = run.manifest, run.manifest.subject
    prov = m.provenance or {}
    git = prov.get("git")
    git_text = "not a git checkout" if not git else f"{(git.get('commit') or 'no commit')[:12]}" + (
        " (uncommitted changes)" if git.get("dirty") else "")
    hardware = prov.get("hardware") or {}
    lines = [
        f"run {run.run_id}  ({m.suite} v{m.suite_version}, written {m.written_at})",
        f"subject     {s.kind} {s.mixer}" + (f" (config {_kv(s.config_diff)})" if s.config_diff else " (defaults)")
        + (f", preset {s.preset}" if s.preset else "") + (f", seed {s.seed}" if s.seed is not None else ""),
        f"model       {s.id}" + (f", {s.parameters:,} parameters" if s.parameters else "")
        + (f", step {s.checkpoint_step}" if s.checkpoint_step is not None else ""),
        f"suite       {_kv(m.config_diff) or 'defaults'} ({m.config_source})",
        f"gate        {m.gate.status} (version {m.gate.version})",
        f"device      {s.device or '—'}" + (f", kernel {s.kernel}" if s.kernel else ""),
        "time        " + (", ".join(f"{k} {_number(v)} s" for k, v in m.timings.items()
                                     if isinstance(v, (int, float)) and not isinstance(v, bool)) or "—"),
        f"code        mixbench {prov.get('mixbench', '?')}, git {git_text}, python {prov.get('python', '?')}",
        f"packages    {_kv(prov.get('packages') or {}) or '—'}",
        f"hardware    {hardware.get('cpu') or '?'}, {hardware.get('usable_cores', '?')} cores, torch threads "
        f"{hardware.get('torch_threads', '?')}",
        "",
        metrics_table(run),
    ]
    if run.plots:
        lines += ["", "plots: " + ", ".join(run.plots)]
    return "\n".join(lines)


def _kv(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


# ---------------------------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class Comparison:
    """One column on which both models have a cell: ``a - b`` with its interval and how it was paired.

    ``a`` and ``b`` are the cells' values in the column's ``unit``; ``difference`` and its interval are on
    ``scale``: the items' own where they were paired on shared items (NLL per token for a perplexity column), else
    the values'. ``role`` is the metric's (:class:`harness.suite.Metric`): a baseline gets no verdict."""

    column: str
    higher_is_better: bool
    a: float
    b: float
    difference: float
    low: float | None
    high: float | None
    basis: str  # "n shared items" or "intervals (no shared items)"
    p_value: float
    verdict: str
    scale: str = ""
    unit: str = ""
    role: str = "score"


#: roles whose columns get no verdict: a baseline (the unigram model of the training split, the majority class) is
#: the same for every model trained on the same data, so a difference there says nothing about the models
NO_VERDICT_ROLES = ("baseline",)


def compare_models(store: ResultsStore, a: str, b: str, suites: Iterable[str] | None = None,
                   alpha: float = 0.05, all_metrics: bool = False) -> tuple[str, str, list[Comparison]]:
    """Paired differences of the board rows named ``a`` and ``b`` (a row label such as ``mamba``, a row key, or a
    run id prefix) on every column both have (the board's headline columns; every metric with ``all_metrics``): the
    board's own :func:`harness.reporting.differences.cell_difference` (paired bootstrap on shared items, seeds averaged
    per item), Holm-corrected across the columns that get a verdict (every role but :data:`NO_VERDICT_ROLES`)."""
    from harness import stats
    from harness.reporting.board import BoardConfig
    from harness.reporting.differences import cell_difference, column_seed_noise
    from harness.reporting.table import build_table

    store.require_existing()
    table = build_table(store, suites, all_metrics=all_metrics, all_budgets=True)  # any row may be named
    row_a, row_b = _row(table, store, a), _row(table, store, b)
    if row_a.key == row_b.key:
        raise MixbenchError(f"'{a}' and '{b}' are the same model; compare two different ones.")
    config = BoardConfig()
    found = []
    for column in table.columns:
        ca, cb = table.cell(row_a, column), table.cell(row_b, column)
        if ca is None or cb is None or not (math.isfinite(ca.value) and math.isfinite(cb.value)):
            continue
        pool = [r for r in table.rows if r.preset in (row_a.preset, row_b.preset)]
        noise = column_seed_noise(table, pool, column, row_a.preset) if row_a.preset == row_b.preset else None
        d = cell_difference(ca, cb, config, noise)
        shared = len(set(ca.items or {}) & set(cb.items or {}))
        basis = f"{shared} shared items" if d.scale == "items" else (
            "intervals (no shared items)" if d.interval is not None else "values only (no interval: no claim)")
        if noise is not None:
            basis += f" + seed spread {noise.sd:.3g}"
        scale = (ca.items_unit or cb.items_unit or "item score") if d.scale == "items" else "as A, B"
        found.append((column, ca, cb, d, basis, scale))
    if not found:
        raise MixbenchError(f"'{row_a.label}' and '{row_b.label}' share no scored column in {store.root}; run the "
                            "same suites for both.")
    judged = [i for i, (column, *_) in enumerate(found) if column.role not in NO_VERDICT_ROLES]
    reject, _ = stats.holm([found[i][3].p_value for i in judged], alpha)
    significant = dict(zip(judged, reject))
    out = []
    for i, (column, ca, cb, d, basis, scale) in enumerate(found):
        iv = d.interval
        if column.role in NO_VERDICT_ROLES:  # shown for reference, never judged
            verdict = f"{column.role}: no verdict"
        elif ca.unreliable or cb.unreliable:  # shown, never a verdict: the number measures nothing comparable
            verdict = "unreliable: " + (ca.unreliable or cb.unreliable or "")
        elif not significant[i]:
            verdict = "no difference shown"
        else:
            a_better = (d.difference > 0) == column.higher_is_better
            verdict = "A better" if a_better else "B better"
        out.append(Comparison(column.name, column.higher_is_better, ca.value, cb.value, d.difference,
                              None if iv is None else iv.low, None if iv is None else iv.high, basis, d.p_value,
                              verdict, scale, column.unit, column.role))
    return row_a.label, row_b.label, out


def _row(table, store: ResultsStore, name: str):
    matches = [r for r in table.rows if name in (r.label, r.key, r.mixer)]
    if not matches:
        matches = [r for r in table.rows if any(run.run_id.startswith(name) for run in r.runs)] if len(
            name) >= MIN_PREFIX else []
    if not matches:
        raise MixbenchError(f"no model '{name}' in {store.root}; models: "
                            f"{', '.join(sorted({r.label for r in table.rows})) or 'none'}.")
    if len(matches) > 1:
        raise MixbenchError(f"'{name}' names {len(matches)} models ({', '.join(sorted(r.key for r in matches)[:4])}"
                            "); give a row key or a run id.")
    return matches[0]


def compare_text(store: ResultsStore, a: str, b: str, suites: Iterable[str] | None = None,
                 all_metrics: bool = False) -> str:
    """``mixbench compare``: a line per column both models have (the board's headline columns, or every metric),
    each number's scale named; then, for speed columns, how many times faster one model is than the other."""
    label_a, label_b, rows = compare_models(store, a, b, suites, all_metrics=all_metrics)
    body = []
    for c in rows:
        paired = _number(c.difference) + ("" if c.low is None else f" [{_number(c.low)}, {_number(c.high)}]")
        body.append([c.column, _number(c.a), _number(c.b), _number(c.a - c.b), paired, c.scale, c.basis,
                     f"{c.p_value:.3g}", c.verdict])
    header = ["column", "A", "B", "A - B", "paired A - B [95%]", "its scale", "paired on", "p", "verdict (Holm)"]
    judged = sum(1 for c in rows if c.role not in NO_VERDICT_ROLES)
    note = ("A, B and A - B are each column's values, in its own unit (perplexity, accuracy, floor time / time). The "
            "paired A - B is on the scale named beside it: on shared items the items' own (NLL per token for "
            "perplexity, so a perplexity column's paired difference is a difference of log perplexities; the "
            "item's score elsewhere), a paired bootstrap with seeds averaged per item and the training-seed spread "
            "of the column added where it is known (docs/protocol.md, \"Seeds\"); without shared items, the values' "
            f"scale, a normal interval from the two intervals. Holm's correction over the {judged} columns with a "
            "verdict, alpha 0.05; a baseline column (the same for every model trained on the same data) gets none.")
    lines = [
        f"A = {label_a}", f"B = {label_b}", *textwrap.wrap(note, 120, break_on_hyphens=False),
        _table(header, body, {1, 2, 3, 7}),
    ]
    speed = [f"  {c.column}: {text}" for c in rows if c.role == "speed"
             and (text := speed_ratio_text(_number(c.a), _number(c.b), _speed_kind(c.unit)))]
    if speed:
        lines += ["speed, from the values printed above (the division is shown):", *speed]
    return "\n".join(lines)


def _speed_kind(unit: str) -> str | None:
    """Whether a speed column's unit is a time (``ms/token``, ``time / reference time``: lower is faster) or a
    rate (``tokens/s``, ``floor time / time``: higher is faster); None for the others (exponents, crossovers)."""
    if unit.endswith("/s") or "/ time" in unit:
        return "rate"
    if unit.startswith(("ms", "s/", "seconds", "time /")):
        return "time"
    return None


def speed_ratio_text(a: str, b: str, kind: str | None, names: tuple[str, str] = ("A", "B")) -> str:
    """How many times faster or slower ``a`` is than ``b``, two numbers as printed (times for ``kind`` "time",
    rates for "rate"): the ratio is the larger printed number over the smaller, to three significant digits, and
    the division is shown, so a reader dividing the printed numbers gets the printed ratio. "" when either is not
    a positive number or ``kind`` is None."""
    try:
        x, y = float(a.replace(",", "")), float(b.replace(",", ""))
    except ValueError:
        return ""
    if kind is None or not (x > 0 and y > 0) or not (math.isfinite(x) and math.isfinite(y)):
        return ""
    if x == y:
        return f"{names[0]} is as fast as {names[1]} ({a} = {b})"
    a_faster = (x < y) if kind == "time" else (x > y)
    big, small = (a, b) if x > y else (b, a)
    ratio = max(x, y) / min(x, y)
    return (f"{names[0]} is {_number_sig(ratio, 3)}x {'faster' if a_faster else 'slower'} than {names[1]} "
            f"({big} / {small})")


def _number_sig(x: float, significant: int) -> str:
    from harness.reporting.numbers import fmt

    return fmt(x, significant)
