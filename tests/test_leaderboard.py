"""Leaderboard tables: seed aggregation against hand-computed values, missing cells and every output format."""

from __future__ import annotations

import html
import io
import json
import math
import time

import pandas as pd
import pytest

from harness.errors import MixbenchError
from harness.leaderboard import (
    FORMATS,
    MISSING,
    build_table,
    load_frame,
    render,
    t_quantile_975,
)
from harness.results import ResultsStore, run_id
from harness.suite import Metric, SuiteResult

EVIL = "<script>alert(1)</script>"


def _write(store, mixer, suite, metrics, seed=0, preset="tiny", headline=None, **manifest):
    manifest = {"suite": suite, "mixer": mixer, "preset": preset, "seed": seed, **manifest}
    if headline is not None:
        manifest["headline"] = headline
    rid = run_id({**manifest, "t": time.monotonic_ns()})
    store.write_run(rid, manifest, SuiteResult(metrics))
    return rid


def _ppl(value, lo=None, hi=None):
    return Metric("ppl", value, False, lo, hi)


@pytest.fixture
def store(tmp_path):
    return ResultsStore(tmp_path)


def test_t_quantiles():
    assert t_quantile_975(1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile_975(2) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile_975(31) == pytest.approx(2.0395, abs=1e-4)
    assert t_quantile_975(120) == pytest.approx(1.9799, abs=1e-4)
    qs = [t_quantile_975(df) for df in range(1, 500)]
    assert all(a > b for a, b in zip(qs, qs[1:])) and qs[-1] > 1.959964


def test_empty_store_renders_a_message(store):
    table = build_table(store)
    message = f"no results in {store.root}; run `mixbench quickstart` or `mixbench eval`"
    for fmt in FORMATS:
        assert render(table, fmt) == message


def test_one_seed_keeps_the_runs_own_interval(store):
    _write(store, "protot", "perplexity", [_ppl(30.0, 29.0, 31.5)], parameters=1000, state_floats=64)
    table = build_table(store)
    assert list(table.columns) == ["mixer", "preset", "params", "state_floats", "seeds", "perplexity/ppl"]
    cell = table.loc[0, "perplexity/ppl"]
    assert (cell.value, cell.ci_low, cell.ci_high, cell.n_seeds) == (30.0, 29.0, 31.5, 1)
    assert cell.text() == "30.00 [29.00, 31.50]"
    assert (table.loc[0, "params"], table.loc[0, "state_floats"], table.loc[0, "seeds"]) == (1000, 64, "0")


def test_three_seeds_give_a_t_interval_over_seeds(store):
    for seed, value in enumerate([1.0, 2.0, 4.0]):
        _write(store, "protot", "perplexity", [_ppl(value, value - 5, value + 5)], seed=seed)
    cell = build_table(store).loc[0, "perplexity/ppl"]
    mean = 7 / 3
    sd = math.sqrt(((1 - mean) ** 2 + (2 - mean) ** 2 + (4 - mean) ** 2) / 2)
    half = 4.302653 * sd / math.sqrt(3)
    assert cell.n_seeds == 3 and cell.value == pytest.approx(mean)
    assert (cell.ci_low, cell.ci_high) == (pytest.approx(mean - half, rel=1e-5), pytest.approx(mean + half, rel=1e-5))
    assert cell.text() == f"{mean:.3f} ± {half:.3f}"


def test_newest_run_of_a_seed_wins(store):
    _write(store, "protot", "perplexity", [_ppl(50.0)])
    time.sleep(0.01)
    _write(store, "protot", "perplexity", [_ppl(40.0)])
    cell = build_table(store).loc[0, "perplexity/ppl"]
    assert (cell.value, cell.n_seeds) == (40.0, 1)


def test_headline_metrics_suites_and_order(store):
    for mixer in ("zeta", "alpha"):
        for preset in ("quick", "tiny"):
            _write(store, mixer, "perplexity", [_ppl(10.0), Metric("bpb", 1.0, False)], preset=preset, headline=["ppl"])
    _write(store, "alpha", "glue", [Metric("cola_mcc", 0.2, True), Metric("avg", 0.6, True)], preset="tiny")

    table = build_table(store)
    expected = [("tiny", "alpha"), ("tiny", "zeta"), ("quick", "alpha"), ("quick", "zeta")]
    assert list(zip(table.preset, table.mixer)) == expected
    assert table.attrs["metric_columns"] == ["glue/cola_mcc", "glue/avg", "perplexity/ppl"]
    assert "perplexity/bpb" in build_table(store, all_metrics=True).attrs["metric_columns"]
    assert build_table(store, suites=["perplexity"]).attrs["metric_columns"] == ["perplexity/ppl"]
    assert build_table(store, suites=["glue", "perplexity"]).attrs["metric_columns"][0] == "glue/cola_mcc"
    assert "no results for suite(s) judge" in render(build_table(store, suites=["judge"]), "md")


def test_seeds_column_notes_suites_with_fewer_seeds(store):
    for seed in (0, 1, 2):
        _write(store, "protot", "perplexity", [_ppl(10.0 + seed)], seed=seed)
    _write(store, "protot", "glue", [Metric("avg", 0.6, True)], seed=0)
    _write(store, "other", "glue", [Metric("avg", 0.6, True)], seed=None)
    table = build_table(store)
    assert dict(zip(table.mixer, table.seeds)) == {"protot": "0,1,2 (glue: 0)", "other": "?"}


@pytest.fixture
def gappy(store):
    """`protot` has perplexity and glue; EVIL only perplexity (its glue cell is missing)."""
    _write(store, "protot", "perplexity", [_ppl(30.0, 29.0, 31.0)], parameters=2_000_000)
    _write(store, "protot", "glue", [Metric("avg", 0.61, True, 0.55, 0.66)])
    _write(store, EVIL, "perplexity", [_ppl(20.0, 19.0, 21.0)])
    return build_table(store)


def test_missing_cells_stay_missing_in_every_format(gappy):
    evil = gappy.index[gappy.mixer == EVIL][0]
    assert gappy.loc[evil, "glue/avg"] is None and pd.isna(gappy.loc[evil, "params"])

    md_rows = [line for line in render(gappy, "md").splitlines() if "alert" in line]
    assert len(md_rows) == 1 and md_rows[0].count(MISSING) == 3  # params, state_floats, glue/avg
    assert f"<td>{MISSING}</td>" in render(gappy, "html")
    assert MISSING in next(line for line in render(gappy, "latex").splitlines() if "alert" in line)

    csv = pd.read_csv(io.StringIO(render(gappy, "csv")))
    row = csv[csv.mixer == EVIL].iloc[0]
    assert math.isnan(row["glue/avg"]) and math.isnan(row["params"]) and row["perplexity/ppl"] == 20.0

    rows = {r["mixer"]: r for r in json.loads(render(gappy, "json"))}
    assert rows[EVIL]["glue/avg"] is None and rows[EVIL]["params"] is None
    assert rows["protot"]["glue/avg"] == {
        "value": 0.61, "ci_low": 0.55, "ci_high": 0.66, "n_seeds": 1, "higher_is_better": True, "unit": ""
    }  # fmt: skip


def test_every_format_parses(gappy):
    csv = pd.read_csv(io.StringIO(render(gappy, "csv")))
    assert {"perplexity/ppl", "perplexity/ppl ci_low", "perplexity/ppl ci_high", "glue/avg"} <= set(csv.columns)
    assert len(csv) == 2 and set(csv.mixer) == {"protot", EVIL}
    assert len(json.loads(render(gappy, "json"))) == 2
    md = render(gappy, "md").splitlines()
    assert len(md) == 4 and all(line.startswith("|") for line in md)
    latex = render(gappy, "latex")
    assert latex.startswith(r"\begin{tabular}") and latex.endswith(r"\end{tabular}")
    assert r"$\pm$" in latex and "state\\_floats" in latex
    html_table = render(gappy, "html")
    assert html_table.startswith("<table") and html_table.endswith("</table>")


def test_html_escapes_user_text(gappy):
    out = render(gappy, "html")
    assert EVIL not in out and "<script" not in out
    assert html.escape(EVIL) in out


def test_latex_escapes_specials(store):
    _write(store, "a&b_c%d#e", "perplexity", [_ppl(1.0)])
    assert r"a\&b\_c\%d\#e" in render(build_table(store), "latex")


def test_best_value_is_bold_in_md(store):
    _write(store, "lo", "perplexity", [_ppl(10.0)])
    _write(store, "hi", "perplexity", [_ppl(12.0)])
    _write(store, "lo", "glue", [Metric("avg", 0.5, True)])
    _write(store, "hi", "glue", [Metric("avg", 0.7, True)])
    lines = render(build_table(store), "md").splitlines()
    lo, hi = (next(line for line in lines if f"| {name} " in line) for name in ("lo", "hi"))
    assert "**10.00**" in lo and "**0.5000**" not in lo
    assert "**0.7000**" in hi and "**12.00**" not in hi


def test_nan_metric_does_not_break_rendering(store):
    _write(store, "diverged", "perplexity", [_ppl(math.nan)])
    _write(store, "fine", "perplexity", [_ppl(10.0)])
    table = build_table(store)
    rows = {r["mixer"]: r for r in json.loads(render(table, "json"))}
    assert rows["diverged"]["perplexity/ppl"]["value"] is None
    assert "n/a" in render(table, "md")  # a NaN value is shown, not confused with a missing cell


def test_unknown_format_lists_the_formats(gappy):
    with pytest.raises(MixbenchError, match="md, csv, json, html, latex"):
        render(gappy, "xlsx")


def test_load_frame_is_long_format(store):
    metrics = [_ppl(30.0), Metric("bpb", 1.1, False)]
    rid = _write(store, "protot", "perplexity", metrics, headline=["ppl"], kernel="chunked")
    frame = load_frame(store)
    assert list(frame.run_id) == [rid, rid] and list(frame.metric) == ["ppl", "bpb"]
    assert list(frame.headline) == [True, False] and set(frame.kernel) == {"chunked"}
    assert frame.train_flops.isna().all()


def test_training_flops_column_appears_when_reported(store):
    _write(store, "protot", "perplexity", [_ppl(10.0)], train_flops=3.2e15, parameters=100)
    _write(store, "mamba", "perplexity", [_ppl(11.0)], parameters=200)
    table = build_table(store)
    assert list(table.columns[:6]) == ["mixer", "preset", "params", "state_floats", "train_flops", "seeds"]
    assert "3.20e+15" in render(table, "md")
    flops = {r["mixer"]: r["train_flops"] for r in json.loads(render(table, "json"))}
    assert flops == {"protot": 3.2e15, "mamba": None}


def test_disagreeing_parameter_counts_warn(store):
    _write(store, "protot", "perplexity", [_ppl(10.0)], parameters=100)
    time.sleep(0.01)
    _write(store, "protot", "glue", [Metric("avg", 0.5, True)], parameters=120)
    with pytest.warns(UserWarning, match="disagree on parameters"):
        table = build_table(store)
    assert table.loc[0, "params"] == 120


# ------------------------------------------------------------------------------------------- the board

from harness.leaderboard import (
    BoardConfig,
    borda,
    borda_columns,
    build_board,
    normalise_frame,
    normalise_score,
    pareto_front,
    pareto_plot,
)  # fmt: skip


def _glue(store, mixer, accs, mcc=None, majority=50.0, seed=0, preset="tiny", ci=None, **manifest):
    """A glue run: ``accs`` maps task -> accuracy (x100); each task gets its majority rate as GLUE's suite writes it."""
    metrics = []
    for task, acc in accs.items():
        lo, hi = ci if ci else (None, None)
        metrics.append(Metric(f"{task}/acc", acc, True, lo, hi, 100, "x100"))
        metrics.append(Metric(f"{task}/majority_acc", majority, True, n=100, unit="x100"))
    if mcc is not None:
        metrics.append(Metric("cola/mcc", mcc, True, n=100, unit="x100"))
    metrics.append(Metric("glue/avg", 50.0, True, n=len(accs), unit="x100"))
    headline = [m.name for m in metrics if "majority" not in m.name]
    return _write(store, mixer, "glue", metrics, seed=seed, preset=preset, headline=headline, **manifest)


def test_normalise_score_is_the_open_llm_leaderboard_rescaling():
    assert normalise_score(80.0, 60.0, 100.0) == pytest.approx(50.0)  # (80-60)/(100-60)*100
    assert normalise_score(0.5, 0.25, 1.0) == pytest.approx(100 / 3)  # a 4-choice task on the fraction scale
    assert normalise_score(50.0, 60.0, 100.0) == 0.0
    assert normalise_score(50.0, 60.0, 100.0, clip=False) == pytest.approx(-25.0)
    assert math.isnan(normalise_score(math.nan, 60.0, 100.0))
    with pytest.raises(MixbenchError, match="not below the best score"):
        normalise_score(1.0, 100.0, 100.0)


def test_normalisation_against_the_runs_majority_rate_mcc_and_chance(store):
    _glue(store, "protot", {"sst2": 80.0}, mcc=-5.0, majority=60.0, ci=(70.0, 90.0))
    _write(store, "protot", "lm-eval", [Metric("hellaswag/acc", 0.4, True, 0.35, 0.45, 200),
                                        Metric("other/acc", 0.4, True)])
    frame = normalise_frame(load_frame(store), {"lm-eval/hellaswag/acc": 0.25})
    rows = {f"{r.suite}/{r.metric}": r for r in frame.itertuples()}
    assert not any("majority" in c for c in rows)  # baselines leave the board
    sst2 = rows["glue/sst2/acc (norm)"]
    assert (sst2.value, sst2.ci_low, sst2.ci_high) == (pytest.approx(50.0), pytest.approx(25.0), pytest.approx(75.0))
    assert (sst2.baseline, sst2.baseline_source, sst2.unit) == (60.0, "majority", "normalised 0-100")
    assert rows["glue/cola/mcc (norm)"].value == 0.0 and rows["glue/cola/mcc (norm)"].baseline_source == "mcc"
    hs = rows["lm-eval/hellaswag/acc (norm)"]
    assert hs.value == pytest.approx(20.0) and hs.ci_low == pytest.approx(40 / 3) and hs.baseline_source == "chance"
    assert rows["lm-eval/other/acc"].value == 0.4  # no known baseline: stays raw
    assert rows["glue/glue/avg"].value == 50.0


def test_seeds_are_normalised_before_they_are_averaged(store):
    _glue(store, "protot", {"sst2": 70.0}, majority=50.0, seed=0)
    _glue(store, "protot", {"sst2": 40.0}, majority=50.0, seed=1)  # below the majority rate: clipped to 0
    cell = build_board(store).loc[0, "glue/sst2/acc (norm)"]
    # seed 0: (70-50)/50*100 = 40; seed 1: 0 -> mean 20, half-width t(1) * sd / sqrt(2) with sd = 40/sqrt(2)
    assert cell.n_seeds == 2 and cell.value == pytest.approx(20.0)
    assert cell.ci_high - cell.value == pytest.approx(12.706205 * (40 / math.sqrt(2)) / math.sqrt(2), rel=1e-6)


def test_borda_points_ties_and_missing_rows():
    values = {"a": [1.0, 3.0], "b": [2.0, 3.0], "c": [2.0, 1.0], "d": [None, 5.0], "e": [math.nan, 0.0]}
    points, ranks = borda(values, [True, False])
    # column 0 (higher better) among a,b,c: a 0, b 1 + 0.5 (tie with c), c 1.5; column 1 (lower better): a 0.5,
    # b 0.5, c 2; d and e miss a cell and neither get nor give points
    assert points == {"a": 0.5, "b": 2.0, "c": 3.5, "d": None, "e": None}
    assert ranks == {"a": 3, "b": 2, "c": 1, "d": None, "e": None}
    _, tied = borda({"x": [1.0], "y": [1.0], "z": [0.0]}, [True])
    assert tied == {"x": 1, "y": 1, "z": 3}
    with pytest.raises(ValueError):
        borda({"x": [1.0]}, [True, True])


def test_pareto_front_by_hand():
    points = {"A": (100.0, 10.0), "B": (200.0, 11.0), "C": (150.0, 12.0), "D": (300.0, 13.0), "E": (100.0, 10.0),
              "F": (math.nan, 1.0)}
    assert pareto_front(points, x_higher=True, y_higher=False) == {"A", "B", "D", "E"}  # C: B is faster and better
    assert pareto_front(points, x_higher=True, y_higher=True) == {"D"}
    assert pareto_front({}, True, True) == set()


@pytest.fixture
def board_store(store):
    """Hand-computed board: A, B, C complete; D lacks glue; E is another preset.

    ppl (lower better): A 10, B 11, C 12, D 13; E 20 at preset quick. glue, majority 50: x/acc A 70 B 80 C 90 -> norm 40, 60, 80;
    y/acc A 60 B 60 C 90 -> norm 20, 20, 80.
    """
    speeds = {"A": 100.0, "B": 200.0, "C": 150.0, "D": 300.0, "E": 50.0}
    for mixer, ppl in (("A", 10.0), ("B", 11.0), ("C", 12.0), ("D", 13.0)):
        _write(store, mixer, "perplexity", [_ppl(ppl)], parameters=1000, state_floats=10)
        _write(store, mixer, "throughput", [Metric("prefill_tok_s", speeds[mixer], True, unit="tokens/s")],
               headline=["prefill_tok_s"])
    for mixer, (x, y) in {"A": (70.0, 60.0), "B": (80.0, 60.0), "C": (90.0, 90.0)}.items():
        _glue(store, mixer, {"x": x, "y": y})
    _write(store, "E", "perplexity", [_ppl(20.0)], preset="quick")  # worst ppl, but alone at its preset
    _write(store, "E", "throughput", [Metric("prefill_tok_s", 50.0, True, unit="tokens/s")], preset="quick",
           headline=["prefill_tok_s"])
    return store


def test_board_borda_means_coverage_and_front(board_store):
    board = build_board(board_store)
    rows = {r.mixer: r for _, r in board.iterrows()}
    assert board.attrs["borda_columns"] == ["glue/x/acc (norm)", "glue/y/acc (norm)", "perplexity/ppl"]
    assert "glue/glue/avg" in board.attrs["metric_columns"]  # shown, but an average does not vote
    # suite weighting: ppl A 2 B 1 C 0; x: A 0 B 1 C 2; y: A .5 B .5 C 2, glue columns weigh 1/2 each
    assert {m: rows[m]["borda points"] for m in "ABC"} == {"A": 2.25, "B": 1.75, "C": 2.0}
    assert {m: rows[m]["borda rank"] for m in "ABC"} == {"A": 1, "B": 3, "C": 2}
    assert pd.isna(rows["D"]["borda rank"]) and rows["D"]["coverage"] == "1/3" and rows["A"]["coverage"] == "3/3"
    assert pd.isna(rows["E"]["borda rank"])  # E has no glue either
    # within a suite: glue x A0 B1 C2 + y A.5 B.5 C2 -> C, B, A; perplexity ranks every row, within its preset
    assert {m: rows[m]["rank glue"] for m in "ABC"} == {"A": 3, "B": 2, "C": 1} and pd.isna(rows["D"]["rank glue"])
    assert {m: rows[m]["rank perplexity"] for m in "ABCDE"} == {"A": 1, "B": 2, "C": 3, "D": 4, "E": 1}
    assert {m: rows[m]["mean glue"].value for m in "ABC"} == {"A": 30.0, "B": 40.0, "C": 80.0}
    assert rows["D"]["mean glue"] is None
    # Pareto (prefill tokens/s up, ppl down) within tiny: A (100, 10), B (200, 11), C (150, 12), D (300, 13)
    assert board.attrs["speed"] == "throughput/prefill_tok_s" and board.attrs["quality"] == "perplexity/ppl"
    assert board.attrs["fronts"] == {"tiny": ["A", "B", "D"], "quick": ["E"]}
    assert {m: rows[m]["pareto"] for m in "ABCDE"} == {"A": "yes", "B": "yes", "C": "no", "D": "yes", "E": "yes"}
    assert rows["B"]["tokens/s"].value == 200.0 and rows["A"]["params"] == 1000

    by_column = build_board(board_store, BoardConfig(borda_weighting="column"))
    rows = {r.mixer: r for _, r in by_column.iterrows()}
    assert {m: rows[m]["borda points"] for m in "ABC"} == {"A": 2.5, "B": 2.5, "C": 4.0}
    assert {m: rows[m]["borda rank"] for m in "ABC"} == {"A": 2, "B": 2, "C": 1}


def test_a_metric_only_some_mixers_produce_does_not_vote(store):
    """robustness/route is ProtoT-only: it must not leave the other mixers unranked, while a mixer that never ran
    robustness still is."""
    for mixer, ppl, jsd in (("protot", 10.0, 0.1), ("attention", 11.0, 0.3), ("mamba", 12.0, 0.2)):
        _write(store, mixer, "perplexity", [_ppl(ppl)])
        metrics = [Metric("jsd", jsd, False)] + ([Metric("route", 0.5, False)] if mixer == "protot" else [])
        _write(store, mixer, "robustness", metrics, headline=["jsd", "route"])
    _write(store, "deltanet", "perplexity", [_ppl(9.0)])  # never ran robustness: missing, so unranked
    board = build_board(store)
    rows = {r.mixer: r for _, r in board.iterrows()}
    assert board.attrs["borda_columns"] == ["perplexity/ppl", "robustness/jsd"]
    assert "robustness/route" in board.attrs["metric_columns"]  # still shown
    # ppl (lower better) over the four: deltanet 3, protot 2, attention 1, mamba 0; jsd over the four (deltanet
    # missing ranks nobody lower): protot 2, mamba 1, attention 0 -> protot 4, mamba 1, attention 1
    assert {m: rows[m]["borda points"] for m in ("protot", "attention", "mamba")} == {"protot": 4.0, "attention": 1.0,
                                                                                   "mamba": 1.0}
    assert rows["protot"]["borda rank"] == 1 and rows["attention"]["borda rank"] == 2 == rows["mamba"]["borda rank"]
    assert pd.isna(rows["deltanet"]["borda rank"]) and rows["deltanet"]["coverage"] == "1/2"


def test_board_renders_in_every_format_with_missing_cells(board_store):
    board = build_board(board_store)
    md = render(board, "md")
    d_row = next(line for line in md.splitlines() if line.startswith("| D "))
    assert MISSING in d_row and "1/3" in d_row
    csv = pd.read_csv(io.StringIO(render(board, "csv")))
    assert set(csv.mixer) == set("ABCDE") and math.isnan(csv.set_index("mixer").loc["D", "mean glue"])
    rows = {r["mixer"]: r for r in json.loads(render(board, "json"))}
    assert rows["C"]["borda rank"] == 2 and rows["D"]["borda rank"] is None
    assert rows["A"]["glue/x/acc (norm)"]["value"] == pytest.approx(40.0)


def test_board_speed_from_training_when_no_throughput_runs(store):
    for seed, speed in ((0, 1000.0), (1, 3000.0)):
        _write(store, "protot", "perplexity", [_ppl(10.0)], seed=seed, train_tokens_per_s=speed)
    _write(store, "attention", "perplexity", [_ppl(9.0)], train_tokens_per_s=500.0)
    board = build_board(store)
    rows = {r.mixer: r for _, r in board.iterrows()}
    assert board.attrs["speed"] == "train_tokens_per_s"
    assert rows["protot"]["tokens/s"].value == 2000.0 and rows["protot"]["tokens/s"].n_seeds == 2
    assert board.attrs["fronts"] == {"tiny": ["attention", "protot"]}


def test_board_bad_axes_fail_clearly(board_store):
    with pytest.raises(MixbenchError, match="quality column 'glue/nope'"):
        build_board(board_store, BoardConfig(quality="glue/nope"))
    with pytest.raises(MixbenchError, match="speed column 'throughput/decode_ms' has no results"):
        build_board(board_store, BoardConfig(speed="throughput/decode_ms"))
    with pytest.raises(MixbenchError, match="borda_weighting"):
        BoardConfig(borda_weighting="votes")


def test_borda_columns_skip_speed_and_averages():
    cols = ["perplexity/ppl", "glue/glue/avg", "glue/standin/avg_3of4", "throughput/prefill_tok_s", "glue/x/acc (norm)"]
    assert borda_columns(cols) == ["perplexity/ppl", "glue/x/acc (norm)"]


def test_pareto_plot_is_written(board_store, tmp_path):
    path = pareto_plot(build_board(board_store), tmp_path / "pareto.png")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
