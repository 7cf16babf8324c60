"""The site's index page and the board table it shares with the suite pages (:mod:`harness.reporting.publish`).

Why a module of its own: the index is the one page that reads the whole board (lead sentence, legend, who came out
ahead where a null won, the Pareto view, learning curves, the column list), and its board table, with the headers'
tooltips and the ‡ cells' words, is the most intricate HTML the site writes. Everything from the store reaches it
through :func:`harness.reporting.site_html.esc` and :func:`harness.reporting.site_html.href`, as on every page.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING

from harness.reporting.board_document import board_json
from harness.reporting.legend import CONTROL_MARK, STABILITY_MARK
from harness.reporting.numbers import readable, si
from harness.reporting.preamble import lead_sentence, null_words, preamble, veto_reason
from harness.reporting.render import ordered_rows, render
from harness.reporting.site_board import site_display
from harness.reporting.site_html import (
    LEAD_TITLES, breakable, column_labels, column_title, esc, href, legend_items, script_json, short_metric, table_html,
)
from harness.reporting.site_provenance import provenance_differences, provenance_summary
from harness.reporting.site_reproductions import PAGE as REPRODUCTIONS_PAGE
from harness.reporting.table import Column, Row

if TYPE_CHECKING:
    from harness.reporting.publish import _Site

#: the index's learning-curve plots, one per preset (harness/reporting/learning_curves.py)
CURVES = "curves"


def board_html(site: _Site, view: str, table_id: str, depth: int, suite: str | None = None) -> str:
    """The board of ``view`` as the site shows it (:func:`harness.reporting.site_board.site_display`): rank
    with its interval, voting columns first, a suite page in the suite's own order; a ‡ mark says in its
    tooltip who came out ahead of the null and with what p-value."""
    if site.table.empty:
        return f'<p class="note">{esc(render(site.board, "md"))}</p>'
    d, rows_sorted, _ = site_display(site.board, view, suite)
    up = [".."] * depth
    columns = {c.name: c for c in site.table.columns}
    cells, classes = [], []
    for row, line, bold in zip(rows_sorted, d.body, d.best):
        html_line, cls_line = [], []
        for key, text, b in zip(d.keys, line, bold):
            h = esc(text)
            column = columns.get(key)
            if key == "model":
                h = f'<a href="{href(*up, "rows", site.row_files[row.key])}">{h}</a>'
                if site.board.pareto.get(row.key):
                    h += ' <span class="flag" title="on the Pareto front of its preset">&#9670;</span>'
                differs = provenance_differences([provenance_summary(r) for r in row.runs])
                if differs:
                    h += f' <span class="flag" title="{esc("runs of this row differ in " + ", ".join(differs))}">&#9873;</span>'
            elif column is not None:
                h = _cell_html(site, row, column, text)
            cell = site.table.cell(row, key) if "/" in key else None
            cls = "best" if b else ("unreliable" if cell is not None and cell.unreliable else "")
            if key in d.text_columns:
                cls = (cls + " text").strip()
            html_line.append(h)
            cls_line.append(cls)
        cells.append(html_line)
        classes.append(cls_line)
    header_html, titles = _headers(site, d.keys, d.header, with_suite=view != "suite")
    return table_html(d.header, cells, table_id, raw=d.raw, classes=classes, keys=d.keys,
                      text_keys=d.text_columns, header_html=header_html, titles=titles,
                      sticky_keys={"model"}, table_class="board", tall=True)


def _cell_html(site: _Site, row: Row, column: Column, text: str) -> str:
    """A metric cell: the value on its first line, its difference from the reference control on a second
    (a narrow column), the ‡ mark with the direction and p-value of its comparison in a tooltip."""
    main, sep, vs = text.partition(" (vs ")
    h = esc(main)
    if CONTROL_MARK in main:
        words = null_words(site.board, row, column)
        h = h.replace(CONTROL_MARK, f'<abbr class="mark" title="{esc(words or "not better than its null")}">'
                                    f"{CONTROL_MARK}</abbr>", 1)
    if sep:
        h += f'<span class="vs">vs {esc(vs.removesuffix(")"))}</span>'
    return h


def _headers(site: _Site, keys: list[str], header: list[str], with_suite: bool) -> tuple[list[str], list[str]]:
    """Short headers for the board's metric columns (suite above, shortened metric and direction below), the
    full column name, direction, unit and config in their tooltips; the other headers as they are."""
    columns = {c.name: c for c in site.table.columns}
    labels = column_labels(list(site.table.columns))
    html_heads, titles = [], []
    for key, text in zip(keys, header):
        c = columns.get(key)
        if c is None:
            html_heads.append(esc(text))
            titles.append(LEAD_TITLES.get(key, ""))
            continue
        suite = c.suite + (f" [{short_metric(c.config, 14)}]" if c.config else "")
        votes = (v := site.board.verdicts.get(c.name)) is not None and v.votes
        lines = [breakable(suite)] if with_suite or c.config else []
        above = f'<span class="suite">{" · ".join([*lines, *(["votes"] if votes else [])])}</span>' \
            if lines or votes else ""
        mark = STABILITY_MARK if c.name in site.board.unsettled else ""  # docs/rank_stability.md
        html_heads.append(f'{above}{breakable(labels[c.name])}{mark} {"↑" if c.higher_is_better else "↓"}')
        titles.append(column_title(c) + ("; votes in the rank" if votes else "")
                      + (" (its ordering changed between half the largest token budget and "
                         "the largest: see the legend)" if mark else ""))
    return html_heads, titles


def columns_html(site: _Site, columns: list[Column], depth: int) -> str:
    """The full name of every metric column with what the board's header shortens: direction, unit, role, config,
    and whether it votes (and why not)."""
    labels = column_labels(list(site.table.columns))
    lines = []
    for c in columns:
        v = site.board.verdicts.get(c.name)
        votes = (f"yes (weight {readable(v.weight, 3)})" if v.votes else f"no: {veto_reason(site.board, c)}") \
            if v is not None else ""
        lines.append([
            esc(c.suite), esc(labels[c.name]), f"<div><code>{esc(c.name)}</code></div>",
            f"<div>{esc(c.config or 'canonical')}</div>",
            "higher" if c.higher_is_better else "lower", esc(c.unit or ""), esc(c.role),
            f'<div>{esc(site.paths.text(votes))}</div>',
        ])
    classes = [["text"] * 6 + ["text", "text wrap"]] * len(lines)
    classes = [[*cls[:2], "text wrap", "text wrap", *cls[4:]] for cls in classes]
    header = ["suite", "header", "full name", "config", "better", "unit", "role", "votes"]
    return table_html(header, lines, "", sortable=True, classes=classes, keys=header, text_keys=set(header))


def write_index(site: _Site) -> None:
    board = site.board
    first = board.headline()
    plot = _pareto_plot(site)
    pareto = (
        "<h2>Quality against measured speed</h2>"
        f'<p class="note">{esc(board.quality_name)} against {esc(_speed_label(site))}, per preset. Red: on the '
        "Pareto front (no other model of the preset is at least as good on both axes and better on one); "
        "grey: dominated; the red line joins the front.</p>"
        f'<div class="plots"><img class="wide" src="pareto.png" alt="{esc(board.quality_name)} against '
        f'{esc(_speed_label(site))}"></div>'
    ) if plot else (
        "<h2>Quality against measured speed</h2>"
        '<p class="note">No Pareto view: this board has no interleaved speed measurement (a headline speed '
        "column of a suite such as throughput), and training tokens/s, measured in separate runs on whatever "
        "machine each ran, are not comparable.</p>"
    ) if not site.table.empty else ""
    lead = lead_sentence(board)
    parts = [
        "<h1>mixbench leaderboard</h1>",
        f'<p class="lead{" warning" if not board.voting else ""}" id="lead">{esc(site.paths.text(lead))}</p>',
        "".join(f'<p class="note preamble">{esc(line)}</p>' for line in preamble(board) if line != first),
        f'<p class="note">{len(site.runs)} runs of {len(site.table.rows)} models (results store: '
        f"<code>{esc(site.paths.store_name)}</code>). Click a column header to sort, hover over it for the "
        "column's full name; click a model for its loss curves and the provenance of its runs "
        "(&#9873;: its runs differ in code, packages, device or kernel; &#9670;: on the Pareto front). "
        'The <a href="#columns">column list</a> and <a href="#legend">legend</a> are below the board.</p>',
        board_html(site, "full", "board", 0),
    ]
    if not site.table.empty:
        parts += [
            '<h2 id="legend">What the marks mean</h2>',
            '<dl class="legend">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(site.paths.text(v))}</dd>"
                                            for k, v in legend_items(board, plot)) + "</dl>",
            _directions_html(site),
            pareto,
            _learning_curves(site),
            '<h2 id="columns">Columns</h2>',
            '<p class="note">The board\'s headers shorten the metric names; here is each column in full, with '
            "whether it votes, and why not.</p>",
            columns_html(site, list(site.table.columns), 0),
        ]
    parts.append("<h2>Suites</h2><ul>" + "".join(
        f'<li><a href="{href("suites", f)}">{esc(s)}</a> ({sum(r.manifest.suite == s for r in site.runs)} runs)</li>'
        for s, f in site.suite_files.items()
    ) + "</ul>")
    if site.reproductions or site.reproduction_problems:
        verdicts = defaultdict(int)
        for record in site.reproductions:
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
    site.write_page("index.html", "mixbench leaderboard", "\n".join(parts))


def _directions_html(site: _Site) -> str:
    """Each vetoed column and each ‡ cell with the direction of its comparison in words and its p-value
    (``control better, p = 0.002``; ``mixer better but not significant (p = 0.08)``): a sign and a p-value
    alone leave the reader to work out who came out ahead."""
    board = site.board
    vetoed = [(c, veto_reason(board, c)) for c in site.table.columns
              if (v := board.verdicts.get(c.name)) is not None and not v.votes and c.role == "score"
              and v.reason.startswith(("no mixer beats", "every mixer cell"))]
    marked = defaultdict(list)
    for row in ordered_rows(board):
        for c in site.table.columns:
            if not row.control and site.table.cell(row, c) is not None and board.not_above(row, c):
                marked[c.name].append(f"{row.label}: {null_words(board, row, c) or 'not better than its null'}")
    if not vetoed and not marked:
        return ""
    items = "".join(f"<dt><code>{esc(c.name)}</code> does not vote</dt><dd>{esc(site.paths.text(why))}</dd>"
                    for c, why in vetoed)
    items += "".join(f"<dt>{CONTROL_MARK} in <code>{esc(name)}</code></dt><dd>{esc('; '.join(lines))}</dd>"
                     for name, lines in marked.items())
    return ('<h3 id="directions">Who came out ahead where a null won</h3>'
            '<p class="note">Each column a control or null model vetoed, and each cell marked '
            f"{CONTROL_MARK}, with the direction of the difference in words and its p-value (paired test; "
            "Holm's correction where the board applies it).</p>"
            f'<dl class="legend directions">{items}</dl>')


def _learning_curves(site: _Site) -> str:
    """curves/preset-<i>.png: every row's learning curve of a preset on one plot, against training FLOPs."""
    from harness.reporting.learning_curves import curves_by_preset, draw_curves

    figures = []
    for i, (preset, curves) in enumerate(curves_by_preset(list(site.table.rows)).items()):
        rel = f"{CURVES}/preset-{i}.png"
        if draw_curves(preset, curves, site.root / rel):
            figures.append(f'<img class="wide" src="{esc(rel)}" alt="learning curves of preset {esc(preset)}">')
    if not figures:
        return ""
    return ("<h2>Learning curves</h2>"
            '<p class="note">Held-out loss on a few fixed validation windows at log-spaced steps of training, '
            "against training FLOPs (docs/scaling.md); controls dashed. An ordering that is still changing at "
            "the right edge is a property of the budget, not of the mixers.</p>"
            f'<div class="plots">{"".join(figures)}</div>')


def _speed_label(site: _Site) -> str:
    """The Pareto view's speed axis: the speed column (its inverse when lower is better), higher = faster."""
    board = site.board
    name = board.speed_name
    if name and not site.table.column(name).higher_is_better:
        name = f"1 / {name}"
    return f"{name} (interleaved, higher = faster)"


def _pareto_plot(site: _Site) -> bool:
    board = site.board
    if not board.speed_name:  # no interleaved speed measurement: nothing to plot (the index says so)
        return False
    by_preset: dict[str, list[Row]] = defaultdict(list)
    for row in site.table.rows:
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
                site.table.cell(row, board.quality_name).value
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
        ax.set_xlabel(f"{_speed_label(site)}{', log scale' if logscale else ''}", parse_math=False)
        ax.set_ylabel(board.quality_name, parse_math=False)
        ax.set_title(f"preset {preset}", loc="right", parse_math=False)
        ax.grid(alpha=0.3)
    # above the first panel, beside its title: never over a point
    axes.flat[0].legend(fontsize=9, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False,
                        borderaxespad=0.2)
    save(fig, site.root / "pareto.png", dpi=100)
    return True
