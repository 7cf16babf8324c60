"""Rank stability across token budgets (docs/rank_stability.md): planted stores where a setting was trained at
82k, 164k and 328k tokens; the board ranks the largest budget and says, per column, whether its ordering already
held at half of it, naming the pairs that swapped."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.reporting.board import BoardConfig
from harness.reporting.leaderboard import board_of
from harness.reporting.rank_stability import Swap, ordinal, ordering_text, tokens
from harness.reporting.legend import STABILITY_MARK
from harness.reporting.render import render
from harness.reporting.site_html import legend_items
from harness.store.identity import budget_series
from harness.store.results import ResultsStore
from tests.planted import manifest, put, score, subject

DEFAULT = 327_680  # preset quick's budget: its rows carry no token_budget in their labels, as in a real store
CONFIG = BoardConfig(bootstrap=200)
COLUMN = "perplexity/ppl"


def _plant(store: ResultsStore, ppl: dict[int, dict[str, float | tuple[float, float]]], control: bool = True) -> None:
    """One perplexity run per (budget, mixer): ``ppl[budget][mixer]`` is the value (half-width 0.5) or
    ``(value, half-width)``; with ``control``, the context-free ``none`` control at every budget, far behind."""
    for budget, by_mixer in ppl.items():
        diff = {} if budget == DEFAULT else {"token_budget": budget}
        entries = {**by_mixer, **({"none": 500.0} if control else {})}
        for mixer, planted in entries.items():
            value, half = planted if isinstance(planted, tuple) else (planted, 0.5)
            s = subject(mixer, preset="quick", train_diff=diff, control=mixer == "none", context_free=mixer == "none")
            put(store, manifest("perplexity", s, headline=("ppl",), train={"token_budget": budget}),
                [score("ppl", value, False, half)])


def _unwrapped(md: str) -> str:
    """The markdown board's legend lines as one line each (the renderer wraps them at 120 characters)."""
    return md.replace("\n  ", " ")


# the ordering at 164k is mamba, deltanet, attention; at 328k attention overtakes deltanet; protot has 328k only
SWAPPED = {
    81_920: {"attention": 40.0, "mamba": 30.0, "deltanet": 35.0},
    163_840: {"mamba": 20.0, "deltanet": 25.0, "attention": 30.0},
    327_680: {"protot": 10.0, "mamba": 15.0, "attention": 18.0, "deltanet": 22.0},
}


def test_a_swap_between_half_and_the_largest_budget_is_named_and_its_column_marked(tmp_path):
    store = ResultsStore(tmp_path)
    _plant(store, SWAPPED)
    board = board_of(store, config=CONFIG)
    assert {r.label for r in board.table.rows} == {"protot", "mamba", "attention", "deltanet", "none"}
    assert {r.budget for r in board.table.rows} == {DEFAULT}  # the largest budget's rows, ranked as before
    assert len(board.table.earlier) == 8 and any("8 row(s) trained at smaller token budgets (81.9k, 164k)" in n
                                                  for n in board.table.notes)
    (s,) = board.stability
    assert (s.column, s.status, s.largest, s.smaller, s.budgets) == (COLUMN, "changed", DEFAULT, 163_840,
                                                                   (81_920, 163_840, DEFAULT))
    assert s.swaps == (Swap("attention", "deltanet"),)
    assert [m.sentence for m in s.moves] == ["attention moved from 3rd to 2nd between 164k and 328k tokens",
                                             "deltanet moved from 2nd to 3rd between 164k and 328k tokens"]
    assert [(p.label, p.rank) for p in s.at_largest] == [("protot", None), ("mamba", 1), ("attention", 2),
                                                         ("deltanet", 3)]  # ranks among the models at both budgets
    assert "none" not in {p.label for p in s.at_largest + s.at_smaller}  # controls are never ordered
    assert board.unsettled == {COLUMN}

    full = render(board, "md", "full")
    assert f"{COLUMN}{STABILITY_MARK} ↓" in next(line for line in full.splitlines() if line.startswith("|"))
    assert (f"- {STABILITY_MARK} {COLUMN}: its ordering at 328k tokens did not hold at 164k: attention moved from 3rd "
            "to 2nd between 164k and 328k tokens; deltanet moved from 2nd to 3rd between 164k and 328k tokens "
            "(swapped: attention over deltanet; 164k: mamba > deltanet > attention; 328k: protot > mamba > attention "
            "> deltanet; protot has no 164k model).") in _unwrapped(full)
    compact = render(board, "md")
    header = next(line for line in compact.splitlines() if line.startswith("|"))
    assert f"|perplex.{STABILITY_MARK}|" in header.replace(" ", "")
    doc = json.loads(render(board, "json", "full"))
    (record,) = doc["rank_stability"]
    assert record["status"] == "changed" and record["swaps"] == [{"ahead": "attention", "behind": "deltanet"}]
    assert [c["ordering_changed"] for c in doc["columns"] if c["name"] == COLUMN] == [True]
    assert any(line.startswith(f"{STABILITY_MARK} {COLUMN}: ") for line in doc["notes"])

    site = dict(legend_items(board, pareto=False))  # the site's legend says the same
    assert site[STABILITY_MARK].startswith("a column whose ordering is still changing")
    assert site[f"{STABILITY_MARK} {COLUMN}"].startswith("its ordering at 328k tokens did not hold at 164k: ")

    every = board_of(store, config=CONFIG, all_budgets=True)  # the old board: every budget a row, ranked together
    assert len(every.table.rows) == 13 and not every.table.earlier
    assert [x.swaps for x in every.stability] == [s.swaps]


def test_an_ordering_that_held_at_half_the_budget_is_said_and_not_marked(tmp_path):
    """82k -> 164k swaps, 164k -> 328k does not: only half the largest budget is compared."""
    store = ResultsStore(tmp_path)
    _plant(store, {81_920: {"attention": 20.0, "mamba": 30.0, "deltanet": 35.0},
                   163_840: {"mamba": 20.0, "attention": 25.0, "deltanet": 30.0},
                   327_680: {"mamba": 15.0, "attention": 18.0, "deltanet": 22.0}})
    board = board_of(store, config=CONFIG)
    (s,) = board.stability
    assert (s.status, s.swaps, s.moves) == ("held", (), ())
    assert board.unsettled == set()
    full = render(board, "md", "full")
    assert STABILITY_MARK not in full.split("\n\n")[0]
    assert (f"- rank stability of {COLUMN}: its ordering at 328k tokens (mamba > attention > deltanet) already held "
            "at 164k.") in _unwrapped(full)
    doc = json.loads(render(board, "json", "full"))
    assert doc["rank_stability"][0]["status"] == "held"
    assert not any(c.get("ordering_changed") for c in doc["columns"])


def test_a_single_budget_board_is_unchanged(tmp_path):
    """Every model at one budget: no note, no mark, no JSON key; the board reads as a store without budgets."""
    with_budget, without = ResultsStore(tmp_path / "a"), ResultsStore(tmp_path / "b")
    _plant(with_budget, {DEFAULT: SWAPPED[DEFAULT]})
    for mixer, value in {**SWAPPED[DEFAULT], "none": 500.0}.items():
        s = subject(mixer, preset="quick", control=mixer == "none", context_free=mixer == "none")
        put(without, manifest("perplexity", s, headline=("ppl",)), [score("ppl", value, False, 0.5)])
    boards = [board_of(store, config=CONFIG) for store in (with_budget, without)]
    assert boards[0].stability == [] and not boards[0].table.earlier
    for fmt in ("md", "json"):
        texts = [render(b, fmt, "full") for b in boards]
        assert "rank stability" not in texts[0] and "rank_stability" not in texts[0]
        if fmt == "md":  # from the table on: the first lines state the training budget only where it is known
            assert texts[0][texts[0].index("\n|"):] == texts[1][texts[1].index("\n|"):]


def test_ties_at_both_budgets_are_no_swap_but_a_tie_at_one_budget_is(tmp_path):
    """x and y reverse their values between 164k and 328k. Within one tie group at both budgets (wide intervals)
    that is no swap; tied only at 328k, distinguishable at 164k, it is."""
    store = ResultsStore(tmp_path / "both")
    _plant(store, {163_840: {"x": (20.0, 5.0), "y": (21.0, 5.0), "z": 40.0},
                   DEFAULT: {"x": (21.0, 5.0), "y": (20.0, 5.0), "z": 40.0}}, control=False)
    (s,) = board_of(store, config=CONFIG).stability
    assert s.status == "held" and ordering_text(s.at_largest) == "y ≈ x > z"
    assert [(p.label, p.rank) for p in s.at_largest][:2] == [("y", 1), ("x", 2)]  # ranks move; the claim does not

    store = ResultsStore(tmp_path / "one")
    _plant(store, {163_840: {"x": (10.0, 0.1), "y": (20.0, 0.1), "z": 40.0},
                   DEFAULT: {"x": (21.0, 5.0), "y": (20.0, 5.0), "z": 40.0}}, control=False)
    (s,) = board_of(store, config=CONFIG).stability
    assert s.status == "changed" and s.swaps == (Swap("y", "x"),)


def test_no_budget_at_or_below_half_says_so_without_a_mark(tmp_path):
    store = ResultsStore(tmp_path)
    _plant(store, {245_760: {"a": 20.0, "b": 30.0}, DEFAULT: {"a": 25.0, "b": 15.0}}, control=False)
    board = board_of(store, config=CONFIG)
    (s,) = board.stability
    assert s.status == "no half budget" and board.unsettled == set()
    assert "no budget at or below half of 328k tokens (budgets 246k, 328k)" in _unwrapped(render(board, "md", "full"))


def test_budget_series_ignore_seed_and_code_and_split_on_anything_else():
    parts = {"mixer": {"mixer": "a", "mixer_config": {}, "mixer_code": "c1"}, "preset": "quick", "core_code": "c1",
             "train": {"seed": 0, "token_budget": 100, "lr": 1e-3}, "backbone": {"d_model": 64}}
    series, member, budget = budget_series(parts)
    reseeded = {**parts, "core_code": "c2", "train": {**parts["train"], "seed": 3, "token_budget": 200}}
    assert budget_series(reseeded) == (series, member, 200)
    other_mixer = {**parts, "mixer": {"mixer": "b", "mixer_config": {}, "mixer_code": "c1"}}
    assert budget_series(other_mixer)[:1] == (series,) and budget_series(other_mixer)[1] != member
    assert budget_series({**parts, "backbone": {"d_model": 128}})[0] != series
    assert budget_series({**parts, "train": {**parts["train"], "lr": 2e-3}})[0] != series
    assert budget_series({"mixer": "a", "mixer_config": {}}) is None  # a mixer-scoped subject


@pytest.mark.parametrize("n,text", [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
                                    (22, "22nd"), (101, "101st")])
def test_ordinals(n, text):
    assert ordinal(n) == text


def test_budgets_read_like_the_boards_counts():
    assert [tokens(b) for b in (81_920, 163_840, 327_680, 1_310_720)] == ["81.9k", "164k", "328k", "1.31M"]


def test_a_mixer_scoped_suite_gets_no_note(tmp_path):
    """A mixer-scoped suite trains its own models from the mixer's definition: its cell joins every budget's row
    of that mixer alike, so its column has no ordering across budgets to assess."""
    store = ResultsStore(tmp_path)
    _plant(store, SWAPPED, control=False)
    for i, mixer in enumerate(("attention", "mamba", "deltanet", "protot")):
        model = subject(mixer, preset="quick")
        scoped = dataclasses.replace(model, kind="mixer", id=model.mixer_id, row_id=model.mixer_id, preset=None)
        put(store, manifest("syn", scoped, headline=("acc",)), [score("acc", 0.5 + i / 10, True, 0.01)])
    board = board_of(store, config=CONFIG)
    assert board.table.cell(board.table.rows[0], "syn/acc") is not None
    assert [s.column for s in board.stability] == [COLUMN]
