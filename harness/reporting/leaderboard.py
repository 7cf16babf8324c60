"""``mixbench leaderboard``: the store's board as text (docs/DESIGN.md §6; docs/ARCHITECTURE.md "The board").

Three modules do the work, one job each: :mod:`harness.reporting.table` turns runs into rows and cells, :mod:`harness.reporting.board`
decides which columns vote, the tie groups and the ranks, :mod:`harness.reporting.render` formats views. This module only
joins them for the CLI, the quickstart and the site.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from harness.reporting.board import Board, BoardConfig, build_board
from harness.errors import MixbenchError
from harness.reporting.render import FORMATS, render
from harness.store.results import ResultsStore
from harness.reporting.table import build_table

__all__ = ["FORMATS", "board_of", "leaderboard_text"]


def board_of(store: ResultsStore, suites: Iterable[str] | None = None, *, all_metrics: bool = False,
             all_configs: bool = False, all_versions: bool = False, config: BoardConfig | None = None,
             all_budgets: bool = False) -> Board:
    table = build_table(store, suites, all_metrics=all_metrics, all_configs=all_configs, include_stale=all_versions,
                        all_budgets=all_budgets)
    return build_board(table, config)


def leaderboard_text(root: str, fmt: str = "md", view: str = "compact", suite: str | None = None,
                     suites: Iterable[str] | None = None, all_configs: bool = False, all_versions: bool = False,
                     all_budgets: bool = False) -> str:
    """The board of the store at ``root`` rendered as ``fmt`` in ``view`` (what ``mixbench leaderboard`` prints)."""
    store = ResultsStore(root)
    store.require_existing()
    chosen = [suite] if suite else suites
    board = board_of(store, chosen, all_metrics=view == "suite", all_configs=all_configs, all_versions=all_versions,
                     all_budgets=all_budgets)
    if chosen and board.table.rows:
        have = {r.manifest.suite for row in board.table.rows for r in row.runs}
        unknown = [s for s in dict.fromkeys(chosen) if s not in have]
        if unknown:
            close = [m for s in unknown for m in difflib.get_close_matches(s, sorted(have), n=1)]
            hint = f" Did you mean {' or '.join(repr(m) for m in dict.fromkeys(close))}?" if close else ""
            raise MixbenchError(
                f"no results for suite(s) {', '.join(unknown)} in {root}.{hint} Suites with results: "
                f"{', '.join(sorted(have)) or 'none'}."
            )
    return render(board, fmt, view, suite)
