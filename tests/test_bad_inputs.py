"""Hostile input on every command, through the real CLI: the exit status, one sentence, and nothing changed.

Each row of :data:`ROWS` is a command line (built from the module's :class:`World`: a trained tiny checkpoint, a
results store holding one run, bad data files and plans), the exit status it must end with, and a fragment of
its one-line message. Every file under the world's folder is hashed before and after each row: a refused command
leaves the store, the checkpoint, the data and a published site byte-identical. Secrets are tested in
tests/test_secrets.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.cli import main
from tests.conftest import TINY_TRAIN

REPO = Path(__file__).resolve().parents[1]


@dataclass
class World:
    root: Path
    store: Path
    checkpoint: Path
    busy: Path  # a checkpoint folder whose write lock another process holds

    def path(self, name: str) -> str:
        return str(self.root / name)


def write_plan(root: Path, name: str, body: str) -> str:
    """A tiny protot plan with ``body``'s keys; a key of the defaults the body gives is the body's (a plan may
    not give a key twice)."""
    path = root / f"{name}.yaml"
    body = textwrap.dedent(body)
    defaults = [line for line in ("presets: [tiny]", "mixers: [protot]", "suites: [perplexity]")
                if not body.startswith(line.split(":")[0] + ":") and f"\n{line.split(':')[0]}:" not in body]
    path.write_text("\n".join(defaults) + "\n" + body)
    return str(path)


def make_data(root: Path) -> None:
    (root / "empty.txt").write_bytes(b"")
    (root / "binary.txt").write_bytes(b"some text\n\x00\x01\x02\xff binary tail\n")
    (root / "latin1.txt").write_bytes("Caf\u00e9 au lait, a paragraph.\n\nAnother one.\n".encode("latin-1"))
    (root / "malformed.jsonl").write_text('{"text": "fine"}\n{"text": "broken"\n{"text": "fine"}\n')
    rows = [{"text": long_text(i)} if i % 3 else {"body": f"no text field {i}"} for i in range(30)]
    (root / "missing.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "a-folder").mkdir()


def edit_checkpoint(source: Path, out: Path) -> None:
    """A copy of a checkpoint whose config.json was edited after training to a value with the same weight shapes
    (the mass floor): it would load and score silently as another model."""
    shutil.copytree(source, out)
    for config in out.rglob("config.json"):
        meta = json.loads(config.read_text())
        meta["run_spec"]["model"]["mixer_config"]["mass_floor"] = 1e-3
        config.write_text(json.dumps(meta))


def strip_identity(source: Path, out: Path) -> None:
    """A copy whose config was edited after training and whose recorded identity was removed: only the training
    id saved beside the run spec still tells."""
    shutil.copytree(source, out)
    for config in out.rglob("config.json"):
        meta = json.loads(config.read_text())
        meta.pop("model_identity", None)
        meta["run_spec"]["model"]["mixer_config"]["mass_floor"] = 1e-3
        config.write_text(json.dumps(meta))


def make_round_two(root: Path, checkpoint: Path, store: Path) -> None:
    """The files of the second round (issue 31): plans, a plugin, a task YAML, checkpoints and a site with the
    store inside it."""
    (root / "binary.yaml").write_bytes(b"\x9a\x00\xff binary, not YAML\n" * 4)
    bomb = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    bomb += [f"{c}: &{c} [{','.join(['*' + p] * 9)}]" for p, c in zip("abcdef", "bcdefg")]
    (root / "bomb.yaml").write_text("\n".join(bomb) + "\npresets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\n")
    write_plan(root, "plan-big-seed", "seeds: [18446744073709551617]\n")
    write_plan(root, "plan-huge-context", "backbone: {context: 100000000}\n")
    write_plan(root, "plan-huge-grid", "seeds: [" + ",".join(map(str, range(30_000))) + "]\n")
    (root / "plan-key-twice.yaml").write_text("presets: [tiny]\nmixers: [protot]\nsuites: [perplexity]\n"
                                              "suites: [glue]\n")
    write_plan(root, "plan-long-name", f"name: {'n' * 300}\n")
    (root / "plan-digits.yaml").write_text("presets: [tiny]\nsuites: [perplexity]\nmixers: {protot: {n_prototypes: "
                                            + "7" * 5000 + "}}\n")
    (root / "tasks").mkdir()
    (root / "tasks" / "broken.yaml").write_text(
        "task: broken_fn\ncustom_dataset: !function nosuchmodule.load\noutput_type: multiple_choice\n"
        "test_split: test\ndoc_to_text: '{{text}}'\ndoc_to_choice: [' a', ' b']\ndoc_to_target: 0\n"
        "metric_list:\n  - metric: acc\n")
    shutil.copytree(checkpoint, root / "escaping")
    (root / "escaping" / "LATEST").write_text("../../elsewhere/step-0000001")
    strip_identity(checkpoint, root / "stripped")
    assert main(["publish", "--results", str(store), "--out", str(root / "site-with-store")]) == 0
    shutil.copytree(store, root / "site-with-store" / "data")


def long_text(i: int) -> str:
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly box in the jungle".split()
    return " ".join(words[(i + k) % len(words)] for k in range(400))


@pytest.fixture(scope="module")
def world(protot_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-inputs")
    store = root / "store"
    assert main(["eval", "--suite", "perplexity", "--checkpoint", str(protot_checkpoint), "--results", str(store),
                 "--suite-config", "max_windows=4", "bootstrap=20", "--no-progress"]) == 0  # fmt: skip
    make_data(root)
    for name, body in PLANS.items():
        write_plan(root, name, body)
    assert main(["publish", "--results", str(store), "--out", str(root / "site")]) == 0  # a live site
    (root / "empty-store" / "runs").mkdir(parents=True)  # a store that holds no run
    edit_checkpoint(protot_checkpoint, root / "edited")
    make_round_two(root, protot_checkpoint, store)
    busy = root / "busy"
    holder = subprocess.Popen(  # a second process really holds the lock, as a concurrent `mixbench train` would
        [sys.executable, "-c", "import sys; from harness.model.checkpoint import writer_lock\n"
         f"with writer_lock({str(busy)!r}):\n    print('locked', flush=True); sys.stdin.read()"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield World(root, store, protot_checkpoint, busy)
    finally:
        holder.communicate("", timeout=60)


PLANS = {
    "plan-float-count": "suites: {perplexity: {max_windows: 2.5}}\n",
    "plan-bool-count": "mixers: {protot: {n_prototypes: true}}\n",
    "plan-nan-tolerance": "nightly: {rel_tolerance: .nan}\n",
    "plan-inf-tolerance": "nightly: {suites: {perplexity: {abs_tolerance: .inf}}}\n",
    "plan-string-lr": "train: {lr: fast}\n",
    "plan-nan-cpus": "resources: {cpus: .nan}\n",
    "plan-unknown-backbone": "backbone: {layers: 2}\n",
}


def ev(w: World, *config: str, suite: str = "perplexity") -> list[str]:
    return ["eval", "--suite", suite, "--checkpoint", str(w.checkpoint), "--results", str(w.store), "--no-progress",
            "--suite-config", *config]  # fmt: skip


def tr(w: World, *extra: str, out: str = "out") -> list[str]:
    return ["train", "--mixer", "protot", "--out", w.path(out), *TINY_TRAIN, *extra]


def plan(w: World, name: str) -> list[str]:
    return ["run", w.path(f"{name}.yaml"), "--results", str(w.store), "--no-progress"]


#: (id, argv builder, exit status, fragment(s) of the one-line message)
ROWS = [
    # ---- item 1: typed values from the command line
    ("int from letters", lambda w: ev(w, "max_windows=abc"), 2, "perplexity: max_windows must be an integer >= 0, got 'abc'."),
    ("int from a float", lambda w: ev(w, "max_windows=2.5"), 2, "max_windows must be an integer >= 0, got '2.5'."),
    ("int from a bool", lambda w: ev(w, "max_windows=true"), 2, "max_windows must be an integer >= 0, got 'true'."),
    ("count from nan", lambda w: ev(w, "pairs_per_slice=nan", suite="robustness"), 2,
     "robustness: pairs_per_slice must be an integer >= 1, got 'nan'."),
    ("float nan", lambda w: ev(w, "confidence=nan"), 2,
     "confidence must be a number in [0.5, 1), got 'nan' (NaN is not allowed here)."),
    ("float inf", lambda w: ev(w, "confidence=inf"), 2, "got 'inf' (infinity is not allowed here)."),
    ("negative count", lambda w: ev(w, "max_windows=-3"), 2, "perplexity: max_windows must be an integer >= 0, got -3."),
    ("choice", lambda w: ev(w, "pooling=max", suite="glue"), 2, "glue: pooling must be one of last, mean, got 'max'."),
    ("list item", lambda w: ev(w, "lengths=256,big", suite="throughput"), 2,
     ("throughput: lengths must be a comma-separated list of integers", "got '256,big' ('big' is not an integer).")),
    ("misspelt field", lambda w: ev(w, "max_windos=4"), 2, "unknown config field(s) max_windos (did you mean max_windows?)"),
    ("no equals sign", lambda w: ev(w, "max_windows"), 2, "expected KEY=VALUE, got 'max_windows'"),
    ("key twice", lambda w: ev(w, "max_windows=1", "max_windows=2"), 2, "max_windows is given twice"),
    ("mixer int from a float", lambda w: tr(w, "--mixer-config", "n_prototypes=2.5"), 2,
     "protot: n_prototypes must be an integer >= 1, got '2.5'."),
    ("mixer float from a bool", lambda w: tr(w, "--mixer-config", "beta_init=true"), 2,
     "protot: beta_init must be a number in (0, 1), got 'true'."),
    ("mixer bool from a number", lambda w: ["check", "deltanet", "--mixer-config", "use_gate=2"], 2,
     "deltanet: use_gate must be true or false, got '2'."),
    # ---- item 1: plans are validated before anything trains
    ("plan float count", lambda w: plan(w, "plan-float-count"), 2, "perplexity: max_windows must be an integer >= 0, got 2.5."),
    ("plan bool count", lambda w: plan(w, "plan-bool-count"), 2, "n_prototypes must be an integer >= 1, got True (a boolean)."),
    ("plan nan tolerance", lambda w: plan(w, "plan-nan-tolerance"), 2,
     "nightly: rel_tolerance must be a number >= 0, got nan (NaN is not allowed here)."),
    ("plan inf tolerance", lambda w: plan(w, "plan-inf-tolerance"), 2, "abs_tolerance must be a number >= 0, got inf"),
    ("plan string lr", lambda w: plan(w, "plan-string-lr"), 2, "train: lr must be a number, got 'fast'."),
    ("plan nan cpus", lambda w: plan(w, "plan-nan-cpus"), 2, "resources: cpus must be a number, got nan"),
    ("plan unknown backbone key", lambda w: plan(w, "plan-unknown-backbone"), 2,
     "backbone: unknown config field(s) layers (did you mean n_layers?)"),
    # ---- item 2: data errors name the file, the line or byte, and the fix
    ("empty txt", lambda w: tr(w, "--data", w.path("empty.txt")), 2, "empty.txt is empty (no text in it); add text"),
    ("binary txt", lambda w: tr(w, "--data", w.path("binary.txt")), 2,
     "binary.txt looks binary: a NUL byte at line 2, byte offset 10; give a UTF-8 text file."),
    ("latin-1 txt", lambda w: tr(w, "--data", w.path("latin1.txt")), 2,
     "latin1.txt is not UTF-8: byte 0xe9 at line 1, byte offset 3 does not decode; re-save the file as UTF-8"),
    ("malformed jsonl", lambda w: tr(w, "--data", w.path("malformed.jsonl")), 2,
     "malformed.jsonl is not valid JSON at line 2, byte offset 17 (Expecting ',' delimiter at column 18)"),
    ("rows without text", lambda w: tr(w, "--data", w.path("missing.jsonl")), 2,
     "missing.jsonl has 10 of 30 rows without a string 'text' (the first at line 1, byte offset 0); fix them, set "
     "text_field, or pass --skip-bad-rows"),
    # ---- item 3: the checkpoint folder, argparse, output paths
    ("busy --out", lambda w: tr(w, out="busy"), 2, "is training into"),
    ("abbreviated option", lambda w: ["eval", "--suite", "perplexity", "--check", str(w.checkpoint)], 2,
     "unrecognized arguments: --check"),
    ("abbreviated subparser option", lambda w: ["train", "--mix", "protot", "--out", w.path("out")], 2,
     "the following arguments are required: --mixer"),
    ("context 0", lambda w: tr(w, "--context", "0"), 2, "argument --context: expected a positive integer, got 0"),
    ("context negative", lambda w: tr(w, "--context", "-3"), 2, "argument --context: expected a positive integer, got -3"),
    ("context letters", lambda w: tr(w, "--context", "long"), 2, "expected a positive integer, got 'long'"),
    ("leaderboard into a folder", lambda w: ["leaderboard", "--results", str(w.store), "--output", w.path("a-folder")],
     2, "a-folder is a folder; give a file name"),
    ("leaderboard into a missing folder", lambda w: ["leaderboard", "--results", str(w.store), "--output",
                                                      w.path("nowhere/board.md")], 2, "nowhere does not exist"),
    # ---- item 3: reading and destructive commands on what is not a store
    ("leaderboard of a missing store", lambda w: ["leaderboard", "--results", w.path("no-store")], 2,
     "no results store at"),
    ("leaderboard of a file", lambda w: ["leaderboard", "--results", w.path("empty.txt")], 2,
     "is a file, not a results store folder"),
    ("publish a missing store", lambda w: ["publish", "--results", w.path("no-store"), "--out", w.path("site")], 2,
     "no results store at"),
    ("publish an empty store over a site", lambda w: ["publish", "--results", w.path("empty-store"), "--out",
                                                       w.path("site")], 2,
     "holds no runs, so publishing it would replace the site in"),
    # ---- item 6: a checkpoint's stored identity is verified on load
    ("edited checkpoint config", lambda w: ["eval", "--suite", "perplexity", "--checkpoint", w.path("edited"),
                                             "--results", str(w.store), "--no-progress"], 2,
     ("config.json no longer matches the model it was trained as", "mass_floor 1e-06 -> 0.001")),
    # ---- round two (issue 31): plans
    ("plan that is binary", lambda w: ["run", w.path("binary.yaml"), "--results", str(w.store)], 2,
     "binary.yaml is not a text file (byte 0 is not UTF-8); pass a YAML plan."),
    ("plan with an alias bomb", lambda w: ["run", w.path("bomb.yaml"), "--results", str(w.store)], 2,
     "aliases (*name) are not allowed in a plan"),
    ("plan with a seed past 64 bits", lambda w: plan(w, "plan-big-seed"), 2,
     "each seed must be an integer from 0 to 2**63 - 1, got 18446744073709551617."),
    ("plan with a context of 1e8", lambda w: plan(w, "plan-huge-context"), 2,
     ("training protot at preset tiny needs about", "a lower bound", "lower the context")),
    ("plan of 30,000 models", lambda w: plan(w, "plan-huge-grid"), 2,
     "asks for 30,000 models (presets x mixers x seeds), more than the 1,000 one grid may hold"),
    ("plan with a key twice", lambda w: plan(w, "plan-key-twice"), 2, "the key 'suites' appears twice in one mapping"),
    ("plan with a 300-character name", lambda w: plan(w, "plan-long-name"), 2, "is 300 characters long"),
    ("plan with a 5000-digit count", lambda w: ["run", w.path("plan-digits.yaml"), "--results", str(w.store)], 2,
     "holds a value that cannot be read (Exceeds the limit (4300 digits)"),
    # ---- round two: sizes are checked from the numbers before anything is allocated
    ("synthetic width 1e6", lambda w: ["eval", "--suite", "synthetic", "--mixer", "attention", "--results",
                                       str(w.store), "--suite-config", "d_model=1000000"], 2,
     ("building the attention model needs about", "parameters in float32")),
    ("synthetic 1e12 test examples", lambda w: ["eval", "--suite", "synthetic", "--mixer", "attention", "--results",
                                                str(w.store), "--suite-config", "test_examples=1000000000000"], 2,
     ("synthetic: test_examples must be at most 10,000,000, got 1,000,000,000,000",)),
    ("mixer count of 5000 digits", lambda w: ["check", "protot", "--mixer-config", "n_prototypes=" + "7" * 5000], 2,
     "(a number of 5,000 digits, outside the 64-bit range)."),
    ("mixer count past memory", lambda w: ["check", "protot", "--mixer-config", "n_prototypes=99999999999"], 2,
     ("building the protot model needs about", "choose smaller config values")),
    # ---- round two: lm-eval, plugins, the board, the store
    ("lm-eval task whose function cannot be imported",
     lambda w: ["lm-eval", "--checkpoint", str(w.checkpoint), "--tasks", "broken_fn", "--include-path",
                w.path("tasks"), "--results", str(w.store)], 2,
     ("a function its YAML names cannot be imported", "Cannot import module 'nosuchmodule'")),
    ("lm-eval with no tasks", lambda w: ["lm-eval", "--checkpoint", str(w.checkpoint), "--tasks", "", "--results",
                                         str(w.store)], 2, "lm-eval: give at least one task name"),
    ("leaderboard of an unknown suite", lambda w: ["leaderboard", "--results", str(w.store), "--suites", "perplexty"],
     2, "no results for suite(s) perplexty in"),
    ("a store in memory", lambda w: ev(w, "max_windows=2") + ["--results", "memory://gone"], 2,
     "is a store in this process's memory"),
    # ---- round two: checkpoints are not trusted further than they can be checked
    ("LATEST leaving the checkpoint", lambda w: ["eval", "--suite", "perplexity", "--checkpoint", w.path("escaping"),
                                                  "--results", str(w.store)], 2,
     "LATEST names '../../elsewhere/step-0000001', which is not a snapshot folder of this checkpoint"),
    ("edited config without its identity", lambda w: ["eval", "--suite", "perplexity", "--checkpoint",
                                                       w.path("stripped"), "--results", str(w.store)], 2,
     "no longer hashes to the training id saved with it"),
    ("publish over the store", lambda w: ["publish", "--results", w.path("site-with-store/data"), "--out",
                                          w.path("site-with-store")], 2,
     "is or contains the results store"),
    # ---- item 5: memory is checked before long work
    ("context past memory", lambda w: ev(w, "context=10000000", "batch_size=64"), 2,
     ("perplexity: scoring 64 windows of up to 10,000,000 tokens at a time needs about", " GiB at its peak (",
      "more than the", "; lower context or batch_size")),
]


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (and the set of folders), to prove that nothing changed."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def run_cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse errors exit from inside the parser
        return int(exc.code)


@pytest.mark.parametrize("case", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_one_sentence_and_changes_nothing(case, world, capsys):
    _, argv, code, fragment = case
    capsys.readouterr()
    before = tree_digest(world.root)
    assert run_cli(argv(world)) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    fragments = (fragment,) if isinstance(fragment, str) else fragment
    assert "error:" in last and all(f in last for f in fragments), err  # one line (argparse prints its usage above)
    assert tree_digest(world.root) == before


def test_skip_bad_rows_trains_on_the_rest_and_records_the_count(world, tmp_path, capsys):
    data = world.path("missing.jsonl")
    out = tmp_path / "skipped"
    assert run_cli(["train", "--mixer", "protot", "--out", str(out), "--preset", "tiny", "--tokens", "4096",
                    "--no-progress", "--data", data, "--skip-bad-rows"]) == 0  # fmt: skip
    assert f"{data}: skipped 10 of 30 rows without a string 'text' (the first at line 1" in capsys.readouterr().err
    meta = json.loads(next(out.glob("step-*/config.json")).read_text())
    assert meta["data_skipped_rows"] == {data: 10}
    assert meta["run_spec"]["data"]["skip_bad_rows"] is True


def test_stale_temp_folders_are_removed_by_the_next_writer(world, tmp_path, capsys):
    out = tmp_path / "resumed"
    shutil.copytree(world.checkpoint, out)
    (out / ".tmp-0123abcd").mkdir()
    (out / ".tmp-0123abcd" / "model.safetensors").write_bytes(b"half written")
    (out / ".LATEST-4567").write_text("step-0000001")
    assert run_cli(["train", "--mixer", "protot", "--out", str(out), *TINY_TRAIN]) == 0
    assert "removed what an interrupted run left in" in capsys.readouterr().err
    assert not list(out.glob(".tmp-*")) and not list(out.glob(".LATEST-*"))


def test_every_checkpoint_file_has_the_mode_open_gives(world):
    umask = os.umask(0)
    os.umask(umask)
    snapshot = next(world.checkpoint.glob("step-*"))
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in snapshot.iterdir()}
    assert set(modes) >= {"model.safetensors", "config.json", "tokenizer.json", "train_state.pt"}
    assert set(modes.values()) == {0o666 & ~umask}, modes  # safetensors alone used to write 0600


def test_suites_and_mixer_configs_are_listed_with_type_default_and_doc(capsys):
    from harness.registry import MIXERS, SUITES
    from harness.values import config_fields

    assert main(["suites"]) == 0
    out = capsys.readouterr().out
    for entry in SUITES.entries():
        assert f"{entry.name}  (" in out
        for f in config_fields(entry.config_cls):
            assert f.doc, f"{entry.name}.{f.name} has no doc"
            assert any(line.split()[:2] == [f.name, f.type_text().split()[0]] for line in out.splitlines())
    assert "  max_windows  int          0              0 = every window of each split" in out
    for entry in MIXERS.entries():
        assert main(["mixers", "--config", entry.name]) == 0
        lines = capsys.readouterr().out.splitlines()[1:]
        names = [f.name for f in config_fields(entry.config_cls)]
        assert [line.split()[0] for line in lines] == names or (not names and lines == ["  (no config fields)"])
        if entry.cls.__module__.startswith("mixers."):  # other tests register undocumented adversaries
            assert all(f.doc for f in config_fields(entry.config_cls)), entry.name
    assert main(["mixers", "--config", "protot"]) == 0
    assert "n_prototypes           int    32     R: prototypes (channels) per layer [>= 1]" in capsys.readouterr().out
    assert run_cli(["mixers", "--config", "protott"]) == 2
    assert "Did you mean 'protot'" in capsys.readouterr().err
