"""The one way mixbench draws a figure: a bare matplotlib ``Figure`` on the Agg canvas, never pyplot.

Why not pyplot: it keeps every figure in a global registry until ``plt.close`` (a forgotten close leaks one per
run of a nightly), switching its backend is process-global (``matplotlib.use`` in six places fought over it), and
it is not thread-safe (runs of a process pool's threads draw at the same time). A bare ``Figure`` is garbage
collected like any object and needs no backend: ``savefig`` picks the Agg renderer from the file type.

Every PNG records the size of its smallest text in pixels at its own resolution (:data:`FONT_KEY`, a PNG text
chunk): a page that shows the image at another width scales that text with it, and the site's tests read the
chunk to check that no figure's text ends up below a readable size where the page shows it (docs/site.md).
"""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.text import Text

#: PNG text chunk: the smallest font of the figure in pixels of the PNG (points x dpi / 72)
FONT_KEY = "mixbench:min-font-px"
#: the smallest text a page should show, in CSS pixels (docs/site.md); figures drawn for the site aim above it
MIN_FONT_PX = 9.0


def figure(width: float, height: float, rows: int = 1, cols: int = 1):
    """A new figure of ``width`` x ``height`` inches and its axes as a 2-D array (``rows`` x ``cols``)."""
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots(rows, cols, squeeze=False)


def min_font_points(fig: Figure) -> float | None:
    """The smallest font size (points) of any visible, non-empty text of a drawn ``fig`` (tick labels, legend,
    annotations, titles); None for a figure without text."""
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and _shown(t)]
    return min(sizes) if sizes else None


def _shown(text: Text) -> bool:
    """Whether ``text`` sits in a visible axes (or in none: a figure title)."""
    ax = getattr(text, "axes", None)
    return ax is None or ax.get_visible()


def _metadata(fig: Figure, dpi: float) -> dict[str, str]:
    points = min_font_points(fig)
    return {} if points is None else {FONT_KEY: f"{points * dpi / 72:.2f}"}


def save(fig: Figure, path: Path, dpi: int = 110, tight: bool = True) -> Path:
    """Write ``fig`` to ``path`` (its folder made first); ``tight``: lay it out first (costs seconds for busy
    figures on a loaded CPU; a caller with fixed margins passes False). A PNG records its smallest font
    (:data:`FONT_KEY`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if tight:
        fig.tight_layout()
    if path.suffix.lower() == ".png":
        fig.draw_without_rendering()  # tick labels get their text at draw time
        fig.savefig(path, dpi=dpi, metadata=_metadata(fig, dpi))
    else:
        fig.savefig(path, dpi=dpi)
    return path


def png_bytes(fig: Figure, dpi: int = 100, tight: bool = True) -> bytes:
    """``fig`` as PNG bytes (for a store file written atomically by its caller)."""
    if tight:
        fig.tight_layout()
    fig.draw_without_rendering()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata=_metadata(fig, dpi))
    return buf.getvalue()
