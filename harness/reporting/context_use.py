"""Does any mixer use context beyond an n-gram's reach? Each mixer's NLL against the controls by target position
(docs/protocol.md, "Mixing beyond n-grams").

"Beats the context-free control" shows that a model uses some context, not that it mixes beyond what a short
convolution reaches: at 328k tokens a 4-tap convolution alone buys most of the gain. A suite that scores the same
quantity at several target positions declares them (:attr:`harness.suite.Metric.positions`; the perplexity suite's
``nll_ctx_0-3``, ``nll_ctx_4-63``, ``nll_ctx_64-255``); for every mixer row this module pairs it with each control
bucket by bucket on the shared documents, and tests whether its gain over the context-free control is larger far
back (the last bucket) than near (the one before): the difference of the two paired differences, bootstrapped over
documents, with the seed spread of that difference added (pooled over the rows with several seeds), Holm over the
preset's mixers. A model that only uses the last few tokens gains the same at every position past them; one whose
gain grows from 4-63 to 64 on uses context a short convolution does not reach (a model that reads 20 tokens back
shows it too: positions 4-19 have less of that context than 64 on, so this is "beyond the first buckets", not
"beyond 64 tokens").
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from harness import stats
from harness.reporting.table import Cell, Column, Row

if TYPE_CHECKING:
    from harness.reporting.board import Board
    from harness.reporting.differences import CellDifference


@dataclass(frozen=True)
class ContextUse:
    """One mixer row's context use in one group of position columns."""

    row: str
    label: str
    preset: str
    group: str  # the columns' shared name (``perplexity/nll_ctx``)
    buckets: tuple[tuple[int, int], ...]
    #: per bucket, per control label: the mixer's difference from the control (negative: lower NLL than it)
    versus: tuple[dict[str, "CellDifference"], ...]
    reference: str  # the context-free control the far-against-near test uses
    #: (gain far back) - (gain near): the mixer-minus-reference difference in the last bucket minus the one before
    beyond: "CellDifference | None"
    uses_far: bool

    def to_json(self) -> dict[str, Any]:
        def diff(d: "CellDifference | None") -> dict[str, Any] | None:
            if d is None:
                return None
            return {"difference": d.difference, "p_value": d.p_value,
                    "interval": None if d.interval is None else d.interval.to_json()}

        return {"row": self.row, "model": self.label, "preset": self.preset, "columns": self.group,
                "buckets": [list(b) for b in self.buckets], "reference": self.reference,
                "versus": [{label: diff(d) for label, d in per.items()} for per in self.versus],
                "far_minus_near": diff(self.beyond), "uses_far_context": self.uses_far}


#: positions a 4-tap short convolution sees whole (the perplexity suite's first bucket, 0-3)
SHORT_REACH = 4


def position_groups(columns: list[Column]) -> dict[str, list[Column]]:
    """Columns that declare positions, grouped by suite, config and name without the bucket, sorted by position."""
    groups: dict[str, list[Column]] = defaultdict(list)
    for c in columns:
        if c.positions is None:
            continue
        base = re.sub(r"_?\d+-\d+$", "", c.metric)
        groups[f"{c.suite}{f'[{c.config}]' if c.config else ''}/{base}"].append(c)
    return {k: sorted(v, key=lambda c: c.positions) for k, v in groups.items() if len(v) >= 2}


def context_use(board: "Board") -> list[ContextUse]:
    """Every mixer row's :class:`ContextUse` in the first group of position columns (the in-domain one)."""
    from harness.reporting.differences import cell_difference

    table, config = board.table, board.config
    groups = position_groups(table.columns)
    if not groups:
        return []
    name, all_columns = next(iter(groups.items()))
    out: list[ContextUse] = []
    for preset in sorted({r.preset for r in table.rows}):
        rows = [r for r in table.rows if r.preset == preset and not r.control and not r.external]
        controls = [r for r in table.rows if r.preset == preset and r.control]
        reference = next((r for r in controls if r.context_free), None)
        # the buckets this preset's rows have (presets of other contexts end in other buckets)
        columns = [c for c in all_columns if any(table.cell(r, c) is not None for r in rows)]
        if not rows or not controls or len(columns) < 2:
            continue
        # far against near says "beyond a short convolution" only when near starts past its reach
        testable = len(columns) >= 3 and columns[-2].positions[0] >= SHORT_REACH
        found: list[tuple[Row, list[dict[str, CellDifference]], CellDifference | None]] = []
        for row in rows:
            versus = []
            for column in columns:
                cell = table.cell(row, column)
                per: dict[str, CellDifference] = {}
                for control in controls:
                    other = table.cell(control, column)
                    if cell is not None and other is not None:
                        per[control.label] = cell_difference(cell, other, config,
                                                             board.seed_noise.get((preset, column.name)))
                versus.append(per)
            beyond = None
            if reference is not None and testable:
                beyond = _far_minus_near(board, preset, row, reference, columns[-2], columns[-1])
            found.append((row, versus, beyond))
        tested = [(i, b) for i, (_, _, b) in enumerate(found) if b is not None]
        reject, _ = stats.holm([b.p_value for _, b in tested], config.alpha)
        uses = {i for (i, b), r in zip(tested, reject) if r and b.difference < 0}
        for i, (row, versus, beyond) in enumerate(found):
            out.append(ContextUse(row.key, row.label, preset, name, tuple(c.positions for c in columns),
                                  tuple(versus), reference.label if reference else "", beyond, i in uses))
    return out


def _far_minus_near(board: "Board", preset: str, row: Row, control: Row, near: Column, far: Column
                    ) -> "CellDifference | None":
    """(row - control) at ``far`` minus (row - control) at ``near``, paired on the documents all four cells share,
    bootstrapped over documents, with the seed spread of the far-minus-near difference added (each bucket's own
    spread where no row has several seeds: an overestimate)."""
    from harness.reporting.differences import normal_difference

    cells = [board.table.cell(r, c) for r in (row, control) for c in (near, far)]
    if any(c is None or not c.items for c in cells):
        return None
    a_near, a_far, c_near, c_far = cells
    shared = sorted(set.intersection(*(set(c.items) for c in cells)))
    if len(shared) < 2:
        return None

    def arrays(cell: Cell) -> tuple[np.ndarray, np.ndarray]:
        return (np.array([cell.items[i][0] for i in shared]), np.array([cell.items[i][1] for i in shared]))

    (an, wn), (af, wf) = arrays(a_near), arrays(a_far)
    (cn, _), (cf, _) = arrays(c_near), arrays(c_far)
    keep = (wn > 0) & (wf > 0)
    if keep.sum() < 2:
        return None
    x, y = ((af - cf) * wf)[keep], ((an - cn) * wn)[keep]
    wf, wn = wf[keep], wn[keep]

    def statistic(x, wf, y, wn, axis=-1):
        return np.sum(x, axis=axis) / np.sum(wf, axis=axis) - np.sum(y, axis=axis) / np.sum(wn, axis=axis)

    res = stats.bootstrap((x, wf, y, wn), statistic, n_resamples=board.config.bootstrap or 200, seed=board.config.seed)
    item_se = res.interval.normal_stderr() if res.interval is not None else 0.0
    n_a, n_c = max(a_near.n_seeds, 1), max(c_near.n_seeds, 1)
    spread = _far_minus_near_spread(board, preset, near, far)
    if spread is not None:
        seed_var = spread**2 * (1 / n_a + 1 / n_c)
    else:  # no row with several seeds: each bucket's own spread, as if the two moved independently (an overestimate)
        seed_var = 0.0
        for column in (near, far):
            noise = board.seed_noise.get((preset, column.name))
            if noise is not None and noise.scale == "items":
                seed_var += noise.sd**2 * (1 / n_a + 1 / n_c)
    return normal_difference(res.point, math.sqrt((item_se or 0.0) ** 2 + seed_var), "items")


def _far_minus_near_spread(board: "Board", preset: str, near: Column, far: Column) -> float | None:
    """The seed standard deviation of a row's far-minus-near NLL, pooled over the preset's rows with several
    seeds (its one-sided 95% upper bound): a seed that trains a worse model is worse at every position, so the
    difference of buckets moves far less between seeds than either bucket."""
    groups = []
    for row in board.table.rows:
        if row.preset != preset or row.external:
            continue
        a, b = board.table.cell(row, near), board.table.cell(row, far)
        if a is None or b is None or not a.seed_ids or a.seed_ids != b.seed_ids or len(a.seed_ids) < 2:
            continue
        groups.append(list(np.array(b.seed_values) - np.array(a.seed_values)))
    pooled = stats.pooled_sd(groups)
    return None if pooled is None else pooled.upper


def detail_lines(uses: list[ContextUse]) -> list[str]:
    """Per mixer row, its NLL per token against each control in each position bucket with the 95% interval (the
    full views' record of what the first lines summarise)."""
    lines = []
    for u in uses:
        parts = []
        controls = sorted({label for per in u.versus for label in per})
        for label in controls:
            cells = []
            for (lo, hi), per in zip(u.buckets, u.versus):
                d = per.get(label)
                if d is None or d.interval is None:
                    continue
                cells.append(f"{lo}-{hi - 1} {d.difference:+.3f} [{d.interval.low:+.3f}, {d.interval.high:+.3f}]")
            if cells:
                parts.append(f"vs {label}: " + ", ".join(cells))
        if parts:
            lines.append(f"context use of {u.label} (NLL per token by target position, {u.group}): " + "; ".join(parts))
    return lines


def context_lines(uses: list[ContextUse]) -> list[str]:
    """The board's first lines on context use: per preset, whether any mixer gains more far back than near."""
    lines = []
    for preset in sorted({u.preset for u in uses}):
        mine = [u for u in uses if u.preset == preset]
        if not mine:
            continue
        first = mine[0]
        near, far = first.buckets[-2], first.buckets[-1]
        span = f"positions {far[0]}-{far[1] - 1}"
        users = [u for u in mine if u.uses_far]
        where = f" (preset {preset})" if len({u.preset for u in uses}) > 1 else ""
        gains = "; ".join(
            f"{u.label} {u.beyond.difference:+.3f} [{u.beyond.interval.low:+.3f}, {u.beyond.interval.high:+.3f}]"
            for u in mine if u.beyond is not None and u.beyond.interval is not None)
        if all(u.beyond is None for u in mine):
            shown = ", ".join(f"{lo}-{hi - 1}" for lo, hi in first.buckets)
            lines.append(f"context beyond the first buckets{where}: not tested: the position buckets ({shown}) need "
                         f"a near one past the {SHORT_REACH} positions a short convolution sees whole and a far one "
                         "after it, with the context-free control scored")
        elif users:
            lines.append(f"context beyond the first buckets{where}: {', '.join(u.label for u in users)} gain more over "
                         f"{first.reference} at {span} than at {near[0]}-{near[1] - 1}: they use context a short "
                         f"convolution does not reach (far minus near gain in NLL per token, seed and document noise "
                         f"counted: {gains}); the others show no such gain")
        else:
            lines.append(f"context beyond the first buckets{where}: no mixer gains more over "
                         f"{first.reference or 'the context-free control'} at {span} than at {near[0]}-{near[1] - 1}, "
                         f"so nothing on this board shows mixing beyond what the last few tokens give (far minus near "
                         f"gain in NLL per token: {gains or 'not measured'})")
    return lines
