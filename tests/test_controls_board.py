"""The board against its controls (docs/controls.md): planted stores with known numbers.

A control row is found by its flag (``Subject.control``), never by its name; it is shown, never ranked; a column
whose best mixer is not better than a control does not vote and says which control and with what numbers; a mixer
cell not better than the context-free control is marked; the JSON carries every comparison."""

from __future__ import annotations

import json

import numpy as np

from harness.reporting.board import BoardConfig
from harness.reporting.differences import CellDifference, cell_difference
from harness.reporting.leaderboard import board_of
from harness.reporting.legend import CONTROL_MARK
from harness.reporting.render import render
from harness.store.results import ResultsStore
from tests.planted import manifest, put, score, subject


def _items(rng: np.random.Generator, base: np.ndarray, shift: float, noise: float) -> dict[str, float]:
    return {f"doc{i}": float(v) for i, v in enumerate(base + shift + rng.normal(0, noise, len(base)))}


def _plant(store: ResultsStore, name: str, column: str, items: dict[str, float], higher: bool = True,
           control: bool = False, context_free: bool = False) -> None:
    suite, metric = column.split("/")
    value = float(np.mean(list(items.values())))
    s = subject(name, control=control, context_free=context_free)
    put(store, manifest(suite, s), [score(metric, value, higher, 0.02, items=items)])


def _column(store: ResultsStore, column: str, rng: np.random.Generator, base: np.ndarray, mixers: dict[str, float],
            controls: dict[str, float], context_free: bool = True) -> None:
    """One column: each mixer's and control's items are ``base`` shifted by its number, plus small noise."""
    for name, shift in mixers.items():
        _plant(store, name, column, _items(rng, base, shift, 0.01))
    for name, shift in controls.items():
        _plant(store, name, column, _items(rng, base, shift, 0.01), control=True, context_free=context_free)


def test_a_column_no_mixer_wins_against_a_control_does_not_vote_and_names_it(tmp_path):
    """Column syn/acc: the context-free control ties the best mixer (the same items up to noise far below the item
    spread): it does not vote and its reason names the control and both numbers. Column other/acc: both mixers
    beat both controls clearly: it votes as before, with the usual tie groups among mixers only."""
    rng = np.random.default_rng(0)
    base = rng.normal(0.5, 0.2, 300)
    store = ResultsStore(tmp_path)
    for column, (a, b, bigram, avg) in {"syn/acc": (0.0, -0.10, 0.0005, -0.2),
                                        "other/acc": (0.3, 0.2, 0.0, -0.1)}.items():
        _column(store, column, rng, base, {"a": a, "b": b}, {"bigram": bigram})
        _column(store, column, rng, base, {}, {"avg": avg}, context_free=False)
    board = board_of(store)
    rows = {r.label: r for r in board.table.rows}
    syn, other = board.verdicts["syn/acc"], board.verdicts["other/acc"]
    assert not syn.votes and syn.reason.startswith("no mixer beats the context-free control bigram: ")
    assert "against the best mixer, a, " in syn.reason
    assert other.votes and other.weight == 1.0
    assert {k: other.groups[rows[k].key] for k in ("a", "b")} == {"a": "a", "b": "b"}
    # controls are shown, never ranked, never in a tie group, never "unranked for lack of a suite"
    for name in ("bigram", "avg"):
        key = rows[name].key
        assert board.rank[key] is None and key not in board.unranked and key not in other.groups
    assert board.rank[rows["a"].key] == 1 and board.rank[rows["b"].key] == 2
    # marks: a ties the context-free control in syn (marked), beats it in other; b loses in syn (marked)
    assert (rows["a"].key, "syn/acc") in board.not_above_control
    assert (rows["b"].key, "syn/acc") in board.not_above_control
    assert (rows["a"].key, "other/acc") not in board.not_above_control
    assert board.reference_controls == ["bigram"]  # the context-free control, not the other one

    md = render(board, "md", "full")
    lines = [line for line in md.splitlines() if line.startswith("|")]
    assert [line.split("|")[2].strip() for line in lines[2:]] == ["a", "b", "avg", "bigram"]  # controls below
    assert all("control" in line.split("|")[1] for line in lines[-2:])
    assert CONTROL_MARK in next(line for line in lines if line.split("|")[2].strip() == "b")
    assert "vs bigram" in md

    doc = json.loads(render(board, "json", "full"))
    by_model = {r["model"]: r for r in doc["rows"]}
    assert {m: r["control"] for m, r in by_model.items()} == {"a": False, "b": False, "avg": True, "bigram": True}
    cell = by_model["b"]["cells"]["syn/acc"]
    assert cell["not_better_than_control"] is True
    comps = {c["control"]: c for c in cell["vs_controls"]}
    assert set(comps) == {"avg", "bigram"}
    assert comps["bigram"]["difference"] < 0 and comps["bigram"]["interval"]["high"] < 0  # b is clearly worse
    assert comps["avg"]["better"] is True and comps["avg"]["interval"]["low"] > 0
    assert "vs_controls" in by_model["bigram"]["cells"]["syn/acc"] and not by_model["bigram"]["cells"]["syn/acc"][
        "vs_controls"]  # a control is not compared with controls
    assert doc["headline"] is None  # a column still votes


def test_the_paired_difference_against_a_control_matches_a_by_hand_bootstrap(tmp_path):
    rng = np.random.default_rng(3)
    base = rng.normal(3.0, 1.0, 200)
    store = ResultsStore(tmp_path)
    _plant(store, "m", "ppl/nll", _items(rng, base, -0.05, 0.05), higher=False)
    _plant(store, "c", "ppl/nll", _items(rng, base, 0.0, 0.05), higher=False, control=True, context_free=True)
    board = board_of(store)
    rows = {r.label: r for r in board.table.rows}
    (comp,) = board.vs_controls[(rows["m"].key, "ppl/nll")]
    va = np.array(list(board.table.cell(rows["m"], "ppl/nll").items.values()))[:, 0]
    vc = np.array(list(board.table.cell(rows["c"], "ppl/nll").items.values()))[:, 0]
    assert abs(comp.difference.difference - (va.mean() - vc.mean())) < 1e-12
    draws = np.random.default_rng(1).integers(0, 200, (4000, 200))
    hand = va[draws].mean(1) - vc[draws].mean(1)
    lo, hi = np.quantile(hand, [0.025, 0.975])
    assert abs(comp.difference.interval.low - lo) < 0.01 and abs(comp.difference.interval.high - hi) < 0.01
    assert comp.better and (rows["m"].key, "ppl/nll") not in board.not_above_control  # lower NLL is better


def test_controls_are_found_by_their_flag_not_their_name(tmp_path):
    """A mixer called "none" without the flag is an ordinary ranked row; a control under any name is a control."""
    rng = np.random.default_rng(1)
    base = rng.normal(0.5, 0.2, 200)
    store = ResultsStore(tmp_path)
    _column(store, "syn/acc", rng, base, {"none": 0.0, "mean": -0.1}, {"my-own-floor": 0.05}, context_free=False)
    _column(store, "other/acc", rng, base, {"none": 0.3, "mean": 0.2}, {"my-own-floor": 0.0}, context_free=False)
    board = board_of(store)
    rows = {r.label: r for r in board.table.rows}
    assert board.rank[rows["none"].key] == 1 and board.rank[rows["mean"].key] == 2
    assert board.rank[rows["my-own-floor"].key] is None
    verdict = board.verdicts["syn/acc"]
    assert not verdict.votes and "no mixer beats the control my-own-floor" in verdict.reason
    # no context-free control: the marks compare with every control
    assert board.reference_controls == ["my-own-floor"]
    assert (rows["none"].key, "syn/acc") in board.not_above_control


def test_when_no_column_votes_the_first_line_says_nothing_tells_the_mixers_apart(tmp_path):
    rng = np.random.default_rng(2)
    base = rng.normal(0.5, 0.2, 200)
    store = ResultsStore(tmp_path)
    _column(store, "syn/acc", rng, base, {"a": 0.0, "b": -0.05}, {"ctl": 0.1})
    board = board_of(store)
    first = render(board, "md").split("\n\n")[0].replace("\n", " ")  # the headline paragraph, wrapped at 120
    assert first.startswith("**nothing on this board tells the mixers apart at this budget: no column votes")
    assert "syn/acc: no mixer beats the context-free control ctl" in first
    assert json.loads(render(board, "json"))["headline"].startswith("nothing on this board")
    assert board.rank[next(r.key for r in board.table.rows if r.label == "a")] is None


def test_a_control_without_a_value_neither_wins_nor_blocks_and_is_no_null(tmp_path):
    """A context-free control's selectivity is undefined (NaN): it cannot veto the column, so alone it leaves the
    column without a null and the column does not vote; a second control with a value (the blind average) is the
    null, and the column votes when the best mixer beats it."""
    rng = np.random.default_rng(4)
    base = rng.normal(0.5, 0.2, 200)
    store = ResultsStore(tmp_path)
    _plant(store, "a", "rob/sel", _items(rng, base, 0.1, 0.01))
    _plant(store, "b", "rob/sel", _items(rng, base, 0.0, 0.01))
    s = subject("ctl", control=True, context_free=True)
    put(store, manifest("rob", s), [score("sel", float("nan"), True)])
    board = board_of(store)
    assert not board.verdicts["rob/sel"].votes and "no null can veto it" in board.verdicts["rob/sel"].reason
    assert not board.not_above_control
    _plant(store, "avg", "rob/sel", _items(rng, base, -0.2, 0.01), control=True)
    board = board_of(store)
    assert board.verdicts["rob/sel"].votes
    assert not board.not_above_control  # the marks compare with the context-free control, which has no value


def test_cell_difference_without_items_is_a_z_test_on_the_intervals():
    from harness.stats import Interval
    from harness.reporting.table import Cell

    a = Cell(10.0, Interval(9.0, 11.0, "normal", 0.95), 1, True)
    b = Cell(7.0, Interval(6.0, 8.0, "normal", 0.95), 1, True)
    d = cell_difference(a, b, BoardConfig())
    assert isinstance(d, CellDifference) and d.scale == "values" and d.difference == 3.0
    se = np.hypot(1 / 1.959964, 1 / 1.959964)
    assert abs(d.interval.low - (3 - 1.959964 * se)) < 1e-3 and d.p_value < 0.05

