"""The ladder's picture: loss against training FLOPs per mixer, the fitted curves with their bootstrap bands, and
the crossovers the fits agree on marked where they fall (their intervals shaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def draw_ladder(info: dict[str, Any], path: Path) -> Path:
    """One PNG of a ladder's analysis (:func:`suites.scaling.analysis.analyze`'s JSON)."""
    from matplotlib.ticker import FuncFormatter

    from harness.kit import figure, save, si

    fig, axes = figure(8.0, 5.0)
    ax = axes[0][0]
    colors = {}
    for i, (name, series) in enumerate(sorted(info["series"].items(), key=lambda kv: (kv[1]["control"], kv[0]))):
        color = f"C{i % 10}"
        colors[name] = color
        label = name.replace("$", r"\$") + (" (control)" if series["control"] else "")
        pts = series["points"]
        ax.scatter([p["flops"] for p in pts], [p["loss"] for p in pts], s=22, color=color,
                   marker="s" if series["control"] else "o", zorder=3, label=label)
        fit = series.get("fit")
        if fit:
            band = [b for b in fit["band"]]
            xs = [b[0] for b in band]
            ax.plot(xs, [b[1] for b in band], color=color, lw=1.3, ls="--" if series["control"] else "-")
            lo_hi = [(b[0], b[2], b[3]) for b in band if b[2] is not None and b[3] is not None]
            if lo_hi:
                ax.fill_between([b[0] for b in lo_hi], [b[1] for b in lo_hi], [b[2] for b in lo_hi], color=color,
                                alpha=0.12, lw=0)
    for c in info["crossovers"]:
        if c["verdict"] != "cross" or c["compute"] is None:
            continue
        ax.axvline(c["compute"], color="#444", lw=0.8, ls=":")
        if c["interval"]:
            ax.axvspan(c["interval"][0], c["interval"][1], color="#888", alpha=0.04, lw=0)
        ax.annotate(f"{c['a']} / {c['b']}".replace("$", r"\$"), (c["compute"], 1.0), xycoords=("data", "axes fraction"),
                    rotation=90, va="top", ha="right", fontsize=7, color="#444")
    ax.axvline(max(p["flops"] for s in info["series"].values() for p in s["points"]), color="#bbb", lw=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: si(x, "FLOP", 2)))
    ax.set_xlabel("training FLOPs (log scale; right of the grey line: extrapolated)")
    ax.set_ylabel("held-out loss (nats/token)")
    level = info["confidence"]
    ax.set_title(f"L(C) = E + A C^-alpha per mixer, {level:.0%} bootstrap bands; dotted: crossovers", fontsize=9,
                 parse_math=False)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return save(fig, path, dpi=100)
