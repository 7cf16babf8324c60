"""Log-log plots of time and memory against context length, saved with the run."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def plot_tables(out_dir: Path, label: str, tables: dict, reference: str, reference_tables: dict | None) -> list[Path]:
    """``time_vs_length.png`` (one panel per mode) and ``memory_vs_length.png``; returns the files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    series = [(label, tables, "-o")] + ([(reference, reference_tables, "--s")] if reference_tables else [])
    modes = [m for m in ("train", "prefill", "decode") if m in tables]
    fig, axes = plt.subplots(1, len(modes), figsize=(4.2 * len(modes), 3.6), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        for name, tabs, style in series:
            pts = sorted((t, p.seconds) for t, p in tabs.get(mode, {}).items() if p.seconds)
            if pts:
                ax.loglog(*zip(*pts), style, label=name, base=2)
        ax.set_title({"decode": "decode (s/token)", "prefill": "prefill (s)", "train": "train fwd+bwd (s)"}[mode])
        ax.set_xlabel("context length T")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    files = [out_dir / "time_vs_length.png"]
    fig.savefig(files[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4.6, 3.6))
    for name, tabs, style in series:
        for mode in modes:
            pts = sorted((t, p.peak_bytes / 2**20) for t, p in tabs.get(mode, {}).items() if p.peak_bytes)
            if pts:
                ax.loglog(*zip(*pts), style, label=f"{name} {mode}", base=2)
    ax.set_xlabel("context length T")
    ax.set_ylabel("peak extra memory (MiB)")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # no point with a measured peak (e.g. all OOM): no legend
        ax.legend(fontsize=7)
    fig.tight_layout()
    files.append(out_dir / "memory_vs_length.png")
    fig.savefig(files[1], dpi=110)
    plt.close(fig)
    return files
