"""What a new user met on first contact (issue 50, item 5): a slow uncached ``mixers --table``, estimated FLOPs that
looked like counts, options without help, typos without a suggestion, the gate's verdict printed twice by ``run``,
and run ids missing from the board's JSON. Each through the real CLI where one exists."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import torch

from harness.cli import build_parser
from harness.mixer import FlopCount, Mixer
from harness.registry import MIXERS
from harness.reporting import listings, mixer_table
from harness.reporting.mixer_table import ESTIMATED, LEGEND, MixerCost, flops_estimated
from harness.store.results import ResultsStore
from tests.conftest import main
from tests.planted import control, manifest, put, score, subject

README = Path(__file__).resolve().parents[1] / "README.md"


# ------------------------------------------------------------------ 1. the mixers table is cached like the listings
@pytest.fixture
def counted_table(tmp_path, monkeypatch):
    """``mixer_costs`` replaced by a planted row that counts its calls; a cache of this test's own, which the
    listings use (this process's registries hold what the files say, so caching applies)."""
    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(listings, "_LOADED_HERE", True)
    calls: list[str] = []

    def costs(preset: str) -> list[MixerCost]:
        calls.append(preset)
        return [MixerCost("planted", "A Paper (Someone, 2020)", 10, False, 1234.0, ("reference",), "reference",
                          "reference", flops_estimated=True)]

    monkeypatch.setattr(mixer_table, "mixer_costs", costs)
    return calls


def test_a_second_mixers_table_is_read_from_the_cache(counted_table, capsys):
    """Building every mixer takes 15-20 s: the second call must not build any."""
    assert main(["mixers", "--table", "tiny"]) == 0
    first = capsys.readouterr().out
    assert main(["mixers", "--table", "tiny"]) == 0
    assert capsys.readouterr().out == first and counted_table == ["tiny"]
    assert main(["mixers", "--table", "quick"]) == 0  # each preset is its own entry
    assert counted_table == ["tiny", "quick"]


def test_an_install_or_an_edited_module_invalidates_the_cached_table(counted_table, tmp_path, monkeypatch, capsys):
    """The key follows the installed distributions (an upgrade changes the defaults) and the code's files."""
    site = tmp_path / "site"
    (site / "somepkg-1.0.dist-info").mkdir(parents=True)
    (site / "planted_mixers").mkdir()
    module = site / "planted_mixers" / "layer.py"
    module.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(listings, "_PACKAGES", (*listings._PACKAGES, "planted_mixers"))
    assert main(["mixers", "--table", "tiny"]) == 0
    assert main(["mixers", "--table", "tiny"]) == 0
    assert counted_table == ["tiny"]
    (site / "somepkg-1.0.dist-info").rename(site / "somepkg-1.1.dist-info")
    assert main(["mixers", "--table", "tiny"]) == 0
    assert counted_table == ["tiny"] * 2
    module.write_text("X = 22\n")  # another size: the stat changes even within one clock tick
    assert main(["mixers", "--table", "tiny"]) == 0
    assert counted_table == ["tiny"] * 3
    capsys.readouterr()


def test_an_unknown_preset_is_refused_before_the_cache(counted_table, capsys):
    assert main(["mixers", "--table", "quik"]) == 2
    assert "Did you mean 'quick'?" in capsys.readouterr().err and counted_table == []


def test_the_paper_mixers_cite_their_papers():
    papers = {name: getattr(MIXERS.get(name).cls, "paper", "") for name in ("attention", "mamba", "mamba2", "protot")}
    assert papers["attention"].startswith("Attention Is All You Need (Vaswani et al.")
    assert papers["mamba"].startswith("Mamba: Linear-Time Sequence Modeling with Selective State Spaces (Gu and Dao")
    assert papers["mamba2"].startswith("Transformers are SSMs: Generalized Models and Efficient Algorithms Through "
                                       "Structured State Space Duality (Dao and Gu")
    assert papers["protot"].startswith("Prototype Transformer (Yordanov et al.")


# ------------------------------------------------------------------ 2. an estimated FLOP count is marked
class _NoFlops(Mixer):
    """A plugin that declares no ``flops_per_token``: it gets the 2-per-weight fallback."""


class _OwnFlops(Mixer):
    def flops_per_token(self, context: int) -> FlopCount:
        return FlopCount.training(1.0)


def test_the_fallback_flop_count_is_marked_and_explained(counted_table, capsys):
    assert flops_estimated(_NoFlops) and not flops_estimated(_OwnFlops)
    assert not flops_estimated(MIXERS.get("attention").cls)
    assert main(["mixers", "--table", "tiny"]) == 0
    out = capsys.readouterr().out
    assert f"| 1,234{ESTIMATED} |" in out and LEGEND in out
    exact = mixer_table.render([MixerCost("own", "", 1, False, 1234.0, ("reference",), "reference", "reference")])
    assert f"1,234{ESTIMATED}" not in exact and LEGEND not in exact  # no mark, no legend


def test_the_board_json_says_which_training_flops_are_estimated(tmp_path, capsys):
    store = ResultsStore(tmp_path / "store")
    put(store, manifest("perplexity", subject("plugmix", train_flops=1e9, train_flops_estimated=True)),
        [score("ppl", 10.0, False, 0.5)])
    put(store, manifest("perplexity", subject("protot", train_flops=2e9, train_flops_estimated=False)),
        [score("ppl", 11.0, False, 0.5)])
    put(store, manifest("perplexity", control("none")), [score("ppl", 30.0, False, 0.5)])  # scored before the mark
    assert main(["leaderboard", "--results", str(store.root), "--format", "json"]) == 0
    rows = {r["mixer"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["plugmix"]["train_flops_estimated"] is True and rows["protot"]["train_flops_estimated"] is False
    assert rows["none"]["train_flops_estimated"] is None


# ------------------------------------------------------------------ 3. every option says what it does
def _parsers(parser: argparse.ArgumentParser, path: str = "mixbench"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                assert choice.help, f"{path} {choice.dest}: the command has no help line"
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def test_every_option_of_every_subcommand_has_help():
    """Built with every suite's own subcommand (judge, lm-eval, scaling), as a command line that runs one is."""
    missing = [f"{path} {'/'.join(a.option_strings) or a.dest}" for path, parser in _parsers(build_parser())
               for a in parser._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not (a.help or "").strip()]
    assert not missing, missing


def test_eval_help_explains_the_options_it_used_to_leave_bare(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option, words in (("--suite SUITE", "the suite that scores it"), ("--suite-config", "suite config fields"),
                          ("--device DEVICE", "cpu, cuda or cuda:N"), ("--kernel KERNEL", "force a mixer kernel"),
                          ("--force", "score again a run")):
        assert re.search(re.escape(option) + r"(?: \[[^\]]*\])? " + re.escape(words), text), option


# ------------------------------------------------------------------ 4. a typo gets the closest name
def test_a_mistyped_command_suggests_the_closest_in_one_line(capsys):
    assert main(["rnu"]) == 2
    err = capsys.readouterr().err
    assert err == ("mixbench: error: unknown command 'rnu'; did you mean 'run'? (`mixbench --help` says what each "
                   "does)\n")
    assert main(["xyzzy", "--results", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the commands are mixers, suites," in err and "did you mean" not in err


def test_mistyped_suite_names_suggest_too(tmp_path, capsys):
    assert main(["eval", "--suite", "perplexty", "--mixer", "attention", "--results", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Did you mean 'perplexity'?" in err
    store = ResultsStore(tmp_path / "store")
    put(store, manifest("perplexity", subject("protot")), [score("ppl", 10.0, False, 0.5)])
    assert main(["leaderboard", "--results", str(store.root), "--suite", "perplexty"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no results for suite(s) perplexty in" in err
    assert "Did you mean 'perplexity'? Suites with results: perplexity." in err


# ------------------------------------------------------------------ 6. the board's JSON lists every run id
def test_board_json_lists_every_run_of_a_row_per_suite(tmp_path, capsys):
    store = ResultsStore(tmp_path / "store")
    ids = {(suite, seed): put(store, manifest(suite, subject("protot", seed=seed)), [score(metric, 10.0 + seed)])
           for suite, metric in (("perplexity", "ppl"), ("cls", "acc")) for seed in (0, 1)}
    other = put(store, manifest("perplexity", subject("mamba")), [score("ppl", 12.0)])
    assert main(["leaderboard", "--results", str(store.root), "--format", "json", "--all"]) == 0
    rows = {r["mixer"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert {s: sorted(r) for s, r in rows["protot"]["runs"].items()} == {
        suite: sorted([ids[suite, 0], ids[suite, 1]]) for suite in ("cls", "perplexity")}
    assert rows["mamba"]["runs"] == {"perplexity": [other]}
    assert rows["protot"]["provenance"]["newest_run"] in ids.values()  # kept: the newest run's provenance
    assert main(["leaderboard", "--results", str(store.root), "--format", "csv", "--all"]) == 0
    assert ids["cls", 0] not in capsys.readouterr().out  # the CSV keeps one line per row, without id lists


# ------------------------------------------------------------------ 5. run prints the gate's verdict once; 7. docs
def _readme_checkpoint_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("**Checkpoints.**"):]
    code = section[section.index("```python\n") + len("```python\n"):]
    return code[:code.index("```")]


def test_run_prints_the_gate_verdict_once_and_the_readme_loads_its_checkpoint(tmp_path, monkeypatch, capsys):
    """A cold gate (this test's own cache), progress on: the gate's two lines (started, verdict), each once."""
    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path / "cache"))
    store = tmp_path / "store"
    code = main(["run", "--mixers", "none", "--no-controls", "--results", str(store), "--preset", "tiny", "--tokens",
                 "32768", "--max-train-docs", "40", "--suite-config", "max_windows=16", "bootstrap=100"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    gate = [line.strip() for line in err.splitlines() if "conformance gate" in line]
    assert gate[0] == "[mixbench] conformance gate for 'none' at preset tiny ..."
    assert len(gate) == 2 and re.fullmatch(r"\[mixbench\] conformance gate passed in \d+\.\d s", gate[1]), gate

    assert main(["leaderboard", "--results", str(store), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["train_flops"] > 0 and row["train_flops_estimated"] is False  # 'none' declares its FLOPs
    assert list(row["runs"]) == ["perplexity"] and len(row["runs"]["perplexity"]) == 1

    (folder,) = (store / "checkpoints").iterdir()  # where the README says run puts it
    example = _readme_checkpoint_example().replace("results/checkpoints/<model id>", str(folder))
    scope: dict = {}
    exec(compile(example, "README.md", "exec"), scope)  # noqa: S102 - the documented example, as a user runs it
    capsys.readouterr()
    assert scope["logits"].shape[:2] == (1, 3) and scope["ckpt"].spec.model.mixer == "none"
    assert isinstance(scope["model"], torch.nn.Module) and not scope["model"].training
