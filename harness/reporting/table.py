"""Board rows from the results store: one row per model, one cell per (suite, metric) of the canonical config
(docs/DESIGN.md §6; docs/ARCHITECTURE.md "The board"). The one place that turns runs into rows: the board, the
renderers, the site and the nightly comparison all read :func:`build_table`.

Rules, each a decision the design asks for:

* **Rows are models.** A row is a model identity without its seed (``Subject.row_id``): seeds of one
  configuration share a row and are averaged; a model whose mixer, backbone, training or data config differs
  from its preset's default is another row, labelled with the difference (``protot (n_prototypes=4)``).
  Runs of a mixer-scoped suite (trained from the mixer's definition) join every row of that mixer and config.
* **Stale code is not a row of its own.** When the code (a mixer's or the core's source, a package version)
  changed, the new runs form a new model identity; by default the board shows, per configuration, only the
  model with the newest run and says how many older ones it hides (``include_stale`` shows them).
* **A setting is ranked at its largest budget.** Models that differ only in mixer, mixer config and token budget
  form a budget series (:func:`harness.store.identity.budget_series`); where a series holds several budgets, the
  rows below its largest budget leave the board for ``Table.earlier`` (``all_budgets`` keeps them as rows), where
  :mod:`harness.reporting.rank_stability` compares their orderings with the largest budget's
  (docs/rank_stability.md). Their cells are computed with the same columns.
* **Canonical cells.** A cell comes from the suite's canonical config: among the runs not marked
  ``override`` (an ad-hoc ``--suite-config``), the config that covers the most rows (ties: the newest). Runs
  under other configs never replace it; ``all_configs`` adds them as their own columns.
* **Seeds.** A cell is the mean over seeds with a Student-t interval (two or more seeds), or the run's own
  interval (one seed). Per-item values are averaged over seeds item by item, for the board's paired tests.
* Missing stays missing: no cell is filled in or averaged over fewer parts.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Any

from harness import stats
from harness.config import canonical_json
from harness.store.identity import budget_series, lineage_identity
from harness.store.results import ResultsStore, RunRecord
from harness.stats import Interval
from harness.suite import Metric

@dataclass(frozen=True)
class Column:
    """A board column: one metric of one suite under one config (``config`` is "" for the canonical one)."""

    suite: str
    metric: str
    role: str
    higher_is_better: bool
    unit: str = ""
    config: str = ""
    headline: bool = True
    null_metric: str = ""  # the metric holding each row's null model's value (harness.suite.Metric.null)
    positions: tuple[int, int] | None = None  # the target positions it scores (harness.suite.Metric.positions)

    @property
    def name(self) -> str:
        suite = f"{self.suite}[{self.config}]" if self.config else self.suite
        return f"{suite}/{self.metric}"


@dataclass(frozen=True)
class Cell:
    """A row's value in a column: mean over seeds, its interval, per-item values and reliability."""

    value: float
    interval: Interval | None
    n_seeds: int
    higher_is_better: bool
    unit: str = ""
    items: dict[str, tuple[float, float]] | None = None  # item id -> (value, weight), averaged over seeds
    unreliable: str | None = None
    chance: float | None = None
    perfect: float | None = None
    n: int | None = None
    #: each seed's value on the scale comparisons use: the weighted mean of its items where it has items (NLL per
    #: token for perplexity), else its value; the board's seed spread comes from these (docs/protocol.md, "Seeds")
    seed_values: tuple[float, ...] = ()
    seed_ids: tuple[Any, ...] = ()  # the seeds behind seed_values, in their order
    items_unit: str = ""
    units: int | None = None  # harness.suite.Metric.units (the same for every seed, else None)

    @property
    def outside_interval(self) -> bool:
        return self.interval is not None and self.interval.finite and not self.interval.contains(self.value)

    def to_json(self) -> dict[str, Any]:
        return {
            "value": _json(self.value),
            "interval": None if self.interval is None else self.interval.to_json(),
            "n_seeds": self.n_seeds,
            "n": self.n,
            "higher_is_better": self.higher_is_better,
            "unit": self.unit,
            "unreliable": self.unreliable,
            "chance": self.chance,
            "seed_values": [_json(v) for v in self.seed_values],
            "units": self.units,
        }


def _json(x: float) -> float | None:
    return x if math.isfinite(x) else None


@dataclass
class Row:
    """A model on the board (seeds of one configuration together)."""

    key: str
    label: str
    mixer: str
    mixer_id: str
    preset: str
    seeds: tuple[Any, ...] = ()
    parameters: int | None = None
    non_embedding_parameters: int | None = None
    state_floats: int | None = None
    train_flops: float | None = None
    #: some seed's train_flops is the 2-per-weight estimate (Subject.train_flops_estimated); None: not recorded
    train_flops_estimated: bool | None = None
    train_tokens_per_s: float | None = None
    gate: str = ""
    #: tuned / overridden / untuned (harness/model/recipes.py): whether its training values are its recipe's
    recipe: str = ""
    #: the backbone's residual gates (none / mixer / all) and who initialised the mixer's output projection
    residual_gates: str = ""
    output_init: str = ""
    control: bool = False  # a control row (docs/controls.md): shown, compared with, never ranked
    context_free: bool = False
    #: a transformers model mixbench did not train (docs/huggingface.md): shown beside the rows, never ranked (its
    #: tokenizer, data and budget are its own); compared with them on bits per byte
    external: bool = False
    lineage: str = ""
    newest: str = ""  # written_at of its newest run
    #: its budget series (docs/rank_stability.md): the comparable set, its mixer and config there, its token budget
    series: str = ""
    member: str = ""
    budget: int | None = None
    runs: list[RunRecord] = field(default_factory=list)


@dataclass
class Table:
    rows: list[Row]
    columns: list[Column]
    cells: dict[tuple[str, str], Cell]  # (row key, column name) -> cell
    notes: list[str] = field(default_factory=list)
    root: str = ""
    #: rows below the largest token budget of their series: off the board, their cells kept for rank stability
    earlier: list[Row] = field(default_factory=list)
    #: (row key, column name) -> the row's null-model cell of a column that declares one (Column.null_metric)
    null_cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    #: suites with only ad-hoc (override) runs: their columns stand in for a canonical config and never vote
    ad_hoc: set[str] = field(default_factory=set)

    def ad_hoc_configs(self) -> set[str]:
        """Suites whose shown columns come from ad-hoc (override) runs only."""
        return set(self.ad_hoc)

    def null_cell(self, row: Row | str, column: Column | str) -> Cell | None:
        key = row.key if isinstance(row, Row) else row
        name = column.name if isinstance(column, Column) else column
        return self.null_cells.get((key, name))

    def cell(self, row: Row | str, column: Column | str) -> Cell | None:
        key = row.key if isinstance(row, Row) else row
        name = column.name if isinstance(column, Column) else column
        return self.cells.get((key, name))

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    @property
    def empty(self) -> bool:
        return not self.rows

    def shown_configs(self) -> dict[str, str]:
        """Per suite, the config label of its first columns: the canonical config ("") or, for a suite with only
        ad-hoc runs, the stand-in the table chose. Those columns vote and head the compact view."""
        shown: dict[str, str] = {}
        for c in self.columns:
            shown.setdefault(c.suite, c.config)
        return shown


# ---------------------------------------------------------------------------------------------- building


def build_table(store: ResultsStore, suites: Iterable[str] | None = None, *, all_metrics: bool = False,
                all_configs: bool = False, include_stale: bool = False, all_budgets: bool = False) -> Table:
    """The table of the store at ``store`` (see the module docstring for the rules)."""
    return table_from_runs(list(store.iter_runs(samples=False)), str(store.root), suites, all_metrics=all_metrics,
                           all_configs=all_configs, include_stale=include_stale, all_budgets=all_budgets)


def table_from_runs(runs: list[RunRecord], root: str = "", suites: Iterable[str] | None = None, *,
                    all_metrics: bool = False, all_configs: bool = False, include_stale: bool = False,
                    all_budgets: bool = False) -> Table:
    notes: list[str] = []
    model_runs = [r for r in runs if r.manifest.subject.kind in ("model", "external")]
    mixer_runs = [r for r in runs if r.manifest.subject.kind == "mixer"]
    rows = _rows(model_runs)
    if not include_stale:
        rows, hidden = _newest_lineage(rows)
        if hidden:
            notes.append(f"{hidden} row(s) of models trained by older code of the same configuration are hidden "
                         "(--all-versions shows them)")
    by_mixer: dict[str, list[Row]] = defaultdict(list)
    for row in rows.values():
        by_mixer[row.mixer_id].append(row)
    for run in mixer_runs:  # a mixer-scoped run joins every row of its mixer and config, or makes its own row
        targets = by_mixer.get(run.manifest.subject.mixer_id)
        if not targets:
            key = run.manifest.subject.row_id
            if key not in rows:
                s = run.manifest.subject
                rows[key] = Row(key, s.label, s.mixer, s.mixer_id, "—", lineage=key, control=s.control,
                                context_free=s.context_free)
                by_mixer[run.manifest.subject.mixer_id].append(rows[key])
            targets = [rows[key]]
        for row in targets:
            row.runs.append(run)
    for row in rows.values():  # after the join: a mixer-scoped run's gate verdict counts for its rows too
        row.gate = _gate_status(row.runs)
    earlier = [] if all_budgets else _below_largest_budget(rows)
    if earlier:
        for row in earlier:
            del rows[row.key]
        notes.append(_earlier_note(earlier))
    wanted = list(dict.fromkeys(suites)) if suites else None
    available = sorted({r.manifest.suite for row in rows.values() for r in row.runs})
    if wanted:
        unknown = [s for s in wanted if s not in available]
        if unknown:
            notes.append(f"no results for suite(s) {', '.join(unknown)} (suites with results: "
                         f"{', '.join(available) or 'none'})")
    order = wanted or available
    ad_hoc: set[str] = set()
    columns, cells, nulls = _cells([*rows.values(), *earlier], order, all_metrics, all_configs, notes, ad_hoc)
    ordered = sorted(rows.values(), key=lambda r: (_preset_rank(r.preset), r.label))
    return Table(ordered, columns, cells, notes, root, earlier, nulls, ad_hoc)


def _preset_rank(preset: str) -> tuple[int, str]:
    from harness.config import PRESETS

    names = list(PRESETS)
    return (names.index(preset), "") if preset in names else (len(names), preset)


def _lineage(run: RunRecord) -> str:
    return lineage_identity(dict(run.manifest.identity.get("subject_parts") or {}))


def _below_largest_budget(rows: dict[str, Row]) -> list[Row]:
    """The rows whose budget series holds a larger token budget than theirs (docs/rank_stability.md)."""
    largest: dict[str, int] = {}
    for row in rows.values():
        if row.budget is not None:
            largest[row.series] = max(largest.get(row.series, row.budget), row.budget)
    below = [r for r in rows.values() if r.budget is not None and r.budget < largest[r.series]]
    return sorted(below, key=lambda r: (_preset_rank(r.preset), r.label))


def _earlier_note(earlier: list[Row]) -> str:
    from harness.reporting.numbers import si

    budgets = ", ".join(si(b) for b in sorted({r.budget for r in earlier if r.budget is not None}))
    return (f"{len(earlier)} row(s) trained at smaller token budgets ({budgets}) of settings also trained at a larger "
            "one are not on the board: a setting is ranked at its largest budget, and the rank-stability notes say "
            "whether each column's ordering already held at half of it (--all-budgets shows them as rows)")


def _rows(runs: list[RunRecord]) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    for run in sorted(runs, key=lambda r: r.manifest.written_at):
        s = run.manifest.subject
        row = rows.get(s.row_id)
        if row is None:
            row = rows[s.row_id] = Row(s.row_id, s.label, s.mixer, s.mixer_id,
                                       "external" if s.external else s.preset or "—", lineage=_lineage(run),
                                       control=s.control, context_free=s.context_free, external=s.external)
            series = budget_series(dict(run.manifest.identity.get("subject_parts") or {}))
            if series is not None:
                row.series, row.member, row.budget = series
        row.runs.append(run)
        row.newest = max(row.newest, run.manifest.written_at)
    for row in rows.values():
        subjects = {r.manifest.subject.id: r.manifest.subject for r in row.runs}.values()
        row.seeds = tuple(sorted({s.seed for s in subjects if s.seed is not None}))
        row.parameters = _mean_int([s.parameters for s in subjects])
        row.non_embedding_parameters = _mean_int([s.non_embedding_parameters for s in subjects])
        row.state_floats = _mean_int([s.state_floats for s in subjects])
        row.train_flops = _mean([s.train_flops for s in subjects])
        marks = [s.train_flops_estimated for s in subjects if s.train_flops_estimated is not None]
        row.train_flops_estimated = any(marks) if marks else None
        row.train_tokens_per_s = _mean([s.train_tokens_per_s for s in subjects])
        row.recipe = _shared([s.recipe for s in subjects])
        row.output_init = _shared([s.output_init for s in subjects])
        row.residual_gates = _shared([str((s.backbone or {}).get("residual_gates", "")) for s in subjects])
    return rows


def _shared(values: list[str]) -> str:
    """The value every part agrees on, "" when none is known, else "mixed"."""
    known = {v for v in values if v}
    return known.pop() if len(known) == 1 else ("mixed" if known else "")


def _gate_status(runs: list[RunRecord]) -> str:
    """The gate verdict the runs share, or "mixed"."""
    statuses = {r.manifest.gate.status for r in runs}
    return statuses.pop() if len(statuses) == 1 else "mixed"


def _newest_lineage(rows: dict[str, Row]) -> tuple[dict[str, Row], int]:
    best: dict[str, Row] = {}
    for row in rows.values():
        if row.lineage not in best or row.newest > best[row.lineage].newest:
            best[row.lineage] = row
    kept = {r.key: r for r in best.values()}
    return kept, len(rows) - len(kept)


def _mean(values: list[float | None]) -> float | None:
    known = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return statistics.fmean(known) if known else None


def _mean_int(values: list[int | None]) -> int | None:
    m = _mean(values)
    return None if m is None else int(round(m))


def _config_key(run: RunRecord) -> str:
    return canonical_json(run.manifest.suite_config)


def _canonical_configs(rows: list[Row], suite: str) -> tuple[str | None, bool, list[str]]:
    """The suite's canonical config (the non-override config that covers most rows; ties: the newest), whether
    it is one (False: the suite has only ad-hoc override runs, and the most-covering override config stands in,
    labelled with its config), and the other configs, as config keys."""
    coverage: dict[str, set[str]] = defaultdict(set)
    newest: dict[str, str] = {}
    canonical_keys: set[str] = set()
    for row in rows:
        for run in row.runs:
            if run.manifest.suite != suite:
                continue
            key = _config_key(run)
            coverage[key].add(row.key)
            newest[key] = max(newest.get(key, ""), run.manifest.written_at)
            if run.manifest.canonical:
                canonical_keys.add(key)
    if not coverage:
        return None, False, []
    pool = canonical_keys or set(coverage)
    chosen = max(pool, key=lambda k: (len(coverage[k]), newest[k]))
    return chosen, bool(canonical_keys), sorted(set(coverage) - {chosen})


def _cells(rows: list[Row], suites: list[str], all_metrics: bool, all_configs: bool, notes: list[str],
           ad_hoc: set[str]) -> tuple[list[Column], dict[tuple[str, str], Cell], dict[tuple[str, str], Cell]]:
    columns: list[Column] = []
    cells: dict[tuple[str, str], Cell] = {}
    nulls: dict[tuple[str, str], Cell] = {}
    for suite in suites:
        shown, is_canonical, others = _canonical_configs(rows, suite)
        configs = ([shown] if shown is not None else []) + (others if all_configs else [])
        hidden = sum(1 for row in rows for r in row.runs if r.manifest.suite == suite and _config_key(r) in others)
        if hidden and not all_configs:
            notes.append(f"{hidden} {suite} run(s) under other configs are not on the board (--all-configs shows them)")
        if shown is not None and not is_canonical:
            ad_hoc.add(suite)
            notes.append(f"{suite} has only runs under ad-hoc configs (--suite-config, --limit); its column shows "
                         f"{_label_of(rows, suite, shown)} as a diagnostic: it never votes")
        for config in configs:
            label = "" if config == shown and is_canonical else _label_of(rows, suite, config)
            for column, per_row, null_per_row in _suite_columns(rows, suite, config, label, all_metrics):
                columns.append(column)
                for row_key, cell in per_row.items():
                    cells[(row_key, column.name)] = cell
                for row_key, cell in null_per_row.items():
                    nulls[(row_key, column.name)] = cell
    return columns, cells, nulls


def _label_of(rows: list[Row], suite: str, config: str) -> str:
    for row in rows:
        for run in row.runs:
            if run.manifest.suite == suite and _config_key(run) == config:
                return run.manifest.config_label
    return "?"


def _suite_columns(rows: list[Row], suite: str, config: str, label: str, all_metrics: bool):
    """Columns of one suite under one config, in the order metrics first appear, with each row's cell."""
    per_metric: dict[str, dict[str, dict[Any, Metric]]] = defaultdict(lambda: defaultdict(dict))
    first: dict[str, Metric] = {}
    headline: tuple[str, ...] = ()
    for row in rows:
        for run in sorted(row.runs, key=lambda r: r.manifest.written_at):  # newest last: it wins per seed
            m = run.manifest
            if m.suite != suite or _config_key(run) != config:
                continue
            headline = m.headline or headline
            for metric in run.metrics:
                first.setdefault(metric.name, metric)
                per_metric[metric.name][row.key][m.subject.seed] = metric
    out = []
    for name, metric in first.items():
        shown = all_metrics or _is_headline(name, headline)
        if not shown:
            continue
        column = Column(suite, name, metric.role, metric.higher_is_better, metric.unit, label,
                        _is_headline(name, headline), metric.null, metric.positions)
        nulls = {row: seed_cell(list(by_seed.values()), tuple(by_seed))
                 for row, by_seed in per_metric.get(metric.null, {}).items()} if metric.null else {}
        out.append((column, {row: seed_cell(list(by_seed.values()), tuple(by_seed))
                             for row, by_seed in per_metric[name].items()}, nulls))
    # the suite's headline order, then the rest as they appear: the first column is the suite's first headline
    # (the compact view's column, the Pareto view's speed), whatever order the suite emits its metrics in
    return sorted(out, key=lambda item: _headline_rank(item[0].metric, headline))


def _is_headline(name: str, headline: tuple[str, ...]) -> bool:
    return not headline or any(fnmatch(name, pattern) for pattern in headline)


def _headline_rank(name: str, headline: tuple[str, ...]) -> int:
    """The index of the first headline pattern ``name`` matches; past the last for a metric that is not one."""
    return next((i for i, pattern in enumerate(headline) if fnmatch(name, pattern)), len(headline))


def seed_cell(metrics: list[Metric], seeds: tuple[Any, ...] = ()) -> Cell:
    """One cell from the metric of each seed (``seeds``: their ids, in the same order; see the module docstring)."""
    first = metrics[0]
    values = [m.value for m in metrics]
    unreliable = next((m.unreliable for m in metrics if m.unreliable), None)
    with_items = all(m.items is not None for m in metrics)
    items = _mean_items([m.items for m in metrics]) if with_items else None
    n = sum(m.n for m in metrics if m.n is not None) if any(m.n is not None for m in metrics) else None
    per_seed = tuple(_items_mean(m) if with_items else m.value for m in metrics)
    unit = _shared([m.items.unit for m in metrics]) if with_items else ""
    units = first.units if all(m.units == first.units for m in metrics) else None
    extra = dict(seed_values=per_seed, items_unit="" if unit == "mixed" else unit, units=units,
                 seed_ids=tuple(seeds) if len(seeds) == len(metrics) else ())
    if len(metrics) == 1:
        return Cell(first.value, first.interval, 1, first.higher_is_better, first.unit, items, unreliable,
                    first.chance, first.perfect, n, **extra)
    finite = [v for v in values if math.isfinite(v)]
    value = statistics.fmean(finite) if len(finite) == len(values) else math.nan
    interval = stats.t_interval(values) if math.isfinite(value) else None
    chance = first.chance if all(m.chance == first.chance for m in metrics) else _mean([m.chance for m in metrics])
    return Cell(value, interval, len(metrics), first.higher_is_better, first.unit, items, unreliable, chance,
                first.perfect, n, **extra)


def _items_mean(metric: Metric) -> float:
    """A run's items on their own scale: their weighted mean (NLL per token for perplexity)."""
    items = metric.items
    assert items is not None
    values = [v for v in items.values]
    weights = list(items.weights or (1.0,) * len(values))
    total = sum(w for v, w in zip(values, weights) if math.isfinite(v))
    if total <= 0:
        return math.nan
    return sum(v * w for v, w in zip(values, weights) if math.isfinite(v)) / total


def _mean_items(all_items) -> dict[str, tuple[float, float]] | None:
    """Per item id: the mean value (and weight) over seeds; duplicated ids within a run are averaged first."""
    sums: dict[str, list[float]] = {}
    for items in all_items:
        per_run: dict[str, list[tuple[float, float]]] = defaultdict(list)
        weights = items.weights or (1.0,) * len(items.ids)
        for i, v, w in zip(items.ids, items.values, weights):
            per_run[i].append((v, w))
        for i, pairs in per_run.items():
            v = statistics.fmean(p[0] for p in pairs)
            w = statistics.fmean(p[1] for p in pairs)
            acc = sums.setdefault(i, [0.0, 0.0, 0])
            acc[0] += v
            acc[1] += w
            acc[2] += 1
    n_runs = len(all_items)
    common = {i: (a[0] / a[2], a[1] / a[2]) for i, a in sums.items() if a[2] == n_runs}
    return common or None
