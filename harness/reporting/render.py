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
import json
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.reporting.board import Board
from harness.reporting.context_use import detail_lines
from harness.model.recipes import OVERRIDDEN, UNTUNED
from harness.reporting.preamble import UNTUNED_MARK, preamble
from harness.errors import MixbenchError
from harness.store.results import json_safe
from harness.reporting.table import Cell, Column, Row

FORMATS = ("md", "csv", "json", "html", "latex")
#: version of the JSON board document (``board.json``, ``mixbench leaderboard --format json``)
BOARD_SCHEMA = 1
VIEWS = ("compact", "full", "suite")
MISSING = "—"
UNRELIABLE_MARK = "†"
OUTSIDE_MARK = "°"
CONTROL_MARK = "‡"  # a mixer cell not better than the reference control (docs/controls.md)
STABILITY_MARK = "~"  # a column whose ordering changed between half the largest budget and it (docs/rank_stability.md)


# ---------------------------------------------------------------------------------------------- numbers


def _decimals(x: float, significant: int) -> int | None:
    a = abs(x)
    if a == 0 or not math.isfinite(a):
        return 2
    if a < 1e-3 or a >= 1e7:
        return None
    return max(0, significant - 1 - math.floor(math.log10(a)))


def fmt(x: float | None, significant: int = 4, digits: int | None = -1) -> str:
    if x is None:
        return MISSING
    if not math.isfinite(x):
        return "n/a"
    d = _decimals(x, significant) if digits == -1 else digits
    return f"{x:.3e}" if d is None else f"{x:.{d}f}"


def readable(v: Any, significant: int = 4) -> str:
    """A number as a reader wants it: integers with thousands separators (``714,639``); other numbers to
    ``significant`` digits with thousands separators: ``908.9``, ``0.01234``, ``9,001``, ``11,962``; SI prefixes from
    ten million (``46.88G``), scientific below 0.001 (``1.234e-05``). None is missing, NaN and infinities n/a."""
    if v is None:
        return MISSING
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if not math.isfinite(v):
        return "n/a"
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e7:
        return si(v, significant=significant)
    if a >= 1e4:
        return f"{v:,.0f}"
    if a < 1e-3:
        return f"{v:.{significant - 1}e}"
    digits = max(0, significant - 1 - math.floor(math.log10(a)))
    return f"{v:,.0f}" if round(a, digits) >= 1e4 else f"{v:,.{digits}f}"


SI_PREFIXES = (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def si(v: float | int | None, unit: str = "", significant: int = 3) -> str:
    """``715k``, ``2k``, ``1.66 TFLOP``: up to ``significant`` digits and an SI prefix (a space before it when a unit
    follows)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return readable(v)
    for prefix, scale in SI_PREFIXES:
        if abs(v) >= scale:
            x = v / scale
            digits = max(0, significant - 1 - math.floor(math.log10(abs(x))))
            text = f"{x:.{digits}f}"
            text = text.rstrip("0").rstrip(".") if "." in text else text  # 2k, not 2.00k
            return f"{text}{' ' if unit else ''}{prefix}{unit}"
    return f"{readable(v, significant)}{' ' + unit if unit else ''}"


def compact_number(x: float, significant: int = 3) -> str:
    """A short number for the compact view: 3 significant digits, k/M/G above 10 000, no leading zero below 1."""
    if not math.isfinite(x):
        return "n/a"
    a = abs(x)
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e4)):
        if a >= scale:
            scale = 1e3 if suffix == "k" else scale
            return f"{x / scale:.{max(0, significant - 1 - math.floor(math.log10(a / scale)))}f}{suffix}"
    if a == 0:
        return "0"
    digits = max(0, significant - 1 - math.floor(math.log10(a)))
    text = f"{x:.{digits}f}"
    if 0 < a < 1:
        text = text.replace("0.", ".", 1)
    return text


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
    digits = _decimals(cell.value, significant)
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


def state_contexts(board: Board) -> list[int]:
    """The training contexts the rows' decode states were counted at (``Subject.state_floats``)."""
    found = set()
    for row in board.table.rows:
        for run in row.runs:
            backbone = run.manifest.subject.backbone or {}
            if isinstance(backbone.get("context"), int):
                found.add(backbone["context"])
    return sorted(found)


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


def legend(board: Board, columns: list[Column]) -> list[str]:
    """What every mark means, which columns vote and why the others do not, and what rows lack."""
    cfg = board.config
    lines = [
        f"rank: Borda rank within the preset over the voting columns, each suite weighing the same, on tie groups (a "
        "point per row in a lower group, half per other row of its own; rows not better than the null share the "
        "lowest group; a column whose rows all tie gives none); in brackets its "
        f"{cfg.rank_level:.0%} bootstrap interval (columns, shared items and seed noise resampled); '=' marks a row "
        "whose rank interval overlaps another's (tied); '–' a row that lacks a voting suite.",
        f"letters: tie groups of a voting column; 'a' (bold) holds the best row and every row a paired test on "
        f"shared items cannot tell from it (Holm, family-wise alpha {cfg.alpha:g}), the training-seed spread "
        "counted (docs/protocol.md); then 'b', ...",
        f"values: mean over seeds with its interval (one seed: the run's own; ± is half its width, a skewed interval "
        f"is shown by its bounds [low,high]); "
        f"{UNRELIABLE_MARK} unreliable (does not vote), {OUTSIDE_MARK} the point lies outside its interval, "
        "n/a does not exist, — missing.",
        "check: the conformance gate's verdict (`mixbench check`) for the row's mixer and config: ok passed, skip "
        "scored with --skip-gate, model an external model that passed the model-level checks (causal, "
        "deterministic, batch independent); not the backbone's residual gates, which the first lines name.",
        f"{UNTUNED_MARK} after a model: trained without its tuned recipe (no recipe for it at its preset, or its "
        "values overridden); its learning rate was not chosen on validation for it (docs/protocol.md).",
        "state: floats of decode state per sequence after the model's training context ("
        + (", ".join(f"T={t}" for t in state_contexts(board)) or "T unknown") + "), as the mixer counts it.",
        "seeds: how many seeds the row averages, their ids in brackets (full views).",
    ]
    if board.has_controls:
        refs = ", ".join(board.reference_controls) or "the controls"
        lines.append(
            "control: a control mixer (docs/controls.md), trained and scored like the others and never ranked; a column "
            f"whose best mixer is not better than every control does not vote; {CONTROL_MARK} a mixer cell not better "
            f"than its null: {refs} (paired test on shared items with the seed spread, Holm over the column's "
            f"mixers, alpha {cfg.alpha:g}), or, in a column controls cannot score, its own untrained model; such "
            "a cell takes no Borda points; `--all` "
            "and the JSON give each score cell's difference from the controls with its interval (on the items' "
            "scale where items exist: NLL per token for perplexity).")
    else:
        lines.append("no control rows on this board: nothing shows whether a column measures mixing at all "
                     "(grids include the controls unless told not to; docs/controls.md).")
    if any(row.external for row in board.table.rows):
        lines.append(
            "external: a transformers model mixbench did not train, scored with its own tokenizer (docs/huggingface.md); "
            "never ranked, its per-token perplexities are marked unreliable (unless it reads with mixbench's own "
            "tokenizer: a re-imported export); compare it with the rows on bpb (`mixbench compare` pairs them on "
            "the same documents).")
    votes = [v.column.name for v in board.verdicts.values() if v.votes]
    lines.append("voting columns: " + (", ".join(votes) if votes else "none"))
    unknown = sorted({name for (_, name), n in board.seed_noise.items() if n is None and name in votes})
    if unknown:
        lines.append("seed spread unknown (one seed per row and none measured for the preset): "
                     f"{', '.join(unknown)}; their ties and vetoes count item noise only")
    for c in columns:
        v = board.verdicts.get(c.name)
        if v is not None and not v.votes and c.role == "score":
            lines.append(f"{c.name} does not vote: {v.reason}")
    for row in board.table.rows:
        if row.key in board.unranked:
            lines.append(f"{row.label} / {row.preset} is not ranked: it {board.unranked[row.key]}")
    lines += stability_lines(board, columns)
    if any(c.positions is not None for c in columns):  # a view that shows the position columns: their record
        lines += detail_lines(board.context)
    lines += board.table.notes
    return lines


def stability_lines(board: Board, columns: list[Column]) -> list[str]:
    """The rank-stability notes of ``columns`` (docs/rank_stability.md): what the mark means, once, then one line
    per column and budget series; none for a board whose settings each have one token budget."""
    names = {c.name for c in columns}
    found = [s for s in board.stability if s.column in names and s.status != "only one budget"]
    several = len({s.series for s in found}) > 1
    lines = []
    if any(s.changed for s in found):
        lines.append(f"{STABILITY_MARK}: a column whose ordering is still changing at a setting's largest token "
                     "budget: a pair of models swapped places since the largest budget at most half of it (two "
                     "models in one tie group at both budgets do not count; docs/rank_stability.md).")
    for s in found:
        where = f" ({s.series_label})" if several else ""
        lead = f"{STABILITY_MARK} {s.column}" if s.changed else f"rank stability of {s.column}"
        lines.append(f"{lead}{where}: {s.sentence}.")
    return lines


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


def board_records(board: Board, columns: list[Column] | None = None) -> list[dict[str, Any]]:
    """JSON-ready rows: identity, cost, rank with interval, and every cell with its interval, group and vote."""
    table = board.table
    columns = list(table.columns) if columns is None else columns
    out = []
    for row in table.rows:
        rec: dict[str, Any] = {
            "row": row.key, "model": row.label, "mixer": row.mixer, "control": row.control, "external": row.external,
            "preset": row.preset,
            "seeds": list(row.seeds),
            "parameters": row.parameters, "state_floats": row.state_floats, "train_flops": row.train_flops,
            "train_flops_estimated": row.train_flops_estimated,
            "train_tokens_per_s": row.train_tokens_per_s, "gate": row.gate, "recipe": row.recipe,
            "non_embedding_parameters": row.non_embedding_parameters, "residual_gates": row.residual_gates,
            "output_init": row.output_init, "train_tokens": row.budget,
            "rank": board.rank.get(row.key), "rank_interval": board.rank_interval.get(row.key),
            "rank_tied": board.tied.get(row.key, False), "borda_points": board.points.get(row.key),
            "unranked": board.unranked.get(row.key), "pareto": board.pareto.get(row.key),
            "provenance": row_provenance(row), "runs": row_runs(row), "cells": {},
        }
        for c in columns:
            cell = table.cell(row, c)
            if cell is None:
                continue
            verdict = board.verdicts.get(c.name)
            rec["cells"][c.name] = {**cell.to_json(), "role": c.role, "votes": bool(verdict and verdict.votes),
                                    "group": board.group(row, c) if verdict is not None and verdict.votes else None,
                                    "not_better_than_control": (row.key, c.name) in board.not_above_control,
                                    "not_better_than_null": (row.key, c.name) in board.not_above_null,
                                    "vs_controls": [comp.to_json()
                                                    for comp in board.vs_controls.get((row.key, c.name), [])]}
        out.append(rec)
    return out


def row_runs(row: Row) -> dict[str, list[str]]:
    """Every run id of the row (all seeds), per suite, oldest first: what `mixbench show` and `compare` take."""
    out: dict[str, list[str]] = {}
    for run in sorted(row.runs, key=lambda r: (r.manifest.written_at, r.run_id)):
        out.setdefault(run.manifest.suite, []).append(run.run_id)
    return dict(sorted(out.items()))


def row_provenance(row: Row) -> dict[str, Any]:
    """Where a row's numbers come from: code revision, fingerprints, machine and threading of its newest run."""
    if not row.runs:
        return {}
    newest = max(row.runs, key=lambda r: r.manifest.written_at)
    m = newest.manifest
    prov = m.provenance or {}
    git = prov.get("git") or {}
    hw = prov.get("hardware") or {}
    subject_parts = m.identity.get("subject_parts") or {}
    mixer_parts = subject_parts.get("mixer")
    if not isinstance(mixer_parts, dict):  # a mixer-scoped run: its subject is the mixer's identity itself
        mixer_parts = subject_parts
    return {
        "revision": git.get("commit"), "dirty": git.get("dirty"), "mixbench": prov.get("mixbench"),
        "mixer_code": mixer_parts.get("mixer_code"), "core_code": subject_parts.get("core_code"),
        "packages": subject_parts.get("packages"), "cpu": hw.get("cpu"), "threads": hw.get("torch_threads"),
        "device": m.subject.device, "threading": (m.identity.get("device") or {}).get("policy"),
        "newest_run": newest.run_id, "written_at": m.written_at,
    }


def board_json(board: Board, columns: list[Column] | None = None) -> str:
    doc = {
        "schema": BOARD_SCHEMA,
        "columns": [{"name": c.name, "suite": c.suite, "metric": c.metric, "role": c.role, "config": c.config,
                     "higher_is_better": c.higher_is_better, "unit": c.unit,
                     "votes": board.verdicts[c.name].votes, "weight": board.verdicts[c.name].weight,
                     "not_voting_because": board.verdicts[c.name].reason or None}
                    for c in (board.table.columns if columns is None else columns)],
        "rows": board_records(board, columns),
        "notes": legend(board, list(board.table.columns) if columns is None else columns),
        "headline": board.headline(),
        "preamble": preamble(board),
        "context_use": [u.to_json() for u in board.context],
        "seed_noise": {f"{p}/{name}": None if n is None else n.to_json()
                       for (p, name), n in sorted(board.seed_noise.items())},
        "reference_controls": board.reference_controls,
        "config": {"alpha": board.config.alpha, "rank_level": board.config.rank_level,
                   "bootstrap": board.config.bootstrap},
    }
    names = {c.name for c in (board.table.columns if columns is None else columns)}
    stability = [s.to_json() for s in board.stability if s.column in names and s.status != "only one budget"]
    if stability:  # only where a setting was trained at several token budgets (docs/rank_stability.md)
        doc["rank_stability"] = stability
        for c in doc["columns"]:
            c["ordering_changed"] = c["name"] in board.unsettled
    return json.dumps(json_safe(doc), allow_nan=False, ensure_ascii=False, indent=2)


def validate_board_document(doc: Any) -> None:
    """Raise ValueError naming what does not fit the board JSON schema (a committed reference board is read back
    by a test, so a format change cannot leave it stale unnoticed)."""
    if not isinstance(doc, dict) or doc.get("schema") != BOARD_SCHEMA:
        raise ValueError(f"not a schema-{BOARD_SCHEMA} board document")
    for key, kind in (("columns", list), ("rows", list), ("notes", list), ("config", dict)):
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"board document: '{key}' must be a {kind.__name__}")
    names = set()
    for c in doc["columns"]:
        missing = {"name", "suite", "metric", "role", "votes", "higher_is_better"} - set(c)
        if missing:
            raise ValueError(f"board column lacks {sorted(missing)}")
        names.add(c["name"])
    for r in doc["rows"]:
        missing = {"row", "model", "mixer", "preset", "gate", "rank", "rank_interval", "provenance", "cells"} - set(r)
        if missing:
            raise ValueError(f"board row {r.get('model')!r} lacks {sorted(missing)}")
        for name, cell in r["cells"].items():
            if name not in names:
                raise ValueError(f"board row {r['model']!r} has a cell in unknown column {name!r}")
            if not {"value", "interval", "group", "votes", "role"} <= set(cell):
                raise ValueError(f"board cell {r['model']!r}/{name} is incomplete")


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
