"""The board as text: compact, full and per-suite views in md, csv, json, html and latex (docs/ARCHITECTURE.md,
"The board").

* **compact** (the default): rank with its interval, model, parameters, decode state, gate, and one headline
  per suite (its first headline metric) as ``value ±half-width`` with the tie group; it fits 120 columns for
  the quickstart's board. ``±`` is half the interval's width (the interval may be asymmetric: the full view
  shows its bounds).
* **full** (``--all``): every headline column with its interval and group.
* **suite** (``--suite S``): every metric of one suite.

A number is never printed without what it means: the legend under the md/text board says what the rank
interval, the groups and the marks are, and which columns vote.
"""

from __future__ import annotations

import html
import io
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from harness.errors import MixbenchError
from harness.model.recipes import OVERRIDDEN, UNTUNED
from harness.reporting.board_document import board_json, board_records
from harness.reporting.legend import (
    CONTROL_MARK, OUTSIDE_MARK, STABILITY_MARK, UNRELIABLE_MARK, legend, state_contexts,
)
from harness.reporting.numbers import MISSING, compact_number, decimals, fmt, si
from harness.reporting.preamble import UNTUNED_MARK, preamble
from harness.reporting.table import Cell, Column, Row

if TYPE_CHECKING:
    from harness.reporting.board import Board

FORMATS = ("md", "csv", "json", "html", "latex")
VIEWS = ("compact", "full", "suite")


#: an interval is shown by its bounds instead of ``±`` when one side is more than this many times the other
SKEW = 2.0


def skewed(value: float, low: float, high: float) -> bool:
    """Whether ``value ± half the width`` would misstate the interval: one side much longer than the other
    (:data:`SKEW`), or the symmetric reading crossing zero where the interval does not."""
    below, above = value - low, high - value
    if below < 0 or above < 0:
        return False  # the point outside its interval is marked on its own (OUTSIDE_MARK)
    half = (high - low) / 2
    crosses = (low >= 0 > value - half) or (high <= 0 < value + half)
    return crosses or max(below, above) > SKEW * max(min(below, above), 1e-300)


def compact_cell(cell: Cell | None, significant: int = 3) -> str:
    """``472±82``, ``.312±.04``: value to ``significant`` digits and half the interval's width to 1-2; a skewed
    interval (:func:`skewed`) as ``7.1k[4.1k,23k]``, its bounds to 2 digits."""
    if cell is None:
        return MISSING
    if math.isnan(cell.value):
        return "n/a"
    text = compact_number(cell.value, significant)
    iv = cell.interval
    if iv is not None and iv.finite and skewed(cell.value, iv.low, iv.high):
        text += f"[{compact_number(iv.low, 2)},{compact_number(iv.high, 2)}]"
    elif iv is not None and iv.finite:
        text += "±" + compact_number(iv.half_width, 2 if iv.half_width >= 1 else 1)
    if cell.outside_interval:
        text += OUTSIDE_MARK
    if cell.unreliable:
        text += UNRELIABLE_MARK
    return text


def abbreviate(name: str, width: int = 8) -> str:
    return name if len(name) <= width else name[: width - 1] + "."


def cell_text(cell: Cell | None, compact: bool = False, pm: str = "±") -> str:
    """``12.34 [12.10, 12.90]`` (full) or ``12.3 ±0.4`` (compact); marks: † unreliable, ° point outside its
    interval; ``n/a`` for a number that does not exist (a crossover outside the grid)."""
    if cell is None:
        return MISSING
    if math.isnan(cell.value):
        return "n/a"
    significant = 3 if compact else 4
    digits = decimals(cell.value, significant)
    text = fmt(cell.value, significant, digits)
    iv = cell.interval
    if iv is not None and iv.finite:
        if compact and skewed(cell.value, iv.low, iv.high):
            text += f" [{fmt(iv.low, 2)}, {fmt(iv.high, 2)}]"
        elif compact:
            text += f" {pm}{fmt(iv.half_width, 2, None if digits is None else min(digits + 1, max(digits, 0) + 1))}"
        else:
            text += f" [{fmt(iv.low, significant, digits)}, {fmt(iv.high, significant, digits)}]"
    if cell.outside_interval:
        text += OUTSIDE_MARK
    if cell.unreliable:
        text += UNRELIABLE_MARK
    return text


# ---------------------------------------------------------------------------------------------- display model


@dataclass
class Display:
    """Header and body of a view, plus what each cell is (for bold, sorting and JSON)."""

    keys: list[str]  # column ids
    header: list[str]
    body: list[list[str]]
    raw: list[list[Any]]  # a number to sort by, or None
    best: list[list[bool]]  # in the top tie group of a voting column
    legend: list[str]
    text_columns: set[str]


def rank_text(board: Board, row: Row, always_interval: bool = False) -> str:
    """``1``, ``=2 (1–3)``: the rank, its bootstrap interval where it is wider than one place (``always_interval``:
    also where not, as the site shows it), ``=`` where it overlaps another row's."""
    if row.control:
        return "control"
    if row.external:
        return "external"
    r = board.rank.get(row.key)
    if r is None:
        return "–" if row.key in board.unranked else MISSING
    lo, hi = board.rank_interval.get(row.key) or (r, r)
    tie = "=" if board.tied.get(row.key) else ""
    return f"{tie}{r} ({lo}–{hi})" if lo != hi or always_interval else f"{tie}{r}"


def ordered_rows(board: Board) -> list[Row]:
    """Rows as every view shows them: per preset, ranked rows by rank, then unranked ones, then the controls; the
    external models last."""
    return sorted(board.table.rows, key=lambda r: (r.external, r.preset, r.control, board.rank.get(r.key) is None,
                                                   board.rank.get(r.key) or 0, r.label))


def _headline_columns(board: Board) -> list[Column]:
    """One column per suite on the board, under the config its columns vote in
    (:meth:`harness.reporting.table.Table.shown_configs`): its first voting column, or its first headline when
    none votes, so the compact view shows the columns its ranks come from and never a non-voting sibling."""
    out: dict[str, Column] = {}
    shown = board.table.shown_configs()
    for c in board.table.columns:
        if c.config != shown[c.suite] or not c.headline:
            continue
        votes = (v := board.verdicts.get(c.name)) is not None and v.votes
        current = out.get(c.suite)
        if current is None or (votes and not board.verdicts[current.name].votes):
            out[c.suite] = c
    return list(out.values())


#: the compact view's width bound in characters (a terminal, a README code block)
COMPACT_WIDTH = 120


def display(board: Board, view: str = "compact", suite: str | None = None, style: str = "md") -> Display:
    """The rows and columns of ``view``. The compact view is made to fit :data:`COMPACT_WIDTH`: while its markdown
    is wider, the widest column is shown to two significant digits instead of three; then columns are left out,
    the legend naming them: state, params, the suites that do not vote (right to left), then those that do. The
    full views keep every digit and column."""
    if view != "compact":
        return _display(board, view, suite, style)
    significant: dict[str, int] = {}
    omitted: list[str] = []
    while True:
        d = _display(board, view, suite, style, significant, omitted)
        if compact_width(d) <= COMPACT_WIDTH:
            break
        values = [j for j, k in enumerate(d.keys) if k not in d.text_columns and k not in ("params", "state")
                  and significant.get(k, 3) > 2]
        if values:
            widest = max(values, key=lambda j: max(len(r[j]) for r in d.body) if d.body else 0)
            significant[d.keys[widest]] = 2
            continue
        suites = [k for k in d.keys if k not in d.text_columns and k not in ("params", "state")]
        silent = [k for k in suites if not (board.verdicts.get(k) and board.verdicts[k].votes)]
        order = [k for k in ("state",) if k in d.keys] + silent[::-1] + [k for k in suites[::-1] if k not in silent]
        if not order or len(suites) <= 1 and order == suites:
            break  # as narrow as it gets
        omitted.append(order[0])
    if omitted:
        d.legend.append(f"left out to fit {COMPACT_WIDTH} columns: {', '.join(omitted)} (`--all` shows them)")
    return d


def compact_width(d: Display) -> int:
    """Characters of the widest line of the compact markdown table of ``d``."""
    cells = [d.header, *d.body]
    return 1 + sum(max(len(_escape_md(line[j])) for line in cells) + 1 for j in range(len(d.header)))


def _display(board: Board, view: str, suite: str | None, style: str,
             significant: dict[str, int] | None = None, omitted: list[str] | tuple = ()) -> Display:
    significant = significant or {}
    if view not in VIEWS:
        raise MixbenchError(f"unknown leaderboard view '{view}'; use one of {', '.join(VIEWS)}.")
    table = board.table
    if view == "compact":
        columns = [c for c in _headline_columns(board) if c.name not in omitted]
    elif view == "suite":
        columns = [c for c in table.columns if c.suite == suite]
        if not columns:
            have = sorted({c.suite for c in table.columns})
            raise MixbenchError(f"no results for suite '{suite}' on this board; suites with results: "
                                f"{', '.join(have) or 'none'}.")
    else:
        columns = list(table.columns)
    presets = {r.preset for r in table.rows}
    lead = [("rank", "rank"), ("model", "model")]
    if len(presets) > 1:
        lead.append(("preset", "preset"))
    lead += [(k, _state_header(board) if k == "state" else k) for k in ("params", "state") if k not in omitted]
    lead.append(("check", "check"))
    if view != "compact":
        # no training tokens/s: numbers of separate runs on whatever machine each ran (the model pages keep them)
        lead.append(("seeds", "seeds"))
    up, down = ("↑", "↓") if style != "latex" else (r"$\uparrow$", r"$\downarrow$")
    header = [h for _, h in lead]
    unsettled = board.unsettled
    for c in columns:  # compact: the suite, abbreviated; the legend names the metric and its direction
        mark = STABILITY_MARK if c.name in unsettled else ""
        header.append(abbreviate(c.suite) + mark if view == "compact"
                      else f"{c.name}{mark} {up if c.higher_is_better else down}")
    keys = [k for k, _ in lead] + [c.name for c in columns]
    body, raw, best = [], [], []
    ordered = ordered_rows(board)
    for row in ordered:
        values = {
            "rank": (rank_text(board, row), board.rank.get(row.key)),
            "model": (row.label + (UNTUNED_MARK if row.recipe in (UNTUNED, OVERRIDDEN) else ""), None),
            "preset": (row.preset, None),
            "params": (si(row.parameters), row.parameters),
            "state": (si(row.state_floats), row.state_floats),
            "check": (GATE_LABELS.get(row.gate, row.gate or MISSING), None),
            "seeds": (f"{len(row.seeds)} ({','.join(map(str, row.seeds))})" if row.seeds else MISSING,
                      len(row.seeds) or None),
        }
        line, nums, bold = [], [], []
        for k, _ in lead:
            line.append(values[k][0])
            nums.append(values[k][1])
            bold.append(False)
        for c in columns:
            cell = table.cell(row, c)
            verdict = board.verdicts.get(c.name)
            group = board.group(row, c) if verdict is not None and verdict.votes else None
            text = compact_cell(cell, significant.get(c.name, 3)) if view == "compact" else cell_text(cell)
            if cell is not None and board.not_above(row, c):
                text += CONTROL_MARK
            if group is not None and cell is not None:
                text += group if view == "compact" else f" {group}"
            if view != "compact" and cell is not None:
                text += _vs_reference_text(board, row, c)
            line.append(text)
            nums.append(None if cell is None or math.isnan(cell.value) else cell.value)
            bold.append(group == "a")
        body.append(line)
        raw.append(nums)
        best.append(bold)
    notes = legend(board, columns)
    if view == "compact":
        named = "; ".join(f"{abbreviate(c.suite)} = {c.name} ({'higher' if c.higher_is_better else 'lower'} is better)"
                          for c in columns)
        notes.insert(0, f"columns: {named}; values: value±half the interval's width ([low,high] when skewed), then the tie group")
    return Display(keys, header, body, raw, best, notes, {"model", "preset", "check", "seeds", "rank"})


#: the gate's verdicts as every view prints them (the legend says what they mean)
GATE_LABELS = {"passed": "ok", "skipped": "skip", "model-checks": "model"}


def _state_header(board: Board) -> str:
    contexts = state_contexts(board)
    return f"state@{contexts[0]}" if len(contexts) == 1 else "state"


def _vs_reference_text(board: Board, row: Row, column: Column) -> str:
    """`` (vs none -0.40 [-0.42, -0.37])``: the cell's difference from each reference control (full views)."""
    parts = []
    for comp in board.vs_controls.get((row.key, column.name), []):
        if comp.label not in board.reference_controls or math.isnan(comp.difference.difference):
            continue
        d = comp.difference
        iv = "" if d.interval is None else f" [{fmt(d.interval.low, 2)}, {fmt(d.interval.high, 2)}]"
        parts.append(f"vs {comp.label} {d.difference:+.3g}{iv}")
    return f" ({'; '.join(parts)})" if parts else ""


# ---------------------------------------------------------------------------------------------- formats


def _escape_md(s: str, cell: bool = True) -> str:
    """Text for a Markdown table cell (``cell``) or line: pipes and backslashes escaped, and ``&`` and ``<`` as HTML
    entities, since Markdown renderers pass HTML through (a model named ``<img onerror=...>`` would run wherever the
    site's leaderboard.md or ``mixbench leaderboard``'s table is rendered); a cell's ``>`` too, while a line keeps
    it (alone it opens no tag, and the legend orders models with it: ``a > b``)."""
    s = s.replace("&", "&amp;").replace("<", "&lt;")
    s = s.replace(">", "&gt;") if cell else s
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


#: the public name of :func:`_escape_md`, for other writers of Markdown from the store's text (the model card)
escape_md = _escape_md


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


def _render_md(board: Board, d: Display, compact: bool = False) -> str:
    """Markdown; the compact view pads cells without the spaces around pipes (valid, and 120 columns fit eight
    suites), and marks the top tie group by its letter alone (bold would cost four characters a cell)."""
    rows = [[("**" + _escape_md(t) + "**") if b and not compact else _escape_md(t) for t, b in zip(line, bold)]
            for line, bold in zip(d.body, d.best)]
    header = [_escape_md(h) for h in d.header]
    if compact:
        widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(header)]
        right = [k not in d.text_columns for k in d.keys]

        def line(cells: list[str]) -> str:
            return "|" + "|".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)) + "|"

        rule = "|" + "|".join(("-" * (w - 1) + ":") if r else (":" + "-" * (w - 1)) for w, r in zip(widths, right)) + "|"
        text = "\n".join([line(header), rule, *(line(r) for r in rows)])
    else:
        text = pd.DataFrame(rows, columns=header).to_markdown(index=False, disable_numparse=True)
    first = board.headline()
    lead = "".join(textwrap.fill(f"**{_escape_md(line, False)}**" if line == first else _escape_md(line, False),
                                 COMPACT_WIDTH, break_on_hyphens=False, break_long_words=False) + "\n"
                   for line in preamble(board))
    lead += "\n" if lead else ""
    notes = [textwrap.fill(_escape_md(note, False), COMPACT_WIDTH, initial_indent="- ", subsequent_indent="  ",
                           break_on_hyphens=False, break_long_words=False) for note in d.legend]
    return lead + text + "\n\n" + "\n".join(notes)


def _render_html(board: Board, d: Display) -> str:
    e = lambda s: html.escape(str(s), quote=True)  # noqa: E731
    head = "<tr>" + "".join(f'<th data-key="{e(k)}">{e(h)}</th>' for k, h in zip(d.keys, d.header)) + "</tr>"
    lines = ['<table class="mixbench-leaderboard">', "<thead>", head, "</thead>", "<tbody>"]
    for line, nums, bold in zip(d.body, d.raw, d.best):
        cells = []
        for t, n, b in zip(line, nums, bold):
            sort = f' data-sort="{e(repr(float(n)))}"' if n is not None else ""
            text = f"<strong>{e(t)}</strong>" if b else e(t)
            cells.append(f"<td{sort}>{text}</td>")
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join([*lines, "</tbody>", "</table>"])


def _render_latex(board: Board, d: Display) -> str:
    align = "".join("l" if k in d.text_columns else "r" for k in d.keys)
    lines = [rf"\begin{{tabular}}{{{align}}}", r"\hline", " & ".join(_escape_latex(h) for h in d.header) + r" \\",
             r"\hline"]
    for line, bold in zip(d.body, d.best):
        lines.append(" & ".join(rf"\textbf{{{_escape_latex(t)}}}" if b else _escape_latex(t)
                                for t, b in zip(line, bold)) + r" \\")
    return "\n".join([*lines, r"\hline", r"\end{tabular}"])


def _render_csv(board: Board, d: Display, columns: list[Column]) -> str:
    flat = []
    for rec in board_records(board, columns):
        line = {k: v for k, v in rec.items() if k not in ("cells", "runs")}  # run ids: in the JSON only
        for c in columns:
            cell = rec["cells"].get(c.name)
            iv = (cell or {}).get("interval") or {}
            line[c.name] = None if cell is None else cell["value"]
            line[f"{c.name} low"] = iv.get("low")
            line[f"{c.name} high"] = iv.get("high")
            line[f"{c.name} interval"] = iv.get("kind")
            line[f"{c.name} group"] = None if cell is None else cell["group"]
        flat.append(line)
    buffer = io.StringIO()
    pd.DataFrame(flat).to_csv(buffer, index=False)
    return buffer.getvalue()


_TEXT: dict[str, Callable[[Board, Display], str]] = {"md": _render_md, "html": _render_html, "latex": _render_latex}


def render(board: Board, fmt_name: str = "md", view: str = "compact", suite: str | None = None) -> str:
    """``board`` in ``fmt_name`` and ``view``; an empty board renders as one sentence."""
    if fmt_name not in FORMATS:
        raise MixbenchError(f"unknown leaderboard format '{fmt_name}'; use one of {', '.join(FORMATS)}.")
    if board.table.empty:
        notes = "; ".join(board.table.notes)
        return f"no results in {board.table.root or 'the store'}" + (f" ({notes})" if notes else "") + \
            "; run `mixbench quickstart` or `mixbench eval`"
    d = display(board, view, suite, fmt_name)
    columns = [board.table.column(k) for k in d.keys if "/" in k]
    if fmt_name == "json":  # every column that votes too: a reader of the JSON must see what the ranks come from
        if view == "compact":
            shown = {c.name for c in columns}
            columns = [c for c in board.table.columns if c.name in shown or (
                (v := board.verdicts.get(c.name)) is not None and v.votes) or c in _headline_columns(board)]
        return board_json(board, columns if view != "full" else None)
    if fmt_name == "csv":
        return _render_csv(board, d, columns)
    if fmt_name == "md":
        return _render_md(board, d, compact=view == "compact")
    return _TEXT[fmt_name](board, d)
