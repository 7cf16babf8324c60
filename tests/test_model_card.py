"""The model card mirrors the board (issue 48): its cells, votes, vetoes, marks and rank are the board's of the whole
store, checked against ``build_board`` on the same store; its "trained by" line says only what the checkpoint
records; text from the store is escaped. One real ``mixbench run`` (attention and the ``none`` control at the tiny
preset) gives a run-trained checkpoint and a store where the control beats attention; other stores copy its runs
(attention alone: no null; a planted worse control: a column that votes)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.hf.card import model_card
from harness.hf.export import export_checkpoint
from harness.model.checkpoint import load_model
from harness.reporting.board import build_board
from harness.reporting.legend import legend
from harness.reporting.render import escape_md
from harness.reporting.table import build_table
from harness.store.results import ResultsStore
from harness.suite import SuiteResult
from tests.conftest import TINY_TRAIN, main

SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A real store from `mixbench run` and its attention checkpoint, exported once for the card's config."""
    root = tmp_path_factory.mktemp("card")
    store = root / "results"
    assert main(["run", "--mixers", "attention", "--controls", "none", *TINY_TRAIN, "--results", str(store)]) == 0
    runs = list(ResultsStore(store).iter_runs(samples=False))
    attention = next(r for r in runs if r.manifest.subject.mixer == "attention")
    checkpoint = Path(attention.manifest.subject.checkpoint)
    export_checkpoint(checkpoint, root / "hf")
    model, ckpt = load_model(checkpoint)
    config = json.loads((root / "hf" / "config.json").read_text())
    return SimpleNamespace(root=root, store=store, runs=runs, ckpt=ckpt, config=config,
                           parameters=model.num_parameters(), checkpoint=checkpoint)


def copy_store(grid, name: str, change=lambda run: (run.manifest, run.metrics)) -> Path:
    """A store of ``grid``'s runs as ``change`` makes them (None leaves a run out)."""
    out = ResultsStore(grid.root / name)
    for run in grid.runs:
        made = change(run)
        if made is not None:
            out.write_run(run.run_id, made[0], SuiteResult(list(made[1])))
    return grid.root / name


def worse_control(run):
    """The ``none`` run with every item 1.5 worse (attention beats it) and ``<script>`` in its label."""
    m = run.manifest
    if not m.subject.control:
        return m, run.metrics
    metrics = [dataclasses.replace(x, items=dataclasses.replace(x.items, values=tuple(v + 1.5 for v in x.items.values)))
               if x.items is not None else x for x in run.metrics]
    return dataclasses.replace(m, subject=dataclasses.replace(m.subject, config_diff={"note": SCRIPT})), metrics


def card_and_board(grid, store: Path):
    text = model_card(grid.ckpt, grid.config, grid.parameters, [], results=ResultsStore(store))
    board = build_board(build_table(ResultsStore(store)))  # the independent path: the board as the tests build it
    weights = grid.ckpt.meta["weights_sha256"]
    row = next(r for r in board.table.rows if any(x.manifest.subject.weights_sha256 == weights for x in r.runs))
    return text, board, row


def table_line(text: str, column) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {column.suite} | {column.metric} |"))


def test_cells_votes_and_vetoes_are_the_boards(grid):
    """Each cell's value, interval and vote come from the board; a vetoed column carries the legend's reason."""
    vetoes = {}
    for store in (grid.store, copy_store(grid, "alone", lambda r: None if r.manifest.subject.control else
                                         (r.manifest, r.metrics))):
        text, board, row = card_and_board(grid, store)
        notes = legend(board, list(board.table.columns))
        for column in board.table.columns:
            cell, verdict = board.table.cell(row, column), board.verdicts[column.name]
            line = table_line(text, column)
            iv = cell.interval
            shown = "—" if iv is None else f"[{iv.low:.4g}, {iv.high:.4g}] {iv.kind} {iv.level:.0%}"
            assert line.startswith(f"| {column.suite} | {column.metric} | {cell.value:.4g} | {shown} |")
            assert not verdict.votes and f"| no: {escape_md(verdict.reason)} |" in line
            if column.role == "score":
                assert f"{column.name} does not vote: {verdict.reason}" in notes
        vetoes[store.name] = board.verdicts["perplexity/ppl"].reason
        assert "- not ranked: no column votes at preset tiny" in text
    assert vetoes["results"].startswith("no mixer beats the context-free control none")  # the control's veto
    assert vetoes["alone"].startswith("no null can veto it: no control rows on the board")


def test_marked_cells_carry_the_mark_and_the_control(grid):
    """A cell the board marks ‡ (not better than the reference control) carries ‡ and names the control."""
    text, board, row = card_and_board(grid, grid.store)
    marked = [c for c in board.table.columns if board.not_above(row, c)]
    assert {c.name for c in marked} >= {"perplexity/ppl"}  # none beats attention at this budget (docs/huggingface.md)
    for column in board.table.columns:
        line = table_line(text, column)
        assert ("‡" in line) == (column in marked)
        if column in marked:
            assert f"‡ not better than the reference control {escape_md(board.reference_controls[0])} (" in line


def test_a_voting_column_says_so_and_labels_are_escaped(grid):
    """With a control attention beats, perplexity votes (tie group, rank); the control's <script> label is escaped."""
    text, board, row = card_and_board(grid, copy_store(grid, "planted", worse_control))
    verdict = board.verdicts["perplexity/ppl"]
    assert verdict.votes and not board.not_above(row, verdict.column)
    line = table_line(text, verdict.column)
    assert f"| yes (tie group {board.group(row, verdict.column)}) |" in line and "‡" not in line
    control = next(r.label for r in board.table.rows if r.control)
    assert SCRIPT in control and f"better than {escape_md(control)} (" in line and "&lt;script&gt;" in line
    lo, hi = board.rank_interval[row.key]
    assert board.rank[row.key] == 1 and f"- rank 1 of 1 at preset tiny (Borda points" in text
    assert f"bootstrap rank interval {lo}–{hi}" in text
    assert "<script" not in text and "&lt;script" in text


def test_votes_are_those_of_the_models_preset(grid):
    """On a board of two presets a column votes when it votes at either; the card gives its own preset's verdict."""
    store = copy_store(grid, "two-presets")
    out = ResultsStore(store)
    for run in grid.runs:  # the same runs as another preset's rows (other identities), with a control attention beats
        m, metrics = worse_control(run)
        parts = {**m.identity["subject_parts"], "planted": "quick"}
        subject = dataclasses.replace(m.subject, preset="quick", id=m.subject.id[::-1], row_id=m.subject.row_id[::-1],
                                      weights_sha256="0" * 64)
        out.write_run(run.run_id[::-1], dataclasses.replace(m, subject=subject, identity={**m.identity,
                                                                                            "subject_parts": parts}),
                      SuiteResult(list(metrics)))
    text, board, row = card_and_board(grid, store)
    at_tiny = build_board(build_table(ResultsStore(grid.store))).verdicts["perplexity/ppl"]
    assert board.verdicts["perplexity/ppl"].votes and not at_tiny.votes and row.preset == "tiny"
    assert f"| no: {escape_md(at_tiny.reason)} |" in table_line(text, at_tiny.column)


def test_trained_by_says_what_the_checkpoint_records(grid):
    """A checkpoint `mixbench run` trained records no command: the card names none, only what was recorded."""
    text, _, _ = card_and_board(grid, grid.store)
    meta = grid.ckpt.meta
    assert grid.checkpoint.parent.parent == grid.store / "checkpoints"  # trained by `mixbench run`, not train
    commit = meta["provenance"]["git"]["commit"]
    assert (f"- trained by mixbench {meta['provenance']['mixbench']} at revision `{commit[:12]}`" in text
            and f"on cpu: {meta['step']} steps, {meta['tokens_seen']:,} tokens" in text)
    assert "mixbench train" not in text and "mixbench run" not in text


def test_no_board_row_is_one_line(grid):
    """A store whose board has no row for these weights says so in one line."""
    store = copy_store(grid, "control-only", lambda r: (r.manifest, r.metrics) if r.manifest.subject.control else None)
    text = model_card(grid.ckpt, grid.config, grid.parameters, [], results=ResultsStore(store))
    section = text.split("## Board row\n\n")[1].split("\n\n## ")[0]
    assert section == f"The board of `{store}` has no row for this model: no run in the store scored these weights."
