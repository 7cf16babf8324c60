"""``mixbench publish``: the results store as a static site (docs/DESIGN.md §6, docs/ARCHITECTURE.md "Data flow").

Layout of the site folder::

    index.html                    the board (sortable) with ranks, rank intervals, tie groups and the gate, a
                                  legend for every mark, the Pareto view with its legend, downloads
    suites/<suite>.html           every metric of the suite, the suite's own section (its hook: judged pairs,
                                  robustness pairs, accuracy-vs-state, ...), its plots and runs
    rows/<row>.html               one model: identity, cost, training and validation loss curves, and the
                                  provenance of every run behind it, fields that differ between the runs marked
    runs/<run_id>.html, .json     one run: metrics, plots and the manifest as stored
    plots/<run_id>/<file>         the plots stored with the runs
    board.{csv,json}, leaderboard.md   downloads (the full board; the compact terminal view)
    assets/site.css, site.js      the only style and script; nothing is fetched from the network

Why it is built this way:

* Everything in the store that a model or a user wrote (mixer names, generations, prompts, judge replies,
  perturbed texts, unit-card contexts, plot file names, configs) is untrusted. It reaches HTML only through
  :func:`_e` (``html.escape`` with quotes), URLs only through :func:`_href` (percent-encoded, then escaped), and a
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
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import html
import json
import math
import os
import re
import shutil
import sys
import uuid
import warnings
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote


from harness.board import Board, BoardConfig, build_board
from harness.errors import MixbenchError
from harness.registry import SUITES
from harness.render import CONTROL_MARK, MISSING, board_json, display, legend, ordered_rows, render
from harness.results import ResultsStore, RunRecord, json_safe
from harness.storage import swap_folder
from harness.table import Row, table_from_runs

MARKER = ".mixbench-site"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-src 'self'; "
    "base-uri 'none'; form-action 'none'"
)
# A copied HTML plot may style itself inline but may not run anything or load anything.
PLOT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
IMAGE_TYPES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg")
HTML_TYPES = (".html", ".htm")
TEXT_TYPES = (".csv", ".json", ".jsonl", ".txt", ".md", ".tsv")
MAX_GENERIC_SAMPLES = 20
PROVENANCE_PACKAGES = ("torch", "mamba-ssm", "flash-linear-attention", "fla-core", "triton", "transformers")


# ---------------------------------------------------------------------------------------------- escaping


def _e(value: Any) -> str:
    """Text for HTML element content and quoted attribute values."""
    return html.escape(str(value), quote=True)


def _href(*parts: str) -> str:
    """A relative URL from path parts, each percent-encoded (``/``, ``?``, ``#`` and ``:`` included), escaped."""
    return _e("/".join(quote(p, safe="") if p not in ("..", ".") else p for p in parts))


def script_json(obj: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` only occur inside JSON strings, where their ``\\u`` escapes mean the same characters, so
    the text parses to the same data but can never contain ``</script>`` or ``<!--``. U+2028/U+2029 are escaped
    too (they end lines in older JavaScript parsers).
    """
    text = json.dumps(json_safe(obj), ensure_ascii=False, allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def slug(text: str) -> str:
    """A file name for any text: readable characters kept, the rest dashed, plus a hash so names never collide."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:48] or "x"
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _file_name(name: str) -> str:
    """A plot's file name reduced to safe characters, its extension kept (lower-cased)."""
    stem, ext = os.path.splitext(os.path.basename(name))
    return (re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._") or "plot")[:80] + ext.lower()


# ---------------------------------------------------------------------------------------------- page frame

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#23395d;color:#fff;padding:.7em 1.5em}header a{color:#fff;margin-right:1.2em}
.stamp{color:#cfd8e8;font-size:.85em}
main{padding:1em 1.5em;max-width:110em}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em}h3{font-size:1em}
table{border-collapse:collapse;font-size:.85em;background:#fff;margin:.5em 0}
th,td{border:1px solid #d0d0d0;padding:.25em .55em;text-align:right;vertical-align:top}
th{background:#eef1f6;position:sticky;top:0}
td.text,th.text{text-align:left}
table.sortable th{cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
td.missing{color:#999;text-align:center}
.flag{color:#b45309;cursor:help}
td.best{font-weight:600;background:#eef7ee}
td.unreliable{color:#999}
.legend dt{font-weight:600;margin-top:.4em}.legend dd{margin-left:1.2em}
tr.front td:first-child{border-left:4px solid #d62728}
.note{color:#555;font-size:.85em;max-width:70em}
.warning{background:#fff1c2;border-left:4px solid #b45309;padding:.5em .8em;max-width:70em}
.differs{background:#fff1c2}
.gen{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:.82em;background:#fff;border:1px solid #ddd;
 padding:.4em .6em;margin:.2em 0;max-width:60em;overflow-wrap:anywhere}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:.6em;margin:.4em 0 1.2em 0;max-width:110em}
.pair>div{min-width:0}
.verdict{font-size:.85em;color:#333}
.plots img{max-width:46em;border:1px solid #ddd;background:#fff;margin:.3em .3em .3em 0}
iframe.cards{width:100%;height:34em;border:1px solid #ccc;background:#fff}
details{margin:.2em 0}summary{cursor:pointer;color:#23395d}
code{font-size:.9em}
"""

JS = """"use strict";
/* Sorting for tables with class "sortable". Cells sort by their data-sort attribute (numbers as numbers),
   else by their text; missing cells always go last. #sort=<column>:<asc|desc> sorts the board on load. */
(function () {
  function key(cell) {
    if (!cell) { return null; }
    var s = cell.getAttribute("data-sort");
    if (s === null) { s = cell.textContent.trim(); }
    if (s === "" || s === "\\u2014" || s === "n/a") { return null; }
    var n = Number(s);
    if (!isNaN(n)) { return n; }
    if (/^[-+]?(\\d|\\.\\d)/.test(s)) { var f = parseFloat(s); if (!isNaN(f)) { return f; } }
    return s.toLowerCase();
  }
  function compare(x, y) {
    if (typeof x !== typeof y) { return typeof x === "number" ? -1 : 1; }
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  function sortBy(table, col, descending) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      if (x === null || y === null) { return (x === null) - (y === null); }
      return descending ? -compare(x, y) : compare(x, y);
    });
    rows.forEach(function (r) { body.appendChild(r); });
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    heads[col].setAttribute("aria-sort", descending ? "descending" : "ascending");
    table.setAttribute("data-sorted", heads[col].getAttribute("data-key") + ":" + (descending ? "desc" : "asc"));
  }
  function setup(table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.setAttribute("title", "sort");
      th.addEventListener("click", function () {
        var descending = th.getAttribute("aria-sort") === "ascending";
        sortBy(table, col, descending);
      });
    });
  }
  function fromHash() {
    var m = /^#sort=([^:]*):(asc|desc)$/.exec(location.hash);
    var table = document.getElementById("board");
    if (!m || !table) { return; }
    var wanted = decodeURIComponent(m[1]);
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) {
      if (heads[i].getAttribute("data-key") === wanted) { sortBy(table, i, m[2] === "desc"); return; }
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), setup);
    fromHash();
  });
  window.addEventListener("hashchange", fromHash);
})();
"""


def _page(title: str, body: str, depth: int, generated: str) -> str:
    up = "../" * depth
    nav = (
        f'<a href="{up}index.html">leaderboard</a>'
        f'<span class="stamp">generated {_e(generated)}</span>'
    )
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_e(title)}</title>"
        f'<link rel="stylesheet" href="{up}assets/site.css"><script src="{up}assets/site.js"></script>'
        f"</head><body><header>{nav}</header><main>\n{body}\n</main></body></html>\n"
    )


# ---------------------------------------------------------------------------------------------- tables


def table_html(header: list[str], rows: list[list[str]], table_id: str = "", sortable: bool = True,
               raw: list[list[Any]] | None = None, classes: list[list[str]] | None = None,
               keys: list[str] | None = None, text_keys: set[str] | frozenset[str] = frozenset()) -> str:
    """An HTML table from already-escaped cell HTML; ``raw`` numbers go to ``data-sort`` (missing sorts last)."""
    head = "".join(
        f'<th data-key="{_e(keys[i] if keys else h)}"{" class=" + chr(34) + "text" + chr(34) if keys and keys[i] in text_keys else ""}'
        f' scope="col">{_e(h)}</th>' for i, h in enumerate(header)
    )
    body = []
    for i, line in enumerate(rows):
        cells = []
        for j, text in enumerate(line):
            n = raw[i][j] if raw is not None else None
            attrs = f' data-sort="{_e(repr(float(n)))}"' if isinstance(n, (int, float)) and not isinstance(n, bool) \
                and math.isfinite(float(n)) else ""
            cls = " ".join(c for c in ((classes[i][j] if classes else ""), "missing" if text == MISSING else "") if c)
            cells.append(f'<td{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}{attrs}>{text}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    ident = f' id="{_e(table_id)}"' if table_id else ""
    kind = ' class="sortable"' if sortable else ""
    return f"<table{ident}{kind}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _kv_table(rows: Iterable[tuple[str, Any]]) -> str:
    body = "".join(f'<tr><th class="text">{_e(k)}</th><td class="text">{_e(v)}</td></tr>' for k, v in rows)
    return f"<table>{body}</table>"


class Kit:
    """The :class:`harness.suite.SiteKit` a suite's section is built with, for one page at ``depth``."""

    def __init__(self, site: "_Site", depth: int):
        self.site, self.depth = site, depth

    def escape(self, value: Any) -> str:
        return _e(value)

    def table(self, header, rows, caption: str = "") -> str:
        cap = f"<caption>{_e(caption)}</caption>" if caption else ""
        head = "".join(f"<th>{_e(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f'<td class="text">{_e(c)}</td>' for c in r) + "</tr>" for r in rows)
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def plot(self, run: RunRecord, rel: str, caption: str = "") -> str:
        for path, kind, source in self.site.plots.get(run.run_id, []):
            if source == rel and kind == "image":
                url = _href(*[".."] * self.depth, *path.split("/"))
                cap = f"<figcaption>{_e(caption)}</figcaption>" if caption else ""
                return f'<figure class="plots"><img src="{url}" alt="{_e(caption or rel)}" loading="lazy">{cap}</figure>'
        return ""

    def model_label(self, run: RunRecord) -> str:
        s = run.manifest.subject
        return _e(f"{s.label} / {s.preset}" if s.preset else s.label)

    def run_link(self, run: RunRecord, text: str) -> str:
        return f'<a href="{_href(*[".."] * self.depth, "runs", f"{run.run_id}.html")}">{_e(text)}</a>'

    def newest_per_model(self, runs) -> list[RunRecord]:
        newest: dict[str, RunRecord] = {}
        for run in _newest_first(list(runs)):
            newest.setdefault(run.manifest.subject.row_id, run)
        return sorted(newest.values(), key=lambda r: r.manifest.subject.label)


# ---------------------------------------------------------------------------------------------- provenance


def provenance_summary(run: RunRecord) -> dict[str, str]:
    """The fields of a run a reader compares across runs: code, packages, device, kernel, gate."""
    m = run.manifest
    prov = m.provenance or {}
    git = prov.get("git") or {}
    commit = git.get("commit")
    code = " ".join(
        p for p in (
            str(prov.get("mixbench") or ""),
            (str(commit)[:12] if commit else "no commit") if git else "no git",
            "+dirty" if git.get("dirty") else "",
        ) if p
    ) if prov else ""  # fmt: skip
    hw = prov.get("hardware") or {}
    cuda = hw.get("cuda") or {}
    packages = {**(prov.get("packages") or {}), **(m.subject.packages or {})}
    out = {
        "code": code,
        "gate": f"{m.gate.status} (v{m.gate.version})",
        "device": str(m.subject.device or ""),
        "gpu": ", ".join(map(str, cuda.get("devices") or [])) + (f" (CUDA {cuda.get('cuda_version')})" if cuda else ""),
        "cpu": str(hw.get("cpu") or ""),
        "kernel": str(m.subject.kernel or ""),
        "dtype": str(m.subject.dtype or ""),
        "python": str(prov.get("python") or ""),
        "platform": str(prov.get("platform") or ""),
    }
    for name in PROVENANCE_PACKAGES:
        out[name] = str(packages.get(name) or "")
    return out


def provenance_differences(summaries: list[dict[str, str]]) -> list[str]:
    """Fields with more than one recorded value among the runs (an unrecorded field is unknown, not different)."""
    fields = list(dict.fromkeys(f for s in summaries for f in s))
    return [f for f in fields if len({s.get(f) for s in summaries if s.get(f)}) > 1]


# ---------------------------------------------------------------------------------------------- the site


LEGEND = (
    ("rank", "Borda rank within the preset over the voting columns, every suite weighing the same; in brackets "
             "its bootstrap interval (voting columns and, within each, the shared items resampled). "
             "= marks a row whose rank interval overlaps another's: their order is not settled. – marks a row "
             "that lacks a voting suite (not ranked; the notes say what it lacks)."),
    ("a, b, ... after a value", "tie groups of a voting column: group a (highlighted) holds the best row and "
                                "every row a paired test on shared items cannot tell from it (Holm-corrected); "
                                "group b repeats that on the rest, and so on."),
    ("value [low, high]", "mean over seeds with its interval: the suite's own (bootstrap, Wilson, normal, range "
                          "— the run page says which) with one seed, a Student-t interval over seeds otherwise."),
    ("†  greyed", "unreliable: the suite found this number measures nothing (e.g. a judge at chance on its "
                  "gold canaries); shown, never voting. The notes below give the reason."),
    ("°", "the point estimate lies outside its interval (a skewed statistic); reported as it is, never widened."),
    ("control", "a control mixer (none: no token mixing, a context-free model; mean: the uniform average of the "
                "prefix), trained and scored like the mixers and never ranked. A column whose best mixer is not "
                "better than every control does not vote: what it measures does not come from mixing."),
    (CONTROL_MARK, "a mixer's value that is not better than the context-free control's (paired test on shared "
                   "items, Holm-corrected over the column's mixers): at this budget, in this column, the mixer "
                   "has shown nothing a model without context could not do."),
    ("gate", "the conformance gate's verdict for the row's mixer and config: passed, or skipped (scored with "
             "--skip-gate, for debugging). A mixer that fails the gate is never scored."),
    ("◆ Pareto", "on the quality-vs-speed Pareto front of its preset (the red points of the plot below): no other "
                 "model of the preset is at least as good on both axes and better on one."),
    ("⚑", "the runs behind this row differ in code, packages, device, kernel or gate (its page shows which)."),
    ("— / n/a", "— a missing cell (the suite did not run for this row); n/a a number that does not exist "
                "(e.g. a crossover outside the measured grid)."),
)


class _Site:
    """Reads the store once and writes every page into ``root``."""

    def __init__(self, store: ResultsStore, root: Path, config: BoardConfig):
        self.store, self.root, self.config = store, root, config
        self.generated = datetime.now(UTC).isoformat(timespec="seconds")
        self.runs: list[RunRecord] = list(store.iter_runs(samples=True))  # the one read of the store
        self.table = table_from_runs(self.runs, str(store.root))
        self.board: Board = build_board(self.table, config)
        self.suites = sorted({r.manifest.suite for r in self.runs})
        self.suite_files = {s: f"{slug(s)}.html" for s in self.suites}
        self.row_files = {row.key: f"{slug(f'{row.label}-{row.preset}-{row.key}')}.html" for row in self.table.rows}
        self.plots: dict[str, list[tuple[str, str, str]]] = {}  # run id -> [(site path, kind, stored rel)]

    def write(self) -> None:
        for folder in ("assets", "suites", "rows", "runs", "plots"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        (self.root / "assets" / "site.css").write_text(CSS.lstrip(), encoding="utf-8")
        (self.root / "assets" / "site.js").write_text(JS, encoding="utf-8")
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
        (self.root / MARKER).write_text(f"mixbench site generated {self.generated} from {self.store.root}\n")

    def _write(self, rel: str, title: str, body: str) -> None:
        depth = rel.count("/")
        (self.root / rel).write_text(_page(title, body, depth, self.generated), encoding="utf-8")

    # ------------------------------------------------------------------ plots
    def _copy_plots(self, run: RunRecord) -> list[tuple[str, str, str]]:
        out, used = [], set()
        for rel in run.plots:
            name = _file_name(rel)
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
            url = _href(*up, *path.split("/"))
            name = path.rsplit("/", 1)[1]
            if kind == "image":
                parts.append(f'<img src="{url}" alt="{_e(name)}" loading="lazy">')
            elif kind == "html":
                parts.append(
                    f'<p class="note">{_e(name)} (shown without scripts; <a href="{url}">open alone</a>)</p>'
                    f'<iframe class="cards" sandbox="" src="{url}" title="{_e(name)}"></iframe>'
                )
            else:
                parts.append(f'<p><a href="{url}" download>{_e(name)}</a></p>')
        return f'<div class="plots">{"".join(parts)}</div>' if parts else ""

    # ------------------------------------------------------------------ downloads and index
    def _downloads(self) -> None:
        (self.root / "board.json").write_text(board_json(self.board) + "\n", encoding="utf-8")
        (self.root / "board.csv").write_text(render(self.board, "csv", "full") + "\n", encoding="utf-8")
        (self.root / "leaderboard.md").write_text(render(self.board, "md") + "\n", encoding="utf-8")

    def _board_html(self, view: str, table_id: str, depth: int, suite: str | None = None) -> str:
        if self.table.empty:
            return f'<p class="note">{_e(render(self.board, "md"))}</p>'
        d = display(self.board, view, suite, "html")
        up = [".."] * depth
        rows_sorted = ordered_rows(self.board)
        cells, classes = [], []
        for row, line, bold in zip(rows_sorted, d.body, d.best):
            html_line, cls_line = [], []
            for key, text, b in zip(d.keys, line, bold):
                h = _e(text)
                if key == "model":
                    h = f'<a href="{_href(*up, "rows", self.row_files[row.key])}">{h}</a>'
                    if self.board.pareto.get(row.key):
                        h += ' <span class="flag" title="on the Pareto front of its preset">&#9670;</span>'
                    differs = provenance_differences([provenance_summary(r) for r in row.runs])
                    if differs:
                        h += f' <span class="flag" title="{_e("runs of this row differ in " + ", ".join(differs))}">&#9873;</span>'
                cell = self.table.cell(row, key) if "/" in key else None
                cls = "best" if b else ("unreliable" if cell is not None and cell.unreliable else "")
                if key in d.text_columns:
                    cls = (cls + " text").strip()
                html_line.append(h)
                cls_line.append(cls)
            cells.append(html_line)
            classes.append(cls_line)
        return table_html(d.header, cells, table_id, raw=d.raw, classes=classes, keys=d.keys, text_keys=d.text_columns)

    def _index(self) -> None:
        board = self.board
        first = board.headline()
        parts = [
            "<h1>mixbench leaderboard</h1>",
            f'<p class="warning"><strong>{_e(first)}</strong></p>' if first else "",
            f'<p class="note">{len(self.runs)} runs of {len(self.table.rows)} models from <code>{_e(self.store.root)}'
            "</code>. Click a column header to sort; click a model for its loss curves and the provenance of its runs "
            "(&#9873;: its runs differ in code, packages, device or kernel; &#9670;: on the Pareto front).</p>",
            self._board_html("full", "board", 0),
            "<h2>What the marks mean</h2>",
            '<dl class="legend">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in LEGEND) + "</dl>",
            "<h2>Notes</h2>",
            '<ul class="note">' + "".join(f"<li>{_e(n)}</li>" for n in legend(board, list(self.table.columns))) + "</ul>",
        ]
        plot = self._pareto_plot()
        if plot:
            parts.append(
                "<h2>Quality vs speed</h2>"
                f'<p class="note">{_e(board.quality_name)} against {_e(board.speed_name)}, per preset. Red: on the '
                "Pareto front (no other model of the preset is at least as good on both axes and better on one); "
                "grey: dominated; the red line joins the front.</p>"
                f'<div class="plots"><img src="pareto.png" alt="{_e(board.quality_name)} against {_e(board.speed_name)}"></div>'
            )
        parts.append("<h2>Suites</h2><ul>" + "".join(
            f'<li><a href="{_href("suites", f)}">{_e(s)}</a> ({sum(r.manifest.suite == s for r in self.runs)} runs)</li>'
            for s, f in self.suite_files.items()
        ) + "</ul>")
        parts.append(
            "<h2>Downloads</h2><ul>"
            '<li><a href="board.csv" download>board.csv</a> · <a href="board.json" download>board.json</a> '
            "(every column with intervals, groups, votes and ranks)</li>"
            '<li><a href="leaderboard.md" download>leaderboard.md</a> (the compact view)</li></ul>'
        )
        parts.append(f'<script type="application/json" id="board-data">{script_json(json.loads(board_json(board)))}</script>')
        self._write("index.html", "mixbench leaderboard", "\n".join(parts))

    def _pareto_plot(self) -> bool:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        board = self.board
        by_preset: dict[str, list[Row]] = defaultdict(list)
        for row in self.table.rows:
            if board.pareto.get(row.key) is not None:
                by_preset[row.preset].append(row)
        if not by_preset:
            return False
        fig, axes = plt.subplots(1, len(by_preset), figsize=(5.5 * len(by_preset), 4.2), squeeze=False)
        for ax, (preset, rows) in zip(axes[0], sorted(by_preset.items())):
            pts = []
            for row in rows:
                speed = row.train_tokens_per_s if board.speed_name == "train_tokens_per_s" else \
                    self.table.cell(row, board.speed_name).value
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
                ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8, parse_math=False)
            ax.set_xscale("log")
            ax.set_xlabel(f"{board.speed_name} (log)", parse_math=False)
            ax.set_ylabel(board.quality_name, parse_math=False)
            ax.set_title(f"preset {preset}", parse_math=False)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(self.root / "pareto.png", dpi=110)
        plt.close(fig)
        return True

    # ------------------------------------------------------------------ suite pages
    def _suite_page(self, suite: str) -> None:
        runs = [r for r in self.runs if r.manifest.suite == suite]
        parts = [f"<h1>Suite: {_e(suite)}</h1>"]
        if any(c.suite == suite for c in self.table.columns):
            parts.append(self._board_html("suite", "suite-table", 1, suite))
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
            parts.append("<h2>Plots</h2>")
            for r in plotted:
                parts.append(f"<h3>{self._run_label(r, 1)}</h3>{self._plots_html(r, 1)}")
        parts.append("<h2>Runs</h2>" + self._run_list(runs, 1))
        self._write(f"suites/{self.suite_files[suite]}", f"mixbench · {suite}", "\n".join(parts))

    def _run_label(self, run: RunRecord, depth: int) -> str:
        s = run.manifest.subject
        url = _href(*[".."] * depth, "runs", f"{run.run_id}.html")
        seed = f" / seed {s.seed}" if s.seed is not None else ""
        return (f'{_e(s.label)} / {_e(s.preset or "—")}{_e(seed)} '
                f'<span class="note">(run <a href="{url}">{_e(run.run_id)}</a>)</span>')

    def _run_list(self, runs: list[RunRecord], depth: int) -> str:
        rows = []
        for r in _newest_first(runs):
            m = r.manifest
            url = _href(*[".."] * depth, "runs", f"{r.run_id}.html")
            rows.append(
                f'<tr><td class="text"><a href="{url}">{_e(r.run_id)}</a></td><td class="text">{_e(m.kind)}</td>'
                f'<td class="text">{_e(m.subject.label)}</td><td class="text">{_e(m.subject.preset or "—")}</td>'
                f'<td>{_e("" if m.subject.seed is None else m.subject.seed)}</td>'
                f'<td class="text">{_e(m.config_label)}</td><td class="text">{_e(m.gate.status)}</td>'
                f'<td class="text">{_e(m.written_at)}</td></tr>'
            )
        head = "".join(f'<th class="text">{h}</th>' for h in
                       ("run", "kind", "model", "preset", "seed", "config", "gate", "written"))
        return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'

    def _generic_samples(self, runs: list[RunRecord]) -> str:
        parts = []
        for r in _newest_first(runs):
            if not r.samples:
                continue
            shown = "".join(
                f'<div class="gen">{_e(json.dumps(s, ensure_ascii=False))}</div>' for s in r.samples[:MAX_GENERIC_SAMPLES]
            )
            parts.append(
                f"<details><summary>{self._run_label(r, 1)}: {min(len(r.samples), MAX_GENERIC_SAMPLES)} of "
                f"{len(r.samples)} samples</summary>{shown}</details>"
            )
        return ("<h2>Samples</h2>" + "\n".join(parts)) if parts else ""

    # ------------------------------------------------------------------ rows and runs
    def _row_page(self, row: Row) -> None:
        runs = _newest_first(row.runs)
        summaries = [provenance_summary(r) for r in runs]
        fields = [f for f in summaries[0] if any(s[f] for s in summaries)]
        differs = provenance_differences(summaries)
        head = "".join(f'<th class="text">{_e(h)}</th>' for h in ("suite", "seed", "run", "written", *fields))
        lines = []
        for r, s in zip(runs, summaries):
            m = r.manifest
            cells = "".join(
                f'<td class="text{" differs" if f in differs and s[f] else ""}">{_e(s[f])}</td>' for f in fields
            )
            lines.append(
                f'<tr><td class="text">{_e(m.suite)}</td><td>{_e("" if m.subject.seed is None else m.subject.seed)}</td>'
                f'<td class="text"><a href="{_href("..", "runs", f"{r.run_id}.html")}">{_e(r.run_id)}</a></td>'
                f'<td class="text">{_e(m.written_at)}</td>{cells}</tr>'
            )
        subject = runs[0].manifest.subject
        parts = [
            f"<h1>{_e(row.label)} / {_e(row.preset)}</h1>",
            _kv_table([
                ("mixer", f"{subject.mixer} ({subject.mixer_source})"), ("seeds", ", ".join(map(str, row.seeds)) or "—"),
                ("parameters", row.parameters), ("decode state floats", row.state_floats),
                ("training FLOPs", row.train_flops), ("training tokens/s", row.train_tokens_per_s),
                ("mixer config", json.dumps(subject.mixer_config, sort_keys=True)),
                ("gate", row.gate), ("row (model identity without seed)", row.key),
            ]),
        ]
        curve = self._loss_plot(row)
        if curve:
            parts.append(f'<h2>Training and validation loss</h2><div class="plots"><img src="{_e(curve)}" '
                         f'alt="training and validation loss of {_e(row.label)}"></div>')
        parts += [
            "<h2>Provenance of every run</h2>",
            f'<p class="note">{"Differs between runs (highlighted): " + _e(", ".join(differs)) if differs else "All runs agree on code, packages, device, kernel and gate."}</p>',
            f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(lines)}</tbody></table>',
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
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        for seed, curve in sorted(curves.values(), key=lambda c: (c[0] is None, c[0])):
            steps = [p.get("step") for p in curve if p.get("loss") is not None]
            ax.plot(steps, [p["loss"] for p in curve if p.get("loss") is not None], lw=1, label=f"train, seed {seed}")
            val = [(p.get("step"), p["val_loss"]) for p in curve if p.get("val_loss") is not None]
            if val:
                ax.plot([v[0] for v in val], [v[1] for v in val], marker="o", lw=1, label=f"validation, seed {seed}")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss (nats/token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        name = self.row_files[row.key].removesuffix(".html") + "-loss.png"
        fig.savefig(self.root / "rows" / name, dpi=100)
        plt.close(fig)
        return name

    def _run_page(self, run: RunRecord) -> None:
        m = run.manifest

        def interval_text(x) -> str:
            iv = x.interval
            if iv is None:
                return ""
            level = "" if iv.level is None else f" {iv.level:.0%}"
            return f"[{_num(iv.low)}, {_num(iv.high)}] {iv.kind}{level}"

        metrics = "".join(
            f'<tr><td class="text">{_e(x.name)}</td><td data-sort="{_e(repr(x.value))}">{_e(_num(x.value))}</td>'
            f'<td class="text">{_e(interval_text(x))}</td><td>{_e(x.n if x.n is not None else "")}</td>'
            f'<td class="text">{_e(x.unit)}</td><td class="text">{_e(x.role)}</td>'
            f'<td class="text">{"↑" if x.higher_is_better else "↓"}</td><td class="text">{_e(x.unreliable or "")}</td></tr>'
            for x in run.metrics
        )
        head = "".join(f"<th>{h}</th>" for h in ("metric", "value", "interval", "n", "unit", "role", "better",
                                                 "unreliable because"))
        manifest_text = json.dumps(json_safe(m.to_json()), ensure_ascii=False, indent=2)
        (self.root / "runs" / f"{run.run_id}.json").write_text(manifest_text + "\n", encoding="utf-8")
        parts = [
            f"<h1>Run {_e(run.run_id)}</h1>",
            _kv_table([("suite", m.suite), ("config", m.config_label), ("kind", m.kind), ("model", m.subject.label),
                       ("preset", m.subject.preset or "—"), ("seed", m.subject.seed), ("gate", m.gate.status),
                       ("written", m.written_at)]),
            f'<h2>Metrics</h2><table class="sortable"><thead><tr>{head}</tr></thead><tbody>{metrics}</tbody></table>',
        ]
        if self.plots.get(run.run_id):
            parts.append("<h2>Plots</h2>" + self._plots_html(run, 1))
        parts.append(
            f'<h2>Manifest</h2><p><a href="{_href(f"{run.run_id}.json")}" download>manifest JSON</a></p>'
            f"<details><summary>show</summary><div class=\"gen\">{_e(manifest_text)}</div></details>"
        )
        self._write(f"runs/{run.run_id}.html", f"mixbench · run {run.run_id}", "\n".join(parts))


def _newest_first(runs: list[RunRecord]) -> list[RunRecord]:
    return sorted(runs, key=lambda r: r.manifest.written_at, reverse=True)


def _num(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return MISSING if v is None else "n/a"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:.4g}"
    return str(v)


# ---------------------------------------------------------------------------------------------- entry point


#: the top-level entries a site folder holds (the layout in this module's docstring): anything else in ``--out`` is
#: the user's, and publishing, which replaces the folder as a whole, would delete it
SITE_ENTRIES = frozenset({MARKER, "index.html", "board.json", "board.csv", "leaderboard.md", "pareto.png", "assets",
                          "suites", "rows", "runs", "plots"})


def publish_site(store: ResultsStore, out: Path, force: bool = False, config: BoardConfig | None = None) -> Path:
    """Write the static site of ``store`` into the folder ``out`` and return ``out``.

    The site is built in a temporary sibling folder and swapped in, so ``out`` always holds a complete site.
    ``out`` may not exist yet, be empty, or hold a previous mixbench site and nothing else; anything else is
    refused (the swap replaces the folder as a whole), and so are a results store inside ``out`` and replacing
    a previous site with a board of zero runs (a mistyped store), unless ``force``. One publish into a parent
    folder at a time (a lock on it); what a killed publish left beside the folder is removed by the next.
    """
    store.require_existing()
    out = Path(out).expanduser()
    _check_out(store, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _publish_lock(out):
        _remove_leftovers(out)
        _check_out(store, out)  # again, under the lock: another publish may have just replaced it
        tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex}"
        try:
            site = _Site(store, tmp, config or BoardConfig())
            if not site.runs and (out / MARKER).exists() and not force:
                raise MixbenchError(
                    f"{store.root} holds no runs, so publishing it would replace the site in {out} with an empty "
                    "board; check --results, or pass --force to publish an empty board on purpose."
                )
            site.write()
            swap_folder(tmp, out, aside=out.parent / f".{out.name}.old-{uuid.uuid4().hex}")
        except OSError as exc:
            raise MixbenchError(f"could not write the site into {out} ({exc.strerror or exc}); check the folder.") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _check_out(store: ResultsStore, out: Path) -> None:
    """Refuse an ``--out`` whose replacement would delete something that is not a site: the results store
    itself (inside it, or it), or any entry a site does not write."""
    local = store.local_path
    if local is not None:
        store_dir, site_dir = local.resolve(), out.resolve()
        if store_dir == site_dir or site_dir in store_dir.parents:
            raise MixbenchError(
                f"the results store {store.root} is inside --out {out}; publishing replaces {out} as a whole and "
                "would delete the results: pick an --out folder that does not contain the store."
            )
    if not out.exists():
        return
    if not out.is_dir():
        raise MixbenchError(f"--out {out} is a file; pass an empty or new folder, or a previous mixbench site.")
    entries = sorted(p.name for p in out.iterdir())
    if entries and MARKER not in entries:
        raise MixbenchError(
            f"--out {out} exists and is not a mixbench site (no {MARKER} in it); pass an empty or new folder."
        )
    foreign = [e for e in entries if e not in SITE_ENTRIES]
    stores = [str(p.parent.parent.relative_to(out)) for p in out.glob("**/runs/*/manifest.json")]
    if foreign or stores:
        shown = ", ".join((foreign + stores)[:5])
        raise MixbenchError(
            f"--out {out} is a mixbench site but also holds what a site does not write ({shown}"
            f"{', ...' if len(foreign) + len(stores) > 5 else ''}); publishing replaces the folder as a whole and "
            "would delete it: move it elsewhere, or pick another --out."
        )


@contextlib.contextmanager
def _publish_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on the folder that holds ``out`` (flock on the directory itself, so no lock file is
    left beside the site): a second publish there stops with a sentence instead of racing this one, and leftovers
    are only removed by a publish that holds the lock."""
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise MixbenchError(
                f"another mixbench publish is writing into {out.parent} right now; wait for it to finish."
            ) from None
        yield
    finally:
        os.close(fd)


def _remove_leftovers(out: Path) -> list[Path]:
    """The temporary and set-aside folders of publishes killed before they finished (called under the lock)."""
    found = sorted(out.parent.glob(f".{glob.escape(out.name)}.tmp-*")) + sorted(
        out.parent.glob(f".{glob.escape(out.name)}.old-*"))
    for leftover in found:
        shutil.rmtree(leftover, ignore_errors=True)
    if found:
        print(f"[mixbench] removed what an interrupted publish left beside {out}: "
              f"{', '.join(p.name for p in found)}", file=sys.stderr, flush=True)
    return found
