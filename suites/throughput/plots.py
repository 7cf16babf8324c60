"""Log-log plots of time and memory against context length, saved with the run."""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import FuncFormatter, LogLocator

from harness.kit import figure, save

TITLES = {"decode": "decode (s/token)", "prefill": "prefill (s)", "train": "train fwd+bwd (s)"}


def plot_tables(out_dir: Path, label: str, tables: dict, reference: str, reference_tables: dict | None) -> list[Path]:
    """``time_vs_length.png`` (one panel per mode) and ``memory_vs_length.png``; returns the files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    series = [(label, tables, "-o")] + ([(reference, reference_tables, "--s")] if reference_tables else [])
    files = [out_dir / "time_vs_length.png", out_dir / "memory_vs_length.png"]
    for fig, path in zip((time_figure(series), memory_figure(series)), files):
        save(fig, path)
    return files


def time_figure(series: list[tuple[str, dict, str]]):
    """One log-log panel of time against length per mode measured."""
    modes = [m for m in ("train", "prefill", "decode") if any(m in tabs for _, tabs, _ in series)]
    fig, axes = figure(4.2 * max(len(modes), 1), 3.6, cols=max(len(modes), 1))
    for ax, mode in zip(axes[0], modes):
        for name, tabs, style in series:
            pts = sorted((t, p.seconds) for t, p in tabs.get(mode, {}).items() if p.seconds)
            if pts:
                ax.plot(*zip(*pts), style, label=name)
        _log_axes(ax)
        ax.set_title(TITLES[mode])
        ax.set_xlabel("context length T")
    return fig


def memory_figure(series: list[tuple[str, dict, str]]):
    """Peak tensor memory of each model's first call at each point, against length (log-log)."""
    fig, axes = figure(4.6, 3.6)
    ax = axes[0][0]
    for name, tabs, style in series:
        for mode in ("train", "prefill", "decode"):
            pts = sorted((t, p.peak_bytes / 2**20) for t, p in tabs.get(mode, {}).items() if p.peak_bytes)
            if pts:
                ax.plot(*zip(*pts), style, label=f"{name} {mode}")
    _log_axes(ax)
    ax.set_xlabel("context length T")
    ax.set_ylabel("peak tensor memory (MiB)")
    return fig


def _log_axes(ax) -> None:
    """Log axes whose ticks are labelled however short the range: base 2 for lengths; for the values, base 10
    with labelled minor ticks (1-9 x 10^k), so a curve that spans less than one power of 2 or 10 (attention's
    prefill times at short lengths) still has numbers on its axis. A legend only where something was drawn."""
    if not ax.lines:
        return
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=range(2, 10)))
    plain = FuncFormatter(lambda value, _: f"{value:.3g}")  # 0.004, not 4e-03 or 2^-8
    ax.yaxis.set_major_formatter(plain)
    low, high = ax.get_ylim()
    if high / low < 100:  # under two decades the powers of ten alone leave the axis (nearly) bare
        ax.yaxis.set_minor_formatter(plain)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
