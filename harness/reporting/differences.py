"""Differences between two cells of one board column, with the training-seed noise of the column, and the tie
groups they make: the paired tests behind the board's groups, vetoes and the run report (docs/protocol.md,
"Seeds"), and the rank interval's per-column draws. The statistics themselves come from :mod:`harness.stats`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness import stats
from harness.errors import MixbenchError
from harness.reporting.board_config import GROUP_NAMES, BoardConfig
from harness.reporting.table import Cell, Column, Row, Table


@dataclass(frozen=True)
class SeedNoise:
    """The training-seed standard deviation of one column at one preset, on ``scale`` (``items``: the items' scale,
    NLL per token for perplexity; ``values``: the metric's own), at its one-sided 95% upper confidence bound
    (``sd``; ``estimate`` the point estimate, ``df`` its degrees of freedom) and where it comes from."""

    sd: float
    estimate: float
    df: int
    scale: str
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"sd": self.sd, "estimate": self.estimate, "df": self.df, "scale": self.scale, "source": self.source}


@dataclass(frozen=True)
class CellDifference:
    """``a - b`` in one column: on the items both cells share (``scale`` "items": the items' own scale, e.g. NLL
    per token for perplexity), else on the two values with a normal interval from their intervals ("values")."""

    difference: float
    interval: stats.Interval | None
    p_value: float
    scale: str


def cell_difference(a: Cell, b: Cell, config: BoardConfig, noise: SeedNoise | None = None) -> CellDifference:
    """``a - b`` with its interval and a two-sided p-value: a paired bootstrap on the items both share (at least
    two), else a z-test on the two intervals' standard errors; without intervals, no claim (p = 1).

    With ``noise`` (the column's seed spread, :func:`column_seed_noise`) the training-seed variance is added: on
    the items' scale ``sd^2 (1/n_a + 1/n_b)`` for ``n`` seeds per cell, on the values' scale ``sd^2`` for each
    one-seed cell (a mean over seeds carries its seed variance in its Student-t interval already); the interval
    and p-value are then normal."""
    if a.items and b.items:
        shared = sorted(set(a.items) & set(b.items))
        if len(shared) >= 2:
            va = np.array([a.items[i][0] for i in shared])
            wa = np.array([a.items[i][1] for i in shared])
            vb = np.array([b.items[i][0] for i in shared])
            wb = np.array([b.items[i][1] for i in shared])
            r = stats.paired_difference(va, vb, wa, wb, n_resamples=config.bootstrap or 200, seed=config.seed)
            if noise is None or noise.scale != "items":
                return CellDifference(r.difference, r.interval, r.p_value, "items")
            r = stats.with_seed_variance(r, noise.sd**2 * (1 / max(a.n_seeds, 1) + 1 / max(b.n_seeds, 1)))
            return CellDifference(r.difference, r.interval, r.p_value, "items")
    diff = a.value - b.value
    se_a = a.interval.normal_stderr() if a.interval is not None else None
    se_b = b.interval.normal_stderr() if b.interval is not None else None
    if se_a is None or se_b is None:
        return CellDifference(diff, None, 1.0, "values")  # no uncertainty known: no claim that they differ
    if noise is not None and noise.scale == "values":
        se_a = math.hypot(se_a, noise.sd) if a.n_seeds <= 1 else se_a
        se_b = math.hypot(se_b, noise.sd) if b.n_seeds <= 1 else se_b
    return normal_difference(diff, math.hypot(se_a, se_b), "values")


def normal_difference(diff: float, se: float, scale: str) -> CellDifference:
    """``diff`` with its 95% normal interval and p-value from standard error ``se`` (:func:`stats.normal_test`)."""
    return CellDifference(diff, *stats.normal_test(diff, se), scale)


def compare_cells(a: Cell, b: Cell, config: BoardConfig, noise: SeedNoise | None = None) -> float:
    """Two-sided p-value that two cells of one column differ (see :func:`cell_difference`)."""
    return cell_difference(a, b, config, noise).p_value


def column_seed_noise(table: Table, rows: list[Row], column: Column, preset: str) -> SeedNoise | None:
    """The seed noise of ``column`` among ``rows`` (a preset's mixers and controls; docs/protocol.md "Seeds"): the
    pooled within-row standard deviation of the per-seed values of every row with two or more seeds (trained
    cells only: an untrained null's seeds vary its initialisation, not its training) and, where the column's items
    are on its scale, the preset's measured seed spread; at its one-sided 95% upper confidence bound. The board's
    own spread is used alone once it has as many degrees of freedom as the preset's: the two usually share
    trainings (the tuned recipes' seeds are the quickstart's), and pooling would count them twice. With fewer the
    two are pooled (one row of two seeds alone is no estimate). None when neither exists."""
    cells = [c for r in rows if (c := table.cell(r, column)) is not None]
    found: list[SeedNoise] = []
    multi = [c for c in cells if len(c.seed_values) >= 2 and all(math.isfinite(v) for v in c.seed_values)]
    own = stats.pooled_sd([c.seed_values for c in multi])
    if own is not None:
        scale = "items" if all(c.items for c in multi) else "values"
        found.append(SeedNoise(own.upper, own.estimate, own.df, scale,
                               f"{len(multi)} row(s) with several seeds on this board"))
    units = {c.items_unit for c in cells if c.items}
    if len(units) == 1 and all(c.items for c in cells):
        from harness.model.recipes import seed_spread

        try:
            spread = seed_spread(preset)
        except MixbenchError:
            spread = None
        if spread is not None and spread.scale == units.pop():
            found.append(SeedNoise(spread.sd_upper, spread.sd, spread.df, "items",
                                   f"preset {preset}'s seed spread ({len(spread.seeds)} seeds, "
                                   f"{', '.join(spread.splits)})"))
    if len(found) == 2 and found[0].df < found[1].df:  # too few seeds on the board: pool with the preset's
        both = stats.pool_sds([(found[0].estimate, found[0].df), (found[1].estimate, found[1].df)])
        return SeedNoise(both.upper, both.estimate, both.df, "items",
                         f"{found[0].source}, pooled with {found[1].source}")
    return found[0] if found else None


def column_sampler(cells: list[Cell], rng: np.random.Generator, noise: SeedNoise | None = None):
    """A function returning one bootstrap draw of every row's value in a column: shared items resampled jointly
    when every row has them, else each value drawn from a normal with its interval's standard error; with the
    column's seed noise added on its scale (:func:`cell_difference`)."""
    shared = None
    if all(c.items for c in cells):
        common = set.intersection(*(set(c.items) for c in cells))
        if len(common) >= 2:
            shared = sorted(common)
    if shared is not None:
        vals = np.array([[c.items[i][0] for i in shared] for c in cells])
        wts = np.array([[c.items[i][1] for i in shared] for c in cells])
        seed_sd = np.array([noise.sd / math.sqrt(max(c.n_seeds, 1)) if noise is not None and noise.scale == "items"
                            else 0.0 for c in cells])

        def items_draw() -> list[float]:
            idx = rng.integers(0, len(shared), len(shared))
            return list(stats.weighted_mean(vals[:, idx], wts[:, idx], axis=1) + rng.normal(0.0, 1.0, len(cells))
                        * seed_sd)

        return items_draw
    ses = [c.interval.normal_stderr() if c.interval is not None else None for c in cells]
    if noise is not None and noise.scale == "values":
        ses = [math.hypot(se or 0.0, noise.sd) if c.n_seeds <= 1 else se for c, se in zip(cells, ses)]

    def normal_draw() -> list[float]:
        return [c.value + (rng.normal(0, se) if se else 0.0) for c, se in zip(cells, ses)]

    return normal_draw


def better_first(cells: dict[str, Cell], higher: bool) -> list[str]:
    """Row keys, best value first (ties by key, so the order is the same on every run)."""
    return sorted(cells, key=lambda k: (-cells[k].value if higher else cells[k].value, k))


def tie_groups(table: Table, rows: list[Row], column: Column, config: BoardConfig) -> dict[str, str]:
    """Row key -> tie group letter of ``rows`` in ``column``, best first (the board's procedure, docs/protocol.md),
    with the seed noise of the rows' preset (its controls' seeds count too)."""
    preset = rows[0].preset if rows else ""
    pool = [*rows, *(r for r in table.rows if r.control and r.preset == preset)]
    return tie_groups_with_noise(table, rows, column, config, column_seed_noise(table, pool, column, preset))


def tie_groups_with_noise(table: Table, rows: list[Row], column: Column, config: BoardConfig,
                          noise: SeedNoise | None = None) -> dict[str, str]:
    """Row key -> tie group letter of ``rows`` in ``column`` with the given seed noise (the board has it)."""
    cells = {r.key: c for r in rows if (c := table.cell(r, column)) is not None and math.isfinite(c.value)}
    groups = stats.tie_groups(better_first(cells, column.higher_is_better),
                              lambda best, k: compare_cells(cells[best], cells[k], config, noise), config.alpha)
    return {k: GROUP_NAMES[g] if g < len(GROUP_NAMES) else str(g + 1) for k, g in groups.items()}
