"""The board as the site shows it (docs/site.md): the shared display (:func:`harness.reporting.render.display`)
rearranged for a reader on a 1280 px screen.

* The voting columns come right after model and parameters, so the columns the rank comes from are on screen
  without scrolling; state, check and seeds follow, then the columns that do not vote.
* The rank cell always shows its interval (``1 (1–1)``, ``=2 (1–3)``): the legend promises it, and an interval
  of one place is a claim too.
* Seeds read as ids, ``seed 0`` / ``seeds 0, 1, 2``, never ``1 (0)``, which reads as "zero seeds".
* A suite page orders its rows by that suite alone (:func:`suite_order`): by its voting column's tie groups (its
  Borda points over its tie groups when several of its columns vote; its first headline column when none does),
  not by the leaderboard's rank over every suite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.reporting.board import Board, effective_groups
from harness.reporting.numbers import MISSING
from harness.reporting.render import Display, display, ordered_rows, rank_text
from harness.reporting.table import Column, Row
from harness.stats import group_points

#: the leading columns, in the order the site shows them; the voting columns go right after ``params``
FIRST = ("rank", "order", "model", "preset", "params")
AFTER_VOTES = ("state", "check", "seeds")


def rank_cell(board: Board, row: Row) -> str:
    """``1 (1–1)``, ``=2 (1–3)``: the rank with its bootstrap interval, ``=`` where it overlaps another row's."""
    return rank_text(board, row, always_interval=True)


def seeds_text(seeds) -> str:
    """``seed 0``, ``seeds 0, 1, 2``: the ids of the training seeds a row averages."""
    seeds = list(seeds)
    if not seeds:
        return MISSING
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


@dataclass
class SuiteOrder:
    """A suite's own order of the board's rows: ``columns`` it is taken from, the rows in that order, and each
    ranked row's place (``=1 (a)``) with its sort number."""

    suite: str
    columns: list[Column]
    rows: list[Row]
    place: dict[str, tuple[str, float | None]]
    by_points: bool

    def describe(self) -> str:
        names = ", ".join(c.name for c in self.columns)
        if self.by_points:
            return (f"by Borda points over {self.suite}'s voting columns ({names}), each point from their tie "
                    "groups as on the leaderboard")
        return f"by {names}, best first, in its tie groups (letter in brackets)"


def order_columns(board: Board, suite: str) -> tuple[list[Column], bool]:
    """The columns a suite page orders by: its voting columns (several: by their Borda points, True), else its first
    headline column, else its first column; all of the config the board shows for the suite."""
    shown = board.table.shown_configs().get(suite)
    columns = [c for c in board.table.columns if c.suite == suite and c.config == shown]
    voting = [c for c in columns if (v := board.verdicts.get(c.name)) is not None and v.votes]
    if voting:
        return voting, len(voting) > 1
    first = next((c for c in columns if c.headline), columns[0] if columns else None)
    return ([first] if first else []), False


def _oriented(board: Board, row: Row, column: Column | None) -> float:
    """A sort key, best first; a missing value last."""
    cell = board.table.cell(row, column) if column is not None else None
    if cell is None or cell.value is None or not math.isfinite(cell.value):
        return math.inf
    return -cell.value if column.higher_is_better else cell.value


def suite_order(board: Board, suite: str) -> SuiteOrder:
    """Per preset: the mixers with a value, in the suite's order (tie groups of its column, or its Borda points),
    then the mixers without one, then the controls (by the same column's value), external models last."""
    columns, by_points = order_columns(board, suite)
    first = columns[0] if columns else None
    table = board.table
    place: dict[str, tuple[str, float | None]] = {}
    out: list[Row] = []
    presets = list(dict.fromkeys(r.preset for r in ordered_rows(board)))
    for external in (False, True):
        for preset in presets:
            rows = [r for r in table.rows if r.preset == preset and r.external == external]
            if not rows:
                continue
            mixers = [r for r in rows if not r.control and not r.external]
            valued = [r for r in mixers if any(table.cell(r, c) is not None and math.isfinite(table.cell(r, c).value)
                                               for c in columns)]
            keys = [r.key for r in valued]
            score: dict[str, float] = {k: 0.0 for k in keys}
            letters: dict[str, str] = {}
            for c in columns:
                groups = board.verdicts[c.name].groups
                bottom = {r.key for r in valued if board.not_above(r, c)}
                eff = effective_groups({k: groups.get(k) for k in keys}, bottom)
                if by_points:
                    for k, p in group_points(eff).items():
                        score[k] -= p
                else:
                    score = {k: float(v) for k, v in eff.items()}
                    letters = {k: ("‡" if k in bottom else groups.get(k) or MISSING) for k in keys}
            valued.sort(key=lambda r: (score[r.key], _oriented(board, r, first), r.label))
            for r in valued:
                pos = 1 + sum(score[o] < score[r.key] - 1e-12 for o in keys)
                shared = sum(abs(score[o] - score[r.key]) <= 1e-12 for o in keys) > 1
                text = f"{'=' if shared else ''}{pos}" + (f" ({letters[r.key]})" if letters else "")
                place[r.key] = (text, float(pos))
            rest = [r for r in mixers if r not in valued]
            controls = sorted((r for r in rows if r.control), key=lambda r: (_oriented(board, r, first), r.label))
            others = [r for r in rows if r.external]
            out += valued + sorted(rest, key=lambda r: r.label) + controls + sorted(others, key=lambda r: r.label)
    return SuiteOrder(suite, columns, out, place, by_points)


def site_display(board: Board, view: str, suite: str | None = None) -> tuple[Display, list[Row], SuiteOrder | None]:
    """The display of ``view`` (full or suite) with the site's rank cells, seeds and column order, its rows in the
    order shown (a suite page: :func:`suite_order`), and the suite order used, if any."""
    d = display(board, view, suite, "html")
    rows = ordered_rows(board)
    order = suite_order(board, suite) if view == "suite" and suite else None
    keys = list(d.keys)
    for i, row in enumerate(rows):
        if "rank" in keys:
            j = keys.index("rank")
            if order is not None:
                d.body[i][j], d.raw[i][j] = order.place.get(
                    row.key, ("control" if row.control else "external" if row.external else MISSING, None))
            else:
                d.body[i][j] = rank_cell(board, row)
        if "seeds" in keys:
            d.body[i][keys.index("seeds")] = seeds_text(row.seeds)
    if order is not None and "rank" in keys:
        d.keys[keys.index("rank")] = "order"
        d.header[keys.index("rank")] = "order"
        d.text_columns = set(d.text_columns) | {"order"}
        index = {r.key: i for i, r in enumerate(rows)}
        permutation = [index[r.key] for r in order.rows]
        for name in ("body", "raw", "best"):
            setattr(d, name, [getattr(d, name)[i] for i in permutation])
        rows = list(order.rows)
    first = [c.name for c in order.columns] if order is not None else []
    votes = [k for k in d.keys if k not in first and (v := board.verdicts.get(k)) is not None and v.votes]
    head = [k for k in FIRST if k in d.keys]
    middle = [*dict.fromkeys([*first, *votes])]
    tail = [k for k in AFTER_VOTES if k in d.keys]
    columns = [*head, *middle, *tail]
    columns += [k for k in d.keys if k not in columns]
    at = [d.keys.index(k) for k in columns]
    d.keys = columns
    d.header = [d.header[j] for j in at]
    for name in ("body", "raw", "best"):
        setattr(d, name, [[line[j] for j in at] for line in getattr(d, name)])
    return d, rows, order
