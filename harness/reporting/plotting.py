"""The one way mixbench draws a figure: a bare matplotlib ``Figure`` on the Agg canvas, never pyplot.

Why not pyplot: it keeps every figure in a global registry until ``plt.close`` (a forgotten close leaks one per
run of a nightly), switching its backend is process-global (``matplotlib.use`` in six places fought over it), and
it is not thread-safe (runs of a process pool's threads draw at the same time). A bare ``Figure`` is garbage
collected like any object and needs no backend: ``savefig`` picks the Agg renderer from the file type.
"""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.figure import Figure


def figure(width: float, height: float, rows: int = 1, cols: int = 1):
    """A new figure of ``width`` x ``height`` inches and its axes as a 2-D array (``rows`` x ``cols``)."""
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots(rows, cols, squeeze=False)


def save(fig: Figure, path: Path, dpi: int = 110, tight: bool = True) -> Path:
    """Write ``fig`` to ``path`` (its folder made first); ``tight``: lay it out first (costs seconds for busy
    figures on a loaded CPU; a caller with fixed margins passes False)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path


def png_bytes(fig: Figure, dpi: int = 100, tight: bool = True) -> bytes:
    """``fig`` as PNG bytes (for a store file written atomically by its caller)."""
    if tight:
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
