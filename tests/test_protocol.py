"""The protocol a reviewer reads (docs/protocol.md): selection never reads a test split, recipes tuned on
validation round-trip and name the model, sizes are matched, one initialisation rule for every mixer's output
projection, and a board whose votes, ties and ranks count training-seed noise and need a null."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from harness.cli import main
from harness.config import BackboneConfig, ModelSpec, PRESETS
from harness.corpus.data import load_corpus
from harness.corpus.protocol import SplitDisciplineError, recording_reads, selection
from harness.config import DataConfig
from harness.errors import ConfigError
from harness.model.backbone import build_model
from harness.model.matching import MATCH_TOLERANCE, relative_gap
from harness.model.recipes import GridPoint, RecipeBook, RecipeEntry, SeedSpread, read_book
from harness.model.specs import make_run_spec
from harness.registry import MIXERS, SUITES
from harness.reporting.board import effective_groups
from harness.reporting.leaderboard import board_of
from harness.running.tune import extension, grid_points
from harness.stats import group_points
from harness.store.identity import model_identity
from harness.store.results import ResultsStore
from harness.suite import SuiteContext
from tests.planted import control, manifest, put, score, subject

SMALL = DataConfig(vocab_size=512, max_train_docs=40)


# ---------------------------------------------------------------------------------------------- splits


def test_a_selection_cannot_read_a_test_split_and_scoring_records_what_it_read(tmp_path):
    corpus = load_corpus(SMALL, progress=False)
    entry = SUITES.get("perplexity")
    model = build_model(make_run_spec("none", "tiny", data_overrides={"max_train_docs": 40}).model, seed=0)
    ctx = SuiteContext(corpus, tmp_path, 0, "cpu", False)
    test_cfg = entry.make_config({"splits": "test", "max_windows": 4, "bootstrap": 0})
    with selection("tuning the learning rate"), pytest.raises(SplitDisciplineError) as caught:
        entry.cls(test_cfg).run(model, ctx)
    message = str(caught.value)
    assert "tuning the learning rate selects" in message and "'test'" in message and "\n" not in message
    with selection("tuning"):  # validation is what selection reads
        config = entry.make_config({"splits": "validation", "max_windows": 4, "bootstrap": 0})
        metrics = entry.cls(config).run(model, ctx)
        assert metrics.metrics[0].name == "val_ppl"
        with pytest.raises(SplitDisciplineError):  # an encoded split kept in memory is refused as well
            corpus.encode_split("test_ood")
        with pytest.raises(SplitDisciplineError):
            corpus.documents["test"]
    with recording_reads() as reads:  # outside a selection every read is allowed, and noted
        entry.cls(test_cfg).run(model, ctx)
    assert reads == {"test"}


def test_tune_reads_no_test_split_and_writes_a_recipe_that_names_the_model(tmp_path, monkeypatch):
    """A two-point learning-rate grid for one mixer at a small budget: the recipe holds both points with their
    validation losses, the lower one wins, the file round-trips, and a model trained with it is another model
    (its identity changes with the recipe's value) labelled tuned."""
    from harness.corpus import data

    seen = []
    real = data.check_read
    monkeypatch.setattr(data, "check_read", lambda split: (seen.append(split), real(split))[1])
    monkeypatch.chdir(tmp_path)
    code = main(["tune", "--preset", "tiny", "--mixers", "none", "--no-controls", "--grid", "lr=0.002,0.004",
                 "--extend", "0", "--seeds", "1", "--tokens", "8192", "--max-train-docs", "40",
                 "--results", str(tmp_path / "results"), "--no-progress"])
    assert code == 0
    assert seen and not any(s.startswith("test") for s in seen)
    book = read_book(tmp_path / "recipes" / "tiny.json")
    entry = book.lookup("none", {})
    assert entry is not None and {p.values["lr"] for p in entry.grid} == {0.002, 0.004}
    assert entry.values == entry.best.values and entry.best.val_nll == min(p.val_nll for p in entry.grid)
    assert all(p.low <= p.val_nll <= p.high for p in entry.grid)
    assert book.commit and "validation" in book.objective
    assert RecipeBook.from_json(json.loads(json.dumps(book.to_json()))).to_json() == book.to_json()
    small = {"train_overrides": {"token_budget": 8192}, "data_overrides": {"max_train_docs": 40}}
    tuned = make_run_spec("none", "tiny", **small)
    assert tuned.train.lr == entry.values["lr"]
    untuned = make_run_spec("none", "tiny", **small, recipes=False)
    assert model_identity(tuned, "d").id != model_identity(untuned, "d").id or untuned.train.lr == tuned.train.lr


def test_tune_asked_for_a_test_split_refuses_in_one_sentence_before_training(tmp_path, capsys):
    code = main(["tune", "--preset", "tiny", "--mixers", "none", "--no-controls", "--split", "test",
                 "--results", str(tmp_path / "results"), "--out", str(tmp_path / "r"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "reads training and validation data only" in err[-1] and "'test'" in err[-1]
    assert not (tmp_path / "results").exists() and not (tmp_path / "r").exists()


def test_a_recipe_file_round_trips_and_changes_the_models_identity(tmp_path, monkeypatch):
    book = RecipeBook("tiny", objective="validation NLL", seed_spread=SeedSpread("nats/token", 0.02, 0.03, 12,
                                                                                (0, 1, 2), ("validation",)))
    book.add(RecipeEntry("attention", {}, {"lr": 0.0123}, (GridPoint({"lr": 0.0123}, 4.0, 3.9, 4.1, 12.0),
                                                          GridPoint({"lr": 0.1}, 5.0, 4.9, 5.1, 11.0)), 0))
    path = tmp_path / "tiny.json"
    book.write(path)
    again = read_book(path)
    assert again.to_json() == book.to_json() and again.seed_spread == book.seed_spread
    before = make_run_spec("attention", "tiny")
    monkeypatch.setenv("MIXBENCH_RECIPES", str(path))
    after = make_run_spec("attention", "tiny")
    assert after.train.lr == 0.0123 and before.train.lr != 0.0123
    assert model_identity(after, "d").id != model_identity(before, "d").id
    overridden = make_run_spec("attention", "tiny", train_overrides={"lr": 0.001})
    assert overridden.train.lr == 0.001  # an explicit value wins over the recipe
    path.write_text('{"schema": 1, "preset": "tiny", "mixers": {"attention": {"mixer": "attention"}}}')
    with pytest.raises(Exception, match="malformed"):
        make_run_spec("attention", "tiny")


def test_a_recipe_applies_only_at_the_setting_it_was_tuned_at(tmp_path, monkeypatch):
    """A learning rate tuned with another backbone (no residual gates where the preset has the mixer gate) is
    not applied and the model is untuned; a diverged grid point never wins and is written as null; a recipe file
    named by MIXBENCH_RECIPES for one preset is skipped at the others."""
    from harness.model.recipes import recipe_status

    def book_at(gates: str) -> RecipeBook:
        book = RecipeBook("tiny", setting={"backbone": {"d_model": 64, "residual_gates": gates}})
        book.add(RecipeEntry("attention", {}, {"lr": 0.0123},
                             (GridPoint({"lr": 0.0123}, 4.0, 3.9, 4.1, 1.0),
                              GridPoint({"lr": 0.1}, math.inf, math.inf, math.inf, 1.0)), 0))
        return book

    path = tmp_path / "tiny.json"
    monkeypatch.setenv("MIXBENCH_RECIPES", str(path))
    book_at("none").write(path)
    assert read_book(path).lookup("attention", {}).best.val_nll == 4.0
    assert '"val_nll": null' in path.read_text()
    assert make_run_spec("attention", "tiny").train.lr == 0.0123  # tiny has no residual gates: the same setting
    gated = make_run_spec("attention", "tiny", backbone_overrides={"residual_gates": "mixer"})
    assert gated.train.lr != 0.0123
    assert recipe_status("tiny", "attention", {}, {"lr": 0.0123}, {"d_model": 64, "residual_gates": "mixer"}) \
        == "untuned"
    assert recipe_status("tiny", "attention", {}, {"lr": 0.0123}, {"d_model": 64, "residual_gates": "none"}) \
        == "tuned"
    make_run_spec("attention", "quick")  # the tiny file named for every preset is not quick's: skipped


def test_plan_sweep_values_take_their_fields_type():
    from harness.running.plan import _sweep

    assert _sweep({"lr": ["1e-3", 0.002], "batch_size": 4}, "plan") == {"lr": (0.001, 0.002), "batch_size": (4,)}
    with pytest.raises(ConfigError, match="sweep.lr"):
        _sweep({"lr": ["fast"]}, "plan")


def test_grid_points_and_edge_extension():
    assert grid_points({"lr": (1, 2), "warmup_frac": (0.0,)}) == [{"lr": 1, "warmup_frac": 0.0},
                                                                  {"lr": 2, "warmup_frac": 0.0}]
    grid = {"lr": (0.001, 0.002, 0.004)}
    assert extension(grid, {"lr": 0.004}) == {"lr": 0.008}
    assert extension(grid, {"lr": 0.001}) == {"lr": 0.0005}
    assert extension(grid, {"lr": 0.002}) is None
    assert extension({"lr": (0.001,)}, {"lr": 0.001}) is None  # one value: no direction to extend in


# ---------------------------------------------------------------------------------------------- backbone


@pytest.mark.parametrize("preset", ["tiny", "quick"])
def test_a_parameter_matched_grid_puts_every_model_within_five_percent(preset):
    reference = PRESETS[preset].match_reference
    for name in MIXERS.names():
        if name.startswith("fla:"):
            continue
        spec = make_run_spec(name, preset)
        gap = relative_gap(spec.model, reference)
        assert abs(gap) <= MATCH_TOLERANCE, (name, gap)
    unmatched = make_run_spec("mamba", preset, match="none")
    assert abs(relative_gap(unmatched.model, reference)) > MATCH_TOLERANCE  # the default would not have been


def test_matching_refuses_a_model_whose_layers_alone_outgrow_the_reference():
    with pytest.raises(ConfigError, match="cannot match"):
        make_run_spec("mamba", "tiny", mixer_config={"expand": 16})


def test_every_mixers_output_projection_follows_one_rule():
    """N(0, 0.02 / sqrt(2L)) for each built-in mixer's output projection, however its package initialises it (fla's
    layers draw N(0, 0.02)); the MLP's down projection follows the same rule."""
    backbone = BackboneConfig(64, 4, 32, 300, residual_gates="none")
    want = 0.02 / math.sqrt(2 * 4)
    for name in ("attention", "none", "mean", "protot", "mamba", "deltanet", "gla"):
        model = build_model(ModelSpec(name, {}, backbone), seed=0)
        assert model.output_init == "backbone"
        for block in model.blocks:
            w = block.mixer.output_projection().weight
            assert w.std().item() == pytest.approx(want, rel=0.15), name
            assert abs(w.mean().item()) < 3 * want / math.sqrt(w.numel())
            assert block.ffn.down.weight.std().item() == pytest.approx(want, rel=0.15)


def test_residual_gates_scale_the_chosen_branches():
    ids = torch.randint(0, 64, (2, 12))
    for gates, gated in (("none", set()), ("mixer", {"mixer"}), ("all", {"mixer", "ffn"})):
        model = build_model(ModelSpec("attention", {}, BackboneConfig(32, 2, 16, 64, residual_gates=gates,
                                                                      residual_gate_init=0.0)), seed=0)
        before = model(ids)[0]
        for branch, weight in (("mixer", model.blocks[0].mixer.o_proj.weight),
                               ("ffn", model.blocks[0].ffn.down.weight)):
            with torch.no_grad():
                weight.add_(1.0)
            changed = not torch.equal(model(ids)[0], before)
            assert changed == (branch not in gated), (gates, branch)
            with torch.no_grad():
                weight.sub_(1.0)


# ---------------------------------------------------------------------------------------------- the board


def _nll_items(rng, base, shift, noise=0.02):
    return {f"doc{i}": float(v) for i, v in enumerate(base + shift + rng.normal(0, noise, len(base)))}


def _ppl_run(store, subj, items, unit="nats/token"):
    from harness.stats import Interval
    from harness.suite import ItemValues, Metric

    values = np.array(list(items.values()))
    ppl = float(np.exp(values.mean()))
    metric = Metric("ppl", ppl, False, role="score", interval=Interval(ppl * 0.97, ppl * 1.03, "bootstrap", 0.95),
                    items=ItemValues(tuple(items), tuple(values), (100.0,) * len(values), unit=unit))
    put(store, manifest("perplexity", subj, headline=("ppl",)), [metric])


def test_two_trainings_of_one_architecture_are_never_told_apart_at_one_seed(tmp_path, monkeypatch):
    """`none` and a copy of it registered as an ordinary mixer, one seed each, differ by a seed's worth (0.03 nats)
    on 300 documents: a paired test on the documents alone calls that a win, the seed spread of the preset does
    not. The copy is not better than the control, takes no point, and attention, which does beat it, ranks
    alone."""
    book = RecipeBook("tiny", seed_spread=SeedSpread("nats/token", 0.02, 0.03, 24, (0, 1, 2), ("validation",)))
    book.write(tmp_path / "recipes" / "tiny.json")
    monkeypatch.setenv("MIXBENCH_RECIPES", str(tmp_path / "recipes"))
    rng = np.random.default_rng(0)
    base = rng.normal(4.8, 0.3, 300)
    store = ResultsStore(tmp_path / "store")
    _ppl_run(store, control("none"), _nll_items(rng, base, 0.0))
    _ppl_run(store, subject("copy-of-none", seed=1), _nll_items(rng, base, -0.03))
    _ppl_run(store, subject("attention"), _nll_items(rng, base, -0.4))
    board = board_of(store)
    rows = {r.label: r for r in board.table.rows}
    column = board.table.column("perplexity/ppl")
    noise = board.seed_noise[("tiny", column.name)]
    assert noise is not None and noise.sd == 0.03 and "seed spread" in noise.source
    assert board.not_above(rows["copy-of-none"], column) and not board.not_above(rows["attention"], column)
    assert board.rank[rows["attention"].key] == 1 and board.rank[rows["copy-of-none"].key] == 2
    assert board.points[rows["copy-of-none"].key] == 0.0
    # without the measured spread the documents alone would call the copy better than none
    from harness.model import recipes

    monkeypatch.setenv("MIXBENCH_RECIPES", str(tmp_path / "nowhere"))
    monkeypatch.setattr(recipes, "SHIPPED", tmp_path / "nowhere")
    blind = board_of(store)
    assert not blind.not_above(rows["copy-of-none"], column)


def test_two_seeds_of_none_under_two_names_share_every_tie_group(tmp_path, monkeypatch):
    """Seeds measured on the board itself: each row with three seeds, the copy's mean a hair better than the
    control's; no column tells them apart, and the copy is marked not better than the control. (With a measured
    spread for the preset the two estimates are pooled.)"""
    from harness.model import recipes

    monkeypatch.setenv("MIXBENCH_RECIPES", str(tmp_path / "nowhere"))
    monkeypatch.setattr(recipes, "SHIPPED", tmp_path / "nowhere")
    rng = np.random.default_rng(1)
    base = rng.normal(4.8, 0.3, 200)
    store = ResultsStore(tmp_path)
    for seed in range(3):
        _ppl_run(store, control("none", seed=seed), _nll_items(rng, base, rng.normal(0, 0.03)))
        _ppl_run(store, subject("none-again", seed=seed), _nll_items(rng, base, rng.normal(-0.01, 0.03)))
        _ppl_run(store, subject("attention", seed=seed), _nll_items(rng, base, -0.3 + rng.normal(0, 0.03)))
    board = board_of(store)
    rows = {r.label: r for r in board.table.rows}
    column = board.table.column("perplexity/ppl")
    assert board.seed_noise[("tiny", column.name)].df == 6  # three rows of three seeds
    assert board.not_above(rows["none-again"], column)
    from harness.reporting.differences import cell_difference

    d = cell_difference(board.table.cell(rows["none-again"], column), board.table.cell(rows["none"], column),
                        board.config, board.seed_noise[("tiny", column.name)])
    assert d.p_value > 0.05
    monkeypatch.undo()  # the shipped spread of preset tiny (24 degrees of freedom) joins the board's own
    pooled = board_of(store).seed_noise[("tiny", column.name)]
    assert pooled.df == 6 + 24 and "pooled with preset tiny's seed spread" in pooled.source


def test_a_column_whose_rows_share_one_tie_group_gives_no_borda_points(tmp_path):
    rng = np.random.default_rng(2)
    base = rng.normal(0.5, 0.2, 200)
    store = ResultsStore(tmp_path)
    for mixer, shift_a, shift_b in (("x", 0.0, 0.30), ("y", 0.001, 0.0), ("z", 0.002, 0.15)):
        items = _nll_items(rng, base, shift_a, 0.05)  # A: all three within item noise of each other
        put(store, manifest("A", subject(mixer)), [score("a", float(np.mean(list(items.values()))), True, 0.02,
                                                         items=items)])
        items = _nll_items(rng, base, shift_b, 0.02)  # B: three clear groups
        put(store, manifest("B", subject(mixer)), [score("b", float(np.mean(list(items.values()))), True, 0.02,
                                                         items=items)])
    for suite, name in (("A", "a"), ("B", "b")):
        items = _nll_items(rng, base, -0.5, 0.02)
        put(store, manifest(suite, control()), [score(name, float(np.mean(list(items.values()))), True, 0.02,
                                                      items=items)])
    board = board_of(store)
    rows = {r.label: r for r in board.table.rows}
    a = board.verdicts["A/a"]
    assert a.votes and len({a.groups[rows[m].key] for m in "xyz"}) == 1
    # every point comes from B (weight 1, groups x > z > y): 2, 1, 0
    assert [board.points[rows[m].key] for m in "xzy"] == [2.0, 1.0, 0.0]
    assert group_points({"p": 0, "q": 0}) == {"p": 0.0, "q": 0.0}
    assert group_points(effective_groups({"p": "a", "q": "a", "r": "b"}, {"q"})) == {"p": 2.0, "r": 1.0, "q": 0.0}


def test_coverage_that_follows_the_unit_count_does_not_vote(tmp_path):
    """A maximum over units grows with their number: coverage computed over 64 units for two mixers and 16 for
    the others does not vote; at 16 units each, where no mixer beats its untrained null, it does not vote
    either."""
    store = ResultsStore(tmp_path)
    for mixer, units, cov in (("mamba", 64, 0.355), ("protot", 64, 0.312), ("deltanet", 16, 0.219),
                              ("attention", 16, 0.200)):
        put(store, manifest("interpretability", subject(mixer), headline=("coverage",)),
            [score("coverage", cov, True, 0.02, units=units, null="coverage_null"),
             score("coverage_null", cov - 0.01, True, 0.02, units=units, role="baseline")])
    put(store, manifest("interpretability", control(), headline=("coverage",)),
        [score("coverage", math.nan, True, null="coverage_null")])
    board = board_of(store)
    verdict = board.verdicts["interpretability/coverage"]
    assert not verdict.votes and "unequal numbers of units" in verdict.reason
    store = ResultsStore(tmp_path / "matched")
    for mixer, cov in (("mamba", 0.22), ("protot", 0.21), ("deltanet", 0.219), ("attention", 0.20)):
        put(store, manifest("interpretability", subject(mixer), headline=("coverage",)),
            [score("coverage", cov, True, 0.02, units=16, null="coverage_null"),
             score("coverage_null", cov - 0.005, True, 0.02, units=16, role="baseline")])
    board = board_of(store)
    verdict = board.verdicts["interpretability/coverage"]
    assert not verdict.votes and "null model" in verdict.reason
    assert all(board.not_above(r, board.table.column("interpretability/coverage")) for r in board.table.rows)


def test_a_column_with_no_null_does_not_vote(tmp_path):
    store = ResultsStore(tmp_path)
    for mixer, value in (("a", 0.9), ("b", 0.1)):
        put(store, manifest("S", subject(mixer)), [score("m", value, True, 0.01)])
    board = board_of(store)
    assert not board.verdicts["S/m"].votes and "no null can veto it" in board.verdicts["S/m"].reason
    assert all(board.rank[r.key] is None for r in board.table.rows)


def test_the_compact_view_shows_the_voting_column_and_the_budget(tmp_path):
    store = ResultsStore(tmp_path)
    for mixer, good in (("a", 0.9), ("b", 0.5)):
        s = subject(mixer, parameters=800_000, non_embedding_parameters=700_000)
        put(store, manifest("syn", s, headline=("first/acc", "*/acc"), train={"token_budget": 320_000}),
            [score("first/acc", 0.01, True, 0.01, role="diagnostic"), score("second/acc", good, True, 0.01)])
    put(store, manifest("syn", control(parameters=800_000, non_embedding_parameters=700_000),
                        headline=("first/acc", "*/acc"), train={"token_budget": 320_000}),
        [score("first/acc", 0.01, True, 0.01, role="diagnostic"), score("second/acc", 0.2, True, 0.01)])
    text = main_text(store)
    lines = text.splitlines()
    assert "ONE training seed per row" in lines[0] and "tokens per parameter" in text.replace("\n", " ")
    assert "syn. = syn/second/acc" in text.replace("synt.", "syn.") or "= syn/second/acc" in text
    header = next(line for line in lines if line.startswith("|"))
    assert "params" in header and "check" in header and "gate" not in header


def main_text(store: ResultsStore) -> str:
    from harness.reporting.leaderboard import leaderboard_text

    return leaderboard_text(str(store.root))


def test_a_mixer_that_uses_no_far_context_is_not_said_to(tmp_path, monkeypatch):
    """Position buckets: a mixer whose gain over the context-free control grows far back is said to use context
    beyond the first buckets; a copy of the control with a constant gain everywhere is not (seed spread 0.02)."""
    from harness.stats import Interval
    from harness.suite import ItemValues, Metric

    book = RecipeBook("tiny", seed_spread=SeedSpread("nats/token", 0.01, 0.02, 24, (0, 1, 2), ("validation",)))
    book.write(tmp_path / "recipes" / "tiny.json")
    monkeypatch.setenv("MIXBENCH_RECIPES", str(tmp_path / "recipes"))

    rng = np.random.default_rng(3)
    store = ResultsStore(tmp_path / "store")
    base = {b: rng.normal(5.0, 0.3, 120) for b in ("0-3", "4-63", "64-255")}
    positions = {"0-3": (0, 4), "4-63": (4, 64), "64-255": (64, 256)}
    gains = {"none": (0, 0, 0), "steady": (-0.1, -0.1, -0.1), "reader": (-0.1, -0.2, -0.4)}
    for mixer, gain in gains.items():
        metrics = []
        for (bucket, lo_hi), g in zip(positions.items(), gain):
            values = base[bucket] + g + rng.normal(0, 0.01, 120)
            metrics.append(Metric(f"nll_ctx_{bucket}", float(values.mean()), False,
                                  interval=Interval(values.mean() - 0.01, values.mean() + 0.01, "bootstrap", 0.95),
                                  items=ItemValues(tuple(f"d{i}" for i in range(120)), tuple(values),
                                                   (10.0,) * 120, unit="nats/token"), positions=lo_hi))
        subj = control("none") if mixer == "none" else subject(mixer)
        put(store, manifest("perplexity", subj, headline=("nll_ctx_*",)), metrics)
    board = board_of(store)
    uses = {u.label: u for u in board.context}
    assert uses["reader"].uses_far and not uses["steady"].uses_far
    assert uses["reader"].beyond.difference == pytest.approx(-0.2, abs=0.01)
    text = main_text(store)
    assert "context beyond the first buckets: reader gain" in text.replace("\n", " ")


def test_memorization_needs_only_a_one_token_look_back_and_never_votes():
    from suites.synthetic.tasks import TASKS

    assert TASKS["memorization"].one_token_lookback
    assert not any(t.one_token_lookback for name, t in TASKS.items() if name != "memorization")
