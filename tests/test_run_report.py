"""What commands print for a new user (issue: "the first hour"): eval's and run's headline tables, ``show``,
``compare``, ``run --suite-config``, ``check``'s cached verdict, the ``--plugin`` hints, and the board's text
(skewed intervals, seeds, state length, wrapped legend, voting columns in the JSON)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from harness.model import gate as gate_module
from harness.cli import main
from harness.config import BackboneConfig, ModelSpec, get_preset
from harness.errors import MixbenchError
from harness.reporting.render import compact_cell, skewed
from harness.store.results import ResultsStore
from harness.reporting.run_report import compare_models
from harness.stats import Interval
from harness.reporting.table import Cell
from tests.conftest import TINY_TRAIN
from tests.planted import control, manifest, put, score, subject


def _interval_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"\[[-0-9.e]+, [-0-9.e]+\] bootstrap 95%", line)]


def test_eval_prints_its_headline_metrics_and_show_prints_the_run(protot_checkpoint, tmp_path, capsys, monkeypatch):
    results = tmp_path / "results"
    argv = ["eval", "--suite", "perplexity", "--checkpoint", str(protot_checkpoint), "--results", str(results),
            "--suite-config", "max_windows=4", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    run_id = re.search(r"run ([0-9a-f]{16}) \(perplexity\) written", out).group(1)
    stored = ResultsStore(results).read_run(run_id)
    ppl = stored.metric("ppl")
    line = next(x for x in out.splitlines() if x.startswith("| perplexity | ppl ↓"))
    from harness.reporting.numbers import fmt

    assert f"[{fmt(ppl.interval.low)}, {fmt(ppl.interval.high)}] bootstrap 95%" in line
    assert len(_interval_rows(out)) >= 2  # ppl and ood_ppl at least, each with its interval and kind

    monkeypatch.chdir(tmp_path)  # outside the checkout: the git revision is still the code's
    assert main(["show", run_id[:6], "--results", str(results)]) == 0
    shown = capsys.readouterr().out
    assert f"run {run_id}" in shown and "not a git checkout" not in shown
    assert re.search(r"git [0-9a-f]{12}", shown)
    assert "ppl_pos_0-15" in shown  # every metric, not only the headline

    assert main(["show", "zzzz", "--results", str(results)]) == 2
    assert "no run 'zzzz'" in capsys.readouterr().err


def _planted_pair(store: ResultsStore, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    base = rng.normal(3.0, 0.5, 60)
    a = base + rng.normal(-0.05, 0.02, 60)
    b = base + rng.normal(0.0, 0.02, 60)
    for mixer, values in (("mamba", a), ("attention", b)):
        items = {f"doc{i}": v for i, v in enumerate(values)}
        m = score("ppl", float(np.exp(values.mean())), False, half=1.0, items=items)
        put(store, manifest("perplexity", subject(mixer, "quick"), headline=("ppl",)), [m])
    return a, b


def test_compare_is_the_paired_difference_on_shared_items(tmp_path, capsys):
    store = ResultsStore(tmp_path / "store")
    a, b = _planted_pair(store, np.random.default_rng(0))
    label_a, label_b, rows = compare_models(store, "mamba", "attention")
    (row,) = [r for r in rows if r.column == "perplexity/ppl"]
    assert row.difference == pytest.approx(float((a - b).mean()), abs=1e-9)  # a naive mean of the per-item gaps
    assert row.low < row.difference < row.high < 0 and row.basis == "60 shared items"
    assert row.verdict == "A better"  # lower NLL is better
    assert main(["compare", "mamba", "attention", "--results", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "A = mamba" in out and "B = attention" in out and "A better" in out
    assert main(["compare", "mamba", "nosuch", "--results", str(tmp_path / "store")]) == 2
    assert "no model 'nosuch'" in capsys.readouterr().err
    with pytest.raises(MixbenchError, match="same model"):
        compare_models(store, "mamba", "mamba")


def test_run_takes_suite_config_and_prints_each_job(tmp_path, capsys):
    results = tmp_path / "r"
    argv = ["run", "--mixers", "mamba", "--no-controls", "--suites", "perplexity", "--results", str(results),
            *TINY_TRAIN[:-1], "--suite-config", "perplexity.max_windows=3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"model: mamba \(max_train_docs=40, token_budget=32768\) seed 0 @ tiny", out)
    assert re.search(r"^\| perplexity \| ppl ↓ ", out, re.M)
    (run,) = list(ResultsStore(results).iter_runs(samples=False))
    assert run.manifest.suite_config["max_windows"] == 3
    for bad, message in ((["--suite-config", "glue.max_windows=3"], "suite 'glue' is not among --suites"),
                         (["--suite-config", "max_windows=-3"], "perplexity: max_windows must be an integer >= 0, "
                                                               "got -3.")):
        assert main([*argv[:-2], *bad]) == 2
        assert message in capsys.readouterr().err


def test_check_caches_its_verdict_for_eval_and_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path / "cache"))
    assert main(["check", "mamba", "--preset", "tiny"]) == 0
    assert "verdict cached" in capsys.readouterr().out
    preset = get_preset("tiny")
    # the backbone a run trains at: the preset's, with the tokenizer's vocabulary bound later (mixer-blind)
    spec = ModelSpec("mamba", {}, BackboneConfig(vocab_size=preset.vocab_size + 17, **preset.backbone))

    def must_not_run(*a, **k):
        raise AssertionError("the gate ran again although check had cached its verdict")

    monkeypatch.setattr(gate_module, "run_checks", must_not_run)
    record = gate_module.require_gate(spec, "tiny", "cpu", progress=False)
    assert record.status == "passed"


def test_unknown_mixer_and_failed_gate_name_the_plugin(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path / "cache"))
    assert main(["check", "gated-ema", "--preset", "tiny"]) == 2
    assert "--plugin MODULE" in capsys.readouterr().err
    from harness import registry

    monkeypatch.setattr(registry, "LOADED_PLUGINS", [])  # plugins earlier tests loaded in this process
    registry.load_plugins(["tests.adversaries"])
    preset = get_preset("tiny")
    spec = ModelSpec("_adv_nan_step", {}, BackboneConfig(vocab_size=preset.vocab_size, **preset.backbone))
    with pytest.raises(gate_module.GateFailed, match=r"mixbench check _adv_nan_step --preset tiny --plugin "
                                                     r"tests\.adversaries"):
        gate_module.require_gate(spec, "tiny", "cpu", progress=False)


@pytest.mark.parametrize(("value", "low", "high", "expected"), [
    (10.0, 9.0, 11.0, False),  # symmetric
    (7141.0, 4088.0, 22729.0, True),  # the report's throughput cell: 3053 below, 15588 above
    (1.0, 0.6, 1.75, False),  # 0.4 below, 0.75 above: within a factor of 2
    (0.2, 0.0, 1.0, True),  # ±0.5 would read as reaching -0.3 though the interval starts at 0
    (-5.0, -6.0, -4.5, False),
])
def test_skewed_intervals_are_shown_by_their_bounds(value, low, high, expected):
    assert skewed(value, low, high) is expected
    text = compact_cell(Cell(value, Interval(low, high, "bootstrap"), 1, True))
    assert ("[" in text) is expected and ("±" in text) is not expected


def test_board_text_says_what_its_columns_mean(tmp_path, capsys):
    store = ResultsStore(tmp_path / "store")
    rng = np.random.default_rng(1)
    for mixer, shift in (("mamba", -0.3), ("attention", 0.0), ("none", 0.4)):
        for seed in (0, 1):
            values = rng.normal(3.0 + shift, 0.1, 40)
            items = {f"d{i}": v for i, v in enumerate(values)}
            subj = (control if mixer == "none" else subject)(mixer, "quick", seed, backbone={"context": 256})
            put(store, manifest("perplexity", subj, headline=("ppl", "ood_ppl")), [
                score("ppl", float(np.exp(values.mean())), False, half=0.5, items=items),
                score("ood_ppl", float(np.exp(values.mean() + 0.1)), False, half=0.5,
                      items={k: v + 0.1 for k, v in items.items()}),
            ])
    assert main(["leaderboard", "--results", str(tmp_path / "store")]) == 0
    text = capsys.readouterr().out
    table, legend = text.split("\n\n", 2)[-2:] if text.startswith("**") else text.split("\n\n", 1)
    assert "state@256" in text
    assert all(len(line) <= 120 for line in legend.splitlines()), max(legend.splitlines(), key=len)
    assert main(["leaderboard", "--results", str(tmp_path / "store"), "--all"]) == 0
    full = capsys.readouterr().out
    assert re.search(r"\|\s*2 \(0,1\)\s*\|", full)  # two seeds, their ids in brackets
    assert "| ok " in full and "passed" not in full.split("\n\n")[1].split("\n- ")[0]  # one gate vocabulary
    assert main(["leaderboard", "--results", str(tmp_path / "store"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    voting = {c["name"] for c in doc["columns"] if c["votes"]}
    columns = {name for record in doc["rows"] for name in record["cells"]}
    assert voting == {"perplexity/ppl", "perplexity/ood_ppl"}  # the compact view shows ppl only
    assert voting <= columns
