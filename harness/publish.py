"""``mixbench publish``: the results store as a static site (DESIGN §6, ANCHORS §1.9 and §4).

Layout of the site folder::

    index.html                    the board (sortable), the Pareto view, notes on how it is aggregated, downloads
    suites/<suite>.html           every metric of the suite, its plots and its examples (judged pairs, robustness
                                  pairs, unit cards, generations)
    rows/<mixer>-<preset>.html    provenance of a row: every run behind it with code, package, device and kernel
                                  versions, fields that differ between the runs marked
    runs/<run_id>.html, .json     one run: metrics, plots and the manifest as stored
    plots/<run_id>/<file>         the plots stored with the runs
    board.{csv,json}, leaderboard.{csv,json,md}   downloads (board: aggregated; leaderboard: every metric)
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
  site (no marker file) is never replaced.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
import shutil
import uuid
import warnings
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from harness.errors import MixbenchError
from harness.leaderboard import (
    _STYLES,
    MISSING,
    BoardConfig,
    Cell,
    _display,
    build_board,
    frame_from_runs,
    pareto_plot,
    render,
    table_from_frame,
)
from harness.results import ResultsStore, RunRecord, json_safe

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
MAX_PAIRS = 60  # judged pairs shown per pool
MAX_GENERATION_PROMPTS = 30
MAX_ROBUSTNESS_PER_SLICE = 3
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
tr.front td:first-child{border-left:4px solid #d62728}
.note{color:#555;font-size:.85em;max-width:70em}
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


def _sort_key(value: Any) -> str | None:
    """The ``data-sort`` value of a cell: the raw number (not its rounded text), ``None`` when missing."""
    if isinstance(value, Cell):
        return None if math.isnan(value.value) else repr(value.value)
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    return None  # text sorts by what is shown


def table_html(table: pd.DataFrame, table_id: str, row_links: dict[tuple[str, str], str] | None = None,
               front: set[tuple[str, str]] | None = None, flags: dict[tuple[str, str], str] | None = None) -> str:
    """A leaderboard frame as a sortable HTML table: display text from the leaderboard's own formatting
    (escaped, best cell in bold), raw numbers in ``data-sort``, missing cells marked; the mixer cell links to
    ``row_links[(mixer, preset)]`` when given and carries ``flags[(mixer, preset)]`` as a warning mark."""
    if table.empty:
        return f'<p class="note">{_e(table.attrs.get("empty_message", "no results"))}</p>'
    header, body = _display(table, _STYLES["html"])
    columns = list(table.columns)
    text_columns = {"mixer", "preset", "seeds", "coverage", "pareto"}
    head = "".join(
        f'<th data-key="{_e(c)}" class="{"text" if c in text_columns else "num"}" scope="col">{h}</th>'
        for c, h in zip(columns, header)
    )
    lines = []
    for (_, row), shown in zip(table.iterrows(), body):
        key = (str(row["mixer"]), str(row["preset"]))
        cells = []
        for c, text in zip(columns, shown):
            value = row[c]
            sort = _sort_key(value)
            attrs = f' data-sort="{_e(sort)}"' if sort is not None else ""
            classes = ["text"] if c in text_columns else []
            if text == MISSING:
                classes.append("missing")
                attrs = ""
            if c == "mixer" and row_links and key in row_links:
                text = f'<a href="{_e(row_links[key])}">{text}</a>'
            if c == "mixer" and flags and key in flags:
                text += f' <span class="flag" title="{_e(flags[key])}">&#9873;</span>'
            cls = f' class="{" ".join(classes)}"' if classes else ""
            cells.append(f"<td{cls}{attrs}>{text}</td>")
        tr = ' class="front"' if front and key in front else ""
        lines.append(f"<tr{tr}>{''.join(cells)}</tr>")
    return (
        f'<table id="{_e(table_id)}" class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(lines)}</tbody></table>"
    )


def _kv_table(rows: Iterable[tuple[str, Any]]) -> str:
    body = "".join(f'<tr><th class="text">{_e(k)}</th><td class="text">{_e(v)}</td></tr>' for k, v in rows)
    return f"<table>{body}</table>"


# ---------------------------------------------------------------------------------------------- provenance


def provenance_summary(manifest: dict[str, Any]) -> dict[str, str]:
    """The fields of a run's manifest a reader compares across runs: code, packages, device, kernel."""
    prov = manifest.get("provenance") or {}
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
    packages = {**(prov.get("packages") or {}), **(manifest.get("mixer_packages") or {})}
    out = {
        "code": code,
        "device": str(manifest.get("device") or ""),
        "gpu": ", ".join(map(str, cuda.get("devices") or [])) + (f" (CUDA {cuda.get('cuda_version')})" if cuda else ""),
        "cpu": str(hw.get("cpu") or ""),
        "kernel": str(manifest.get("kernel") or ""),
        "dtype": str(manifest.get("dtype") or ""),
        "python": str(prov.get("python") or ""),
        "platform": str(prov.get("platform") or ""),
    }
    for name in PROVENANCE_PACKAGES:
        out[name] = str(packages.get(name) or "")
    return out


def provenance_differences(summaries: list[dict[str, str]]) -> list[str]:
    """Fields with more than one recorded value among the runs (a field a run did not record is unknown, not
    different: older runs and suites that copy fewer fields leave it empty)."""
    fields = list(dict.fromkeys(f for s in summaries for f in s))
    return [f for f in fields if len({s.get(f) for s in summaries if s.get(f)}) > 1]


# ---------------------------------------------------------------------------------------------- the site


class _Site:
    """Reads the store once and writes every page into ``root``."""

    def __init__(self, store: ResultsStore, root: Path, config: BoardConfig):
        self.store, self.root, self.config = store, root, config
        self.generated = datetime.now(UTC).isoformat(timespec="seconds")
        self.runs: list[RunRecord] = list(store.iter_runs(samples=True))  # the one read of the store
        self.frame = frame_from_runs(self.runs)
        self.placed = [r for r in self.runs if all(r.manifest.get(k) is not None for k in ("suite", "mixer", "preset"))]
        self.suites = sorted({str(r.manifest["suite"]) for r in self.placed})
        self.suite_files = {s: f"{slug(s)}.html" for s in self.suites}
        self.row_runs: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
        for r in self.placed:
            self.row_runs[(str(r.manifest["mixer"]), str(r.manifest["preset"]))].append(r)
        self.row_files = {k: f"{slug(f'{k[0]}-{k[1]}')}.html" for k in self.row_runs}
        self.plots: dict[str, list[tuple[str, str]]] = {}  # run id -> [(site path under plots/, kind)]

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
        for key in self.row_runs:
            self._row_page(key)
        for run in self.runs:
            self._run_page(run)
        (self.root / MARKER).write_text(f"mixbench site generated {self.generated} from {self.store.root}\n")

    def _write(self, rel: str, title: str, body: str) -> None:
        depth = rel.count("/")
        (self.root / rel).write_text(_page(title, body, depth, self.generated), encoding="utf-8")

    # ------------------------------------------------------------------ plots
    def _copy_plots(self, run: RunRecord) -> list[tuple[str, str]]:
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
            out.append((f"plots/{run.run_id}/{name}", kind))
        return out

    def _plots_html(self, run: RunRecord, depth: int) -> str:
        up = [".."] * depth
        parts = []
        for path, kind in self.plots.get(run.run_id, []):
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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the index shows the same warnings once
            full = table_from_frame(self.frame, str(self.store.root), all_metrics=True)
        for fmt in ("csv", "json", "md"):
            (self.root / f"leaderboard.{fmt}").write_text(render(full, fmt) + "\n", encoding="utf-8")

    def _index(self) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            board = build_board(self.store, self.config, self.frame)
        notes = sorted({str(w.message) for w in caught})
        for fmt in ("csv", "json"):
            (self.root / f"board.{fmt}").write_text(render(board, fmt) + "\n", encoding="utf-8")
        links = {k: f"rows/{f}" for k, f in self.row_files.items()}
        front = set()
        if not board.empty:
            front = {(str(r.mixer), str(r.preset)) for _, r in board.iterrows() if r.pareto == "yes"}
        flags = {}
        for key, runs in self.row_runs.items():
            differs = provenance_differences([provenance_summary(r.manifest) for r in runs])
            if differs:
                flags[key] = f"runs of this row differ in {', '.join(differs)}"
        parts = [
            "<h1>mixbench leaderboard</h1>",
            (
                f'<p class="note">{len(self.placed)} runs of {len(self.row_runs)} models (mixer × preset) from '
                f"<code>{_e(self.store.root)}</code>. Click a column header to sort; click a mixer for the "
                "provenance of its row (&#9873;: its runs differ in code, packages, device or kernel).</p>"
            ),
            table_html(board, "board", links, front, flags),
        ]
        parts += [f'<p class="note">warning: {_e(n)}</p>' for n in notes]
        if not board.empty:
            parts.append(self._board_notes(board))
            plot = pareto_plot(board, self.root / "pareto.png")
            if plot is not None:
                parts.append(f'<h2>Quality vs speed</h2><div class="plots"><img src="pareto.png" '
                             f'alt="Pareto view: {_e(board.attrs["quality"])} against {_e(board.attrs["speed"])}"></div>')
            fronts = "".join(
                f"<li>preset {_e(p)}: {_e(', '.join(m) or 'no row has both axes')}</li>"
                for p, m in board.attrs["fronts"].items()
            )
            parts.append(f"<p class=\"note\">On the Pareto front (red border in the table):</p><ul>{fronts}</ul>")
        parts.append("<h2>Suites</h2><ul>" + "".join(
            f'<li><a href="{_href("suites", f)}">{_e(s)}</a> ({sum(r.manifest["suite"] == s for r in self.placed)} runs)</li>'
            for s, f in self.suite_files.items()
        ) + "</ul>")
        parts.append(
            "<h2>Downloads</h2><ul>"
            '<li><a href="board.csv" download>board.csv</a> · <a href="board.json" download>board.json</a> '
            "(this table)</li>"
            '<li><a href="leaderboard.csv" download>leaderboard.csv</a> · '
            '<a href="leaderboard.json" download>leaderboard.json</a> · '
            '<a href="leaderboard.md" download>leaderboard.md</a> (every metric)</li></ul>'
        )
        data = json.loads(render(board, "json")) if not board.empty else []
        parts.append(f'<script type="application/json" id="board-data">{script_json(data)}</script>')
        self._write("index.html", "mixbench leaderboard", "\n".join(parts))

    @staticmethod
    def _board_notes(board: pd.DataFrame) -> str:
        attrs = board.attrs
        weights = attrs["borda_weights"]
        voting = ", ".join(f"{c} (×{w:.3g})" for c, w in weights.items()) or "none"
        baselines = ", ".join(f"{c}: {s}" for c, s in attrs["baselines"].items())
        items = [
            (
                "Cells are the mean over training seeds with a 95% Student-t interval (one seed: the run's own "
                "interval). — marks a missing cell; n/a a number that does not exist (e.g. a crossover outside "
                "the grid)."
            ),
            "Columns ending in “(norm)” are classification scores rescaled as on the Open LLM Leaderboard: "
            "100 × (score − baseline) / (best − baseline), at least 0; the baseline is the majority-class rate of the "
            "evaluation set (majority), 0 for MCC (mcc) or a given chance level (chance)"
            + (f". Here: {baselines}." if baselines else "."),
            "“mean <suite>” averages a suite's normalised columns and is missing when a row lacks any of them.",
            (
                f"Borda rank, within each preset: each voting column gives a point per row beaten and half per "
                f"tie; votes: {voting}. Rows missing a voting cell are not ranked (coverage counts their cells); "
                "“rank <suite>” ranks the rows that have all of that suite's cells."
            ),
            f"Pareto view: {attrs['quality']} against {attrs['speed']}, within each preset.",
        ]
        return '<ul class="note">' + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>"

    # ------------------------------------------------------------------ suite pages
    def _suite_page(self, suite: str) -> None:
        runs = [r for r in self.placed if r.manifest["suite"] == suite]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = table_from_frame(self.frame, str(self.store.root), [suite], all_metrics=True)
        links = {k: f"../rows/{f}" for k, f in self.row_files.items()}
        parts = [f"<h1>Suite: {_e(suite)}</h1>", table_html(table, "suite-table", links)]
        examples = {
            "judge": self._judge_examples, "robustness": self._robustness_examples,
        }.get(suite, self._generic_examples)(runs)
        if examples:
            parts.append(examples)
        plotted = [r for r in _newest_first(runs) if self.plots.get(r.run_id)]
        if plotted:
            parts.append("<h2>Plots</h2>")
            for r in plotted:
                parts.append(f"<h3>{self._run_label(r, 1)}</h3>{self._plots_html(r, 1)}")
        parts.append("<h2>Runs</h2>" + self._run_list(runs, 1))
        self._write(f"suites/{self.suite_files[suite]}", f"mixbench · {suite}", "\n".join(parts))

    def _run_label(self, run: RunRecord, depth: int) -> str:
        m = run.manifest
        url = _href(*[".."] * depth, "runs", f"{run.run_id}.html")
        return (f'{_e(m.get("mixer"))} / {_e(m.get("preset"))} / seed {_e(m.get("seed"))} '
                f'<span class="note">(run <a href="{url}">{_e(run.run_id)}</a>)</span>')

    def _run_list(self, runs: list[RunRecord], depth: int) -> str:
        rows = []
        for r in _newest_first(runs):
            m = r.manifest
            url = _href(*[".."] * depth, "runs", f"{r.run_id}.html")
            rows.append(
                f'<tr><td class="text"><a href="{url}">{_e(r.run_id)}</a></td><td class="text">{_e(m.get("kind", ""))}</td>'
                f'<td class="text">{_e(m.get("mixer"))}</td><td class="text">{_e(m.get("preset"))}</td>'
                f'<td>{_e(m.get("seed"))}</td><td class="text">{_e(m.get("written_at", ""))}</td></tr>'
            )
        head = "".join(f'<th class="text">{h}</th>' for h in ("run", "kind", "mixer", "preset", "seed", "written"))
        return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'

    def _judge_examples(self, runs: list[RunRecord]) -> str:
        parts = []
        ratings = [r for r in runs if r.manifest.get("kind") == "judge-rating"]
        pools: dict[tuple, list[RunRecord]] = defaultdict(list)
        for r in ratings:
            pool = r.manifest.get("pool") or {}
            pools[(str(r.manifest.get("preset")), str(r.manifest.get("seed")), json.dumps(pool, sort_keys=True))].append(r)
        if pools:
            parts.append("<h2>Judged pairs</h2>")
        for (preset, seed, _), members in sorted(pools.items()):
            seen, shown = set(), []
            for r in sorted(members, key=lambda x: str(x.manifest.get("mixer"))):
                for s in r.samples:
                    pair = (str(s.get("prompt_id")), frozenset((str(s.get("mixer")), str(s.get("opponent")))))
                    if pair not in seen:
                        seen.add(pair)
                        shown.append(s)
            judge = (members[0].manifest.get("judge") or {}).get("id", "")
            parts.append(f"<h3>preset {_e(preset)}, seed {_e(seed)} — judge {_e(judge)}: "
                         f"{min(len(shown), MAX_PAIRS)} of {len(shown)} pairs</h3>")
            for s in shown[:MAX_PAIRS]:
                parts.append(_pair_html(s))
        generations = [r for r in runs if r.manifest.get("kind") != "judge-rating" and r.samples]
        if generations:
            parts.append("<h2>Generations</h2>")
            by_pool: dict[tuple, list[RunRecord]] = defaultdict(list)
            for r in _newest_first(generations):
                info = r.manifest.get("suite_info") or {}
                by_pool[(str(r.manifest.get("preset")), str(r.manifest.get("seed")), str(info.get("generation_key")))].append(r)
            for (preset, seed, key), members in sorted(by_pool.items()):
                newest: dict[str, RunRecord] = {}
                for r in members:
                    newest.setdefault(str(r.manifest.get("mixer")), r)
                prompts: dict[str, str] = {}
                outputs: dict[str, dict[str, str]] = defaultdict(dict)
                for mixer, r in sorted(newest.items()):
                    for s in r.samples:
                        pid = str(s.get("prompt_id"))
                        prompts.setdefault(pid, str(s.get("prompt", "")))
                        outputs[pid][mixer] = str(s.get("output", ""))
                parts.append(f"<h3>preset {_e(preset)}, seed {_e(seed)}, prompts {_e(key)}</h3>")
                for pid in list(prompts)[:MAX_GENERATION_PROMPTS]:
                    rows = "".join(
                        f'<tr><th class="text">{_e(m)}</th><td class="text"><div class="gen">{_e(o)}</div></td></tr>'
                        for m, o in sorted(outputs[pid].items())
                    )
                    parts.append(f'<p><b>prompt</b></p><div class="gen">{_e(prompts[pid])}</div><table>{rows}</table>')
        return "\n".join(parts)

    def _robustness_examples(self, runs: list[RunRecord]) -> str:
        newest: dict[tuple, RunRecord] = {}
        for r in _newest_first(runs):
            newest.setdefault((str(r.manifest.get("mixer")), str(r.manifest.get("preset"))), r)
        parts = []
        for _, r in sorted(newest.items(), key=lambda item: item[0]):
            by_slice: dict[str, list[dict]] = defaultdict(list)
            for s in r.samples:
                by_slice[str(s.get("slice"))].append(s)
            if not by_slice:
                continue
            parts.append(f"<h3>{self._run_label(r, 1)}</h3>")
            rows = []
            for sl, samples in by_slice.items():
                for s in samples[:MAX_ROBUSTNESS_PER_SLICE]:
                    nums = " · ".join(
                        f"{k} {_num(s.get(k))}" for k in ("jsd_final", "top1", "spearman", "dppl") if k in s
                    )
                    edits = "; ".join(_edit_text(e) for e in s.get("edits") or [])
                    rows.append(
                        f'<tr><td class="text">{_e(sl)}<br><span class="note">{_e(s.get("kind", ""))}</span></td>'
                        f'<td class="text"><div class="gen">{_e(s.get("original", ""))}</div></td>'
                        f'<td class="text"><div class="gen">{_e(s.get("perturbed", ""))}</div>'
                        f'<span class="note">{_e(edits)}</span></td><td class="text">{_e(nums)}</td></tr>'
                    )
            head = "".join(f'<th class="text">{h}</th>' for h in ("slice", "original", "perturbed", "scores"))
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
        return ("<h2>Example pairs</h2>" + "\n".join(parts)) if parts else ""

    def _generic_examples(self, runs: list[RunRecord]) -> str:
        parts = []
        for r in _newest_first(runs):
            samples = [s for s in r.samples if s.get("kind") != "unit"]  # unit cards show those
            if not samples:
                continue
            shown = "".join(
                f'<div class="gen">{_e(json.dumps(s, ensure_ascii=False))}</div>' for s in samples[:MAX_GENERIC_SAMPLES]
            )
            parts.append(
                f"<details><summary>{self._run_label(r, 1)}: {min(len(samples), MAX_GENERIC_SAMPLES)} of "
                f"{len(samples)} samples</summary>{shown}</details>"
            )
        return ("<h2>Samples</h2>" + "\n".join(parts)) if parts else ""

    # ------------------------------------------------------------------ rows and runs
    def _row_page(self, key: tuple[str, str]) -> None:
        runs = _newest_first(self.row_runs[key])
        summaries = [provenance_summary(r.manifest) for r in runs]
        fields = [f for f in summaries[0] if any(s[f] for s in summaries)]
        differs = provenance_differences(summaries)
        head = "".join(f'<th class="text">{_e(h)}</th>' for h in ("suite", "seed", "run", "written", *fields))
        rows = []
        for r, s in zip(runs, summaries):
            m = r.manifest
            cells = "".join(
                f'<td class="text{" differs" if f in differs and s[f] else ""}">{_e(s[f])}</td>' for f in fields
            )
            rows.append(
                f'<tr><td class="text">{_e(m.get("suite"))}</td><td>{_e(m.get("seed"))}</td>'
                f'<td class="text"><a href="{_href("..", "runs", f"{r.run_id}.html")}">{_e(r.run_id)}</a></td>'
                f'<td class="text">{_e(m.get("written_at", ""))}</td>{cells}</tr>'
            )
        def newest(field: str) -> Any:  # suites copy different model fields; the newest run that has it wins
            value = next((r.manifest[field] for r in runs if r.manifest.get(field) is not None), None)
            if isinstance(value, (dict, list)):
                return json.dumps(value, ensure_ascii=False, sort_keys=True)
            return MISSING if value is None else value

        parts = [
            f"<h1>{_e(key[0])} / {_e(key[1])}</h1>",
            _kv_table([
                ("parameters", newest("parameters")), ("state floats", newest("state_floats")),
                ("training FLOPs", newest("train_flops")), ("training tokens/s", newest("train_tokens_per_s")),
                ("mixer config", newest("mixer_config")), ("train id", newest("train_id")),
                ("weights sha256", newest("weights_sha256")),
            ]),
            "<h2>Provenance of every run</h2>",
            f'<p class="note">{"Differs between runs (highlighted): " + _e(", ".join(differs)) if differs else "All runs agree on code, packages, device and kernel."}</p>',
            f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>',
        ]
        self._write(f"rows/{self.row_files[key]}", f"mixbench · {key[0]} / {key[1]}", "\n".join(parts))

    def _run_page(self, run: RunRecord) -> None:
        m = run.manifest
        metrics = "".join(
            f'<tr><td class="text">{_e(x.name)}</td><td data-sort="{_e(repr(x.value))}">{_e(_num(x.value))}</td>'
            f"<td>{_e(_num(x.ci_low))}</td><td>{_e(_num(x.ci_high))}</td><td>{_e(x.n if x.n is not None else '')}</td>"
            f'<td class="text">{_e(x.unit)}</td><td class="text">{"↑" if x.higher_is_better else "↓"}</td></tr>'
            for x in run.metrics
        )
        head = "".join(f"<th>{h}</th>" for h in ("metric", "value", "ci low", "ci high", "n", "unit", "better"))
        manifest_text = json.dumps(m, ensure_ascii=False, indent=2)
        (self.root / "runs" / f"{run.run_id}.json").write_text(manifest_text + "\n", encoding="utf-8")
        parts = [
            f"<h1>Run {_e(run.run_id)}</h1>",
            _kv_table([(k, m.get(k)) for k in ("suite", "kind", "mixer", "preset", "seed", "written_at")]),
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
    return sorted(runs, key=lambda r: str(r.manifest.get("written_at", "")), reverse=True)


def _num(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return MISSING if v is None else "n/a"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:.4g}"
    return str(v)


def _edit_text(edit: Any) -> str:
    if isinstance(edit, dict):
        return ", ".join(f"{k}={v}" for k, v in edit.items())
    return str(edit)


def _pair_html(s: dict[str, Any]) -> str:
    """One judged comparison: prompt, both continuations side by side, both verdicts and the outcome."""
    mixer, opponent = str(s.get("mixer")), str(s.get("opponent"))
    replies = "".join(
        f"<p class=\"verdict\">{_e(label)}: verdict {_e(s.get(f'verdict_{k}'))}</p><div class=\"gen\">{_e(s.get(f'reply_{k}'))}</div>"
        for label, k in ((f"{mixer} shown as A", "as_a"), (f"{mixer} shown as B", "as_b"))
    )
    consistent = "consistent" if s.get("consistent") else "inconsistent (counts as a tie)"
    return (
        f'<div class="judged"><p class="verdict"><b>prompt</b> {_e(s.get("prompt_id"))}: '
        f"outcome for {_e(mixer)}: <b>{_e(s.get('outcome'))}</b> ({_e(consistent)}; asked first {_e(s.get('asked_first'))})</p>"
        f'<div class="gen">{_e(s.get("prompt", ""))}</div><div class="pair">'
        f'<div><p class="verdict">{_e(mixer)}</p><div class="gen">{_e(s.get("output", ""))}</div></div>'
        f'<div><p class="verdict">{_e(opponent)}</p><div class="gen">{_e(s.get("opponent_output", ""))}</div></div>'
        f"</div><details><summary>judge replies</summary>{replies}</details></div>"
    )


# ---------------------------------------------------------------------------------------------- entry point


def publish_site(store: ResultsStore, out: Path) -> Path:
    """Write the static site of ``store`` into the folder ``out`` and return ``out``.

    The site is built in a temporary sibling folder and swapped in, so ``out`` always holds a complete site.
    ``out`` may not exist yet, be empty, or hold a previous mixbench site; anything else is refused.
    """
    return write_site(store, Path(out), BoardConfig())


def write_site(store: ResultsStore, out: Path, config: BoardConfig) -> Path:
    """:func:`publish_site` with a board configuration (chance levels, Pareto axes, Borda weighting)."""
    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise MixbenchError(
            f"--out {out} exists and is not a mixbench site (no {MARKER} in it); pass an empty or new folder."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex}"
    try:
        _Site(store, tmp, config).write()
        aside = None
        if out.exists():
            aside = out.parent / f".{out.name}.old-{uuid.uuid4().hex}"
            os.rename(out, aside)
        os.rename(tmp, out)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    except OSError as exc:
        raise MixbenchError(f"could not write the site into {out} ({exc.strerror or exc}); check the folder.") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
