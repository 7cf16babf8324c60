"""The site's own comparison plots: one per metric of a suite, every model of the board side by side (docs/site.md).

A suite's stored plots are drawn per run (one mixer, at most beside its reference), so no stored plot puts every
mixer and a control on one axis; these are drawn from the board instead, from the same cells and intervals the
tables show. Each is made to be read where the page shows it (docs/site.md, "Plots"):

* drawn at the width it is shown (:data:`WIDTH_IN` x :data:`DPI` = 590 px, under the page's 46em image width), so
  the browser does not shrink it, and no text is smaller than 9 pt (12.5 px);
* one row per model, labels on the y axis (no legend or annotation over the points), the legend outside the axes;
* a log axis only where the values span more than a factor of 10, with its major ticks only (labelled powers of
  ten, never the crowded minor labels), otherwise at most five linear ticks.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from harness.reporting.board import Board
from harness.reporting.table import Column, Row

WIDTH_IN = 5.9
DPI = 100
#: the smallest font the site's plots use, in points (9 pt at 100 dpi = 12.5 px)
SMALL = 9
MIXER_COLOUR, CONTROL_COLOUR = "#1f77b4", "#7f7f7f"


def plotted_columns(board: Board, suite: str) -> list[Column]:
    """The suite's headline columns of the config the board shows for it (its first columns if none is a
    headline): one plot each."""
    shown = board.table.shown_configs().get(suite)
    columns = [c for c in board.table.columns if c.suite == suite and c.config == shown]
    return [c for c in columns if c.headline] or columns


def metric_figure(board: Board, column: Column, rows: list[Row], path: Path) -> bool:
    """``path``: :func:`draw_metric`'s figure; False (nothing written) with fewer than two values."""
    from harness.reporting.plotting import save

    fig = draw_metric(board, column, rows)
    if fig is None:
        return False
    save(fig, path, dpi=DPI)
    return True


def draw_metric(board: Board, column: Column, rows: list[Row]):
    """Every row of ``rows`` (in that order, top to bottom) with a value in ``column``, as a point with its
    interval, controls grey squares; None with fewer than two values."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    from harness.reporting.plotting import figure
    from harness.reporting.numbers import readable

    table = board.table
    points = [(r, c) for r in rows if (c := table.cell(r, column)) is not None and c.value is not None
              and math.isfinite(c.value)]
    if len(points) < 2:
        return None
    presets = len({r.preset for r, _ in points}) > 1
    votes = (v := board.verdicts.get(column.name)) is not None and v.votes
    n = len(points)
    fig, axes = figure(WIDTH_IN, 1.45 + 0.32 * n)
    ax = axes[0][0]
    labels, bounds = [], []
    for i, (row, cell) in enumerate(points):
        y = n - 1 - i
        colour = CONTROL_COLOUR if row.control else MIXER_COLOUR
        iv = cell.interval
        if iv is not None and iv.finite:
            ax.plot([iv.low, iv.high], [y, y], color=colour, lw=2.2, solid_capstyle="butt", alpha=0.75)
            bounds += [iv.low, iv.high]
        ax.plot([cell.value], [y], "s" if row.control else "o", color=colour, ms=6)
        bounds.append(cell.value)
        group = board.verdicts[column.name].groups.get(row.key) if votes else None
        label = row.label + (f" / {row.preset}" if presets else "") + (" (control)" if row.control else "")
        labels.append((label + (f"  {group}" if group else "")).replace("$", r"\$"))
    ax.set_yticks(range(n - 1, -1, -1), labels, fontsize=SMALL + 1)
    ax.set_ylim(-0.7, n - 0.3)
    positive = [b for b in bounds if b > 0]
    if len(positive) == len(bounds) and max(bounds) / min(bounds) > 10:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, numticks=6))  # powers of ten only: labels never crowd
        ax.xaxis.set_minor_locator(LogLocator(base=10, subs=range(2, 10), numticks=12))
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor ticks as marks, unlabelled
        scale = ", log scale"
    else:
        ax.xaxis.set_major_locator(MaxNLocator(5))
        scale = ""
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:.6g}" if abs(x) < 1e4 else readable(x, 3)))
    ax.tick_params(axis="x", labelsize=SMALL + 1)
    unit = f" ({column.unit})" if column.unit else ""
    better = "higher" if column.higher_is_better else "lower"
    xlabel = "\n".join(textwrap.wrap(f"{column.metric}{unit}: {better} is better{scale}", 72))  # units run long
    ax.set_xlabel(xlabel, fontsize=SMALL + 1, parse_math=False)
    title = f"{column.suite}{f' [{column.config}]' if column.config else ''}: {column.metric}"
    # the title, then the legend in one line between it and the axes: outside the axes, over no point
    ax.set_title("\n".join(textwrap.wrap(title, 60)), fontsize=SMALL + 2, loc="left", parse_math=False, pad=24)
    ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], color=MIXER_COLOUR, marker="o", lw=2.2, label="mixer, interval")]
    if any(r.control for r, _ in points):
        handles.append(Line2D([], [], color=CONTROL_COLOUR, marker="s", lw=2.2, label="control"))
    if votes:
        handles.append(Line2D([], [], ls="none", label="a, b, …: tie group"))
    ax.legend(handles=handles, fontsize=SMALL, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(handles),
              frameon=False, borderaxespad=0.15, handlelength=1.6, columnspacing=1.2)
    return fig
