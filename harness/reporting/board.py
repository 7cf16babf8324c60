"""The board: which columns vote, tie groups from paired tests, Borda ranks with bootstrap rank intervals, and
the quality/speed Pareto view (docs/DESIGN.md §6; docs/ARCHITECTURE.md "The board").

A comparison board is only worth its weakest number, so:

* **Only trustworthy columns vote.** A column votes when its metric's role is ``score``, no row's cell is
  marked unreliable by its suite, not every row is within its interval of the metric's chance level (a column
  that measures nothing), and every row that ran the suite has it (a metric only some mixers produce cannot
  rank the others). Each voting suite weighs the same in the rank: its weight is split over its columns.
* **Only comparable rows are ranked.** Ranking is within a preset (matched backbones). A suite votes when at
  least half of the preset's rows ran it; a row missing a voting suite is listed as unranked with what it
  lacks, never ranked first for coverage.
* **Tie groups per column.** Rows are sorted best first; the best row and every row not distinguishable from it
  by a two-sided paired test on shared items (the metric's per-item values, :func:`harness.stats.paired_difference`;
  without items, a z-test on the two intervals' standard errors; without intervals, no claim: tied), Holm-
  corrected over the comparisons at level ``alpha``, form group ``a``; the procedure repeats on the rest.
* **Rank intervals.** The Borda rank is recomputed on bootstrap resamples of the voting columns and, within each
  column, of its shared items (the same items for every row); the rank interval is the percentile interval of
  the resampled ranks. Rows whose rank intervals overlap are shown as tied.
* **Controls measure the columns** (docs/controls.md). Rows of control mixers (``Row.control``) are never
  ranked, grouped or counted in a column's verdict. A column that would vote still does not when the best mixer
  of a preset is not better than every control there (paired test, Holm over the controls): it says which control
  and with what numbers. Every mixer cell of a score column is compared with every control of its preset (paired
  difference with its interval, :class:`ControlComparison`); a cell not better than the reference control (the
  context-free ones, else every control; Holm over the column's mixers) is marked; a column whose mixer cells
  are all marked does not vote either (the two families differ, so the best mixer can pass one and not the other).
* **Seeds** (docs/protocol.md, "Seeds"). Two trainings of one architecture differ by more than their items'
  noise, so every comparison adds the training-seed variance of the column
  (:class:`harness.reporting.differences.SeedNoise`): pooled from the rows of the preset with two or more seeds,
  else the preset's measured seed spread (its recipe file, for columns on that scale), each at its one-sided 95%
  upper confidence bound. A single seed cannot beat another by less than
  that spread. A column with neither says so, and its comparisons count item noise only.
* **Nulls** (docs/protocol.md, "What votes"). A column votes only if a null can veto it: a control with a value
  there, or, for a column controls cannot score, each row's own null model (``Column.null_metric``: the same
  architecture untrained). Cells not better than their null are marked and take no Borda points; a column whose
  best mixer does not beat its null does not vote. A statistic computed over units (a maximum over units grows
  with their number) votes only when every row used the same number. Runs under an ad-hoc config (an override:
  ``--suite-config``, ``--limit``) make diagnostic columns: they never vote and never unrank a row.
* **Borda on tie groups.** A column gives each row a point per row in a lower tie group and half a point per
  other row of its own; rows not better than the null share the lowest group; a column whose rows all share one
  group gives no points.
* **Rank stability** (docs/rank_stability.md). Where a setting was trained at several token budgets, each score
  column says whether its ordering at the largest budget already held at half of it
  (:mod:`harness.reporting.rank_stability`, ``Board.stability``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from harness import stats
from harness.reporting.board_config import GROUP_NAMES, BoardConfig
from harness.reporting.differences import (
    CellDifference, SeedNoise, better_first, cell_difference, column_sampler, column_seed_noise,
    tie_groups_with_noise,
)
from harness.reporting.pareto import pareto_flags, speed_value
from harness.reporting.table import Cell, Column, Row, Table

if TYPE_CHECKING:
    from harness.reporting.rank_stability import ColumnStability

#: a suite votes when at least this share of the preset's rows ran it
MIN_SUITE_COVERAGE = 0.5


@dataclass
class ColumnVerdict:
    column: Column
    votes: bool
    reason: str = ""  # why it does not vote
    weight: float = 0.0
    groups: dict[str, str] = field(default_factory=dict)  # row key -> group letter (per preset)


@dataclass(frozen=True)
class ControlComparison:
    """A mixer's cell against a control's cell of its preset: ``better`` when the paired test says the mixer is
    better (Holm over the column's mixers, at the board's alpha)."""

    control: str  # the control row's key
    label: str
    difference: CellDifference
    better: bool

    def to_json(self) -> dict[str, Any]:
        d = self.difference
        return {"control": self.label, "difference": d.difference, "p_value": d.p_value, "scale": d.scale,
                "interval": None if d.interval is None else d.interval.to_json(), "better": self.better}


@dataclass
class Board:
    table: Table
    config: BoardConfig
    verdicts: dict[str, ColumnVerdict]  # column name -> verdict
    points: dict[str, float | None]
    rank: dict[str, int | None]
    rank_interval: dict[str, tuple[int, int] | None]
    unranked: dict[str, str]  # row key -> what it lacks
    tied: dict[str, bool]  # row key -> its rank interval overlaps another ranked row's
    pareto: dict[str, bool | None]
    speed_name: str = ""
    quality_name: str = ""
    #: (mixer row key, column name) -> its comparison with each control of its preset
    vs_controls: dict[tuple[str, str], list[ControlComparison]] = field(default_factory=dict)
    #: (mixer row key, column name) of cells not better than the reference control (docs/controls.md)
    not_above_control: set[tuple[str, str]] = field(default_factory=set)
    #: labels of the reference controls the marks compare with
    reference_controls: list[str] = field(default_factory=list)
    #: per budget series with several budgets and score column: whether its ordering held (docs/rank_stability.md)
    stability: list[ColumnStability] = field(default_factory=list)
    #: (preset, column name) -> the seed noise its comparisons count (None: unknown, item noise only)
    seed_noise: dict[tuple[str, str], SeedNoise | None] = field(default_factory=dict)
    #: (mixer row key, column name) of cells not better than their own null model (a column controls cannot score)
    not_above_null: set[tuple[str, str]] = field(default_factory=set)
    #: (mixer row key, column name) -> its comparison with its null model
    vs_null: dict[tuple[str, str], CellDifference] = field(default_factory=dict)
    #: each mixer row's context use by target position (harness/reporting/context_use.py)
    context: list[Any] = field(default_factory=list)

    def not_above(self, row: Row, column: Column) -> bool:
        """Whether the cell is not better than its null: the reference control, or its own null model."""
        key = (row.key, column.name)
        return key in self.not_above_control or key in self.not_above_null

    @property
    def unsettled(self) -> set[str]:
        """Names of the columns whose ordering changed between half the largest budget and the largest."""
        return {s.column for s in self.stability if s.changed}

    def speed_of(self, row: Row) -> float | None:
        """``row``'s value on the Pareto view's speed axis, oriented so that higher is faster (the inverse of a
        lower-is-better column such as a time ratio); None without a speed column or a value."""
        return speed_value(self.table, row, self.speed_name or None)

    @property
    def voting(self) -> list[Column]:
        return [v.column for v in self.verdicts.values() if v.votes]

    @property
    def has_controls(self) -> bool:
        return any(row.control for row in self.table.rows)

    def group(self, row: Row, column: Column) -> str | None:
        return self.verdicts[column.name].groups.get(row.key)

    def headline(self) -> str | None:
        """The board's first line when nothing on it tells the mixers apart: no column votes."""
        if self.voting or not any(not r.control for r in self.table.rows):
            return None
        why = [f"{v.column.name}: {v.reason}" for v in self.verdicts.values()
               if v.column.role == "score" and v.reason and not v.column.config]
        return ("nothing on this board tells the mixers apart at this budget: no column votes"
                + (f" ({'; '.join(why)})" if why else ""))


# ---------------------------------------------------------------------------------------------- entry point


def build_board(table: Table, config: BoardConfig | None = None) -> Board:
    config = config or BoardConfig()
    verdicts: dict[str, ColumnVerdict] = {}
    points: dict[str, float | None] = {row.key: None for row in table.rows}
    rank: dict[str, int | None] = {row.key: None for row in table.rows}
    interval: dict[str, tuple[int, int] | None] = {row.key: None for row in table.rows}
    unranked: dict[str, str] = {}
    vs_controls: dict[tuple[str, str], list[ControlComparison]] = {}
    not_above: set[tuple[str, str]] = set()
    below_null: set[tuple[str, str]] = set()
    vs_null: dict[tuple[str, str], CellDifference] = {}
    references: list[str] = []
    noise: dict[tuple[str, str], SeedNoise | None] = {}
    for preset, all_rows in _by_preset(table).items():
        rows = [r for r in all_rows if not r.control and not r.external]  # external rows: shown, never ranked
        controls = [r for r in all_rows if r.control]
        for column in table.columns:
            noise[(preset, column.name)] = column_seed_noise(table, [*rows, *controls], column, preset)
        preset_noise = {c.name: noise[(preset, c.name)] for c in table.columns}
        preset_verdicts = _column_verdicts(table, rows, controls)
        if controls:
            comparisons, marks, reference = _against_controls(table, rows, controls, config, preset_noise)
            vs_controls.update(comparisons)
            not_above |= marks
            references += [r.label for r in reference if r.label not in references]
            for verdict in preset_verdicts.values():
                if verdict.votes:
                    _control_veto(table, rows, controls, verdict, comparisons, config)
        diffs, marks = _against_nulls(table, rows, config, preset_noise)
        vs_null.update(diffs)
        below_null |= marks
        for verdict in preset_verdicts.values():
            if verdict.votes and verdict.column.null_metric:
                _null_veto(table, rows, verdict, diffs, config)
        bottom = not_above | below_null
        for verdict in preset_verdicts.values():
            if verdict.votes:
                _marked_veto(table, rows, verdict, bottom, config)
        _reweigh(preset_verdicts)
        for name, verdict in preset_verdicts.items():  # a column votes on the board if it votes in any preset
            merged = verdicts.setdefault(name, ColumnVerdict(verdict.column, False, verdict.reason))
            if verdict.votes:
                merged.votes, merged.reason, merged.weight = True, "", verdict.weight
            verdict.groups = tie_groups_with_noise(table, rows, verdict.column, config, preset_noise[name])
            merged.groups.update(verdict.groups)
        voting = [v for v in preset_verdicts.values() if v.votes]
        ranked, lacking = _rankable(table, rows, voting)
        unranked.update(lacking)
        p, r, iv = _rank(table, ranked, voting, config, bottom, preset_noise)
        points.update(p)
        rank.update(r)
        interval.update(iv)
    tied = _overlaps(interval)
    speed_name, quality_name, pareto = pareto_flags(table, _by_preset(table), points, config)
    from harness.reporting.rank_stability import board_stability  # it reads the tie groups of this module

    from harness.reporting.context_use import context_use

    board = Board(table, config, verdicts, points, rank, interval, unranked, tied, pareto, speed_name, quality_name,
                  vs_controls, not_above, references, board_stability(table, config), noise, below_null, vs_null)
    board.context = context_use(board)
    return board


def _by_preset(table: Table) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = defaultdict(list)
    for row in table.rows:
        out[row.preset].append(row)
    return dict(out)


# ---------------------------------------------------------------------------------------------- voting


def _column_verdicts(table: Table, rows: list[Row], controls: list[Row]) -> dict[str, ColumnVerdict]:
    ran = {(r.manifest.suite, row.key) for row in rows for r in row.runs}
    suites_ran = defaultdict(set)
    for suite, key in ran:
        suites_ran[suite].add(key)
    out: dict[str, ColumnVerdict] = {}
    shown_config = table.shown_configs()
    ad_hoc = table.ad_hoc_configs()
    for column in table.columns:
        cells = {row.key: table.cell(row, column) for row in rows}
        present = {k: c for k, c in cells.items() if c is not None and math.isfinite(c.value)}
        reason = _why_not(column, present, suites_ran[column.suite], len(rows),
                          column.config == shown_config[column.suite])
        if not reason and column.suite in ad_hoc and column.config == shown_config[column.suite]:
            reason = ("its runs use an ad-hoc config (an override such as --suite-config or --limit): a diagnostic "
                      "column, which never votes or unranks a row (a plan's or the grid's config makes it canonical)")
        if not reason:
            reason = _why_no_null(table, column, present, controls) or _unequal_units(table, column, present)
        out[column.name] = ColumnVerdict(column, reason == "", reason)
    _reweigh(out)
    return out


def _why_no_null(table: Table, column: Column, present: dict[str, Cell], controls: list[Row]) -> str:
    """Why no null can veto the column: no control has a value in it and its rows have no null model."""
    if any((c := table.cell(r, column)) is not None and math.isfinite(c.value) for r in controls):
        return ""
    if column.null_metric:
        missing = [k for k in present if (n := table.null_cell(k, column)) is None or not math.isfinite(n.value)]
        if not missing:
            return ""
        return (f"its null model ({column.null_metric}) is missing for {len(missing)} row(s): nothing could show "
                "that it measures what the mixers learned")
    if not controls:
        return ("no null can veto it: no control rows on the board (grids train them unless told not to), so "
                "nothing could show that it measures mixing")
    return ("no null can veto it: no control has a value in it and the suite declares no null model, so nothing "
            "could show that it measures mixing")


def _unequal_units(table: Table, column: Column, present: dict[str, Cell]) -> str:
    """A statistic over units (a maximum grows with their number) compared at different numbers of units."""
    counts = {c.units for c in present.values()} | {n.units for k in present
                                                    if (n := table.null_cell(k, column)) is not None}
    if len(counts) > 1:
        shown = ", ".join(sorted(str(c) for c in counts))
        return (f"computed over unequal numbers of units ({shown}): a statistic over units grows with their number, "
                "so it is compared only at equal numbers (docs/protocol.md)")
    return ""


def _reweigh(verdicts: dict[str, ColumnVerdict]) -> None:
    """Each voting suite weighs 1 in the rank, split evenly over its voting columns."""
    per_suite: dict[str, int] = defaultdict(int)
    for v in verdicts.values():
        if v.votes:
            per_suite[v.column.suite] += 1
    for v in verdicts.values():
        v.weight = 1.0 / per_suite[v.column.suite] if v.votes else 0.0


def _why_not(column: Column, present: dict[str, Cell], ran: set[str], n_rows: int, first_of_suite: bool) -> str:
    if column.config and not first_of_suite:
        return "not the suite's canonical config"
    if column.role != "score":
        return f"role {column.role}"
    if not present:
        return "no values"
    if len(ran) < MIN_SUITE_COVERAGE * n_rows:
        return f"only {len(ran)} of {n_rows} rows ran {column.suite}"
    if set(ran) - set(present):
        return "produced for some rows of the suite only"
    unreliable = sorted({c.unreliable for c in present.values() if c.unreliable})
    if unreliable:
        return f"unreliable: {unreliable[0]}"
    if len(present) >= 2 and not any(_above_chance(c, column.higher_is_better) for c in present.values()):
        return ("no row is better than chance (each row's interval includes its chance level or lies on its wrong "
                "side: a constant answer does as well): the column measures nothing here")
    return ""


def _above_chance(cell: Cell, higher: bool) -> bool:
    """Whether the cell beats its chance level (a guess, or the best constant answer) beyond its interval; a cell
    without a chance level counts as above it (nothing says otherwise)."""
    if cell.chance is None:
        return True
    if cell.interval is None or not cell.interval.finite:
        return cell.value > cell.chance if higher else cell.value < cell.chance
    return cell.interval.low > cell.chance if higher else cell.interval.high < cell.chance


def _rankable(table: Table, rows: list[Row], voting: list[ColumnVerdict]) -> tuple[list[Row], dict[str, str]]:
    ranked, lacking = [], {}
    for row in rows:
        missing = sorted({v.column.suite for v in voting if table.cell(row, v.column) is None})
        if missing:
            lacking[row.key] = "lacks " + ", ".join(missing)
        else:
            ranked.append(row)
    return ranked, lacking


# ---------------------------------------------------------------------------------------------- controls


def _finite_cells(table: Table, rows: list[Row], column: Column) -> dict[str, Cell]:
    return {r.key: c for r in rows if (c := table.cell(r, column)) is not None and math.isfinite(c.value)}


def _better(diff: CellDifference, higher: bool) -> bool:
    """The difference points the good way (items move with the metric: harness.suite.ItemValues)."""
    return diff.difference > 0 if higher else diff.difference < 0


def _control_veto(table: Table, rows: list[Row], controls: list[Row], verdict: ColumnVerdict,
                  comparisons: dict[tuple[str, str], list[ControlComparison]], config: BoardConfig) -> None:
    """Stop a column from voting when its best mixer is not better than every control that has a value in it
    (its comparisons with them, Holm over the controls)."""
    column = verdict.column
    mixers = _finite_cells(table, rows, column)
    ctrl = _finite_cells(table, controls, column)
    if not mixers or not ctrl:
        return
    best = better_first(mixers, column.higher_is_better)[0]
    found = {c.control: c.difference for c in comparisons.get((best, column.name), [])}
    order = [k for k in better_first(ctrl, column.higher_is_better) if k in found]
    diffs = [found[k] for k in order]
    reject, _ = stats.holm([d.p_value for d in diffs], config.alpha)
    beaten = [r and _better(d, column.higher_is_better) for d, r in zip(diffs, reject)]
    if all(beaten):
        return
    j = beaten.index(False)
    labels = {r.key: r for r in [*rows, *controls]}
    control_row, mixer_row = labels[order[j]], labels[best]
    kind = "context-free control" if control_row.context_free else "control"
    d = diffs[j]
    iv = "" if d.interval is None else f" [{_num(d.interval.low)}, {_num(d.interval.high)}]"
    if _better(d, column.higher_is_better):
        how = (f"the mixer ahead but not significantly after Holm's correction over the controls (p = "
               f"{d.p_value:.2g}, alpha {config.alpha:g})")
    else:
        how = f"the control ahead or level (p = {d.p_value:.2g})"
    verdict.votes = False
    verdict.reason = (
        f"no mixer beats the {kind} {control_row.label}: {_cell_text(ctrl[order[j]])} against the best mixer, "
        f"{mixer_row.label}, {_cell_text(mixers[best])} (difference {_num(d.difference)}{iv} on the {d.scale}' "
        f"scale: {how})"
    )


def _marked_veto(table: Table, rows: list[Row], verdict: ColumnVerdict, marked: set[tuple[str, str]],
                 config: BoardConfig) -> None:
    """Stop a column from voting when every mixer cell in it is marked ‡ (not better than its null or the
    reference control, Holm over the column's mixers): the best mixer can pass the veto against each control
    (Holm over the controls) while no cell passes the column's own family, and a column of ‡ cells would list
    as voting yet give no Borda points."""
    column = verdict.column
    mixers = _finite_cells(table, rows, column)
    if not mixers or any((k, column.name) not in marked for k in mixers):
        return
    best = better_first(mixers, column.higher_is_better)[0]
    label = next(r.label for r in rows if r.key == best)
    verdict.votes = False
    verdict.reason = (
        f"every mixer cell is ‡: none is better than its null once the column's {len(mixers)} mixers are "
        f"corrected for (Holm, alpha {config.alpha:g}); the best, {label}, {_cell_text(mixers[best])}"
    )


def _against_controls(table: Table, rows: list[Row], controls: list[Row], config: BoardConfig,
                      noise: dict[str, SeedNoise | None] | None = None):
    """Every mixer cell of every score column against every control of the preset; the cells not better than a
    reference control (Holm over the column's mixers) are marked."""
    reference = [r for r in controls if r.context_free] or controls
    comparisons: dict[tuple[str, str], list[ControlComparison]] = defaultdict(list)
    marks: set[tuple[str, str]] = set()
    for column in table.columns:
        if column.role != "score":
            continue
        mixers = _finite_cells(table, rows, column)
        for control in controls:
            cell = table.cell(control, column)
            if cell is None or not mixers:
                continue
            keys = sorted(mixers)
            if not math.isfinite(cell.value):  # undefined for the control (a context-free selectivity): it
                for k in keys:                  # cannot be beaten, nor beat anyone
                    comparisons[(k, column.name)].append(
                        ControlComparison(control.key, control.label, CellDifference(math.nan, None, 1.0, "values"),
                                          True))
                continue
            diffs = [cell_difference(mixers[k], cell, config, (noise or {}).get(column.name)) for k in keys]
            reject, _ = stats.holm([d.p_value for d in diffs], config.alpha)
            for k, d, r in zip(keys, diffs, reject):
                better = bool(r) and _better(d, column.higher_is_better)
                comparisons[(k, column.name)].append(ControlComparison(control.key, control.label, d, better))
                if control in reference and not better:
                    marks.add((k, column.name))
    return dict(comparisons), marks, reference


def _against_nulls(table: Table, rows: list[Row], config: BoardConfig, noise: dict[str, SeedNoise | None]):
    """Every mixer cell of a score column that declares a null model against its own null cell (the same run's
    null metric); the cells not better than it (Holm over the column's mixers) are marked."""
    diffs: dict[tuple[str, str], CellDifference] = {}
    marks: set[tuple[str, str]] = set()
    for column in table.columns:
        if column.role != "score" or not column.null_metric:
            continue
        pairs = {r.key: (c, n) for r in rows if (c := table.cell(r, column)) is not None and math.isfinite(c.value)
                 and (n := table.null_cell(r, column)) is not None and math.isfinite(n.value)}
        keys = sorted(pairs)
        found = [cell_difference(pairs[k][0], pairs[k][1], config, noise.get(column.name)) for k in keys]
        reject, _ = stats.holm([d.p_value for d in found], config.alpha)
        for k, d, r in zip(keys, found, reject):
            diffs[(k, column.name)] = d
            if not (r and _better(d, column.higher_is_better)):
                marks.add((k, column.name))
    return diffs, marks


def _null_veto(table: Table, rows: list[Row], verdict: ColumnVerdict, diffs: dict[tuple[str, str], CellDifference],
               config: BoardConfig) -> None:
    """Stop a column from voting when its best mixer is not better than its own null model."""
    column = verdict.column
    mixers = _finite_cells(table, rows, column)
    if not mixers:
        return
    best = better_first(mixers, column.higher_is_better)[0]
    d = diffs.get((best, column.name))
    if d is not None and d.p_value < config.alpha and _better(d, column.higher_is_better):
        return
    label = next(r.label for r in rows if r.key == best)
    null = table.null_cell(best, column)
    iv = "" if d is None or d.interval is None else f" [{_num(d.interval.low)}, {_num(d.interval.high)}]"
    verdict.votes = False
    verdict.reason = (
        f"no mixer beats its own null model ({column.null_metric}, the same architecture untrained): the best, "
        f"{label}, {_cell_text(mixers[best])} against {_cell_text(null) if null else 'none'}"
        + ("" if d is None else f" (difference {_num(d.difference)}{iv}, not significant at alpha {config.alpha:g})")
    )


def _num(x: float) -> str:
    return f"{x:.4g}"


def _cell_text(cell: Cell) -> str:
    iv = cell.interval
    return _num(cell.value) + (f" [{_num(iv.low)}, {_num(iv.high)}]" if iv is not None and iv.finite else "")


# ---------------------------------------------------------------------------------------------- ties


# ---------------------------------------------------------------------------------------------- ranks


def effective_groups(groups: dict[str, str | None], bottom: set[str]) -> dict[str, int]:
    """Tie-group letters as indices, with the rows in ``bottom`` (not better than their null) and rows without a
    group sharing one group below every other."""
    index = {k: GROUP_NAMES.index(g) if g in GROUP_NAMES else len(GROUP_NAMES) for k, g in groups.items()
             if g is not None and k not in bottom}
    last = max(index.values(), default=-1) + 1
    return {k: index.get(k, last) for k in groups}


def _rank(table: Table, rows: list[Row], voting: list[ColumnVerdict], config: BoardConfig,
          bottom: set[tuple[str, str]] | None = None, noise: dict[str, SeedNoise | None] | None = None):
    """Borda on tie groups (:func:`stats.group_points`, each column at its weight) and competition ranks; the rank
    interval from bootstrap draws of the columns that give points (columns resampled, and within each its shared
    items with its seed noise), the rows not better than their null tied below the rest in every draw."""
    bottom, noise = bottom or set(), noise or {}
    points: dict[str, float | None] = {r.key: None for r in rows}
    ranks: dict[str, int | None] = {r.key: None for r in rows}
    intervals: dict[str, tuple[int, int] | None] = {r.key: None for r in rows}
    if not voting or not rows:
        return points, ranks, intervals
    keys = [r.key for r in rows]
    p = {k: 0.0 for k in keys}
    active: list[tuple[ColumnVerdict, set[str]]] = []
    for v in voting:
        low = {k for k in keys if (k, v.column.name) in bottom}
        column_points = stats.group_points(effective_groups({k: v.groups.get(k) for k in keys}, low))
        if any(column_points.values()):
            active.append((v, low))
        for k in keys:
            p[k] += v.weight * column_points[k]
    r = stats.competition_ranks(p)
    points.update(p)
    ranks.update(r)
    if len(rows) < 2 or config.bootstrap == 0 or not active:
        intervals.update({k: (r[k], r[k]) for k in keys})
        return points, ranks, intervals
    rng = stats.rng_for([config.seed, 17])
    samplers = [column_sampler([table.cell(k, v.column) for k in keys], rng, noise.get(v.column.name))
                for v, _ in active]
    higher = [v.column.higher_is_better for v, _ in active]
    weights = [v.weight for v, _ in active]
    draws = np.empty((config.bootstrap, len(keys)))
    for b in range(config.bootstrap):
        chosen = rng.integers(0, len(active), len(active))  # resample columns
        vals: dict[str, list[float]] = {k: [] for k in keys}
        for j in chosen:
            sampled = samplers[j]()
            worst = -math.inf if higher[j] else math.inf
            for i, k in enumerate(keys):
                vals[k].append(worst if k in active[j][1] else sampled[i])
        pts = stats.borda(vals, [higher[j] for j in chosen], [weights[j] for j in chosen])
        rk = stats.competition_ranks(pts)
        draws[b] = [rk[k] for k in keys]
    intervals.update(stats.rank_intervals(draws, keys, config.rank_level))
    return points, ranks, intervals


def _overlaps(intervals: dict[str, tuple[int, int] | None]) -> dict[str, bool]:
    known = {k: v for k, v in intervals.items() if v is not None}
    return {k: any(o != k and not (v[1] < w[0] or w[1] < v[0]) for o, w in known.items()) for k, v in known.items()}
