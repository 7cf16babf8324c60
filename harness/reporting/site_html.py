"""The published site's building blocks: escaping, page frame, tables that scroll on their own, the board's
short headers and its one legend, formatted cells (docs/site.md). Pages are assembled by :mod:`harness.reporting.publish`;
the style sheet and the sorting script are package files in ``harness/reporting/site_assets/``."""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
from collections.abc import Iterable
from importlib import resources
from typing import Any
from urllib.parse import quote

from harness.reporting.board import Board
from harness.reporting.numbers import MISSING, readable
from harness.reporting.legend import CONTROL_MARK, STABILITY_MARK, legend
from harness.store.results import json_safe
from harness.reporting.table import Column

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


# ---------------------------------------------------------------------------------------------- escaping


def esc(value: Any) -> str:
    """Text for HTML element content and quoted attribute values."""
    return html.escape(str(value), quote=True)


def href(*parts: str) -> str:
    """A relative URL from path parts, each percent-encoded (``/``, ``?``, ``#`` and ``:`` included), escaped."""
    return esc("/".join(quote(p, safe="") if p not in ("..", ".") else p for p in parts))


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


def file_name(name: str) -> str:
    """A plot's file name reduced to safe characters, its extension kept (lower-cased)."""
    stem, ext = os.path.splitext(os.path.basename(name))
    return (re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._") or "plot")[:80] + ext.lower()


# ---------------------------------------------------------------------------------------------- page frame

#: the site's style sheet and sorting script, package files (``harness/reporting/site_assets/``) copied into ``assets/``
ASSETS = ("site.css", "site.js")


def asset_text(name: str) -> str:
    return resources.files("harness.reporting").joinpath("site_assets", name).read_text(encoding="utf-8")


def page(title: str, body: str, depth: int, generated: str) -> str:
    up = "../" * depth
    nav = (
        f'<a href="{up}index.html">leaderboard</a>'
        f'<span class="stamp">generated {esc(generated)}</span>'
    )
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title>"
        f'<link rel="stylesheet" href="{up}assets/site.css"><script src="{up}assets/site.js"></script>'
        f"</head><body><header>{nav}</header><main>\n{body}\n</main></body></html>\n"
    )


# ---------------------------------------------------------------------------------------------- tables


def table_html(header: list[str], rows: list[list[str]], table_id: str = "", sortable: bool = True,
               raw: list[list[Any]] | None = None, classes: list[list[str]] | None = None,
               keys: list[str] | None = None, text_keys: set[str] | frozenset[str] = frozenset(),
               header_html: list[str] | None = None, titles: list[str] | None = None,
               sticky_keys: set[str] | frozenset[str] = frozenset(), table_class: str = "", tall: bool = False) -> str:
    """An HTML table from already-escaped cell HTML; ``raw`` numbers go to ``data-sort`` (missing sorts last).

    ``header`` is plain text (escaped here) unless ``header_html`` gives the headers as HTML; ``titles`` are their
    tooltips. Cells of ``sticky_keys`` stay in view when the table is scrolled sideways. The table comes inside a
    :func:`scroll` container, so a wide one scrolls on its own and the page never does."""
    head = []
    for i, h in enumerate(header):
        key = keys[i] if keys else h
        cls = " ".join(c for c in ("text" if keys and key in text_keys else "",
                                   "stick" if key in sticky_keys else "") if c)
        title = f' title="{esc(titles[i])}"' if titles and titles[i] else ""
        label = header_html[i] if header_html is not None else esc(h)
        head.append(f'<th data-key="{esc(key)}"{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}{title}'
                    f' scope="col">{label}</th>')
    body = []
    for i, line in enumerate(rows):
        cells = []
        for j, text in enumerate(line):
            n = raw[i][j] if raw is not None else None
            attrs = f' data-sort="{esc(repr(float(n)))}"' if isinstance(n, (int, float)) and not isinstance(n, bool) \
                and math.isfinite(float(n)) else ""
            sticky = "stick" if keys and keys[j] in sticky_keys else ""
            cls = " ".join(c for c in ((classes[i][j] if classes else ""), "missing" if text == MISSING else "",
                                       sticky) if c)
            cells.append(f'<td{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}{attrs}>{text}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    ident = f' id="{esc(table_id)}"' if table_id else ""
    kinds = " ".join(c for c in ("sortable" if sortable else "", table_class) if c)
    kind = f' class="{kinds}"' if kinds else ""
    return scroll(f"<table{ident}{kind}><thead><tr>{''.join(head)}</tr></thead><tbody>{''.join(body)}</tbody></table>",
                  tall)


def scroll(table: str, tall: bool = False) -> str:
    """``table`` in a container that scrolls sideways (and, ``tall``, down with its header kept in view): a wide
    table never makes the whole page scroll, and its last column stays reachable."""
    return f'<div class="scroll{" tall" if tall else ""}">{table}</div>'


def kv_table(rows: Iterable[tuple[str, Any]]) -> str:
    body = "".join(f'<tr><th class="text" scope="row">{esc(k)}</th><td class="text kv">{esc(value_text(v))}</td></tr>'
                   for k, v in rows)
    return scroll(f'<table class="kv">{body}</table>')


def value_text(v: Any) -> str:
    """A value of a key-value table or a suite's table: numbers formatted (:func:`harness.reporting.render.readable`), None as missing."""
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return readable(v)
    return str(v)





def cell_text(v: Any) -> str:
    """A plain cell a suite hands :meth:`Kit.table`: floats formatted, None missing, the rest as it is."""
    return readable(v) if v is None or isinstance(v, float) else str(v)



def timings_text(timings: dict[str, Any]) -> str:
    """``train 27.9 s, eval 5.02 s``: a manifest's timings (seconds, their names ending in ``_s``), formatted."""
    return ", ".join(f"{k.removesuffix('_s')} {readable(v, 3)} s" if isinstance(v, (int, float)) and not isinstance(v, bool)
                     else f"{k} {v if v is not None else MISSING}" for k, v in timings.items())


LEGEND = (
    ("rank", "Borda rank within the preset over the voting columns, every suite weighing the same; in brackets "
             "its {level} bootstrap interval (voting columns and, within each, the shared items resampled). "
             "= marks a row whose rank interval overlaps another's: their order is not settled. – marks a row "
             "that lacks a voting suite (not ranked; the list below says what it lacks)."),
    ("votes (above a header)", "a voting column: the rank comes from these columns, so they stand first, right "
                               "after the model and its parameters."),
    ("a, b, ... after a value", "tie groups of a voting column: group a (highlighted) holds the best row and "
                                "every row a paired test on shared items cannot tell from it (Holm-corrected, "
                                "family-wise alpha {alpha}); group b repeats that on the rest, and so on."),
    ("value [low, high]", "mean over seeds with its interval: the suite's own (bootstrap, Wilson, normal, range "
                          "— the run page says which) with one seed, a Student-t interval over seeds otherwise."),
    ("†  greyed", "unreliable: the suite found this number measures nothing (e.g. a judge at chance on its "
                  "gold canaries); shown, never voting. The column list below gives the reason."),
    ("°", "the point estimate lies outside its interval (a skewed statistic); reported as it is, never widened."),
    ("control", "a control mixer (none: no token mixing, a context-free model; mean: the uniform average of the "
                "prefix), trained and scored like the mixers and never ranked. A column whose best mixer is not "
                "better than every control does not vote: what it measures does not come from mixing. Each "
                "mixer cell's difference from the controls, with its interval, is in board.json and board.csv."),
    (CONTROL_MARK, "a mixer's value that is not better than its null: the reference control's ({refs}; paired "
                   "test on shared items with the training-seed spread, Holm-corrected over the column's mixers, "
                   "alpha {alpha}), or, where controls have no value, its own untrained model's: at this budget, in "
                   "this column, the mixer has shown nothing a model without context (or without training) could "
                   "not do. Such a cell takes no Borda points."),
    ("check", "the conformance gate's verdict (mixbench check) for the row's mixer and config: ok (passed), or skip "
              "(scored with --skip-gate, for debugging). A mixer that fails the gate is never scored. Not the "
              "backbone's residual gates, which the lines above the board name."),
    ("◆ Pareto", "on the Pareto front of quality against measured speed in its preset (the red points of the plot "
                 "below): no other model of the preset is at least as good on both axes and better on one."),
    ("⚑", "the runs behind this row differ in code, packages, device, kernel or gate (its page shows which)."),
    ("— / n/a", "— a missing cell (the suite did not run for this row); n/a a number that does not exist "
                "(e.g. a crossover outside the measured grid)."),
)
#: lines of :func:`harness.reporting.render.legend` that :data:`LEGEND` already says (in the site's words), by their lead
_LEGEND_SAID = {"rank", "letters", "values", "check", "control", "voting columns"}


def legend_items(board: Board, pareto: bool) -> list[tuple[str, str]]:
    """One list of what the marks mean and what this board's notes say, each thing once: the site's own words for
    the marks (:data:`LEGEND`), then the board's lines (:func:`harness.reporting.render.legend`) that :data:`LEGEND` does not
    already say. Which columns vote, and why the others do not, is in the column list instead."""
    cfg = board.config
    refs = " or ".join(board.reference_controls) or "the controls"
    items = []
    for term, text in LEGEND:
        if term in ("control", CONTROL_MARK) and not board.has_controls:
            continue
        if term == "◆ Pareto" and not pareto:
            continue
        items.append((term, text.format(level=f"{cfg.rank_level:.0%}", alpha=f"{cfg.alpha:g}", refs=refs)))
    names = {c.name for c in board.table.columns}
    for line in legend(board, list(board.table.columns)):
        lead, sep, rest = line.partition(": ")
        if sep and lead in _LEGEND_SAID:
            continue
        if sep and lead.endswith(" does not vote") and lead.removesuffix(" does not vote") in names:
            continue  # the column list gives the reason
        if sep and lead == "seeds":  # the site writes seed ids, not a count with ids in brackets
            items.append(("seeds", "the training seeds the row averages, by id: seed 0 is one seed (number 0), "
                                   "seeds 0, 1, 2 are three."))
        elif sep and (lead in ("state", STABILITY_MARK) or lead.startswith(f"{STABILITY_MARK} ")
                    or lead.startswith("rank stability of ")):  # docs/rank_stability.md
            items.append((lead, rest))
        elif line.startswith("no control rows"):
            items.append(("controls", line))
        elif " is not ranked: " in line:
            items.append(("not ranked", line))
        else:
            items.append(("note", line))
    return items


#: tooltips of the board's leading columns
LEAD_TITLES = {
    "rank": "Borda rank within the preset, its bootstrap interval in brackets (= shared with another row)",
    "order": "the row's place in this suite alone (its tie group in brackets); the leaderboard ranks over every suite",
    "model": "the model (mixer and config); its page has the loss curves and the provenance of its runs",
    "preset": "the model size and training recipe",
    "params": "trainable parameters",
    "state": "floats of decode state per sequence after the training context",
    "check": "the conformance gate's verdict (mixbench check): ok passed, skip scored with --skip-gate",
    "seeds": "the training seeds the row averages, by id",
}


def column_title(c: Column) -> str:
    """A metric column's tooltip: its full name, direction, unit and config."""
    extra = [f"{'higher' if c.higher_is_better else 'lower'} is better"]
    if c.unit:
        extra.append(f"unit: {c.unit}")
    if c.config:
        extra.append(f"config: {c.config}")
    return f"{c.name} ({'; '.join(extra)})"


def short_metric(metric: str, width: int = 18) -> str:
    """A column's metric name cut to about ``width`` characters for a table header: the first and last parts of a
    ``/``-separated name kept whole where they fit, the middle cut (``mqar/seq64_k…/acc``)."""
    if len(metric) <= width:
        return metric
    parts = metric.split("/")
    last = parts[-1] if len(parts) > 1 and len(parts[-1]) < width // 2 else ""
    head = metric[: len(metric) - len(last) - 1] if last else metric
    room = width - len(last) - (2 if last else 1)
    return head[: max(room, 3)] + "…" + (f"/{last}" if last else "")


def column_labels(columns: list[Column], width: int = 18) -> dict[str, str]:
    """:func:`short_metric` of each column, longer where two columns of a suite and config would read the same."""
    labels: dict[str, str] = {}
    for c in columns:
        w = width
        taken = {labels[o.name] for o in columns if o.name in labels and o.suite == c.suite and o.config == c.config}
        while (label := short_metric(c.metric, w)) in taken and w < len(c.metric):
            w += 4
        labels[c.name] = label
    return labels


def breakable(text: str) -> str:
    """Escaped ``text`` that may wrap after ``/``, ``_`` and ``-`` (a narrow header grows down, not sideways)."""
    return re.sub(r"([/_-])", r"\1<wbr>", esc(text))



