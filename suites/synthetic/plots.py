"""Accuracy against decode state size, one panel per task (zoology's recall-vs-state view; docs/synthetic.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def plot_accuracy_vs_state(rows: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """``rows``: dicts with mixer, task, label, accuracy, low, high (Wilson bounds or None), state_floats and
    chance. One panel per task, one colour per mixer, the settings of a mixer joined in state order, the
    task's chance level dashed."""
    import matplotlib
    from matplotlib.ticker import EngFormatter, LogLocator, NullFormatter

    from harness.kit import figure, save

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    mixers = list(dict.fromkeys(r["mixer"] for r in rows))
    cols = min(4, max(1, len(tasks)))
    nrows = math.ceil(len(tasks) / cols) if tasks else 1
    fig, axes = figure(3.6 * cols, 3.0 * nrows, rows=nrows, cols=cols)
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, task in zip(axes.flat, tasks):
        mine = [r for r in rows if r["task"] == task]
        for j, mixer in enumerate(mixers):
            pts = sorted((r for r in mine if r["mixer"] == mixer), key=lambda r: r["state_floats"])
            if not pts:
                continue
            x = [max(r["state_floats"], 1) for r in pts]
            y = [r["accuracy"] for r in pts]
            err = [[max(0.0, r["accuracy"] - r["low"]) if r.get("low") is not None else 0.0 for r in pts],
                   [max(0.0, r["high"] - r["accuracy"]) if r.get("high") is not None else 0.0 for r in pts]]
            ax.errorbar(x, y, yerr=err, marker="o", ms=4, lw=1, capsize=2, color=colours[j % len(colours)],
                        label=mixer)
            if len(mixers) == 1:
                for r, xi, yi in zip(pts, x, y):
                    ax.annotate(r["label"], (xi, yi), fontsize=6, xytext=(3, 3), textcoords="offset points")
        chances = {r["chance"] for r in mine}
        if len(chances) == 1:
            ax.axhline(chances.pop(), color="grey", ls="--", lw=0.8)
        ax.set_xscale("log")
        xs = [max(r["state_floats"], 1) for r in mine]
        ax.set_xlim(min(xs) / 1.6, max(xs) * 1.6)  # bounded: autoscaling one point spans decades of ticks
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=8))  # labels within a decade
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 2k, 5k, 10k
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("decode state (floats)", fontsize=8)
        ax.set_ylabel("test accuracy", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    if mixers:
        axes.flat[0].legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    # fixed margins: tight_layout measures every tick label and costs seconds on a loaded CPU
    fig.subplots_adjust(left=0.24 / cols, right=0.98, bottom=0.45 / (3.0 * nrows) + 0.08 / nrows,
                        top=1 - (0.55 if title else 0.3) / (3.0 * nrows), wspace=0.35, hspace=0.55)
    return save(fig, path, tight=False)
