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
* Missing stays missing: a (mixer, preset) without a run for a metric gets no cell, and no average over
  columns is ever computed here (a suite's own average is one of its metrics).
"""

from __future__ import annotations

import html
import io
import json
import math
import statistics
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.config import PRESETS
from harness.errors import MixbenchError
from harness.results import ResultsStore, json_safe

FORMATS = ("md", "csv", "json", "html", "latex")
MANIFEST_FIELDS = ("kernel", "device", "parameters", "state_floats", "train_flops")
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
    rows = []
    for run in store.iter_runs(samples=False):
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
    frame = load_frame(store)
    if frame.empty:
        return _empty(f"no results in {store.root}; run `mixbench quickstart` or `mixbench eval`")
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
            f"no results for suite(s) {', '.join(order)} in {store.root} "
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
        sample = next(c for c in cells if c is not None)  # units stay in csv/json; headers stay short
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
