"""Leaderboard tables from the results store (DESIGN §6).

:func:`load_frame` flattens the store into one row per (run, metric); :func:`build_table` aggregates seeds into
one row per (mixer, preset) with a :class:`Cell` per ``suite/metric`` column; :func:`render` formats it.

Decisions fixed here:

* Seeds are the unit of replication. Several runs of one (mixer, preset, suite, seed) — a re-run under a new
  suite config or kernel — count once: the newest (``written_at``) wins, so a fix replaces a stale number
  instead of being averaged with it.
* A cell's interval is, with two or more seeds, a Student-t 95% interval of the mean over seeds; with one seed,
  the run's own interval (e.g. the suite's bootstrap CI). The cell keeps how many seeds it rests on, and the
  ``seeds`` column says when a column rests on fewer seeds than its row.
* Missing stays missing: a (mixer, preset) without a run for a metric gets no cell, and :func:`build_table`
  computes no average over columns (a suite's own average is one of its metrics). The board
  (:func:`build_board`, below) adds normalised scores, Borda ranks, suite means and the Pareto view; its suite
  means exist only for rows that have every column they average.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
import statistics
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config import PRESETS
from harness.errors import MixbenchError
from harness.results import ResultsStore, RunRecord, json_safe

FORMATS = ("md", "csv", "json", "html", "latex")
MANIFEST_FIELDS = ("kernel", "device", "parameters", "state_floats", "train_flops", "train_tokens_per_s")
FRAME_COLUMNS = (
    "run_id", "suite", "mixer", "preset", "seed", "metric", "value", "ci_low", "ci_high",
    "higher_is_better", "n", "unit", "headline", *MANIFEST_FIELDS, "written_at",
)  # fmt: skip
MISSING = "—"

# Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30 (beyond: a Cornish-Fisher expansion).
_T975 = (
    12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
    2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
    2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (error < 1e-4 for every df)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Cell:
    """One leaderboard entry: the mean over seeds and its 95% interval (``None`` when unknown)."""

    value: float
    ci_low: float | None
    ci_high: float | None
    n_seeds: int
    higher_is_better: bool
    unit: str = ""

    @staticmethod
    def from_seeds(
        values: list[float], run_ci: tuple[float | None, float | None], higher_is_better: bool, unit: str
    ) -> "Cell":
        """Aggregate one value per seed; ``run_ci`` is the single run's own interval, used when there is one seed."""
        n = len(values)
        if n == 1:
            return Cell(values[0], *run_ci, 1, higher_is_better, unit)
        mean = statistics.fmean(values)
        if not math.isfinite(mean):
            return Cell(mean, None, None, n, higher_is_better, unit)
        half = t_quantile_975(n - 1) * statistics.stdev(values) / math.sqrt(n)
        return Cell(mean, mean - half, mean + half, n, higher_is_better, unit)

    def text(self, pm: str = "±") -> str:
        """``12.34 ± 0.56`` for a symmetric interval, ``12.34 [12.10, 12.90]`` otherwise, ``12.34`` without one,
        ``n/a`` for a NaN (a metric that does not exist for this row, e.g. a crossover outside the grid)."""
        if math.isnan(self.value):
            return "n/a"
        digits = _decimals(self.value)
        value = _fixed(self.value, digits)
        if self.ci_low is None or self.ci_high is None or not math.isfinite(self.value):
            return value
        below, above = self.value - self.ci_low, self.ci_high - self.value
        if math.isclose(below, above, rel_tol=1e-6, abs_tol=1e-12 * max(1.0, abs(self.value))):
            return f"{value} {pm} {_fixed(above, digits)}"
        return f"{value} [{_fixed(self.ci_low, digits)}, {_fixed(self.ci_high, digits)}]"

    def to_json(self) -> dict[str, Any]:
        return json_safe(
            {
                "value": self.value,
                "ci_low": self.ci_low,
                "ci_high": self.ci_high,
                "n_seeds": self.n_seeds,
                "higher_is_better": self.higher_is_better,
                "unit": self.unit,
            }
        )


def _decimals(x: float) -> int | None:
    """Decimals for four significant digits; ``None`` means scientific notation (tiny or huge values)."""
    a = abs(x)
    if a == 0 or not math.isfinite(a):
        return 2
    if a < 1e-3 or a >= 1e7:
        return None
    return max(0, 3 - math.floor(math.log10(a)))


def _fixed(x: float, digits: int | None) -> str:
    return f"{x:.3e}" if digits is None else f"{x:.{digits}f}"


def load_frame(store: ResultsStore) -> pd.DataFrame:
    """Every metric of every complete run, one row each, with the manifest fields the tables need."""
    return frame_from_runs(store.iter_runs(samples=False))


def frame_from_runs(runs: Iterable[RunRecord]) -> pd.DataFrame:
    """:func:`load_frame` over runs already read (the site reads the store once for every page)."""
    rows = []
    for run in runs:
        m = run.manifest
        headline = m.get("headline")
        for metric in run.metrics:
            rows.append(
                {
                    "run_id": run.run_id,
                    "suite": m.get("suite"),
                    "mixer": m.get("mixer"),
                    "preset": m.get("preset"),
                    "seed": m.get("seed"),
                    "metric": metric.name,
                    "value": metric.value,
                    "ci_low": metric.ci_low,
                    "ci_high": metric.ci_high,
                    "higher_is_better": metric.higher_is_better,
                    "n": metric.n,
                    "unit": metric.unit,
                    "headline": metric.name in headline if isinstance(headline, list) else True,
                    **{k: m.get(k) for k in MANIFEST_FIELDS},
                    "written_at": m.get("written_at"),
                }
            )
    return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


def _empty(message: str) -> pd.DataFrame:
    table = pd.DataFrame(columns=["mixer", "preset", "params", "state_floats", "seeds"])
    table.attrs.update(empty_message=message, metric_columns=[])
    return table


def _preset_order(name: str) -> tuple[int, str]:
    order = list(PRESETS)
    return (order.index(name), "") if name in order else (len(order), name)


def _seed_text(seed: Any) -> str:
    """Seeds as written (pandas turns ints into floats when some run lacks a seed)."""
    seed = _opt(seed)
    if seed is None:
        return "?"
    return str(int(seed)) if isinstance(seed, float) and seed.is_integer() else str(seed)


def _newest(frame: pd.DataFrame, column: str, label: str) -> Any:
    """The newest run's value of a per-model field, warning when runs of one row disagree about it."""
    known = frame.dropna(subset=[column]).sort_values("written_at", na_position="first")
    if known.empty:
        return None
    distinct = known[column].unique()
    if len(distinct) > 1:
        values = ", ".join(map(str, distinct))
        warnings.warn(f"{label}: runs disagree on {column} ({values}); showing the newest.", stacklevel=3)
    return known[column].iloc[-1]


def build_table(store: ResultsStore, suites: list[str] | None = None, all_metrics: bool = False) -> pd.DataFrame:
    """One row per (mixer, preset), one :class:`Cell` (or ``None``) per ``suite/metric`` column.

    ``table.attrs["metric_columns"]`` lists the metric columns in order; an empty table carries the line to
    print instead in ``table.attrs["empty_message"]``.
    """
    return table_from_frame(load_frame(store), str(store.root), suites, all_metrics)


def table_from_frame(
    frame: pd.DataFrame, root: str, suites: list[str] | None = None, all_metrics: bool = False
) -> pd.DataFrame:
    """:func:`build_table` on a frame in :func:`load_frame`'s shape (e.g. one already normalised); ``root`` only
    names the store in messages."""
    if frame.empty:
        return _empty(f"no results in {root}; run `mixbench quickstart` or `mixbench eval`")
    unplaced = frame[frame[["suite", "mixer", "preset"]].isna().any(axis=1)]
    if not unplaced.empty:
        ids = ", ".join(sorted(unplaced.run_id.unique()))
        warnings.warn(f"runs {ids} lack suite, mixer or preset in their manifest and are left out.", stacklevel=2)
        frame = frame.drop(unplaced.index)
    available = sorted(frame.suite.unique())
    order = list(dict.fromkeys(suites)) if suites else available
    chosen = frame[frame.suite.isin(order)]
    if not all_metrics:
        chosen = chosen[chosen.headline.astype(bool)]
    if chosen.empty:
        return _empty(
            f"no results for suite(s) {', '.join(order)} in {root} "
            f"(suites with results: {', '.join(available) or 'none'})"
        )
    chosen = chosen.sort_values("written_at", na_position="first").drop_duplicates(
        ["mixer", "preset", "suite", "metric", "seed"], keep="last"
    )
    present = set(zip(chosen.suite, chosen.metric))
    columns = [f"{s}/{m}" for s in order for m in frame[frame.suite == s].metric.unique() if (s, m) in present]
    by_cell = dict(list(chosen.groupby(["mixer", "preset", "suite", "metric"], sort=False)))
    by_model = dict(list(frame.groupby(["mixer", "preset"], sort=False)))
    keys = sorted({(mixer, preset) for mixer, preset, _, _ in by_cell}, key=lambda k: (_preset_order(k[1]), k[0]))
    has_flops = frame.train_flops.notna().any()
    rows = []
    for mixer, preset in keys:
        model_runs, label = by_model[(mixer, preset)], f"{mixer} / {preset}"
        row: dict[str, Any] = {
            "mixer": mixer,
            "preset": preset,
            "params": _newest(model_runs, "parameters", label),
            "state_floats": _newest(model_runs, "state_floats", label),
        }
        if has_flops:
            row["train_flops"] = _newest(model_runs, "train_flops", label)
        seeds_by_column: dict[str, tuple[str, ...]] = {}
        cells: dict[str, Cell | None] = {}
        for column in columns:
            g = by_cell.get((mixer, preset, *column.split("/", 1)))
            if g is None:
                cells[column] = None
                continue
            first = g.iloc[0]
            cells[column] = Cell.from_seeds(
                [float(v) for v in g.value],
                (_float(first.ci_low), _float(first.ci_high)),
                bool(first.higher_is_better),
                str(first.unit or ""),
            )
            seeds_by_column[column] = tuple(sorted({_seed_text(s) for s in g.seed}, key=_seed_key))
        row["seeds"] = _seeds_note(seeds_by_column)
        rows.append({**row, **cells})

    table = pd.DataFrame(rows)
    for column in ("params", "state_floats"):
        table[column] = pd.array([None if _opt(v) is None else int(v) for v in table[column]], dtype="Int64")
    if has_flops:
        table["train_flops"] = pd.array([_opt(v) for v in table["train_flops"]], dtype="Float64")
    for column in columns:
        table[column] = pd.Series([r[column] for r in rows], dtype=object)  # keep None, never NaN
    table.attrs.update(metric_columns=columns)
    return table


def _float(v: Any) -> float | None:
    v = _opt(v)
    return None if v is None else float(v)


def _opt(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA else v


def _seeds_note(seeds_by_column: dict[str, tuple[str, ...]]) -> str:
    """``0,1,2`` — plus ``(judge: 0)`` for the suites (or columns) that rest on fewer seeds than the row."""
    union = tuple(sorted({s for seeds in seeds_by_column.values() for s in seeds}, key=_seed_key))
    notes: dict[str, set[tuple[str, ...]]] = {}
    for column, seeds in seeds_by_column.items():
        notes.setdefault(column.split("/", 1)[0], set()).add(seeds)
    parts = []
    for suite, seed_sets in notes.items():
        if seed_sets == {union}:
            continue
        if len(seed_sets) == 1:
            parts.append(f"{suite}: {','.join(next(iter(seed_sets)))}")
        else:
            parts.extend(
                f"{c}: {','.join(s)}" for c, s in seeds_by_column.items() if c.startswith(f"{suite}/") and s != union
            )
    text = ",".join(union)
    return f"{text} ({'; '.join(parts)})" if parts else text


def _seed_key(seed: str) -> tuple[int, int | str]:
    return (0, int(seed)) if seed.lstrip("-").isdigit() else (1, seed)


# ---------------------------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class _Style:
    escape: Callable[[str], str]
    bold: Callable[[str], str]
    pm: str
    up: str
    down: str


def _escape_md(s: str) -> str:
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _escape_latex(s: str) -> str:
    out = []
    for ch in s:
        if ch in "&%$#_{}":
            out.append("\\" + ch)
        elif ch == "\\":
            out.append(r"\textbackslash{}")
        elif ch == "~":
            out.append(r"\textasciitilde{}")
        elif ch == "^":
            out.append(r"\textasciicircum{}")
        else:
            out.append(ch)
    return " ".join("".join(out).split("\n"))


_STYLES = {
    "md": _Style(_escape_md, lambda s: f"**{s}**", "±", "↑", "↓"),
    "html": _Style(lambda s: html.escape(s, quote=True), lambda s: f"<strong>{s}</strong>", "±", "↑", "↓"),
    "latex": _Style(_escape_latex, lambda s: rf"\textbf{{{s}}}", r"$\pm$", r"$\uparrow$", r"$\downarrow$"),
}


def _si(x: float) -> str:
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:g}"


def _best(cells: list[Cell | None]) -> float | None:
    values = [c.value for c in cells if c is not None and math.isfinite(c.value)]
    if len(set(values)) < 2:  # a lone or all-equal column has no winner to point at
        return None
    return max(values) if next(c for c in cells if c is not None).higher_is_better else min(values)


def _display(table: pd.DataFrame, style: _Style) -> tuple[list[str], list[list[str]]]:
    """Header and body as escaped strings, missing cells as ``—``, the best cell of each metric column in bold."""
    metric_columns = table.attrs["metric_columns"]
    lead = [c for c in table.columns if c not in metric_columns]
    header = [style.escape(c) for c in lead]
    best = {}
    for column in metric_columns:
        cells = list(table[column])
        sample = next((c for c in cells if c is not None), None)  # units stay in csv/json; headers stay short
        if sample is None:  # a board column no row has (e.g. tokens/s without any speed measurement)
            header.append(style.escape(column))
        else:
            header.append(f"{style.escape(column)} {style.up if sample.higher_is_better else style.down}")
        best[column] = _best(cells)
    body = []
    for _, row in table.iterrows():
        line = []
        for column in lead:
            v = row[column]
            if pd.isna(v):
                line.append(MISSING)
            elif column == "train_flops":
                line.append(f"{float(v):.2e}")
            elif column in ("params", "state_floats"):
                line.append(_si(float(v)))
            elif isinstance(v, float):  # the board's Borda points
                line.append(f"{v:.4g}")
            else:
                line.append(style.escape(str(v)))
        for column in metric_columns:
            cell = row[column]
            if cell is None:
                line.append(MISSING)
                continue
            text = cell.text(style.pm)
            line.append(style.bold(text) if best[column] is not None and cell.value == best[column] else text)
        body.append(line)
    return header, body


def _render_md(table: pd.DataFrame) -> str:
    header, body = _display(table, _STYLES["md"])
    return pd.DataFrame(body, columns=header).to_markdown(index=False, disable_numparse=True)


def _render_html(table: pd.DataFrame) -> str:
    header, body = _display(table, _STYLES["html"])
    head = "<tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr>"
    lines = ['<table class="mixbench-leaderboard">', "<thead>", head, "</thead>", "<tbody>"]
    lines += ["<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body]
    return "\n".join([*lines, "</tbody>", "</table>"])


def _render_latex(table: pd.DataFrame) -> str:
    header, body = _display(table, _STYLES["latex"])
    align = "".join("l" if c in ("mixer", "preset", "seeds") else "r" for c in table.columns)
    lines = [rf"\begin{{tabular}}{{{align}}}", r"\hline", " & ".join(header) + r" \\", r"\hline"]
    lines += [" & ".join(row) + r" \\" for row in body]
    return "\n".join([*lines, r"\hline", r"\end{tabular}"])


def _render_csv(table: pd.DataFrame) -> str:
    flat = table.drop(columns=table.attrs["metric_columns"])
    for column in table.attrs["metric_columns"]:
        cells = list(table[column])
        for part in ("value", "ci_low", "ci_high"):
            name = column if part == "value" else f"{column} {part}"
            values = [None if c is None else json_safe(getattr(c, part)) for c in cells]
            flat[name] = pd.array(values, dtype="Float64")
    buffer = io.StringIO()
    flat.to_csv(buffer, index=False)
    return buffer.getvalue()


def _render_json(table: pd.DataFrame) -> str:
    metric_columns = set(table.attrs["metric_columns"])
    rows = [
        {c: _cell_json(row[c]) if c in metric_columns else _opt(row[c]) for c in table.columns}
        for _, row in table.iterrows()
    ]
    return json.dumps(json_safe(rows), allow_nan=False, ensure_ascii=False, indent=2)


def _cell_json(cell: Cell | None) -> dict[str, Any] | None:
    return None if cell is None else cell.to_json()


_RENDERERS = {"md": _render_md, "csv": _render_csv, "json": _render_json, "html": _render_html, "latex": _render_latex}


def render(table: pd.DataFrame, fmt: str) -> str:
    """The table in ``fmt`` (md, csv, json, html or latex); an empty table renders as its one-line message."""
    if fmt not in _RENDERERS:
        raise MixbenchError(f"unknown leaderboard format '{fmt}'; use one of {', '.join(FORMATS)}.")
    if table.empty:
        return table.attrs.get("empty_message", "no results")
    return _RENDERERS[fmt](table)


def leaderboard_text(root: str, fmt: str = "md", suites: list[str] | None = None, all_metrics: bool = False) -> str:
    """The leaderboard of the store at ``root`` rendered as ``fmt`` (what ``mixbench leaderboard`` prints)."""
    if fmt not in FORMATS:
        raise MixbenchError(f"unknown leaderboard format '{fmt}'; choose one of {', '.join(FORMATS)}.")
    return render(build_table(ResultsStore(root), suites, all_metrics), fmt)


# ---------------------------------------------------------------------------------------------- aggregation
#
# The board (DESIGN §6, ANCHORS §1.9): the leaderboard table plus what makes rows comparable at a glance.
#
# * Classification scores are normalised against their baseline, as the Open LLM Leaderboard v2 does:
#   ``100 * (raw - baseline) / (upper - baseline)``, clipped at 0 so a below-baseline task cannot pull an average
#   under what always guessing would get. The baseline is the run's own majority-class rate (``task/majority_acc``,
#   which the glue suite stores next to every accuracy and which is stronger than 1/classes), 0 for MCC (its
#   chance level by construction), or a chance level given per column (``BoardConfig.chance``, e.g. 1/choices for
#   an lm-eval task). Normalised columns replace the raw ones on the board and are named ``... (norm)``; the
#   majority rates themselves describe the data, not the model, and leave the board.
# * Borda count (MTEB's ranking) within each preset (only matched backbones compete): every quality column votes;
#   a row gets one point per row of its preset it beats and half per tie. By default each suite's vote is split over its columns so a suite with ten headline columns does not
#   outvote one with two. Speed suites do not vote (speed is the other axis of the Pareto view), nor do average
#   columns (``*/avg*``: their parts vote already). Rows are only ranked over the same columns: a row missing a
#   voting cell gets no rank (``—``) and its coverage says how many cells it has, instead of being ranked over
#   fewer tasks (MTEB #1921, #4263). A rank per suite (Borda over that suite's columns) still ranks rows that
#   have all cells of that suite. A column that a suite produces only for some mixers (ProtoT's routing shift in
#   robustness) does not vote: a row that ran the suite but has no such cell lacks it by design, not by a
#   missing run, and one mixer's own metric cannot rank the others.
# * Mean by suite: the mean of a suite's normalised columns (the only ones on a shared 0-100 scale); missing
#   when the row lacks any of them, never a mean over fewer.
# * Pareto view: quality against speed within each preset (comparisons are at matched backbone); a row is on
#   the front when no other row of its preset is at least as good on both axes and better on one.

NORM_SUFFIX = " (norm)"
NORM_UNIT = "normalised 0-100"
SPEED_SUITES = ("throughput",)
DEFAULT_SPEEDS = ("throughput/prefill_tok_s", "throughput/train_tok_s")
TRAIN_SPEED = "train_tokens_per_s"  # measured while training, in every eval manifest
BORDA_WEIGHTINGS = ("suite", "column")
_NORMALISABLE = re.compile(r"^(?P<task>.+/)?(?P<metric>acc|acc_norm|mcc)(?P<split>_matched|_mismatched)?$")
_BASELINE = re.compile(r"(^|/)majority_acc(_matched|_mismatched)?$")
_AVERAGE = re.compile(r"(^|/)avg(_\d+of\d+)?$")


@dataclass(frozen=True)
class BoardConfig:
    """What the board aggregates and how (defaults follow the Open LLM Leaderboard and MTEB).

    ``chance`` maps a column (``suite/metric``, e.g. ``lm-eval/hellaswag/acc``) to its chance level on the
    metric's own scale, for classification metrics whose run stores no majority rate. ``quality`` and ``speed``
    name the Pareto axes: ``quality`` a metric column (default ``perplexity/ppl`` when present, else the Borda
    points), ``speed`` a metric column or ``train_tokens_per_s`` (default: the throughput suite's prefill
    tokens/s when any row has it, else its training tokens/s, else the training speed from the manifests).
    """

    suites: tuple[str, ...] | None = None
    chance: tuple[tuple[str, float], ...] = ()
    clip: bool = True
    borda_weighting: str = "suite"
    quality: str | None = None
    speed: str | None = None

    def __post_init__(self) -> None:
        if self.suites is not None:
            object.__setattr__(self, "suites", tuple(self.suites))
        chance = tuple(sorted(dict(self.chance).items())) if not isinstance(self.chance, tuple) else self.chance
        object.__setattr__(self, "chance", chance)
        for column, level in chance:
            if "/" not in column:
                raise MixbenchError(f"board: chance level key '{column}' must be a suite/metric column name.")
            if not (isinstance(level, (int, float)) and math.isfinite(level)):
                raise MixbenchError(f"board: chance level of {column} must be a finite number, got {level!r}.")
        if self.borda_weighting not in BORDA_WEIGHTINGS:
            raise MixbenchError(
                f"board: borda_weighting must be one of {', '.join(BORDA_WEIGHTINGS)}, got '{self.borda_weighting}'."
            )


def normalise_score(value: float, baseline: float, upper: float, clip: bool = True) -> float:
    """``100 * (value - baseline) / (upper - baseline)``, at least 0 with ``clip`` (NaN stays NaN).

    The Open LLM Leaderboard's rescaling: the baseline maps to 0, a perfect score to 100.
    """
    if not upper > baseline:
        raise MixbenchError(f"cannot normalise against baseline {baseline}: it is not below the best score {upper}.")
    if math.isnan(value):
        return value
    score = 100.0 * (value - baseline) / (upper - baseline)
    return max(0.0, score) if clip else score


def _upper(unit: Any) -> float:
    """A metric's best score: GLUE-style metrics are stored x100, lm-eval's as fractions."""
    return 100.0 if str(unit or "") == "x100" else 1.0


def normalise_frame(frame: pd.DataFrame, chance: dict[str, float] | None = None, clip: bool = True) -> pd.DataFrame:
    """:func:`load_frame`'s rows with classification metrics normalised against their baseline (see above).

    Each seed's value (and a single run's interval bounds: the map is monotonic) is normalised before seeds are
    aggregated. Adds the columns ``baseline`` and ``baseline_source`` (``majority``, ``mcc`` or ``chance``);
    majority-rate rows are dropped. A metric that looks like an accuracy but has no known baseline stays raw.
    """
    chance = dict(chance or {})
    majority = {
        (r.run_id, r.metric): float(r.value)
        for r in frame.itertuples()
        if _BASELINE.search(str(r.metric)) and r.value is not None and math.isfinite(float(r.value))
    }
    rows = []
    for r in frame.to_dict("records"):
        metric = str(r["metric"])
        if _BASELINE.search(metric):
            continue
        baseline, source = _baseline_of(r, majority, chance)
        if baseline is None:
            rows.append({**r, "baseline": None, "baseline_source": None})
            continue
        upper = _upper(r["unit"])

        def norm(x: Any, upper: float = upper, baseline: float = baseline) -> float | None:
            x = _float(x)
            return None if x is None else normalise_score(x, baseline, upper, clip)

        rows.append(
            {
                **r,
                "metric": metric + NORM_SUFFIX,
                "value": norm(r["value"]),
                "ci_low": norm(r["ci_low"]),
                "ci_high": norm(r["ci_high"]),
                "higher_is_better": True,
                "unit": NORM_UNIT,
                "baseline": baseline,
                "baseline_source": source,
            }
        )
    return pd.DataFrame(rows, columns=[*frame.columns, "baseline", "baseline_source"])


def _baseline_of(row: dict[str, Any], majority: dict, chance: dict[str, float]) -> tuple[float | None, str | None]:
    metric = str(row["metric"])
    column = f"{row['suite']}/{metric}"
    if column in chance:
        return float(chance[column]), "chance"
    m = _NORMALISABLE.match(metric)
    if m is None or not bool(row["higher_is_better"]):
        return None, None
    if m["metric"] == "mcc":
        return 0.0, "mcc"
    key = (row["run_id"], f"{m['task'] or ''}majority_acc{m['split'] or ''}")
    if key in majority and majority[key] < _upper(row["unit"]):
        return majority[key], "majority"
    return None, None


def borda(values: dict[Any, list[float | None]], higher_is_better: list[bool],
          weights: list[float] | None = None) -> tuple[dict[Any, float | None], dict[Any, int | None]]:
    """Borda points and competition ranks (1, 2, 2, 4) of rows over columns.

    ``values[row][j]`` is the row's value in column ``j`` (``None`` or NaN: missing). Each column gives a row one
    point per complete row it beats and half a point per tie, times the column's weight. Only rows with every
    column are ranked; the others get ``None`` for both.
    """
    n_cols = len(higher_is_better)
    weights = [1.0] * n_cols if weights is None else list(weights)
    if len(weights) != n_cols or any(len(v) != n_cols for v in values.values()):
        raise ValueError("borda: every row needs one value per column, and every column one weight")

    def present(x: float | None) -> bool:
        return x is not None and not math.isnan(x)

    complete = [k for k, v in values.items() if all(present(x) for x in v)]
    points: dict[Any, float | None] = {k: None for k in values}
    for k in complete:
        total = 0.0
        for j in range(n_cols):
            sign = 1.0 if higher_is_better[j] else -1.0
            mine = sign * values[k][j]
            others = [sign * values[o][j] for o in complete if o != k]
            total += weights[j] * (sum(mine > x for x in others) + 0.5 * sum(mine == x for x in others))
        points[k] = total
    ranks: dict[Any, int | None] = {k: None for k in values}
    for k in complete:
        ranks[k] = 1 + sum(points[o] > points[k] + 1e-12 for o in complete)  # type: ignore[operator]
    return points, ranks


def pareto_front(points: dict[Any, tuple[float, float]], x_higher: bool = True, y_higher: bool = True) -> set[Any]:
    """The keys no other point dominates (at least as good on both axes, better on one); NaN points are left out."""
    signed = {
        k: ((1 if x_higher else -1) * x, (1 if y_higher else -1) * y)
        for k, (x, y) in points.items()
        if not (math.isnan(x) or math.isnan(y))
    }
    return {
        k
        for k, (x, y) in signed.items()
        if not any(ox >= x and oy >= y and (ox > x or oy > y) for o, (ox, oy) in signed.items() if o != k)
    }


def borda_columns(metric_columns: list[str]) -> list[str]:
    """The columns that vote: quality columns, not speed suites' and not averages of other columns."""
    return [
        c for c in metric_columns
        if c.split("/", 1)[0] not in SPEED_SUITES and not _AVERAGE.search(c.split("/", 1)[1])
    ]  # fmt: skip


def applicable_columns(columns: list[str], cells: dict[str, dict[tuple, Any]], keys: list[tuple]) -> list[str]:
    """The columns every row that ran their suite has: a row with some cell of suite S but none in a column of S
    ran S, which did not produce that metric for its mixer (a metric that applies to some mixers only)."""
    def suite_of(c: str) -> str:
        return c.split("/", 1)[0]

    ran = {(suite_of(c), k) for c in cells for k in keys if cells[c][k] is not None}
    return [c for c in columns if all(cells[c][k] is not None or (suite_of(c), k) not in ran for k in keys)]


def build_board(store: ResultsStore, config: BoardConfig | None = None, frame: pd.DataFrame | None = None
                ) -> pd.DataFrame:
    """The leaderboard with normalised classification scores, Borda rank, suite means, speed and the Pareto front.

    Columns: mixer, preset, params, state_floats (train_flops), seeds, ``borda rank``, ``borda points``,
    ``coverage`` (voting cells present / voting columns), ``rank <suite>`` (Borda within one suite, over the rows
    that have all of that suite's voting cells), ``pareto`` (on its preset's front, or ``—`` when the row
    lacks an axis), then :class:`Cell` columns: ``tokens/s``, ``mean <suite>`` per suite with normalised columns,
    and every headline metric column. ``attrs`` carries ``metric_columns`` (all Cell columns), ``borda_columns``,
    ``borda_weights``, ``speed`` and ``quality`` (the Pareto axes' sources) and ``fronts`` (preset -> mixers).
    ``frame`` is :func:`load_frame`'s result when the caller has it already.
    """
    config = config or BoardConfig()
    frame = normalise_frame(load_frame(store) if frame is None else frame, dict(config.chance), config.clip)
    suites = list(config.suites) if config.suites else None
    table = table_from_frame(frame, str(store.root), suites, all_metrics=False)
    if table.empty:
        return table
    columns = list(table.attrs["metric_columns"])
    keys = list(zip(table.mixer, table.preset))
    cells = {c: dict(zip(keys, table[c])) for c in columns}

    # Borda
    voting = applicable_columns(borda_columns(columns), cells, keys)
    per_suite = {s: sum(c.split("/", 1)[0] == s for c in voting) for s in {c.split("/", 1)[0] for c in voting}}
    weights = [1.0 / per_suite[c.split("/", 1)[0]] if config.borda_weighting == "suite" else 1.0 for c in voting]
    direction = [next(x for x in cells[c].values() if x is not None).higher_is_better for c in voting]
    values = {k: [None if cells[c][k] is None else cells[c][k].value for c in voting] for k in keys}
    points, ranks = _borda_by_preset(values, direction, weights)
    coverage = {k: sum(v is not None and not math.isnan(v) for v in values[k]) for k in keys}
    suite_ranks: dict[str, dict[tuple, int | None]] = {}
    for suite in dict.fromkeys(c.split("/", 1)[0] for c in voting):  # within a suite, rows need only its cells
        idx = [j for j, c in enumerate(voting) if c.split("/", 1)[0] == suite]
        _, suite_ranks[f"rank {suite}"] = _borda_by_preset(
            {k: [values[k][j] for j in idx] for k in keys}, [direction[j] for j in idx], None
        )

    # suite means over the normalised columns
    means: dict[str, dict[tuple, Cell | None]] = {}
    for suite in dict.fromkeys(c.split("/", 1)[0] for c in columns):
        norm_cols = [c for c in columns if c.startswith(f"{suite}/") and c.endswith(NORM_SUFFIX)]
        if norm_cols:
            means[f"mean {suite}"] = {k: _suite_mean(frame, k, suite, norm_cols) for k in keys}

    # speed and quality, the Pareto axes
    speed_name, speed = _speed(frame, table, config.speed, keys)
    quality_name = config.quality or ("perplexity/ppl" if "perplexity/ppl" in columns else "borda points")
    if quality_name != "borda points" and quality_name not in columns:
        raise MixbenchError(
            f"board: quality column '{quality_name}' is not on the board; choose one of {', '.join(columns)}."
        )
    fronts: dict[str, list[str]] = {}
    on_front: dict[tuple, bool | None] = {}
    for preset in dict.fromkeys(table.preset):
        pts = {}
        for k in keys:
            if k[1] != preset:
                continue
            q = points[k] if quality_name == "borda points" else _value(cells[quality_name][k])
            s = _value(speed[k])
            if q is None or s is None or math.isnan(q) or math.isnan(s):
                on_front[k] = None
                continue
            pts[k] = (s, q)
        higher = True if quality_name == "borda points" else _direction(cells[quality_name])
        front = pareto_front(pts, x_higher=True, y_higher=higher)
        for k in pts:
            on_front[k] = k in front
        fronts[str(preset)] = sorted(k[0] for k in front)

    lead = [c for c in table.columns if c not in columns]
    board = table[lead].copy()
    board["borda rank"] = pd.array([ranks[k] for k in keys], dtype="Int64")
    board["borda points"] = pd.array([points[k] for k in keys], dtype="Float64")
    board["coverage"] = [f"{coverage[k]}/{len(voting)}" for k in keys]
    for name, by_key in suite_ranks.items():
        board[name] = pd.array([by_key[k] for k in keys], dtype="Int64")
    board["pareto"] = ["—" if on_front[k] is None else ("yes" if on_front[k] else "no") for k in keys]
    cell_columns = ["tokens/s", *means, *columns]
    board["tokens/s"] = pd.Series([speed[k] for k in keys], dtype=object)
    for name, by_key in means.items():
        board[name] = pd.Series([by_key[k] for k in keys], dtype=object)
    for c in columns:
        board[c] = table[c]
    board.attrs.update(
        metric_columns=cell_columns,
        borda_columns=voting,
        borda_weights=dict(zip(voting, weights)),
        speed=speed_name,
        quality=quality_name,
        fronts=fronts,
        baselines=_baselines(frame),
    )
    return board


def _borda_by_preset(values: dict[tuple, list[float | None]], direction: list[bool], weights: list[float] | None
                     ) -> tuple[dict[tuple, float | None], dict[tuple, int | None]]:
    """:func:`borda` within each preset: rows are ``(mixer, preset)`` and only matched backbones compete."""
    points: dict[tuple, float | None] = {}
    ranks: dict[tuple, int | None] = {}
    for preset in dict.fromkeys(k[1] for k in values):
        p, r = borda({k: v for k, v in values.items() if k[1] == preset}, direction, weights)
        points.update(p)
        ranks.update(r)
    return points, ranks


def _value(cell: Cell | None) -> float | None:
    return None if cell is None else cell.value


def _direction(cells: dict[tuple, Cell | None]) -> bool:
    return next(c for c in cells.values() if c is not None).higher_is_better


def _suite_mean(frame: pd.DataFrame, key: tuple, suite: str, norm_cols: list[str]) -> Cell | None:
    """Mean of the row's normalised columns of ``suite``, per seed, then over seeds (``None`` if any is missing).

    A seed counts only if it has every column; the newest run of a (seed, column) wins as in the table.
    """
    mixer, preset = key
    metrics = [c.split("/", 1)[1] for c in norm_cols]
    rows = frame[(frame.mixer == mixer) & (frame.preset == preset) & (frame.suite == suite)]
    rows = rows[rows.metric.isin(metrics)].sort_values("written_at", na_position="first")
    rows = rows.drop_duplicates(["metric", "seed"], keep="last")
    if set(rows.metric) != set(metrics):
        return None
    per_seed = []
    for _, g in rows.groupby(rows.seed.map(_seed_text), sort=True):
        if len(g) == len(metrics) and all(_float(v) is not None for v in g.value):
            per_seed.append(statistics.fmean(float(v) for v in g.value))
    if not per_seed:
        return None
    return Cell.from_seeds(per_seed, (None, None), True, NORM_UNIT)


def _speed(frame: pd.DataFrame, table: pd.DataFrame, requested: str | None,
           keys: list[tuple]) -> tuple[str, dict[tuple, Cell | None]]:
    """The speed axis: a throughput column's cells, or training tokens/s from the manifests (mean over seeds)."""
    speed_frame = frame[frame.suite.isin(SPEED_SUITES)]
    available = {f"{s}/{m}" for s, m in zip(speed_frame.suite, speed_frame.metric)}
    if requested is None:
        requested = next((c for c in DEFAULT_SPEEDS if c in available), TRAIN_SPEED)
    if requested != TRAIN_SPEED:
        if requested not in available:
            raise MixbenchError(
                f"board: speed column '{requested}' has no results; use one of "
                f"{', '.join(sorted(available | {TRAIN_SPEED}))}."
            )
        if requested in table.columns:
            return requested, dict(zip(keys, table[requested]))
        sub = table_from_frame(frame, "", [requested.split("/", 1)[0]], all_metrics=True)
        by_key = dict(zip(zip(sub.mixer, sub.preset), sub[requested]))
        return requested, {k: by_key.get(k) for k in keys}
    out: dict[tuple, Cell | None] = {}
    for k in keys:
        runs = frame[(frame.mixer == k[0]) & (frame.preset == k[1])].dropna(subset=[TRAIN_SPEED])
        runs = runs.sort_values("written_at", na_position="first").drop_duplicates("run_id")
        per_seed = runs.assign(s=runs.seed.map(_seed_text)).drop_duplicates("s", keep="last")
        values = [float(v) for v in per_seed[TRAIN_SPEED] if _float(v) is not None]
        out[k] = Cell.from_seeds(values, (None, None), True, "tokens/s") if values else None
    return TRAIN_SPEED, out


def _baselines(frame: pd.DataFrame) -> dict[str, str]:
    """Column -> what its normalisation was measured against, for the page's footnote."""
    out: dict[str, set[str]] = {}
    for r in frame.dropna(subset=["baseline_source"]).itertuples():
        out.setdefault(f"{r.suite}/{r.metric}", set()).add(str(r.baseline_source))
    return {c: "/".join(sorted(s)) for c, s in out.items()}


def pareto_plot(board: pd.DataFrame, path: Path) -> Path | None:
    """Quality against speed, one panel per preset, the front joined by a line; ``None`` when nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if board.empty:
        return None
    quality = board.attrs["quality"]
    presets = [p for p in dict.fromkeys(board.preset) if (board[board.preset == p].pareto != "—").any()]
    if not presets:
        return None
    fig, axes = plt.subplots(1, len(presets), figsize=(5.5 * len(presets), 4.2), squeeze=False)
    for ax, preset in zip(axes[0], presets):
        rows = board[(board.preset == preset) & (board.pareto != "—")]
        xs = [r["tokens/s"].value for _, r in rows.iterrows()]
        ys = [r["borda points"] if quality == "borda points" else r[quality].value for _, r in rows.iterrows()]
        front = [r.pareto == "yes" for _, r in rows.iterrows()]
        ax.scatter([x for x, f in zip(xs, front) if not f], [y for y, f in zip(ys, front) if not f], c="#999", s=36)
        ax.scatter([x for x, f in zip(xs, front) if f], [y for y, f in zip(ys, front) if f], c="#d62728", s=48,
                   label="Pareto front")
        line = sorted((x, y) for x, y, f in zip(xs, ys, front) if f)
        if len(line) > 1:
            ax.plot([p[0] for p in line], [p[1] for p in line], c="#d62728", lw=1, alpha=0.6)
        for (_, r), x, y in zip(rows.iterrows(), xs, ys):
            ax.annotate(str(r.mixer), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8,
                        parse_math=False)
        ax.set_xscale("log")
        ax.set_xlabel(f"{board.attrs['speed']} (tokens/s, log)", parse_math=False)
        better = "higher" if quality == "borda points" or _direction(dict(enumerate(board[quality]))) else "lower"
        ax.set_ylabel(f"{quality} ({better} is better)", parse_math=False)
        ax.set_title(f"preset {preset}", parse_math=False)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
