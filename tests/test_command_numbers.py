"""Commands end with the numbers they produced (issue 50, item 1): ``run`` prints its runs' headline metrics with
intervals and run ids that the store holds, then the compact board of its rows only; ``lm-eval`` prints its
accuracy and run id. ``compare`` says which scale each number is on, gives a baseline no verdict, and words a
speed ratio by its direction, equal to the ratio of the printed numbers (item 2)."""

from __future__ import annotations

import contextlib
import io
import math
import re

import numpy as np
import pytest

from harness.cli import main
from harness.reporting.numbers import fmt
from harness.reporting.run_report import compare_models, interval_text, speed_ratio_text
from harness.stats import Interval
from harness.store.results import ResultsStore
from harness.suite import ItemValues, Metric
from tests.conftest import TINY_TRAIN
from tests.planted import manifest, put, score, subject

RUN_ID = re.compile(r"\|\s*([0-9a-f]{16})\s*\|$")


def _cli(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def _table_lines(text: str) -> list[list[str]]:
    """The cells of every line of the numbers table (a Markdown line ending in a run id)."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if RUN_ID.search(line)]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """One cheap grid (attention at preset tiny, 4,096 tokens, three perplexity windows) into a store that already
    holds another model's run, so the board the command prints can be seen to hold only the rows it touched."""
    results = tmp_path_factory.mktemp("numbers") / "results"
    store = ResultsStore(results)
    put(store, manifest("perplexity", subject("planted-elsewhere", "tiny"), headline=("ppl",)),
        [score("ppl", 50.0, False, half=1.0)])
    out = _cli(["run", "--mixers", "attention", "--no-controls", "--suites", "perplexity", "--results", str(results),
                "--skip-gate", *TINY_TRAIN, "--tokens", "4096", "--suite-config", "perplexity.max_windows=3"])
    return store, out


def test_run_ends_with_its_metrics_run_ids_and_its_rows_of_the_board(ran):
    store, out = ran
    numbers = out[re.search(r"model: attention( \([^)]*\))? seed 0 @ tiny", out).start():]
    lines = _table_lines(numbers)
    assert lines, out
    (run,) = [r for r in store.iter_runs(samples=False) if r.manifest.subject.mixer == "attention"]
    assert {cells[-1] for cells in lines} == {run.run_id} and store.has_run(run.run_id)
    by_metric = {cells[1].split()[0]: cells for cells in lines}
    for name in ("ppl", "bpb", "unigram_ppl"):  # headline metrics, each with its value, interval and n
        metric = run.metric(name)
        cells = by_metric[name]
        assert cells[2] == fmt(metric.value) and cells[3] == interval_text(metric) and "bootstrap 95%" in cells[3]
        assert cells[4] == f"{metric.n:,}"
    assert "ppl_pos_0-15" not in by_metric  # not a headline metric
    assert f"mixbench show {run.run_id} --results {store.root}" in out
    board = out[out.index("the board's rows of these runs (1 of 2;"):]
    assert re.search(r"^\|rank\s*\|model", board, re.M) and "attention" in board
    assert "planted-elsewhere" not in board  # the store's other row is left out


def test_lm_eval_prints_its_accuracy_and_run_id(ran):
    store, _ = ran
    (checkpoint,) = [p for p in (store.local_path / "checkpoints").iterdir() if p.is_dir()]
    out = _cli(["lm-eval", "--checkpoint", str(checkpoint), "--tasks", "standin_sentiment_zeroshot", "--limit", "8",
                "--results", str(store.root), "--skip-gate"])
    (run,) = [r for r in store.iter_runs(samples=False) if r.manifest.suite == "lm-eval"]
    acc = run.metric("standin_sentiment_zeroshot/acc")
    (cells,) = _table_lines(out)
    assert cells == ["lm-eval", "standin_sentiment_zeroshot/acc ↑", fmt(acc.value), interval_text(acc), "8",
                     run.run_id]
    assert re.search(r"model: attention( \([^)]*\))? seed 0 @ tiny", out)
    assert f"run {run.run_id} (lm-eval) written" in out


def _planted_compare(store: ResultsStore) -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(3.0, 0.5, 40)
    speeds = {"mamba": (0.9866, 5.0), "attention": (0.2001, 1.0)}  # train_vs_floor (a rate), decode_ms (a time)
    for mixer, shift in (("mamba", -0.1), ("attention", 0.0)):
        nll = base + shift + rng.normal(0.0, 0.01, 40)
        items = ItemValues(tuple(f"doc{i}" for i in range(40)), tuple(nll), unit="nats/token")
        unigram = ItemValues(items.ids, tuple(base + 3.0 + rng.normal(0.0, 0.01, 40)), unit="nats/token")
        ppl = Metric("ppl", float(np.exp(nll.mean())), False, role="score", items=items,
                     interval=Interval(float(np.exp(nll.mean() - 0.05)), float(np.exp(nll.mean() + 0.05)), "bootstrap"))
        uni = Metric("unigram_ppl", float(np.exp(np.mean(unigram.values))), False, role="baseline", items=unigram,
                     interval=Interval(900.0, 1100.0, "bootstrap"))
        put(store, manifest("perplexity", subject(mixer, "quick"), headline=("ppl", "unigram_ppl")), [ppl, uni])
        rate, time = speeds[mixer]
        put(store, manifest("throughput", subject(mixer, "quick"), headline=("train_vs_floor", "decode_ms")), [
            score("train_vs_floor", rate, True, half=0.01, role="speed", unit="floor time / time, paired rounds"),
            score("decode_ms", time, False, half=0.05, role="speed", unit="ms/token"),
        ])


def test_compare_names_scales_judges_no_baseline_and_words_speed_by_direction(tmp_path):
    store = ResultsStore(tmp_path / "store")
    _planted_compare(store)
    _, _, rows = compare_models(store, "mamba", "attention")
    by_column = {r.column: r for r in rows}
    assert by_column["perplexity/unigram_ppl"].verdict == "baseline: no verdict"
    assert by_column["perplexity/ppl"].verdict == "A better" and by_column["perplexity/ppl"].scale == "nats/token"
    out = _cli(["compare", "mamba", "attention", "--results", str(tmp_path / "store")])
    ppl = next(line for line in out.splitlines() if line.startswith("perplexity/ppl "))
    c = by_column["perplexity/ppl"]
    # the values, their difference on the values' scale, and the paired difference on the NLL scale, named
    assert f" {fmt(c.a)} " in ppl and f" {fmt(c.a - c.b)} " in ppl and f" {fmt(c.difference)} [" in ppl
    assert "nats/token" in ppl and "difference of log perplexities" in out
    assert "baseline: no verdict" in next(x for x in out.splitlines() if x.startswith("perplexity/unigram_ppl"))
    speed = {m.group(1): m for m in re.finditer(
        r"^  (\S+): A is (\S+)x (faster|slower) than B \((\S+) / (\S+)\)$", out, re.M)}
    assert set(speed) == {"throughput/train_vs_floor", "throughput/decode_ms"}
    for column, direction in (("throughput/train_vs_floor", "faster"), ("throughput/decode_ms", "slower")):
        m = speed[column]
        line = next(x for x in out.splitlines() if x.startswith(column + " "))
        printed = {fmt(by_column[column].a), fmt(by_column[column].b)}
        assert {m.group(4), m.group(5)} == printed and all(f" {v} " in line for v in printed)
        assert m.group(3) == direction and m.group(2) == fmt(float(m.group(4)) / float(m.group(5)), 3)
    assert speed["throughput/train_vs_floor"].group(2) == "4.93"  # 0.9866 / 0.2001 = 4.9305


@pytest.mark.parametrize(("a", "b", "kind", "expected"), [
    ("12.34", "2.503", "time", "A is 4.93x slower than B (12.34 / 2.503)"),
    ("2.503", "12.34", "time", "A is 4.93x faster than B (12.34 / 2.503)"),
    ("1,234", "250.3", "rate", "A is 4.93x faster than B (1,234 / 250.3)"),
    ("1.000", "1.000", "rate", "A is as fast as B (1.000 = 1.000)"),
    ("0", "1.0", "time", ""), ("n/a", "1.0", "rate", ""), ("2.0", "1.0", None, ""),
])
def test_a_speed_ratio_is_the_ratio_of_the_printed_numbers(a, b, kind, expected):
    assert speed_ratio_text(a, b, kind) == expected


def test_throughput_progress_line_says_which_way_from_its_printed_times():
    from suites.throughput import _progress
    from suites.throughput.measure import Point

    line = _progress({"measured": Point("train", 128, 1, "ok", seconds=0.012341),
                      "reference": Point("train", 128, 1, "ok", seconds=0.0025031),
                      "floor": Point("train", 128, 1, "ok", seconds=0.00102)})
    assert line == ("12.34 ms, reference 2.503 ms, floor 1.020 ms; measured is 4.93x slower than the reference "
                    "(12.34 / 2.503)")
    assert math.isclose(12.34 / 2.503, 4.93, abs_tol=0.005)
