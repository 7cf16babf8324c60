"""Rank stability across token budgets: did a column's ordering at a setting's largest budget already hold at half
of it? (docs/rank_stability.md; issue 34, item 4)

* **A budget series** is a comparable set of models: equal in everything but the mixer, its config and the token
  budget (:func:`harness.store.identity.budget_series`; code fingerprints and seeds do not split it, as they do not
  split a board row). Its *members* are its mixers and configs; control rows take no part.
* **The two budgets**: the series' largest budget ``B`` and the largest budget at most ``B/2`` it holds; none, and
  the column says so (``no half budget``); a series of one budget gets no record on the board (``only one budget``).
* **Orderings** are per column, best first by value, with tie groups computed among the series' models at that
  budget (:func:`harness.reporting.differences.tie_groups`: paired tests on shared items, Holm). Ranks are
  competition ranks among the members present at both budgets, so the two ranks of a member are comparable.
* **A swap** is a pair of members, present at both budgets, whose order by value is reversed, unless the two are
  in one tie group at both budgets (the board claims no order between them at either, so none changed). A column
  whose ordering has a swap is ``changed``; with none, ``held``; fewer than two members with values at both
  budgets: ``too few``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from harness.reporting.board_config import BoardConfig
from harness.reporting.differences import tie_groups
from harness.reporting.numbers import si
from harness.reporting.table import Column, Row, Table

STATUSES = ("held", "changed", "no half budget", "too few", "only one budget")


@dataclass(frozen=True)
class Placing:
    """A member's place in a column at one budget: its value, tie group, and rank among the members at both
    budgets (None for a member present at this budget only)."""

    member: str
    label: str
    value: float
    group: str
    rank: int | None


@dataclass(frozen=True)
class Swap:
    """Two members whose order reversed between the budgets: ``ahead`` leads at the largest budget."""

    ahead: str
    behind: str


@dataclass(frozen=True)
class Move:
    """A member of a swapped pair whose rank changed from the smaller budget to the largest."""

    label: str
    before: int
    after: int
    smaller: int
    largest: int

    @property
    def sentence(self) -> str:
        """``attention moved from 4th to 2nd between 164k and 328k tokens``."""
        return (f"{self.label} moved from {ordinal(self.before)} to {ordinal(self.after)} between "
                f"{tokens(self.smaller)} and {tokens(self.largest)} tokens")


@dataclass(frozen=True)
class ColumnStability:
    """One column of one budget series: its orderings at the largest budget and at the largest at most half of it,
    the pairs that swapped and the members that moved (see the module docstring)."""

    column: str
    series: str
    series_label: str
    budgets: tuple[int, ...]  # every budget the series holds, ascending
    largest: int
    smaller: int | None  # the largest budget <= largest / 2, if any
    status: str
    at_largest: tuple[Placing, ...] = ()
    at_smaller: tuple[Placing, ...] = ()
    swaps: tuple[Swap, ...] = ()
    moves: tuple[Move, ...] = ()

    @property
    def changed(self) -> bool:
        return self.status == "changed"

    @property
    def sentence(self) -> str:
        """What the board's legend says of this column."""
        big = tokens(self.largest)
        if self.status == "only one budget":
            return f"only one budget ({big} tokens): nothing to compare"
        if self.status == "no half budget":
            have = ", ".join(tokens(b) for b in self.budgets)
            return f"no budget at or below half of {big} tokens (budgets {have}): stability not assessed"
        small = tokens(self.smaller) if self.smaller is not None else "?"
        if self.status == "too few":
            return f"fewer than two models have values at both {small} and {big} tokens: nothing to compare"
        lacking = self._lacking()
        if self.status == "held":
            return (f"its ordering at {big} tokens ({ordering_text(self.at_largest)}) already held at {small}"
                    + (f" ({'; '.join(lacking)})" if lacking else ""))
        pairs = ", ".join(f"{s.ahead} over {s.behind}" for s in self.swaps)
        moves = "; ".join(m.sentence for m in self.moves) or "no model's rank among both budgets' models changed"
        details = [f"swapped: {pairs}", f"{small}: {ordering_text(self.at_smaller)}",
                   f"{big}: {ordering_text(self.at_largest)}", *lacking]
        return f"its ordering at {big} tokens did not hold at {small}: {moves} ({'; '.join(details)})"

    def _lacking(self) -> list[str]:
        """The members at one of the two budgets only (not compared)."""
        big = {p.member for p in self.at_largest}
        small = {p.member for p in self.at_smaller}
        parts = [f"{p.label} has no {tokens(self.smaller or 0)} model"
                 for p in self.at_largest if p.member not in small]
        return parts + [f"{p.label} has no {tokens(self.largest)} model"
                        for p in self.at_smaller if p.member not in big]

    def to_json(self) -> dict[str, Any]:
        return {
            "column": self.column, "series": self.series_label, "budgets": list(self.budgets),
            "largest": self.largest, "smaller": self.smaller, "status": self.status,
            "at_largest": [dataclasses.asdict(p) for p in self.at_largest],
            "at_smaller": [dataclasses.asdict(p) for p in self.at_smaller],
            "swaps": [dataclasses.asdict(s) for s in self.swaps],
            "moves": [m.sentence for m in self.moves], "sentence": self.sentence,
        }


# ---------------------------------------------------------------------------------------------- text


def tokens(n: int) -> str:
    """A token budget as the board writes counts: ``164k``, ``1.31M``."""
    return si(n)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def ordering_text(placings: tuple[Placing, ...]) -> str:
    """``attention > mamba ≈ deltanet``: best first, ``≈`` between neighbours of one tie group."""
    out = ""
    for i, p in enumerate(placings):
        if i:
            out += " ≈ " if p.group == placings[i - 1].group else " > "
        out += p.label
    return out


# ---------------------------------------------------------------------------------------------- series


def series_of(rows: list[Row]) -> dict[str, dict[int, dict[str, Row]]]:
    """Series -> budget -> member -> row, of the rows that have a budget and are not controls (the newest row
    where ``--all-versions`` shows several of one member)."""
    out: dict[str, dict[int, dict[str, Row]]] = defaultdict(lambda: defaultdict(dict))
    for row in sorted(rows, key=lambda r: r.newest):
        if row.budget is not None and not row.control:
            out[row.series][row.budget][row.member] = row
    return {k: dict(v) for k, v in out.items()}


def member_label(row: Row) -> str:
    """The row's label without its token budget: what names the member at every budget."""
    for run in row.runs:
        s = run.manifest.subject
        if s.kind == "model":
            return dataclasses.replace(s, train_diff={k: v for k, v in s.train_diff.items()
                                                      if k != "token_budget"}).label
    return row.label


def series_label(row: Row) -> str:
    """``quick`` or ``quick (lr=0.001)``: the preset and what the series' models share that differs from it."""
    for run in row.runs:
        s = run.manifest.subject
        if s.kind == "model":
            diff = {**s.backbone_diff, **{k: v for k, v in s.train_diff.items() if k != "token_budget"}, **s.data_diff}
            inner = ", ".join(f"{k}={v}" for k, v in sorted(diff.items()))
            return f"{row.preset} ({inner})" if inner else row.preset
    return row.preset


# ---------------------------------------------------------------------------------------------- assessment


def _placings(table: Table, rows: dict[str, Row], column: Column, config: BoardConfig,
              common: set[str]) -> tuple[Placing, ...]:
    present = {m: r for m, r in rows.items()
               if (c := table.cell(r, column)) is not None and math.isfinite(c.value)}
    groups = tie_groups(table, list(present.values()), column, config)
    sign = -1.0 if column.higher_is_better else 1.0
    value = {m: table.cell(r, column).value for m, r in present.items()}
    order = sorted(present, key=lambda m: (sign * value[m], member_label(present[m])))
    ranks = {m: 1 + sum(sign * value[o] < sign * value[m] for o in common) for m in present if m in common}
    return tuple(Placing(m, member_label(present[m]), value[m], groups.get(present[m].key, ""), ranks.get(m))
                 for m in order)


def column_stability(table: Table, column: Column, by_budget: dict[int, dict[str, Row]],
                     config: BoardConfig | None = None, series: str = "", label: str = "") -> ColumnStability:
    """``column``'s stability across one series' budgets (``by_budget``: budget -> member -> row)."""
    config = config or BoardConfig()
    budgets = tuple(sorted(by_budget))
    largest = budgets[-1]
    halves = [b for b in budgets if 2 * b <= largest]
    base = dict(column=column.name, series=series, series_label=label, budgets=budgets, largest=largest)
    if len(budgets) == 1:
        return ColumnStability(**base, smaller=None, status="only one budget")
    if not halves:
        return ColumnStability(**base, smaller=None, status="no half budget")
    smaller = halves[-1]

    def valued(b: int) -> set[str]:
        return {m for m, r in by_budget[b].items() if (c := table.cell(r, column)) is not None
                and math.isfinite(c.value)}

    common = valued(largest) & valued(smaller)
    at_largest = _placings(table, by_budget[largest], column, config, common)
    at_smaller = _placings(table, by_budget[smaller], column, config, common)
    base.update(smaller=smaller, at_largest=at_largest, at_smaller=at_smaller)
    if len(common) < 2:
        return ColumnStability(**base, status="too few")
    big = {p.member: p for p in at_largest}
    small = {p.member: p for p in at_smaller}
    sign = -1.0 if column.higher_is_better else 1.0
    swaps = []
    shared = [p.member for p in at_largest if p.member in common]  # best first at the largest budget
    for i, a in enumerate(shared):
        for b in shared[i + 1:]:
            now = sign * (big[a].value - big[b].value)
            before = sign * (small[a].value - small[b].value)
            tied = big[a].group == big[b].group and small[a].group == small[b].group
            if now * before < 0 and not tied:
                ahead, behind = (a, b) if now < 0 else (b, a)
                swaps.append(Swap(big[ahead].label, big[behind].label))
    swapped = {label for s in swaps for label in (s.ahead, s.behind)}
    moves = tuple(Move(big[m].label, small[m].rank, big[m].rank, smaller, largest) for m in shared
                  if big[m].label in swapped and small[m].rank != big[m].rank)
    return ColumnStability(**base, status="changed" if swaps else "held", swaps=tuple(swaps), moves=moves)


def board_stability(table: Table, config: BoardConfig | None = None) -> list[ColumnStability]:
    """Every score column of every budget series with more than one budget (on the board or in
    ``Table.earlier``), where the series has a value at its largest budget and at a smaller one, and the suite
    scored the trained models
    (a mixer-scoped suite gives every budget the same cell); single-budget series give nothing."""
    out = []
    for series, by_budget in series_of([*table.rows, *table.earlier]).items():
        if len(by_budget) < 2:
            continue
        largest = max(by_budget)
        label = series_label(next(iter(by_budget[largest].values())))
        trained = {r.manifest.suite for rows in by_budget.values() for row in rows.values() for r in row.runs
                   if r.manifest.subject.kind == "model"}  # a mixer-scoped suite's cells are one per mixer config
        for column in table.columns:
            if column.role != "score" or column.suite not in trained or not any(
                    table.cell(r, column) is not None for r in by_budget[largest].values()):
                continue
            if not any(table.cell(r, column) is not None for b, rows in by_budget.items() if b != largest
                       for r in rows.values()):
                continue  # no smaller budget was scored on it (the quickstart's extra budgets feed one suite)
            out.append(column_stability(table, column, by_budget, config, series, label))
    return out
