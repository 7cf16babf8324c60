"""The command line end to end, and every kind of bad input failing before any work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from tests.conftest import TINY_TRAIN


def listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def test_mixers_lists_kernels_and_capabilities(capsys):
    assert main(["mixers"]) == 0
    out = capsys.readouterr().out
    assert "protot" in out and "recurrent, chunked" in out and "intervene(write-mask/read-mask/reinit)" in out
    assert "attention" in out and "naive, sdpa" in out


def test_check_passes_for_builtins(capsys):
    assert main(["check", "protot"]) == 0
    assert "all checks passed" in capsys.readouterr().out


def test_train_eval_leaderboard(protot_checkpoint, attention_checkpoint, tmp_path, capsys):
    results = tmp_path / "results"
    for ckpt in (protot_checkpoint, attention_checkpoint):
        assert main(["eval", "--suite", "perplexity", "--checkpoint", str(ckpt), "--results", str(results), "--no-progress"]) == 0
    before = listing(results)
    assert main(["eval", "--suite", "perplexity", "--checkpoint", str(protot_checkpoint), "--results", str(results)]) == 0
    assert "nothing to do" in capsys.readouterr().out and listing(results) == before  # a re-run is a no-op
    assert main(["leaderboard", "--results", str(results), "--format", "json", "--all"]) == 0
    rows = {r["mixer"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert set(rows) == {"protot", "attention"}
    for row in rows.values():
        ppl, unigram = row["cells"]["perplexity/ppl"], row["cells"]["perplexity/unigram_ppl"]
        assert ppl["interval"]["low"] <= ppl["value"] <= ppl["interval"]["high"]
        assert ppl["value"] < unigram["value"] and not unigram["votes"]  # even a tiny model beats the floor
        # two models scored one by one, no control beside them: nothing can veto the column, so nothing ranks
        assert row["gate"] == "passed" and row["rank"] is None and not ppl["votes"]
    for fmt in ("md", "csv", "html", "latex"):
        assert main(["leaderboard", "--results", str(results), "--format", fmt]) == 0
        assert "protot" in capsys.readouterr().out


def prepare_fixtures(ckpt: Path, tmp: Path) -> None:
    """A checkpoint with truncated weights, and a plain file where a results folder would go."""
    shutil.copytree(ckpt, tmp / "corrupt")
    for weights in (tmp / "corrupt").rglob("model.safetensors"):
        weights.write_bytes(weights.read_bytes()[:100])
    (tmp / "a-file").write_text("not a folder")


def bad_inputs(ckpt: Path, attn: Path, tmp: Path) -> dict[str, tuple[list[str], str]]:
    corrupt, blocker = tmp / "corrupt", tmp / "a-file"
    out = str(tmp / "out")
    res = ["--results", str(tmp / "results")]
    return {
        "unknown mixer": (["train", "--mixer", "protoo", "--out", out, *TINY_TRAIN], "Did you mean 'protot'"),
        "unknown suite": (["eval", "--suite", "perplexty", "--checkpoint", str(ckpt), *res], "Did you mean 'perplexity'"),
        "unknown preset": (["train", "--mixer", "protot", "--out", out, "--preset", "huge"], "unknown preset 'huge'"),
        "R = 0": (["train", "--mixer", "protot", "--out", out, *TINY_TRAIN, "--mixer-config", "n_prototypes=0"], "protot: n_prototypes must be an integer >= 1, got 0."),
        "unknown mixer field": (["train", "--mixer", "protot", "--out", out, *TINY_TRAIN, "--mixer-config", "prototypes=3"], "unknown config field"),
        "heads": (["train", "--mixer", "attention", "--out", out, *TINY_TRAIN, "--mixer-config", "n_heads=3"], "must be divisible by n_heads"),
        "zero budget": (["train", "--mixer", "protot", "--out", out, *TINY_TRAIN, "--tokens", "0"], "token_budget must be a positive"),
        "negative budget": (["train", "--mixer", "protot", "--out", out, *TINY_TRAIN, "--tokens", "-5"], "token_budget must be a positive"),
        "context too long": (["eval", "--suite", "perplexity", "--checkpoint", str(attn), "--suite-config", "context=4096", *res], "longer than this attention model supports"),
        "missing checkpoint": (["eval", "--suite", "perplexity", "--checkpoint", str(tmp / "nope"), *res], "does not exist"),
        "corrupt checkpoint": (["eval", "--suite", "perplexity", "--checkpoint", str(corrupt), *res], "corrupt"),
        "missing data": (["train", "--mixer", "protot", "--out", out, *TINY_TRAIN, "--data", str(tmp / "none.jsonl")], "does not exist"),
        "unwritable results": (["eval", "--suite", "perplexity", "--checkpoint", str(ckpt), "--results", str(blocker / "results")], "not writable"),
        "bad suite option": (["eval", "--suite", "perplexity", "--checkpoint", str(ckpt), "--suite-config", "splits=train", *res], "perplexity: splits must be a comma-separated list of names among test, test_ood"),
    }


CASES = list(bad_inputs(Path("a"), Path("b"), Path("c")))  # names only, for parametrisation


@pytest.mark.parametrize("case", CASES)
def test_bad_input_fails_before_work(case, protot_checkpoint, attention_checkpoint, tmp_path, capsys):
    prepare_fixtures(protot_checkpoint, tmp_path)
    argv, message = bad_inputs(protot_checkpoint, attention_checkpoint, tmp_path)[case]
    before = listing(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mixbench: error:") and message in err and "\n" not in err, err
    assert listing(tmp_path) == before  # nothing written: no checkpoint folder, no results store


def test_out_must_not_hold_another_run(protot_checkpoint, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(protot_checkpoint, other)
    assert main(["train", "--mixer", "attention", "--out", str(other), *TINY_TRAIN]) == 2
    assert "holds a checkpoint of a different run" in capsys.readouterr().err
