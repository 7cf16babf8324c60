"""The site's learning-curve view: every model of a preset on one plot, held-out loss against training FLOPs.

Training measures each model's held-out loss at log-spaced steps (docs/scaling.md, "Learning curves"); overlaid on
log-scaled FLOPs (one colour per mixer, one line per model), the curves show whether an ordering read off the
board at the final budget was already there earlier, or is a crossing still under way. Controls are drawn dashed, so a mixer whose curve never leaves the
context-free control's is visible at a glance.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from harness.reporting.table import Row


def curves_by_preset(rows: list[Row]) -> dict[str, list[tuple[Row, list[dict[str, Any]]]]]:
    """Per preset, each row's learning curve (the first seed's that has one; seeds share the row's line)."""
    out: dict[str, list[tuple[Row, list[dict[str, Any]]]]] = defaultdict(list)
    for row in rows:
        curves = {}
        for run in row.runs:
            s = run.manifest.subject
            if s.kind == "model" and s.learning_curve and s.id not in curves:
                curves[s.id] = (s.seed if s.seed is not None else 0, s.learning_curve)
        if curves:
            out[row.preset].append((row, min(curves.values(), key=lambda c: c[0])[1]))
    return dict(sorted(out.items()))


def draw_curves(preset: str, curves: list[tuple[Row, list[dict[str, Any]]]], path: Path) -> bool:
    """One PNG: loss (nats/token) against training FLOPs, log x, one line per row; False when nothing to draw."""
    from matplotlib.ticker import FuncFormatter

    from harness.reporting.plotting import figure, save
    from harness.reporting.numbers import si

    drawable = [(row, [p for p in curve if p.get("flops") and p.get("loss") is not None]) for row, curve in curves]
    drawable = [(row, pts) for row, pts in drawable if pts]
    if not drawable:
        return False
    fig, axes = figure(8.5, 4.8)
    ax = axes[0][0]
    mixers = sorted({row.mixer for row, _ in drawable}, key=lambda m: (any(r.control for r, _ in drawable
                                                                          if r.mixer == m), m))
    colors = {m: f"C{i % 10}" for i, m in enumerate(mixers)}
    labelled: set[str] = set()
    for row, pts in sorted(drawable, key=lambda c: (c[0].control, c[0].label)):
        # one colour per mixer: a mixer's models at several sizes and budgets read as one family of curves
        label = None if row.mixer in labelled else (row.mixer + (" (control)" if row.control else "")).replace(
            "$", r"\$")  # no mathtext
        labelled.add(row.mixer)
        ax.plot([p["flops"] for p in pts], [p["loss"] for p in pts], lw=1.2, color=colors[row.mixer],
                ls="--" if row.control else "-", marker="o", ms=2.0, alpha=0.85, label=label)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: si(x, "FLOP", 2)))
    ax.set_xlabel("training FLOPs (log scale)")
    ax.set_ylabel("held-out loss (nats/token)")
    ax.set_title(f"learning curves, preset {preset}", parse_math=False)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="one line per model", title_fontsize=7)
    save(fig, path, dpi=100)
    return True
