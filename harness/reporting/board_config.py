"""The board's settings (a leaf module: the board, its tests of differences and the rank-stability notes all read
them)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import MixbenchError

#: names of tie groups, best first
GROUP_NAMES = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class BoardConfig:
    """``alpha``: family-wise level of the tie tests (Holm); ``rank_level``: coverage of the rank intervals;
    ``bootstrap``: resamples for rank intervals and paired tests; ``quality``/``speed``: the Pareto axes (a
    column name, or None for the Borda points and the first headline speed column; with no speed column there is
    no Pareto view: training tokens/s come from separate runs on whatever machine each ran, so they are never an
    axis, docs/ARCHITECTURE.md "The board")."""

    alpha: float = 0.05
    rank_level: float = 0.95
    bootstrap: int = 1000
    seed: int = 0
    quality: str | None = None
    speed: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1 or not 0 < self.rank_level < 1:
            raise MixbenchError("board: alpha and rank_level must be in (0, 1).")
        if self.bootstrap < 0:
            raise MixbenchError("board: bootstrap must be >= 0.")
