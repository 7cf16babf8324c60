"""The numbers a scoring command ends with (docs/cli.md, "What a finished command prints").

A command that scored models used to end with phase timings or "run ... written": the reader then had to find the
numbers with other commands. Every command that scores or finds runs (``eval``, ``run``, ``nightly``,
``quickstart``, ``reproduce``, a suite's own command such as ``lm-eval``) now ends with :func:`scored_report`: the
runs' headline metrics with their intervals and run ids in one table (laid out as lm-eval's results table, which its
users read first), and after ``run`` and ``nightly`` the compact board of the rows those runs belong to.

One implementation for every command, suites' commands included: while the CLI holds a :class:`ScoredRuns` open
around a command, the harness's primitives note the runs they score or find (:func:`note_runs`, called by
:func:`harness.running.evaluate.evaluate`, :func:`harness.running.evaluate.store_runs` and
:func:`harness.running.runner.run_requests`, the last in the driver, whichever executor ran the jobs), and the CLI
prints the report of what was noted when the command returns. Outside a command (a test, a notebook) nothing is
noted.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the CLI opens a ScoredRuns around the listings too, which stay light
    from harness.store.results import ResultsStore, RunRecord
    from harness.suite import Metric

_ACTIVE: list["ScoredRuns"] = []


class ScoredRuns:
    """The runs noted while open, per store, in the order first noted."""

    def __init__(self) -> None:
        self.stores: dict[str, ResultsStore] = {}
        self.runs: dict[str, dict[str, None]] = {}  # store root -> run ids (a dict keeps the order, once each)

    def __enter__(self) -> "ScoredRuns":
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self)

    def report(self, board: bool = False) -> str:
        """:func:`scored_report` of the noted runs, which are then forgotten: a command that prints its own board
        last (quickstart) takes the numbers before it, and the CLI prints only what is left."""
        texts = [scored_report(self.stores[root], list(ids), board) for root, ids in self.runs.items()]
        self.runs.clear()
        return "\n\n".join(t for t in texts if t)


def note_runs(store: ResultsStore, run_ids: Iterable[str | None]) -> None:
    """Note runs a command scored or found (absent ones are left out when reported); a no-op outside a command."""
    for scored in _ACTIVE:
        scored.stores.setdefault(str(store.root), store)
        scored.runs.setdefault(str(store.root), {}).update(dict.fromkeys(r for r in run_ids if r))


def report_noted(board: bool = False) -> str:
    """The report of the innermost open :class:`ScoredRuns` ("" when none is open), forgetting its runs."""
    return _ACTIVE[-1].report(board) if _ACTIVE else ""


# ---------------------------------------------------------------------------------------------- the report


def scored_report(store: ResultsStore, run_ids: Iterable[str], board: bool = False) -> str:
    """The runs of ``run_ids`` that ``store`` holds as :func:`numbers_table`, then (``board``) :func:`touched_board`,
    then how to see the rest of a run; "" when it holds none of them."""
    runs = [store.read_run(rid, samples=False) for rid in dict.fromkeys(run_ids) if store.has_run(rid)]
    if not runs:
        return ""
    parts = [numbers_table(runs)]
    if board:
        parts.append(touched_board(store, [r.run_id for r in runs]))
    which = runs[0].run_id if len(runs) == 1 else "RUN_ID"
    parts.append(f"every metric and the provenance of a run: mixbench show {which} --results {store.root}")
    return "\n\n".join(p for p in parts if p)


def model_label(run: RunRecord) -> str:
    """The scored model as a reader names it: its board label (the mixer and whatever differs from the defaults:
    a scaling rung's smaller token budget too), seed and preset."""
    s = run.manifest.subject
    return s.label + (f" seed {s.seed}" if s.seed is not None else "") + (f" @ {s.preset}" if s.preset else "")


def headline_metrics(run: RunRecord) -> list[Metric]:
    """The run's headline metrics (its suite's patterns, in their order), or every metric when it names none."""
    from harness.reporting.table import _headline_rank, _is_headline

    headline = tuple(run.manifest.headline)
    chosen = [m for m in run.metrics if _is_headline(m.name, headline)]
    return sorted(chosen, key=lambda m: _headline_rank(m.name, headline))


def numbers_table(runs: list[RunRecord]) -> str:
    """One Markdown table of every run's headline metrics: suite | metric (↑ higher / ↓ lower is better) | value |
    interval (with its kind and level) | n | run id, the model first when the runs scored several. A model and a
    suite are written on their first line only, as lm-eval writes a task; the run id is on every line, so any line
    can be pasted into ``mixbench show``."""
    from harness.reporting.run_report import interval_text

    labels = {r.run_id: model_label(r) for r in runs}
    order = list(dict.fromkeys(labels.values()))
    runs = sorted(runs, key=lambda r: order.index(labels[r.run_id]))  # stable: a model's runs together
    several = len(order) > 1
    header = (["model"] if several else []) + ["suite", "metric", "value", "interval", "n", "run id"]
    rows, unreliable, last = [], [], (None, None)
    for run in runs:
        for m in headline_metrics(run):
            key = (labels[run.run_id], run.manifest.suite)
            lead = [key[0] if key[0] != last[0] else ""] if several else []
            suite = run.manifest.suite if key != last else ""
            last = key
            rows.append([*lead, suite, f"{m.name} {'↑' if m.higher_is_better else '↓'}",
                         _value(m.value) + ("†" if m.unreliable else ""), interval_text(m),
                         "" if m.n is None else f"{m.n:,}", run.run_id])
            if m.unreliable:
                unreliable.append(f"{m.name}: {m.unreliable}")
    right = {len(header) - 4, len(header) - 2}  # value and n
    lines = [] if several else [f"model: {order[0]}"]
    lines += _markdown(header, rows, right)
    if unreliable:
        lines.append("† unreliable (shown, never votes): " + "; ".join(dict.fromkeys(unreliable)))
    return "\n".join(lines)


def _value(x: float) -> str:
    from harness.reporting.numbers import fmt

    return fmt(x)


def _markdown(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "|" + "|".join(f" {c.rjust(w) if i in right else c.ljust(w)} "
                              for i, (c, w) in enumerate(zip(cells, widths))) + "|"

    rule = "|" + "|".join("-" * (w + 1) + ":" if i in right else "-" * (w + 2) for i, w in enumerate(widths)) + "|"
    return [line(header), rule, *(line(r) for r in rows)]


def touched_board(store: ResultsStore, run_ids: Iterable[str]) -> str:
    """The compact board (``mixbench leaderboard``) showing only the rows that hold ``run_ids``. The board is
    computed over the whole store, so ranks, tie groups and votes are the board's own, not those of a board of
    these rows alone; "" when none of the runs is a row of the board (stale code, a smaller budget)."""
    from harness.reporting.leaderboard import board_of
    from harness.reporting.render import render

    board = board_of(store)
    ids = set(run_ids)
    rows = [r for r in board.table.rows if any(run.run_id in ids for run in r.runs)]
    if not rows:
        return ""
    keys = {r.key for r in rows}
    shown = dataclasses.replace(board, table=dataclasses.replace(board.table, rows=rows),
                                context=[c for c in board.context if c.row in keys])
    total = len(board.table.rows)
    lead = ("the board (`mixbench leaderboard`):" if len(rows) == total else
            f"the board's rows of these runs ({len(rows)} of {total}; ranks, tie groups and votes are those of the "
            f"whole board, which `mixbench leaderboard --results {store.root}` prints):")
    return textwrap.fill(lead, 120, break_on_hyphens=False) + "\n\n" + render(shown, "md", "compact")
