"""``mixbench publish``: the results store as a static site (docs/DESIGN.md §6, docs/ARCHITECTURE.md "Data flow").

Layout of the site folder::

    index.html                    one sentence on who leads and how surely, the board (sortable) with ranks and
                                  their intervals, voting columns first, tie groups and the gate, one legend for
                                  every mark and note, who came out ahead where a null won, the Pareto view
                                  (quality against measured speed), the full name of every column, downloads
    suites/<suite>.html           every metric of the suite in the suite's own order, one plot per headline
                                  column with every model side by side (suites/<suite>-<i>-<metric>.png), the
                                  suite's own section (its hook: judged pairs, robustness pairs,
                                  accuracy-vs-state, ...), the plots stored with its runs, its runs
    rows/<row>.html               one model: identity, cost, training and validation loss curves, and the
                                  provenance of every run behind it, fields that differ between the runs marked
    runs/<run_id>.html, .json     one run: metrics, plots and the manifest as stored
    plots/<run_id>/<file>         the plots stored with the runs
    curves/preset-<i>.png         every model's learning curve of a preset, against training FLOPs
    reproductions.html            the verdicts of ``mixbench reproduce`` kept in the store: per target the claim,
                                  expected against measured, the verdict (harness/reporting/site_reproductions.py)
    reproductions/<target>.png    each verdict's checks: interval against threshold
    board.{csv,json}, leaderboard.md   downloads (the full board; the compact terminal view)
    assets/site.css, site.js      the only style and script; nothing is fetched from the network

Why it is built this way:

* Everything in the store that a model or a user wrote (mixer names, generations, prompts, judge replies,
  perturbed texts, unit-card contexts, plot file names, configs) is untrusted. It reaches HTML only through
  :func:`esc` (``html.escape`` with quotes), URLs only through :func:`href` (percent-encoded, then escaped), and a
  ``<script>`` block only through :func:`script_json` (``<``, ``>``, ``&``, U+2028/9 as ``\\u`` escapes, so no
  string can close the element). As a second line of defence every page carries a Content-Security-Policy that
  allows scripts only from the site's own files (no inline script, no event-handler attribute) and no network
  access, so a missed escape still cannot run code or phone home.
* HTML plots (the interpretability suite's unit cards) are pages written by a suite from model text. They are
  copied with a CSP that forbids every script prepended, and shown in ``<iframe sandbox>`` (no scripts, opaque
  origin). SVG plots are shown with ``<img>`` only (images never run their scripts) and not linked directly.
* The table is rendered on the server side, so it reads without JavaScript; ``site.js`` only adds sorting
  (click a header; ``#sort=<column>:<asc|desc>`` in the URL sorts on load). Missing cells sort last in both
  directions so a missing number never looks like the best one (MTEB #1813).
* The site is written into a temporary folder next to ``out`` and swapped in at the end: a reader never sees a
  half-written site, and a failed publish leaves the previous one. An existing ``out`` that is not a mixbench
  site (no marker file) is never replaced, and a live site is never replaced by a board of zero runs (a
  mistyped ``--results``) unless ``force``.
* The core knows no suite: a suite's page is the generic metric table plus whatever the suite's
  :meth:`harness.suite.Suite.site_section` returns, built only with the :class:`Kit` helpers, which escape.
* Made for a reader who has not seen it before (docs/site.md): the index opens with one sentence from the board
  (:func:`harness.reporting.preamble.lead_sentence`); a ‡ or a veto says who came out ahead, in words, with the
  p-value; seeds read as ids (``seed 0``); every figure the site draws is drawn at the width the page shows it, its
  text at 9 px or more (:mod:`harness.reporting.site_plots`), and stored plots are shown at their own size. Every
  table sits in a box that scrolls sideways (:func:`harness.reporting.site_html.scroll`), so no page scrolls
  sideways at 1280 px and the board's last column stays reachable, while the voting columns come first
  (:mod:`harness.reporting.site_board`); board headers show a shortened metric name, the full column name in
  their tooltip and the column list; one legend says each thing once; numbers are formatted
  (:func:`harness.reporting.render.readable`, :func:`harness.reporting.render.si`); and no local path reaches a
  page or a download (:class:`harness.reporting.site_provenance.LocalPaths`: the store is named by its folder's
  name, the home directory is ``~``, any other absolute path its last part).
* One job per module: this one assembles the pages and swaps the site in; :mod:`harness.reporting.site_html` holds
  the building blocks (escaping, tables, headers, legend), :mod:`harness.reporting.site_board` the board's order and
  cells, :mod:`harness.reporting.site_provenance` what a page says of a run's origin,
  :mod:`harness.reporting.site_plots` the side-by-side plots, ``harness/reporting/site_assets/`` the style sheet
  and script, :mod:`harness.reporting.plotting` draws the figures.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.reporting.board import Board, BoardConfig, build_board
from harness.reporting.preamble import lead_sentence, null_words, preamble, veto_reason
from harness.errors import MixbenchError
from harness.registry import SUITES
from harness.reporting.board_document import board_json
from harness.reporting.legend import CONTROL_MARK, STABILITY_MARK
from harness.reporting.numbers import MISSING, readable, si
from harness.reporting.render import ordered_rows, render
from harness.store.output_folder import Keep, OutputKind, check_output_folder, replacing
from harness.store.results import ResultsStore, RunRecord, json_safe
from harness.reporting.site_html import (
    ASSETS, HTML_TYPES, IMAGE_TYPES, LEAD_TITLES, MAX_GENERIC_SAMPLES, PLOT_CSP, TEXT_TYPES, asset_text, breakable,
    cell_text, column_labels, column_title, esc, file_name, href, kv_table, legend_items, page, script_json, scroll,
    short_metric, slug, table_html, timings_text,
)
from harness.reporting.site_board import seeds_text, site_display, suite_order
from harness.reporting.site_plots import metric_figure, plotted_columns
from harness.reporting.site_provenance import LocalPaths, provenance_differences, provenance_summary
from harness.reporting.site_reproductions import PAGE as REPRODUCTIONS_PAGE
from harness.reporting.site_reproductions import PLOTS_DIR as REPRODUCTION_PLOTS
from harness.reporting.site_reproductions import draw_checks, record_anchor, reproductions_body
from harness.reproduction import load_records
from harness.reporting.table import Column, Row, table_from_runs

MARKER = ".mixbench-site"
#: the index's learning-curve plots, one per preset (harness/reporting/learning_curves.py)
CURVES = "curves"
class Kit:
    """The :class:`harness.suite.SiteKit` a suite's section is built with, for one page at ``depth``."""

    def __init__(self, site: "_Site", depth: int):
        self.site, self.depth = site, depth

    def escape(self, value: Any) -> str:
        return esc(value)

    def table(self, header, rows, caption: str = "") -> str:
        cap = f"<caption>{esc(caption)}</caption>" if caption else ""
        head = "".join(f"<th>{esc(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f'<td class="text">{esc(cell_text(c))}</td>' for c in r) + "</tr>"
                       for r in rows)
        return scroll(f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def plot(self, run: RunRecord, rel: str, caption: str = "") -> str:
        for path, kind, source in self.site.plots.get(run.run_id, []):
            if source == rel and kind == "image":
                url = href(*[".."] * self.depth, *path.split("/"))
                cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
                return f'<figure class="plots"><img src="{url}" alt="{esc(caption or rel)}" loading="lazy">{cap}</figure>'
        return ""

    def model_label(self, run: RunRecord) -> str:
        s = run.manifest.subject
        return esc(f"{s.label} / {s.preset}" if s.preset else s.label)

    def run_link(self, run: RunRecord, text: str) -> str:
        return f'<a href="{href(*[".."] * self.depth, "runs", f"{run.run_id}.html")}">{esc(text)}</a>'

    def suite_link(self, suite: str, text: str) -> str:
        page = self.site.suite_files.get(suite)
        if page is None:
            return esc(text)
        return f'<a href="{href(*[".."] * self.depth, "suites", page)}">{esc(text)}</a>'

    def newest_per_model(self, runs) -> list[RunRecord]:
        newest: dict[str, RunRecord] = {}
        for run in _newest_first(list(runs)):
            newest.setdefault(run.manifest.subject.row_id, run)
        return sorted(newest.values(), key=lambda r: r.manifest.subject.label)


class _Site:
    """Reads the store once and writes every page into ``root``."""

    def __init__(self, store: ResultsStore, root: Path, config: BoardConfig):
        self.store, self.root, self.config = store, root, config
        self.generated = datetime.now(UTC).isoformat(timespec="seconds")
        self.runs: list[RunRecord] = list(store.iter_runs(samples=True))  # the one read of the store
        self.paths = LocalPaths(store)
        self.table = table_from_runs(self.runs, self.paths.store_name)  # a site never names a local folder
        self.board: Board = build_board(self.table, config)
        self.suites = sorted({r.manifest.suite for r in self.runs})
        self.suite_files = {s: f"{slug(s)}.html" for s in self.suites}
        self.row_files = {row.key: f"{slug(f'{row.label}-{row.preset}-{row.key}')}.html" for row in self.table.rows}
        self.plots: dict[str, list[tuple[str, str, str]]] = {}  # run id -> [(site path, kind, stored rel)]
        self.reproductions, self.reproduction_problems = load_records(store)

    def write(self) -> None:
        for folder in ("assets", "suites", "rows", "runs", "plots"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        for name in ASSETS:
            (self.root / "assets" / name).write_text(asset_text(name), encoding="utf-8")
        for run in self.runs:
            self.plots[run.run_id] = self._copy_plots(run)
        self._downloads()
        self._index()
        for suite in self.suites:
            self._suite_page(suite)
        for row in self.table.rows:
            self._row_page(row)
        for run in self.runs:
            self._run_page(run)
        if self.reproductions or self.reproduction_problems:
            self._reproductions_page()
        (self.root / MARKER).write_text(f"mixbench site generated {self.generated} from {self.paths.store_name}\n")

    def _write(self, rel: str, title: str, body: str) -> None:
        depth = rel.count("/")
        (self.root / rel).write_text(page(title, body, depth, self.generated), encoding="utf-8")

    # ------------------------------------------------------------------ plots
    def _copy_plots(self, run: RunRecord) -> list[tuple[str, str, str]]:
        out, used = [], set()
        for rel in run.plots:
            name = file_name(rel)
            ext = os.path.splitext(name)[1]
            kind = "image" if ext in IMAGE_TYPES else "html" if ext in HTML_TYPES else "text" if ext in TEXT_TYPES else ""
            if not kind:
                warnings.warn(f"run {run.run_id}: plot {rel} is of a type the site does not show; left out.", stacklevel=3)
                continue
            while name in used:
                name = f"_{name}"
            used.add(name)
            try:
                data = self.store.read_bytes(run.run_id, rel)
            except MixbenchError as exc:
                warnings.warn(str(exc), stacklevel=3)
                continue
            if kind == "html":
                head = f'<!doctype html><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{PLOT_CSP}">'
                data = head.encode() + data
            target = self.root / "plots" / run.run_id / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            out.append((f"plots/{run.run_id}/{name}", kind, rel))
        return out

    def _plots_html(self, run: RunRecord, depth: int) -> str:
        up = [".."] * depth
        parts = []
        for path, kind, _ in self.plots.get(run.run_id, []):
            url = href(*up, *path.split("/"))
            name = path.rsplit("/", 1)[1]
            if kind == "image":
                parts.append(f'<img src="{url}" alt="{esc(name)}" loading="lazy">')
            elif kind == "html":
                parts.append(
                    f'<p class="note">{esc(name)} (shown without scripts; <a href="{url}">open alone</a>)</p>'
                    f'<iframe class="cards" sandbox="" src="{url}" title="{esc(name)}"></iframe>'
                )
            else:
                parts.append(f'<p><a href="{url}" download>{esc(name)}</a></p>')
        # at the size they were drawn, in a box that scrolls: a stored plot shrunk to the page's width shrinks
        # its text with it (a three-panel figure read 6 px)
        return f'<div class="plots stored scroll">{"".join(parts)}</div>' if parts else ""

    # ------------------------------------------------------------------ downloads and index
    def _downloads(self) -> None:
        (self.root / "board.json").write_text(board_json(self.board) + "\n", encoding="utf-8")
        (self.root / "board.csv").write_text(render(self.board, "csv", "full") + "\n", encoding="utf-8")
        (self.root / "leaderboard.md").write_text(render(self.board, "md") + "\n", encoding="utf-8")

    def _board_html(self, view: str, table_id: str, depth: int, suite: str | None = None) -> str:
        """The board of ``view`` as the site shows it (:func:`harness.reporting.site_board.site_display`): rank
        with its interval, voting columns first, a suite page in the suite's own order; a ‡ mark says in its
        tooltip who came out ahead of the null and with what p-value."""
        if self.table.empty:
            return f'<p class="note">{esc(render(self.board, "md"))}</p>'
        d, rows_sorted, _ = site_display(self.board, view, suite)
        up = [".."] * depth
        columns = {c.name: c for c in self.table.columns}
        cells, classes = [], []
        for row, line, bold in zip(rows_sorted, d.body, d.best):
            html_line, cls_line = [], []
            for key, text, b in zip(d.keys, line, bold):
                h = esc(text)
                column = columns.get(key)
                if key == "model":
                    h = f'<a href="{href(*up, "rows", self.row_files[row.key])}">{h}</a>'
                    if self.board.pareto.get(row.key):
                        h += ' <span class="flag" title="on the Pareto front of its preset">&#9670;</span>'
                    differs = provenance_differences([provenance_summary(r) for r in row.runs])
                    if differs:
                        h += f' <span class="flag" title="{esc("runs of this row differ in " + ", ".join(differs))}">&#9873;</span>'
                elif column is not None:
                    h = self._cell_html(row, column, text)
                cell = self.table.cell(row, key) if "/" in key else None
                cls = "best" if b else ("unreliable" if cell is not None and cell.unreliable else "")
                if key in d.text_columns:
                    cls = (cls + " text").strip()
                html_line.append(h)
                cls_line.append(cls)
            cells.append(html_line)
            classes.append(cls_line)
        header_html, titles = self._headers(d.keys, d.header, with_suite=view != "suite")
        return table_html(d.header, cells, table_id, raw=d.raw, classes=classes, keys=d.keys,
                          text_keys=d.text_columns, header_html=header_html, titles=titles,
                          sticky_keys={"model"}, table_class="board", tall=True)

    def _cell_html(self, row: Row, column: Column, text: str) -> str:
        """A metric cell: the value on its first line, its difference from the reference control on a second
        (a narrow column), the ‡ mark with the direction and p-value of its comparison in a tooltip."""
        main, sep, vs = text.partition(" (vs ")
        h = esc(main)
        if CONTROL_MARK in main:
            words = null_words(self.board, row, column)
            h = h.replace(CONTROL_MARK, f'<abbr class="mark" title="{esc(words or "not better than its null")}">'
                                        f"{CONTROL_MARK}</abbr>", 1)
        if sep:
            h += f'<span class="vs">vs {esc(vs.removesuffix(")"))}</span>'
        return h

    def _headers(self, keys: list[str], header: list[str], with_suite: bool) -> tuple[list[str], list[str]]:
        """Short headers for the board's metric columns (suite above, shortened metric and direction below), the
        full column name, direction, unit and config in their tooltips; the other headers as they are."""
        columns = {c.name: c for c in self.table.columns}
        labels = column_labels(list(self.table.columns))
        html_heads, titles = [], []
        for key, text in zip(keys, header):
            c = columns.get(key)
            if c is None:
                html_heads.append(esc(text))
                titles.append(LEAD_TITLES.get(key, ""))
                continue
            suite = c.suite + (f" [{short_metric(c.config, 14)}]" if c.config else "")
            votes = (v := self.board.verdicts.get(c.name)) is not None and v.votes
            lines = [breakable(suite)] if with_suite or c.config else []
            above = f'<span class="suite">{" · ".join([*lines, *(["votes"] if votes else [])])}</span>' \
                if lines or votes else ""
            mark = STABILITY_MARK if c.name in self.board.unsettled else ""  # docs/rank_stability.md
            html_heads.append(f'{above}{breakable(labels[c.name])}{mark} {"↑" if c.higher_is_better else "↓"}')
            titles.append(column_title(c) + ("; votes in the rank" if votes else "")
                          + (" (its ordering changed between half the largest token budget and "
                             "the largest: see the legend)" if mark else ""))
        return html_heads, titles

    def _columns_html(self, columns: list[Column], depth: int) -> str:
        """The full name of every metric column with what the board's header shortens: direction, unit, role, config,
        and whether it votes (and why not)."""
        labels = column_labels(list(self.table.columns))
        lines = []
        for c in columns:
            v = self.board.verdicts.get(c.name)
            votes = (f"yes (weight {readable(v.weight, 3)})" if v.votes else f"no: {veto_reason(self.board, c)}") \
                if v is not None else ""
            lines.append([
                esc(c.suite), esc(labels[c.name]), f"<div><code>{esc(c.name)}</code></div>",
                f"<div>{esc(c.config or 'canonical')}</div>",
                "higher" if c.higher_is_better else "lower", esc(c.unit or ""), esc(c.role),
                f'<div>{esc(self.paths.text(votes))}</div>',
            ])
        classes = [["text"] * 6 + ["text", "text wrap"]] * len(lines)
        classes = [[*cls[:2], "text wrap", "text wrap", *cls[4:]] for cls in classes]
        header = ["suite", "header", "full name", "config", "better", "unit", "role", "votes"]
        return table_html(header, lines, "", sortable=True, classes=classes, keys=header, text_keys=set(header))

    def _index(self) -> None:
        board = self.board
        first = board.headline()
        plot = self._pareto_plot()
        pareto = (
            "<h2>Quality against measured speed</h2>"
            f'<p class="note">{esc(board.quality_name)} against {esc(self._speed_label())}, per preset. Red: on the '
            "Pareto front (no other model of the preset is at least as good on both axes and better on one); "
            "grey: dominated; the red line joins the front.</p>"
            f'<div class="plots"><img class="wide" src="pareto.png" alt="{esc(board.quality_name)} against '
            f'{esc(self._speed_label())}"></div>'
        ) if plot else (
            "<h2>Quality against measured speed</h2>"
            '<p class="note">No Pareto view: this board has no interleaved speed measurement (a headline speed '
            "column of a suite such as throughput), and training tokens/s, measured in separate runs on whatever "
            "machine each ran, are not comparable.</p>"
        ) if not self.table.empty else ""
        lead = lead_sentence(board)
        parts = [
            "<h1>mixbench leaderboard</h1>",
            f'<p class="lead{" warning" if not board.voting else ""}" id="lead">{esc(self.paths.text(lead))}</p>',
            "".join(f'<p class="note preamble">{esc(line)}</p>' for line in preamble(board) if line != first),
            f'<p class="note">{len(self.runs)} runs of {len(self.table.rows)} models (results store: '
            f"<code>{esc(self.paths.store_name)}</code>). Click a column header to sort, hover over it for the "
            "column's full name; click a model for its loss curves and the provenance of its runs "
            "(&#9873;: its runs differ in code, packages, device or kernel; &#9670;: on the Pareto front). "
            'The <a href="#columns">column list</a> and <a href="#legend">legend</a> are below the board.</p>',
            self._board_html("full", "board", 0),
        ]
        if not self.table.empty:
            parts += [
                '<h2 id="legend">What the marks mean</h2>',
                '<dl class="legend">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(self.paths.text(v))}</dd>"
                                                for k, v in legend_items(board, plot)) + "</dl>",
                self._directions_html(),
                pareto,
                self._learning_curves(),
                '<h2 id="columns">Columns</h2>',
                '<p class="note">The board\'s headers shorten the metric names; here is each column in full, with '
                "whether it votes, and why not.</p>",
                self._columns_html(list(self.table.columns), 0),
            ]
        parts.append("<h2>Suites</h2><ul>" + "".join(
            f'<li><a href="{href("suites", f)}">{esc(s)}</a> ({sum(r.manifest.suite == s for r in self.runs)} runs)</li>'
            for s, f in self.suite_files.items()
        ) + "</ul>")
        if self.reproductions or self.reproduction_problems:
            verdicts = defaultdict(int)
            for record in self.reproductions:
                verdicts[record.verdict] += 1
            counts = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) or "no record could be read"
            parts.append(f'<h2>Reproductions</h2><p><a href="{REPRODUCTIONS_PAGE}">Published results checked against '
                         f"this harness</a> ({esc(counts)}).</p>")
        parts.append(
            "<h2>Downloads</h2><ul>"
            '<li><a href="board.csv" download>board.csv</a> · <a href="board.json" download>board.json</a> '
            "(every column with intervals, groups, votes and ranks)</li>"
            '<li><a href="leaderboard.md" download>leaderboard.md</a> (the compact view)</li></ul>'
        )
        parts.append(f'<script type="application/json" id="board-data">{script_json(json.loads(board_json(board)))}</script>')
        self._write("index.html", "mixbench leaderboard", "\n".join(parts))

    def _directions_html(self) -> str:
        """Each vetoed column and each ‡ cell with the direction of its comparison in words and its p-value
        (``control better, p = 0.002``; ``mixer better but not significant (p = 0.08)``): a sign and a p-value
        alone leave the reader to work out who came out ahead."""
        board = self.board
        vetoed = [(c, veto_reason(board, c)) for c in self.table.columns
                  if (v := board.verdicts.get(c.name)) is not None and not v.votes and c.role == "score"
                  and v.reason.startswith(("no mixer beats", "every mixer cell"))]
        marked = defaultdict(list)
        for row in ordered_rows(board):
            for c in self.table.columns:
                if not row.control and self.table.cell(row, c) is not None and board.not_above(row, c):
                    marked[c.name].append(f"{row.label}: {null_words(board, row, c) or 'not better than its null'}")
        if not vetoed and not marked:
            return ""
        items = "".join(f"<dt><code>{esc(c.name)}</code> does not vote</dt><dd>{esc(self.paths.text(why))}</dd>"
                        for c, why in vetoed)
        items += "".join(f"<dt>{CONTROL_MARK} in <code>{esc(name)}</code></dt><dd>{esc('; '.join(lines))}</dd>"
                         for name, lines in marked.items())
        return ('<h3 id="directions">Who came out ahead where a null won</h3>'
                '<p class="note">Each column a control or null model vetoed, and each cell marked '
                f"{CONTROL_MARK}, with the direction of the difference in words and its p-value (paired test; "
                "Holm's correction where the board applies it).</p>"
                f'<dl class="legend directions">{items}</dl>')

    def _learning_curves(self) -> str:
        """curves/preset-<i>.png: every row's learning curve of a preset on one plot, against training FLOPs."""
        from harness.reporting.learning_curves import curves_by_preset, draw_curves

        figures = []
        for i, (preset, curves) in enumerate(curves_by_preset(list(self.table.rows)).items()):
            rel = f"{CURVES}/preset-{i}.png"
            if draw_curves(preset, curves, self.root / rel):
                figures.append(f'<img class="wide" src="{esc(rel)}" alt="learning curves of preset {esc(preset)}">')
        if not figures:
            return ""
        return ("<h2>Learning curves</h2>"
                '<p class="note">Held-out loss on a few fixed validation windows at log-spaced steps of training, '
                "against training FLOPs (docs/scaling.md); controls dashed. An ordering that is still changing at "
                "the right edge is a property of the budget, not of the mixers.</p>"
                f'<div class="plots">{"".join(figures)}</div>')

    def _speed_label(self) -> str:
        """The Pareto view's speed axis: the speed column (its inverse when lower is better), higher = faster."""
        board = self.board
        name = board.speed_name
        if name and not self.table.column(name).higher_is_better:
            name = f"1 / {name}"
        return f"{name} (interleaved, higher = faster)"

    def _pareto_plot(self) -> bool:
        board = self.board
        if not board.speed_name:  # no interleaved speed measurement: nothing to plot (the index says so)
            return False
        by_preset: dict[str, list[Row]] = defaultdict(list)
        for row in self.table.rows:
            if board.pareto.get(row.key) is not None and board.speed_of(row) is not None:
                by_preset[row.preset].append(row)
        if not by_preset:
            return False
        from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator

        from harness.reporting.plotting import figure, save

        # at most two panels a row, 5.6 in each at 100 dpi: the figure is shown at its own width (<= 1,120 px)
        cols = min(len(by_preset), 2)
        n_rows = -(-len(by_preset) // cols)
        fig, axes = figure(5.6 * cols, 4.2 * n_rows, rows=n_rows, cols=cols)
        for ax in axes.flat[len(by_preset):]:
            ax.set_visible(False)
        for ax, (preset, rows) in zip(axes.flat, sorted(by_preset.items())):
            pts = []
            for row in rows:
                speed = board.speed_of(row)
                quality = board.points[row.key] if board.quality_name == "borda points" else \
                    self.table.cell(row, board.quality_name).value
                pts.append((speed, quality, bool(board.pareto[row.key]), row.label))
            ax.scatter([p[0] for p in pts if not p[2]], [p[1] for p in pts if not p[2]], c="#999", s=36,
                       label="dominated")
            ax.scatter([p[0] for p in pts if p[2]], [p[1] for p in pts if p[2]], c="#d62728", s=48,
                       label="Pareto front")
            line = sorted((p[0], p[1]) for p in pts if p[2])
            if len(line) > 1:
                ax.plot([x for x, _ in line], [y for _, y in line], c="#d62728", lw=1, alpha=0.6)
            for x, y, _, label in pts:
                ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=9, parse_math=False)
            speeds = [p[0] for p in pts]
            logscale = max(speeds) / min(speeds) > 10
            if logscale:
                ax.set_xscale("log")
                ax.xaxis.set_major_locator(LogLocator(base=10, numticks=6))  # major ticks only: none overlap
                ax.xaxis.set_minor_locator(NullLocator())
            else:
                ax.xaxis.set_major_locator(MaxNLocator(5))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:.6g}" if abs(x) < 1e4 else si(x)))
            ax.margins(x=0.15, y=0.12)  # room for the labels beside the points
            ax.set_xlabel(f"{self._speed_label()}{', log scale' if logscale else ''}", parse_math=False)
            ax.set_ylabel(board.quality_name, parse_math=False)
            ax.set_title(f"preset {preset}", loc="right", parse_math=False)
            ax.grid(alpha=0.3)
        # above the first panel, beside its title: never over a point
        axes.flat[0].legend(fontsize=9, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False,
                            borderaxespad=0.2)
        save(fig, self.root / "pareto.png", dpi=100)
        return True

    # ------------------------------------------------------------------ reproductions
    def _reproductions_page(self) -> None:
        plots = {}
        for record in self.reproductions:
            rel = f"{REPRODUCTION_PLOTS}/{record_anchor(record)}.png"
            if draw_checks(record, self.root / rel):
                plots[record_anchor(record)] = rel
        body = reproductions_body(self.reproductions, self.reproduction_problems, {r.run_id for r in self.runs},
                                  plots)
        self._write(REPRODUCTIONS_PAGE, "mixbench reproductions", body)

    # ------------------------------------------------------------------ suite pages
    def _suite_page(self, suite: str) -> None:
        runs = [r for r in self.runs if r.manifest.suite == suite]
        parts = [f"<h1>Suite: {esc(suite)}</h1>"]
        columns = [c for c in self.table.columns if c.suite == suite]
        figures = ""
        if columns:
            order = suite_order(self.board, suite)
            parts.append(
                f'<p class="note">Rows in {esc(suite)}\'s own order: {esc(order.describe())}; rows a paired test '
                "cannot tell apart share a place (=). Controls follow the mixers. The rank over every voting suite "
                f'is on the <a href="{href("..", "index.html")}">leaderboard</a>.</p>'
            )
            parts.append(self._board_html("suite", "suite-table", 1, suite))
            parts.append(
                '<details><summary>Columns: full names, units and votes</summary>'
                f"{self._columns_html(columns, 1)}</details>"
                f'<p class="note">What the marks mean: the <a href="{href("..", "index.html")}#legend">legend on the '
                "leaderboard</a>.</p>"
            )
            figures = self._metric_figures(suite, order.rows)
            parts.append(figures)
        section = ""
        if suite in SUITES.names():
            try:
                section = SUITES.get(suite).cls.site_section(runs, Kit(self, 1))
            except Exception as exc:  # a suite's page must not take the whole site down
                warnings.warn(f"suite {suite}: its site section failed ({type(exc).__name__}: {exc}); left out.",
                              stacklevel=2)
        parts.append(section or self._generic_samples(runs))
        plotted = [r for r in _newest_first(runs) if self.plots.get(r.run_id)]
        if plotted:
            stored = "".join(f"<h3>{self._run_label(r, 1)}</h3>{self._plots_html(r, 1)}" for r in plotted)
            if figures:  # the side-by-side plots come first; each run's own plots on request
                parts.append(f"<h2>Plots stored with each run</h2><details><summary>{len(plotted)} runs' plots, "
                             "each of one model (at the size they were drawn)</summary>" + stored + "</details>")
            else:
                parts.append("<h2>Plots</h2>" + stored)
        parts.append("<h2>Runs</h2>" + self._run_list(runs, 1))
        self._write(f"suites/{self.suite_files[suite]}", f"mixbench · {suite}", "\n".join(parts))

    def _metric_figures(self, suite: str, rows: list[Row]) -> str:
        """suites/<suite>-<metric>.png: one plot per headline column with every model side by side
        (:mod:`harness.reporting.site_plots`), rows in the suite's order."""
        images = []
        stem = self.suite_files[suite].removesuffix(".html")
        for i, column in enumerate(plotted_columns(self.board, suite)):
            name = f"{stem}-{i}-{slug(column.metric)}.png"
            if metric_figure(self.board, column, rows, self.root / "suites" / name):
                images.append(f'<img src="{esc(name)}" alt="{esc(column.name)}: every model side by side">')
        if not images:
            return ""
        return ("<h2>Every model side by side</h2>"
                '<p class="note">One plot per headline column: each model\'s value with its interval (the bar), '
                "mixers blue, controls grey squares, in the order of the table above; the tie group follows the "
                "name where the column votes. A log axis where the values span more than a factor of ten.</p>"
                f'<div class="plots">{"".join(images)}</div>')

    def _run_label(self, run: RunRecord, depth: int) -> str:
        s = run.manifest.subject
        url = href(*[".."] * depth, "runs", f"{run.run_id}.html")
        seed = f" / seed {s.seed}" if s.seed is not None else ""
        return (f'{esc(s.label)} / {esc(s.preset or "—")}{esc(seed)} '
                f'<span class="note">(run <a href="{url}">{esc(run.run_id)}</a>)</span>')

    def _run_list(self, runs: list[RunRecord], depth: int) -> str:
        rows = []
        for r in _newest_first(runs):
            m = r.manifest
            url = href(*[".."] * depth, "runs", f"{r.run_id}.html")
            rows.append(
                f'<tr><td class="text"><a href="{url}">{esc(r.run_id)}</a></td><td class="text">{esc(m.kind)}</td>'
                f'<td class="text">{esc(m.subject.label)}</td><td class="text">{esc(m.subject.preset or "—")}</td>'
                f'<td>{esc("" if m.subject.seed is None else m.subject.seed)}</td>'
                f'<td class="text wrap"><div>{esc(self.paths.text(m.config_label))}</div></td>'
                f'<td class="text">{esc(m.gate.status)}</td><td class="text">{esc(m.written_at)}</td></tr>'
            )
        head = "".join(f'<th class="text">{h}</th>' for h in
                       ("run", "kind", "model", "preset", "seed", "config", "check", "written"))
        return scroll(f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')

    def _generic_samples(self, runs: list[RunRecord]) -> str:
        parts = []
        for r in _newest_first(runs):
            if not r.samples:
                continue
            shown = "".join(
                f'<div class="gen">{esc(json.dumps(s, ensure_ascii=False))}</div>' for s in r.samples[:MAX_GENERIC_SAMPLES]
            )
            parts.append(
                f"<details><summary>{self._run_label(r, 1)}: {min(len(r.samples), MAX_GENERIC_SAMPLES)} of "
                f"{len(r.samples)} samples</summary>{shown}</details>"
            )
        return ("<h2>Samples</h2>" + "\n".join(parts)) if parts else ""

    # ------------------------------------------------------------------ rows and runs
    def _row_page(self, row: Row) -> None:
        runs = _newest_first(row.runs)
        summaries = [{k: self.paths.text(v) for k, v in provenance_summary(r).items()} for r in runs]
        fields = [f for f in summaries[0] if any(s[f] for s in summaries)]
        differs = provenance_differences(summaries)
        head = "".join(f'<th class="text">{esc(h)}</th>' for h in ("suite", "seed", "run", "written", *fields))
        lines = []
        for r, s in zip(runs, summaries):
            m = r.manifest
            cells = "".join(
                f'<td class="text wrap{" differs" if f in differs and s[f] else ""}"><div>{esc(s[f])}</div></td>'
                for f in fields
            )
            lines.append(
                f'<tr><td class="text">{esc(m.suite)}</td><td>{esc("" if m.subject.seed is None else m.subject.seed)}</td>'
                f'<td class="text"><a href="{href("..", "runs", f"{r.run_id}.html")}">{esc(r.run_id)}</a></td>'
                f'<td class="text">{esc(m.written_at)}</td>{cells}</tr>'
            )
        subject = runs[0].manifest.subject
        parameters = MISSING if row.parameters is None else f"{readable(row.parameters)} ({si(row.parameters)})"
        parts = [
            f"<h1>{esc(row.label)} / {esc(row.preset)}</h1>",
            kv_table([
                ("mixer", self.paths.text(f"{subject.mixer} ({subject.mixer_source})")),
                ("training seeds", seeds_text(row.seeds)),
                ("parameters", parameters), ("decode state floats", row.state_floats),
                ("training FLOPs", si(row.train_flops, "FLOP", 4) if row.train_flops else row.train_flops),
                ("training tokens/s", row.train_tokens_per_s),
                ("mixer config", self.paths.text(json.dumps(subject.mixer_config, sort_keys=True))),
                ("conformance check", row.gate), ("row (model identity without seed)", row.key),
            ]),
        ]
        curve = self._loss_plot(row)
        if curve:
            parts.append(f'<h2>Training and validation loss</h2><div class="plots"><img src="{esc(curve)}" '
                         f'alt="training and validation loss of {esc(row.label)}"></div>')
        parts += [
            "<h2>Provenance of every run</h2>",
            f'<p class="note">{"Differs between runs (highlighted): " + esc(", ".join(differs)) if differs else "All runs agree on code, packages, device, kernel and gate."}</p>',
            scroll(f'<table class="sortable prov"><thead><tr>{head}</tr></thead><tbody>{"".join(lines)}</tbody></table>'),
        ]
        self._write(f"rows/{self.row_files[row.key]}", f"mixbench · {row.label} / {row.preset}", "\n".join(parts))

    def _loss_plot(self, row: Row) -> str:
        """rows/<row>-loss.png: training loss per step and validation loss per evaluation, one line per seed."""
        curves = {}
        for r in row.runs:
            s = r.manifest.subject
            if s.kind == "model" and s.loss_curve and s.id not in curves:
                curves[s.id] = (s.seed, s.loss_curve)
        if not curves:
            return ""
        from harness.reporting.plotting import figure, save

        fig, axes = figure(7.2, 3.6)  # 720 px at 100 dpi: shown at its own size, its text at 11 px and up
        ax = axes[0][0]
        for seed, curve in sorted(curves.values(), key=lambda c: (c[0] is None, c[0])):
            steps = [p.get("step") for p in curve if p.get("loss") is not None]
            ax.plot(steps, [p["loss"] for p in curve if p.get("loss") is not None], lw=1, label=f"train, seed {seed}")
            val = [(p.get("step"), p["val_loss"]) for p in curve if p.get("val_loss") is not None]
            if val:
                ax.plot([v[0] for v in val], [v[1] for v in val], marker="o", lw=1, label=f"validation, seed {seed}")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # off the curves
        name = self.row_files[row.key].removesuffix(".html") + "-loss.png"
        save(fig, self.root / "rows" / name, dpi=100)
        return name

    def _run_page(self, run: RunRecord) -> None:
        m = run.manifest

        def interval_text(x) -> str:
            iv = x.interval
            if iv is None:
                return ""
            level = "" if iv.level is None else f" {iv.level:.0%}"
            return f"[{readable(iv.low)}, {readable(iv.high)}] {iv.kind}{level}"

        metrics = "".join(
            f'<tr><td class="text">{esc(x.name)}</td><td data-sort="{esc(repr(x.value))}">{esc(readable(x.value))}</td>'
            f'<td class="text">{esc(interval_text(x))}</td><td>{esc(readable(x.n) if x.n is not None else "")}</td>'
            f'<td class="text">{esc(x.unit)}</td><td class="text">{esc(x.role)}</td>'
            f'<td class="text">{"↑" if x.higher_is_better else "↓"}</td><td class="text">{esc(x.unreliable or "")}</td></tr>'
            for x in run.metrics
        )
        head = "".join(f"<th>{h}</th>" if h in ("value", "n") else f'<th class="text">{h}</th>'
                       for h in ("metric", "value", "interval", "n", "unit", "role", "better", "unreliable because"))
        # the manifest as stored, less the local paths in it (a checkpoint's folder, a provenance entry)
        manifest_text = json.dumps(self.paths.json(json_safe(m.to_json())), ensure_ascii=False, indent=2)
        (self.root / "runs" / f"{run.run_id}.json").write_text(manifest_text + "\n", encoding="utf-8")
        parts = [
            f"<h1>Run {esc(run.run_id)}</h1>",
            kv_table([("suite", m.suite), ("config", self.paths.text(m.config_label)), ("kind", m.kind),
                       ("model", m.subject.label),
                       ("preset", m.subject.preset or "—"), ("seed", m.subject.seed),
                       ("conformance check", m.gate.status),
                       ("written", m.written_at), *([("timings", timings_text(m.timings))] if m.timings else [])]),
            "<h2>Metrics</h2>",
            scroll(f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{metrics}</tbody></table>'),
        ]
        if self.plots.get(run.run_id):
            parts.append("<h2>Plots</h2>" + self._plots_html(run, 1))
        parts.append(
            f'<h2>Manifest</h2><p><a href="{href(f"{run.run_id}.json")}" download>manifest JSON</a></p>'
            f"<details><summary>show</summary><div class=\"gen\">{esc(manifest_text)}</div></details>"
        )
        self._write(f"runs/{run.run_id}.html", f"mixbench · run {run.run_id}", "\n".join(parts))


def _newest_first(runs: list[RunRecord]) -> list[RunRecord]:
    return sorted(runs, key=lambda r: r.manifest.written_at, reverse=True)


# ---------------------------------------------------------------------------------------------- entry point


#: the top-level entries a site folder holds (the layout in this module's docstring): anything else in ``--out`` is
#: the user's, and publishing, which replaces the folder as a whole, would delete it
SITE_ENTRIES = frozenset({MARKER, "index.html", "board.json", "board.csv", "leaderboard.md", "pareto.png", "assets",
                          "suites", "rows", "runs", "plots", CURVES,
                          REPRODUCTIONS_PAGE, REPRODUCTION_PLOTS})


SITE = OutputKind("site", MARKER, SITE_ENTRIES)


def publish_site(store: ResultsStore, out: Path, force: bool = False, config: BoardConfig | None = None) -> Path:
    """Write the static site of ``store`` into the folder ``out`` and return ``out``.

    The site is built in a temporary sibling folder and swapped in, so ``out`` always holds a complete site.
    ``out`` may not exist yet, be empty, or hold a previous mixbench site and nothing else; everything else the
    shared guard refuses (:func:`harness.store.output_folder.check_output_folder`: the store, the home, root and
    working folders, a file, a folder mixbench did not write), and so is replacing a previous site with a board
    of zero runs (a mistyped store), unless ``force``. One writer into a parent folder at a time (a lock on it);
    what a killed publish left beside the folder is removed by the next.
    """
    store.require_existing()
    out = Path(out).expanduser()

    def check() -> None:
        keep = [Keep(store.local_path, f"the results store {store.root}")] if store.local_path else []
        check_output_folder(out, SITE, keep, force)
        stores = [str(p.parent.parent.relative_to(out)) for p in out.glob("**/runs/*/manifest.json")]
        if stores:
            raise MixbenchError(f"--out {out} holds a results store ({', '.join(stores[:3])}); publishing replaces "
                                f"{out} as a whole and would delete it: pick another --out.")

    check()
    try:
        with replacing(out, SITE, recheck=check) as tmp:
            site = _Site(store, tmp, config or BoardConfig())
            if not site.runs and (out / MARKER).exists() and not force:
                raise MixbenchError(
                    f"{store.root} holds no runs, so publishing it would replace the site in {out} with an empty "
                    "board; check --results, or pass --force to publish an empty board on purpose."
                )
            site.write()
    except OSError as exc:
        raise MixbenchError(f"could not write the site into {out} ({exc.strerror or exc}); check the folder.") from None
    return out
