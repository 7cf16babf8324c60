"""The board's Pareto view: quality (Borda points or a named column) against speed, per preset
(docs/ARCHITECTURE.md, "The board")."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from harness.errors import MixbenchError
from harness.reporting.table import Cell, Row, Table

if TYPE_CHECKING:
    from harness.reporting.board import BoardConfig


def pareto_front(points: dict[Any, tuple[float, float]], x_higher: bool = True, y_higher: bool = True) -> set[Any]:
    """The keys no other point dominates (at least as good on both axes, better on one); NaN points are left out."""
    signed = {
        k: ((1 if x_higher else -1) * x, (1 if y_higher else -1) * y)
        for k, (x, y) in points.items()
        if not (math.isnan(x) or math.isnan(y))
    }
    return {
        k
        for k, (x, y) in signed.items()
        if not any(ox >= x and oy >= y and (ox > x or oy > y) for o, (ox, oy) in signed.items() if o != k)
    }


def speed_value(table: Table, row: Row, speed: str | None) -> float | None:
    """The speed column's value, inverted when lower is better, so that the Pareto axis is always "higher is
    faster"; None for a missing, NaN or non-positive value."""
    if speed is None:
        return None
    cell = table.cell(row, speed)
    if cell is None or cell.value is None or math.isnan(cell.value):
        return None
    if table.column(speed).higher_is_better:
        return cell.value
    return 1.0 / cell.value if cell.value > 0 else None


def pareto_flags(table: Table, by_preset: dict[str, list[Row]], points: dict[str, float | None],
                 config: BoardConfig) -> tuple[str, str, dict[str, bool | None]]:
    """The speed and quality axes' names and, per row, whether it is on its preset's Pareto front (None for
    controls, external models and rows without both values)."""
    speed_col = config.speed
    if speed_col is None:  # the first speed column a suite lists among its headline metrics, if any row has it
        speed_col = next((c.name for c in table.columns if c.role == "speed" and c.headline and not c.config), None)
    if speed_col is not None and speed_col not in {c.name for c in table.columns}:
        raise MixbenchError(f"board: speed column '{speed_col}' is not on the board.")
    quality = config.quality
    if quality is not None and quality not in {c.name for c in table.columns}:
        raise MixbenchError(f"board: quality column '{quality}' is not on the board.")
    quality_name = quality or "borda points"
    higher = True if quality is None else table.column(quality).higher_is_better
    out: dict[str, bool | None] = {}
    for rows in by_preset.values():
        pts = {}
        for row in rows:
            if row.control or row.external:  # controls are what the candidates are measured against; external
                # models are shown beside them
                out[row.key] = None
                continue
            q = points.get(row.key) if quality is None else _value(table.cell(row, quality))
            s = speed_value(table, row, speed_col)
            if q is None or s is None or math.isnan(q):
                out[row.key] = None
                continue
            pts[row.key] = (s, q)
        front = pareto_front(pts, True, higher)
        out.update({k: k in front for k in pts})
    return speed_col or "", quality_name, out


def _value(cell: Cell | None) -> float | None:
    return None if cell is None else cell.value
