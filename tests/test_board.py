"""The board: rows are models, only trustworthy columns vote, tie groups from paired tests, rank intervals,
readable views. Planted stores with known numbers, checked against by-hand computations."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness import stats
from harness.reporting.board import BoardConfig, build_board
from harness.reporting.differences import compare_cells
from harness.reporting.leaderboard import board_of, leaderboard_text
from harness.reporting.render import render
from harness.store.results import ResultsStore
from harness.reporting.table import build_table
from tests.planted import control, manifest, put, score, subject

REPO = Path(__file__).resolve().parents[1]


def _rows(board):
    return {row.label: row for row in board.table.rows}


def test_rows_are_models_and_a_debug_eval_never_replaces_the_canonical_cell(tmp_path):
    """protot at its default config and at n_prototypes=4, plus a max_windows=4 debug eval of the default model:
    three labelled things (two rows, one extra column under --all-configs); the canonical cell is unchanged."""
    store = ResultsStore(tmp_path)
    default, ablation = subject("protot"), subject("protot", config={"n_prototypes": 4})
    put(store, manifest("perplexity", default, headline=("ppl",)), [score("ppl", 139.0, False, 5.0)])
    put(store, manifest("robustness", default), [score("jsd", 0.20, False, 0.01)])
    put(store, manifest("perplexity", ablation, headline=("ppl",)), [score("ppl", 234.0, False, 5.0)])
    put(store, manifest("perplexity", default, config={"max_windows": 4}, source="override", headline=("ppl",)),
        [score("ppl", 90.0, False, 30.0)])
    board = board_of(store)
    rows = _rows(board)
    assert set(rows) == {"protot", "protot (n_prototypes=4)"}
    assert board.table.cell(rows["protot"], "perplexity/ppl").value == 139.0
    assert board.table.cell(rows["protot (n_prototypes=4)"], "perplexity/ppl").value == 234.0
    assert board.table.cell(rows["protot (n_prototypes=4)"], "robustness/jsd") is None  # never borrowed
    assert any("under other configs" in n for n in board.table.notes)
    wide = board_of(store, all_configs=True)
    assert "perplexity[max_windows=4]/ppl" in [c.name for c in wide.table.columns]
    assert wide.table.cell(_rows(wide)["protot"], "perplexity[max_windows=4]/ppl").value == 90.0
    assert not wide.verdicts["perplexity[max_windows=4]/ppl"].votes


def test_seeds_of_one_config_share_a_row_with_a_t_interval(tmp_path):
    store = ResultsStore(tmp_path)
    for seed, value in enumerate([10.0, 12.0, 14.0]):
        put(store, manifest("perplexity", subject("attention", seed=seed)), [score("ppl", value, False, 1.0)])
    (row,) = board_of(store).table.rows
    cell = build_table(store).cell(row.key, "perplexity/ppl")
    half = 4.302653 * 2.0 / math.sqrt(3)  # t_{0.975,2} * sd / sqrt(n)
    assert row.seeds == (0, 1, 2) and cell.n_seeds == 3 and cell.value == pytest.approx(12.0)
    assert (cell.interval.kind, cell.interval.low, cell.interval.high) == ("t", pytest.approx(12 - half, abs=1e-5),
                                                                            pytest.approx(12 + half, abs=1e-5))


def test_baselines_and_speed_never_vote_and_suites_weigh_the_same(tmp_path):
    """Suite A has three score columns, suite B one: each suite's vote totals 1. With planted numbers the Borda
    points are computed by hand; unigram perplexity (a baseline) and tokens/s (speed) change nothing."""
    store = ResultsStore(tmp_path)
    values = {"x": (1.0, 1.0, 1.0, 0.0), "y": (0.0, 0.0, 0.0, 1.0)}  # x wins every A column, y wins B
    for mixer, (a1, a2, a3, b) in values.items():
        s = subject(mixer)
        put(store, manifest("A", s), [score("a1", a1, half=0.01), score("a2", a2, half=0.01),
                                       score("a3", a3, half=0.01),
                                       score("unigram_ppl", 5.0 if mixer == "x" else 1.0, False, role="baseline"),
                                       score("tok_s", 1.0 if mixer == "x" else 1e6, role="speed")])
        put(store, manifest("B", s), [score("b", b, half=0.01)])
    floor = control()  # the null every column needs: the winners beat it
    put(store, manifest("A", floor), [score(n, -1.0, half=0.01) for n in ("a1", "a2", "a3")])
    put(store, manifest("B", floor), [score("b", -1.0, half=0.01)])
    board = board_of(store)
    weights = {v.column.name: v.weight for v in board.verdicts.values() if v.votes}
    assert weights == {"A/a1": pytest.approx(1 / 3), "A/a2": pytest.approx(1 / 3), "A/a3": pytest.approx(1 / 3),
                       "B/b": 1.0}
    assert not board.verdicts["A/unigram_ppl"].votes and not board.verdicts["A/tok_s"].votes
    rows = _rows(board)
    assert board.points[rows["x"].key] == pytest.approx(1.0) and board.points[rows["y"].key] == pytest.approx(1.0)
    assert board.rank[rows["x"].key] == board.rank[rows["y"].key] == 1  # one suite each: a tie, not 3 to 1


def _items(base: np.ndarray, shift: float, noise: float, rng) -> dict[str, float]:
    return {f"doc{i}": float(v) for i, v in enumerate(base + shift + rng.normal(0, noise, len(base)))}


def test_tie_groups_follow_paired_tests_on_shared_items(tmp_path):
    """Three mixers on the same 200 items: a and b differ by less than their item noise (tied, group a), c is
    clearly worse (group b). The decision equals a by-hand paired bootstrap's; the rank intervals of a and b
    overlap, c's does not."""
    rng = np.random.default_rng(0)
    base = rng.normal(0.5, 0.2, 200)
    planted = {"a": _items(base, 0.0, 0.05, rng), "b": _items(base, -0.003, 0.05, rng),
               "c": _items(base, -0.10, 0.05, rng)}
    store = ResultsStore(tmp_path)
    for mixer, items in planted.items():
        value = float(np.mean(list(items.values())))
        put(store, manifest("syn", subject(mixer)), [score("acc", value, True, 0.02, items=items)])
    floor = _items(base, -0.3, 0.05, rng)
    put(store, manifest("syn", control()),
        [score("acc", float(np.mean(list(floor.values()))), True, 0.02, items=floor)])
    board = board_of(store)
    rows = _rows(board)
    groups = {m: board.group(rows[m], board.table.column("syn/acc")) for m in planted}
    assert groups == {"a": "a", "b": "a", "c": "b"}
    # by hand: resample the 200 shared items, difference of means, two-sided bootstrap p-value
    va, vb, vc = (np.array(list(planted[m].values())) for m in "abc")
    hand = np.random.default_rng(1)
    draws = hand.integers(0, 200, (4000, 200))
    for other, expect_same in ((vb, True), (vc, False)):
        d = va[draws].mean(1) - other[draws].mean(1)
        p = min(1.0, 2 * (min((d <= 0).sum(), (d >= 0).sum()) + 1) / (len(d) + 1))
        assert (p > 0.05) == expect_same
        ours = compare_cells(board.table.cell(rows["a"], "syn/acc"),
                             board.table.cell(rows["b" if expect_same else "c"], "syn/acc"), board.config)
        assert (ours > 0.05) == expect_same
    ia, ib, ic = (board.rank_interval[rows[m].key] for m in "abc")
    assert not (ia[1] < ib[0] or ib[1] < ia[0])  # a and b overlap: tied
    assert ic[0] > max(ia[1], ib[1]) and board.tied[rows["a"].key] and not board.tied[rows["c"].key]


def test_a_row_missing_a_suite_is_unranked_never_first(tmp_path):
    store = ResultsStore(tmp_path)
    for mixer, ppl in (("a", 10.0), ("b", 20.0), ("c", 30.0)):
        put(store, manifest("perplexity", subject(mixer)), [score("ppl", ppl, False, 0.1)])
    for mixer, acc in (("a", 0.9), ("b", 0.8)):  # c lacks robustness
        put(store, manifest("robustness", subject(mixer)), [score("acc", acc, True, 0.01)])
    put(store, manifest("perplexity", control()), [score("ppl", 40.0, False, 0.1)])
    put(store, manifest("robustness", control()), [score("acc", 0.1, True, 0.01)])
    put(store, manifest("judge", subject("c")), [score("elo", 2000.0, True, 1.0)])  # only c ran it: too sparse
    board = board_of(store)
    rows = _rows(board)
    assert board.rank[rows["a"].key] == 1 and board.rank[rows["b"].key] == 2
    assert board.rank[rows["c"].key] is None and board.unranked[rows["c"].key] == "lacks robustness"
    assert not board.verdicts["judge/elo"].votes and "only 1 of 3" in board.verdicts["judge/elo"].reason
    text = render(board, "md")
    assert "c / tiny is not ranked: it lacks robustness" in text


def test_a_suite_with_only_ad_hoc_runs_is_a_diagnostic_column_that_never_votes_or_unranks(tmp_path):
    """Mixer-scoped runs (no trained model) under an ad-hoc suite config beside a canonical perplexity column: the
    compact view shows the ad-hoc column and the rows carry their runs' conformance verdict, but the column never
    votes (one ad-hoc run, `mixbench lm-eval --limit 50` on one mixer, once became the board's rank), and a row
    without it stays ranked."""
    store = ResultsStore(tmp_path)
    for mixer, acc in (("a", 0.80), ("b", 0.20)):
        s = dataclasses.replace(subject(mixer), kind="mixer", preset=None, seed=None, parameters=None,
                                state_floats=None, train_tokens_per_s=None)
        put(store, manifest("synthetic", s, config={"lrs": [0.003]}, source="override", headline=("recall/acc",)),
            [score("recall/acc", acc, True, 0.01)])
    for mixer, ppl in (("a", 20.0), ("b", 10.0), ("c", 15.0)):
        put(store, manifest("perplexity", subject(mixer)), [score("ppl", ppl, False, 0.1)])
    put(store, manifest("perplexity", control()), [score("ppl", 40.0, False, 0.1)])
    board = board_of(store)
    assert [c.name for c in board.voting] == ["perplexity/ppl"]
    assert "ad-hoc config" in board.verdicts["synthetic[lrs=0.003]/recall/acc"].reason
    text = render(board, "md")
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert table[0].split("|")[-2].strip() == "synthet."  # shown, as a diagnostic
    assert "synthet. = synthetic[lrs=0.003]/recall/acc" in text
    cells = {line.split("|")[2].strip(): [c.strip() for c in line.split("|")] for line in table[2:]}
    assert cells["b"][1].startswith("1") and cells["c"][1].startswith("2") and cells["a"][1].startswith("3")
    assert cells["a"][5] == cells["b"][5] == "ok"
    assert not board.unranked


def test_a_skip_gated_mixer_scoped_run_marks_the_model_row_it_joins(tmp_path):
    """A mixer-scoped run joins every row of its mixer: scored with --skip-gate, it must not hide behind the
    model runs' 'passed'."""
    store = ResultsStore(tmp_path)
    model = subject("a")
    put(store, manifest("perplexity", model), [score("ppl", 10.0, False, 0.1)])
    mixer_only = dataclasses.replace(model, kind="mixer", preset=None, seed=None)
    put(store, manifest("synthetic", mixer_only, gate="skipped"), [score("recall/acc", 0.5, True, 0.01)])
    (row,) = board_of(store).table.rows
    assert row.gate == "mixed" and len(row.runs) == 2


def test_unreliable_and_chance_level_columns_do_not_vote(tmp_path):
    store = ResultsStore(tmp_path)
    for mixer, elo, acc in (("a", 1100.0, 50.5), ("b", 900.0, 49.8)):
        s = subject(mixer)
        put(store, manifest("judge", s), [score("elo", elo, True, 30.0, unreliable="canary agreement 0.50 [0.36, 0.64] includes chance")])
        put(store, manifest("glue", s), [score("acc", acc, True, 2.0, chance=50.0, perfect=100.0)])
        put(store, manifest("perplexity", s), [score("ppl", 10.0 if mixer == "a" else 11.0, False, 0.1)])
    put(store, manifest("perplexity", control()), [score("ppl", 12.0, False, 0.1)])
    board = board_of(store)
    assert board.verdicts["judge/elo"].reason.startswith("unreliable: canary agreement")
    assert "chance level" in board.verdicts["glue/acc"].reason
    assert [c.name for c in board.voting] == ["perplexity/ppl"]
    md = render(board, "md", "full")
    assert "1100.0 [1070, 1130]†" in md.replace(".0 [", " [").replace("1100 [", "1100.0 [") or "†" in md


@pytest.mark.parametrize("lead", [0.05, 0.12])
def test_a_column_whose_cells_are_all_marked_does_not_vote(tmp_path, lead):
    """Best mixer ``a`` leads ``none`` by 0.05 at z = 2.37 (p = 0.018): under Holm over the two controls it beats
    both (0.018 < 0.05 at the second step), under Holm over the four mixers it does not (0.018 > 0.05/4), so
    every cell is marked ‡; a column listed as voting would give no points. With a lead of 0.12 it votes."""
    store = ResultsStore(tmp_path)
    half = 0.05 / 2.37 / math.sqrt(2) * 1.959964  # two equal standard errors whose difference has z = 2.37
    values = {"a": 0.67 + lead, "b": 0.66, "c": 0.65, "d": 0.64}
    for mixer, value in values.items():
        put(store, manifest("cls", subject(mixer, "planted")), [score("acc", value, True, half)])
        put(store, manifest("perplexity", subject(mixer, "planted")),
            [score("ppl", 10.0 if mixer == "a" else 11.0, False, 0.1)])
    for name, value in (("none", 0.67), ("mean", 0.55)):
        put(store, manifest("cls", control(name, "planted")), [score("acc", value, True, half)])
        put(store, manifest("perplexity", control(name, "planted")), [score("ppl", 12.0, False, 0.1)])
    board = board_of(store)
    rows = _rows(board)
    column = board.table.column("cls/acc")
    p_none = next(c.difference.p_value for c in board.vs_controls[(rows["a"].key, "cls/acc")] if c.label == "none")
    assert (0.0125 < p_none < 0.025) if lead < 0.1 else p_none < 0.001
    votes = board.verdicts["cls/acc"].votes
    if lead < 0.1:
        assert all(board.not_above(rows[m], column) for m in values)
        assert not votes and board.verdicts["cls/acc"].reason.startswith("every mixer cell is ‡")
    else:
        assert votes and not board.not_above(rows["a"], column)


def test_stale_code_rows_are_hidden_by_default(tmp_path):
    store = ResultsStore(tmp_path)
    put(store, manifest("perplexity", subject("protot", code="old"), code="old"), [score("ppl", 100.0, False, 1.0)])
    put(store, manifest("perplexity", subject("protot", code="new"), code="new"), [score("ppl", 90.0, False, 1.0)])
    board = board_of(store)
    (row,) = board.table.rows
    assert board.table.cell(row, "perplexity/ppl").value == 90.0
    assert any("older code" in n for n in board.table.notes)
    assert len(board_of(store, all_versions=True).table.rows) == 2


def _wide_store(root: Path, label: str = "protot") -> ResultsStore:
    """Four mixers x eight suites, like the quickstart's board."""
    store = ResultsStore(root)
    rng = np.random.default_rng(3)
    suites = ["perplexity", "throughput", "robustness", "glue", "judge", "interpretability", "synthetic", "lm-eval"]
    for mixer in (label, "attention", "mamba", "deltanet"):
        s = subject(mixer, parameters=1_234_567, state_floats=8_388_608)
        for suite in suites:
            value = float(rng.uniform(100, 999))
            put(store, manifest(suite, s, headline=("m",)), [score("m", value, True, float(rng.uniform(1, 90)))])
    for suite in suites:
        put(store, manifest(suite, control(), headline=("m",)), [score("m", 1.0, True, 0.5)])
    return store


def test_compact_view_fits_120_columns_and_full_views_parse(tmp_path):
    store = _wide_store(tmp_path)
    text = leaderboard_text(str(tmp_path))
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert table and max(len(line) for line in table) <= 120, max(len(line) for line in table)
    doc = json.loads(leaderboard_text(str(tmp_path), "json", "full"))
    assert {r["model"] for r in doc["rows"]} == {"protot", "attention", "mamba", "deltanet", "none"}
    assert all(r["rank_interval"] is not None for r in doc["rows"] if not r["control"])
    first = doc["rows"][0]["cells"]["perplexity/m"]
    assert {"value", "interval", "group", "votes", "role"} <= set(first) and first["interval"]["kind"] == "bootstrap"
    csv = leaderboard_text(str(tmp_path), "csv", "full")
    assert "perplexity/m group" in csv.splitlines()[0]
    assert r"\begin{tabular}" in leaderboard_text(str(tmp_path), "latex")
    assert "<table" in leaderboard_text(str(tmp_path), "html")
    suite = leaderboard_text(str(tmp_path), "md", "suite", "glue")
    assert "glue/m" in suite and "perplexity" not in suite.split("\n\n")[0]


def test_compact_view_of_small_numbers_drops_digits_then_columns_to_fit_and_says_so(tmp_path):
    """Values like the quickstart's JSDs (.00236±.0007) in every column are too wide at three digits: the
    compact view shows the widest columns to two, then leaves out state, then suites, naming them, but never the
    parameter counts a reader needs to judge a rank; the JSON keeps every digit."""
    store = ResultsStore(tmp_path)
    rng = np.random.default_rng(5)
    suites = ["perplexity", "throughput", "robustness", "glue", "judge", "interpretability", "synthetic", "lm-eval"]
    planted = set()
    for mixer in ("a-long-mixer-name", "attention", "mamba", "deltanet"):
        s = subject(mixer, parameters=1_234_567, state_floats=8_388_608)
        for suite in suites:
            value = float(rng.uniform(0.001, 0.009))
            planted.add(value)
            put(store, manifest(suite, s, headline=("m",)), [score("m", value, True, 0.000712)])
    for suite in suites:
        put(store, manifest(suite, control(), headline=("m",)), [score("m", 0.0001, True, 0.00001)])
    text = leaderboard_text(str(tmp_path))
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert max(len(line) for line in table) <= 120
    assert "left out to fit 120 columns: state, " in text and "|state|" not in table[0] and "|params|" in table[0]
    doc = json.loads(leaderboard_text(str(tmp_path), "json", "full"))
    assert {c["value"] for r in doc["rows"] for c in r["cells"].values() if not r["control"]} == planted


def test_model_text_is_escaped_in_every_format(tmp_path):
    evil = "x|y<script>alert(1)</script>&_%"
    _wide_store(tmp_path, label=evil)
    html = leaderboard_text(str(tmp_path), "html")
    assert "<script>" not in html and "&lt;script&gt;" in html
    for view in ("compact", "full"):  # Markdown passes HTML through to whoever renders it: entities, as in html
        md = leaderboard_text(str(tmp_path), "md", view)
        assert r"x\|y" in md and "<script>" not in md and r"x\|y&lt;script&gt;alert(1)&lt;/script&gt;&amp;" in md
    latex = leaderboard_text(str(tmp_path), "latex")
    assert r"\&\_\%" in latex


def test_reading_commands_refuse_what_is_not_a_store(tmp_path):
    from harness.errors import MixbenchError

    with pytest.raises(MixbenchError, match="does not exist"):
        leaderboard_text(str(tmp_path / "missing"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(MixbenchError, match="is a file"):
        leaderboard_text(str(tmp_path / "file"))
    with pytest.raises(MixbenchError, match="not a results store"):
        leaderboard_text(str(tmp_path))


def test_leaderboard_into_a_closed_pipe_is_quiet(tmp_path):
    _wide_store(tmp_path)
    cmd = f"{sys.executable} -m harness.cli leaderboard --results {tmp_path} --all | head -n 1"
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr and done.stdout.startswith("preset tiny: ")


def test_ranks_need_no_items_but_then_claim_less(tmp_path):
    """Without items the tie test uses the intervals (z-test on their standard errors); without intervals it
    claims nothing: rows stay in one group."""
    store = ResultsStore(tmp_path)
    for mixer, value, half in (("a", 10.0, 0.1), ("b", 10.05, 0.1), ("c", 12.0, 0.1), ("d", 13.0, None)):
        put(store, manifest("perplexity", subject(mixer)), [score("ppl", value, False, half)])
    put(store, manifest("perplexity", control()), [score("ppl", 40.0, False, 0.1)])
    board = build_board(build_table(store), BoardConfig(bootstrap=200))
    rows = _rows(board)
    col = board.table.column("perplexity/ppl")
    # d has no interval: nothing can tell it from the best, so it stays in the top group (no claim without data)
    assert [board.group(rows[m], col) for m in "abcd"] == ["a", "a", "b", "a"]
    z = (12.0 - 10.0) / math.hypot(0.1 / 1.959964, 0.1 / 1.959964)
    assert compare_cells(board.table.cell(rows["a"], col), board.table.cell(rows["c"], col), board.config) == \
        pytest.approx(2 * (1 - 0.5 * (1 + math.erf(z / math.sqrt(2)))), abs=1e-12)
    assert stats.holm([0.01, 0.5])[0] == [True, False]


def test_pareto_speed_is_a_measured_ratio_never_training_tokens_per_s(tmp_path):
    """The Pareto axis is the first headline speed column, inverted when lower is better (a time ratio), so
    higher is always faster; without one there is no Pareto view at all, however fast training was."""
    store = ResultsStore(tmp_path)
    quality = {"a": 1.0, "b": 0.5, "c": 3.0}
    time_ratio = {"a": 0.5, "b": 1.0, "c": 4.0}  # a is fastest: half the reference's time
    for mixer in quality:
        s = subject(mixer, train_tokens_per_s={"a": 1.0, "b": 2.0, "c": 1e9}[mixer])
        put(store, manifest("Q", s, headline=("q",)), [score("q", quality[mixer])])
    config = BoardConfig(quality="Q/q")
    board = board_of(store, config=config)
    assert board.speed_name == "" and set(board.pareto.values()) == {None}  # training tokens/s is no axis
    assert board.speed_of(board.table.rows[0]) is None
    for mixer in quality:
        put(store, manifest("T", subject(mixer), headline=("time_ratio",)),
            [score("time_ratio", time_ratio[mixer], False, role="speed")])
    board = board_of(store, config=config)
    rows = _rows(board)
    assert board.speed_name == "T/time_ratio"
    assert {m: board.speed_of(rows[m]) for m in quality} == {"a": 2.0, "b": 1.0, "c": 0.25}
    # b is slower than a and worse: dominated; c trades speed for quality. With the ratio read as "higher is
    # better" c would dominate everything.
    assert {m: board.pareto[rows[m].key] for m in quality} == {"a": True, "b": False, "c": True}


def test_a_suites_first_column_is_its_first_headline_whatever_order_it_emits_metrics_in(tmp_path):
    """The throughput suite emits its headline train_vs_floor last; the compact view showed prefill_exponent, the
    first headline metric it emitted, instead."""
    store = ResultsStore(tmp_path)
    for mixer in ("a", "b"):
        put(store, manifest("T", subject(mixer), headline=("first", "second_*")),
            [score("other", 1.0, role="diagnostic"), score("second_x", 2.0, role="diagnostic"),
             score("first", 3.0, role="speed")])
    board = board_of(store, all_metrics=True)
    assert [c.metric for c in board.table.columns] == ["first", "second_x", "other"]
    assert "T/first" in render(board, "md") and "T/second_x" not in render(board, "md").split("\n\n")[0]
    assert board.speed_name == "T/first"
