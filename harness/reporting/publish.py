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
* One job per module: this one reads the store, writes the suite pages and swaps the site in;
  :mod:`harness.reporting.site_index` writes the index and the board table, :mod:`harness.reporting.site_rows` the
  pages of one model and of one run; :mod:`harness.reporting.site_html` holds the building blocks (escaping,
  tables, headers, legend), :mod:`harness.reporting.site_board` the board's order and cells,
  :mod:`harness.reporting.site_provenance` what a page says of a run's origin, :mod:`harness.reporting.site_plots`
  the side-by-side plots, ``harness/reporting/site_assets/`` the style sheet and script,
  :mod:`harness.reporting.plotting` draws the figures.
"""

from __future__ import annotations

import json
import os
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.reporting.board import Board, BoardConfig, build_board
from harness.errors import MixbenchError
from harness.registry import SUITES
from harness.reporting.board_document import board_json
from harness.reporting.render import render
from harness.store.output_folder import Keep, OutputKind, check_output_folder, replacing
from harness.store.results import ResultsStore, RunRecord
from harness.reporting.site_html import (
    ASSETS, HTML_TYPES, IMAGE_TYPES, MAX_GENERIC_SAMPLES, PLOT_CSP, TEXT_TYPES, asset_text, cell_text, esc, file_name,
    href, page, scroll, slug,
)
from harness.reporting.site_board import suite_order
from harness.reporting.site_index import CURVES, board_html, columns_html, write_index
from harness.reporting.site_plots import metric_figure, plotted_columns
from harness.reporting.site_provenance import LocalPaths
from harness.reporting.site_reproductions import PAGE as REPRODUCTIONS_PAGE
from harness.reporting.site_reproductions import PLOTS_DIR as REPRODUCTION_PLOTS
from harness.reporting.site_reproductions import draw_checks, record_anchor, reproductions_body
from harness.reporting.site_rows import newest_first, write_row_page, write_run_page
from harness.reproduction import load_records
from harness.reporting.table import Row, table_from_runs

MARKER = ".mixbench-site"


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
        for run in newest_first(list(runs)):
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
        write_index(self)
        for suite in self.suites:
            self._suite_page(suite)
        for row in self.table.rows:
            write_row_page(self, row)
        for run in self.runs:
            write_run_page(self, run)
        if self.reproductions or self.reproduction_problems:
            self._reproductions_page()
        (self.root / MARKER).write_text(f"mixbench site generated {self.generated} from {self.paths.store_name}\n")

    def write_page(self, rel: str, title: str, body: str) -> None:
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

    def plots_html(self, run: RunRecord, depth: int) -> str:
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

    # ------------------------------------------------------------------ downloads
    def _downloads(self) -> None:
        (self.root / "board.json").write_text(board_json(self.board) + "\n", encoding="utf-8")
        (self.root / "board.csv").write_text(render(self.board, "csv", "full") + "\n", encoding="utf-8")
        (self.root / "leaderboard.md").write_text(render(self.board, "md") + "\n", encoding="utf-8")

    # ------------------------------------------------------------------ reproductions
    def _reproductions_page(self) -> None:
        plots = {}
        for record in self.reproductions:
            rel = f"{REPRODUCTION_PLOTS}/{record_anchor(record)}.png"
            if draw_checks(record, self.root / rel):
                plots[record_anchor(record)] = rel
        body = reproductions_body(self.reproductions, self.reproduction_problems, {r.run_id for r in self.runs},
                                  plots)
        self.write_page(REPRODUCTIONS_PAGE, "mixbench reproductions", body)

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
            parts.append(board_html(self, "suite", "suite-table", 1, suite))
            parts.append(
                '<details><summary>Columns: full names, units and votes</summary>'
                f"{columns_html(self, columns, 1)}</details>"
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
        plotted = [r for r in newest_first(runs) if self.plots.get(r.run_id)]
        if plotted:
            stored = "".join(f"<h3>{self._run_label(r, 1)}</h3>{self.plots_html(r, 1)}" for r in plotted)
            if figures:  # the side-by-side plots come first; each run's own plots on request
                parts.append(f"<h2>Plots stored with each run</h2><details><summary>{len(plotted)} runs' plots, "
                             "each of one model (at the size they were drawn)</summary>" + stored + "</details>")
            else:
                parts.append("<h2>Plots</h2>" + stored)
        parts.append("<h2>Runs</h2>" + self._run_list(runs, 1))
        self.write_page(f"suites/{self.suite_files[suite]}", f"mixbench · {suite}", "\n".join(parts))

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
        for r in newest_first(runs):
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
        for r in newest_first(runs):
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
