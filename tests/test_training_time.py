"""A training's time is bounded before any work (harness/running/training_time.py): a token budget or a ladder
rung that this machine would train for longer than the stated limit is refused in one sentence (exit 2) naming its
steps, tokens, measured speed and time, before a tokenizer, a checkpoint folder or a gate; ``--yes`` starts it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.model.specs import make_run_spec
from harness.running import training_time
from tests.conftest import main

HUGE = str(10**12)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh cache folder: a refused command leaves no tokenizer, token stream, gate verdict or checkpoint in it
    (only the CLI's listings, and the machine's compiled kernels that timing a step of the model builds once)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("MIXBENCH_CACHE", str(folder))
    return folder


def written(folder: Path) -> list[Path]:
    if not folder.exists():
        return []
    return [p for p in folder.rglob("*") if p.is_file() and not {"listings", "kernels"} & set(p.parts)]


def refusal(capsys, announced: int = 0) -> str:
    """The one error line (after ``announced`` lines the command prints before its checks)."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 + announced, err
    return err.splitlines()[-1]


def test_a_token_budget_of_a_trillion_is_refused_with_its_estimate(tmp_path, cache, capsys):
    out = tmp_path / "ckpt"
    code = main(["train", "--mixer", "none", "--preset", "tiny", "--tokens", HUGE, "--out", str(out),
                 "--no-progress"])
    err = refusal(capsys)
    assert code == 2 and not out.exists() and written(cache) == [], err
    # preset tiny: 8 sequences of 128 tokens a step
    for part in ("training none at preset tiny", "976,562,500 steps", "1,000,000,000,000 tokens", "tokens/s",
                 "optimizer steps of this model measured here", "24-hour limit", "--yes"):
        assert part in err, (part, err)


def test_a_ladder_rung_of_a_trillion_tokens_is_refused_by_run_and_scaling(tmp_path, cache, capsys):
    plan = tmp_path / "ladder.yaml"
    plan.write_text("name: huge-rung\npreset: tiny\nmixers: [none]\ncontrols: []\nsuites: [scaling]\n"
                    "ladder:\n  - {d_model: 32, n_layers: 1, tokens: 1000}\n"
                    f"  - {{d_model: 32, n_layers: 1, tokens: {HUGE}}}\n")
    store = tmp_path / "store"
    for argv in (["run", str(plan)], ["scaling", "--plan", str(plan)]):
        code = main([*argv, "--results", str(store), "--no-progress"])
        err = refusal(capsys)
        assert code == 2 and "training none at preset tiny (width 32, 1 layer)" in err and "steps" in err, err
        assert written(store) == [] and written(cache) == [], argv
    code = main(["tune", "--preset", "tiny", "--mixers", "none", "--no-controls", "--tokens", HUGE,
                 "--out", str(tmp_path / "recipes"), "--results", str(store), "--no-progress"])
    assert code == 2 and "tuning: training none" in refusal(capsys, announced=1) and not (tmp_path / "recipes").exists()


def test_yes_starts_what_the_limit_refuses(tmp_path, cache, capsys, monkeypatch):
    """Under a planted limit of a millisecond, twice preset tiny's budget is refused, and starts with --yes."""
    monkeypatch.setattr(training_time, "MAX_TRAIN_HOURS", 1e-3 / 3600)
    argv = ["train", "--mixer", "none", "--preset", "tiny", "--tokens", "131072", "--max-train-docs", "40",
            "--out", str(tmp_path / "ckpt"), "--no-progress"]
    assert main(argv) == 2 and "hour limit" in refusal(capsys)
    assert not (tmp_path / "ckpt").exists()
    assert main([*argv, "--yes"]) == 0 and (tmp_path / "ckpt").is_dir()


def test_a_presets_own_setting_is_not_measured(monkeypatch):
    """The preset's budget (or less: the tests', the quickstart's smaller budgets) costs no measurement."""
    def never(*args, **kwargs):
        raise AssertionError("measured")

    monkeypatch.setattr(training_time, "measure_tokens_per_s", never)
    for tokens in (None, 32768):
        spec = make_run_spec("none", "tiny", train_overrides={"token_budget": tokens} if tokens else {})
        assert training_time.check_training_time(spec, "cpu", False, "x") is None
    bigger = make_run_spec("none", "tiny", backbone_overrides={"d_model": 128})
    assert training_time.larger_than_preset(bigger)
    assert training_time.duration(90) == "90 s" and training_time.duration(3 * 86400) == "3.0 days"


def test_run_says_what_the_grid_will_train_before_it_starts(tmp_path, capsys):
    """The cost line comes before the first training, with the steps and tokens the spec gives (counted here
    independently: budget // (batch x context) steps); a second call whose model is trained says only the suite
    runs left."""
    store = tmp_path / "store"
    argv = ["run", "--mixers", "none", "--no-controls", "--preset", "tiny", "--tokens", "8192", "--max-train-docs",
            "40", "--results", str(store), "--no-progress"]
    assert main([*argv, "--suites", "perplexity", "--suite-config", "max_windows=2", "bootstrap=10"]) == 0
    err = capsys.readouterr().err
    spec = make_run_spec("none", "tiny", train_overrides={"token_budget": 8192})
    batch, context = spec.train.batch_size, spec.model.backbone.context
    steps = max(1, 8192 // (batch * context))
    line = next(x for x in err.splitlines() if "this grid trains" in x)
    assert f"trains 1 model(s): {steps:,} optimizer steps, {steps * batch * context:,} tokens, about " in line
    assert line.endswith("then 1 suite run(s)") and err.index(line) < err.index("job 1/1")
    assert main([*argv, "--suites", "perplexity", "--suite-config", "max_windows=3", "bootstrap=10"]) == 0
    assert "every model is trained already; 1 suite run(s) to score" in capsys.readouterr().err
