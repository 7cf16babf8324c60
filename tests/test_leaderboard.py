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
from harness.leaderboard import FORMATS, MISSING, build_table, load_frame, render, t_quantile_975
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
