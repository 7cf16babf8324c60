"""The one guard of every command that replaces a folder (harness/store/output_folder.py): export and publish
refuse, in one sentence and with the folder unchanged byte for byte, every --out whose replacement would delete
what they did not write, also with --force; they replace only their own folder, and clean what killed runs left."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from harness.errors import MixbenchError
from harness.store.output_folder import Keep, OutputKind, check_output_folder
from tests.conftest import main

KIND = OutputKind("model folder", ".mixbench-export", own_needs_force=True)


def tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` (or ``path`` itself) with the sha256 of its bytes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture(scope="module")
def world(attention_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("out-guard")
    store = root / "results"
    assert main(["eval", "--suite", "perplexity", "--checkpoint", str(attention_checkpoint), "--results",
                 str(store), "--suite-config", "max_windows=2", "bootstrap=10", "--no-progress"]) == 0
    mine = root / "mine"
    (mine / "photos").mkdir(parents=True)
    (mine / "my-notes.txt").write_text("do not delete")
    (mine / "photos" / "cat.jpg").write_bytes(b"\xff\xd8 a cat")
    (root / "a-file.txt").write_text("a file, not a folder")
    return root, store, attention_checkpoint


def _export(ckpt: Path, out: str, store: Path, *extra: str) -> list[str]:
    return ["export", str(ckpt), "--out", out, "--results", str(store), "--no-card-results", *extra]


@pytest.mark.parametrize("case,expected", [
    ("store", "is or contains the results store"),
    ("inside-store", "lies inside the results store"),
    ("checkpoint", "is or contains the checkpoint being exported"),
    ("mine", "was not written by mixbench (no .mixbench-export in it) and holds my-notes.txt, photos"),
    ("file", "is a file; writing the model folder would replace it"),
    ("long", "bytes long; this file system holds at most"),
])
def test_export_with_force_refuses_what_it_did_not_write(world, case, expected, capsys):
    root, store, ckpt = world
    out = {"store": store, "inside-store": store / "runs", "checkpoint": ckpt, "mine": root / "mine",
           "file": root / "a-file.txt", "long": root / ("x" * 300)}[case]
    watched = {"store": store, "inside-store": store, "checkpoint": ckpt, "mine": root / "mine",
               "file": root / "a-file.txt", "long": root}[case]
    before = tree(watched)
    capsys.readouterr()
    assert main(_export(ckpt, str(out), store, "--force")) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "--force" not in err  # --force would destroy it: never the advice
    assert tree(watched) == before


def test_export_refuses_home_root_and_working_folders(world, tmp_path, monkeypatch, capsys):
    root, store, ckpt = world
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    (home / "work" / "thesis.tex").write_text("years of work")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home / "work")
    before = tree(home)
    for out, expected in (("~", "is or contains the home folder"), (".", "is or contains the working folder"),
                          (str(tmp_path), "is or contains the home folder")):
        assert main(_export(ckpt, out, store, "--force")) == 2
        err = capsys.readouterr().err
        assert expected in err and "--force" not in err and "Traceback" not in err, err
    assert tree(home) == before
    with pytest.raises(MixbenchError, match="is the root folder"):  # the pure check: nothing is ever built there
        check_output_folder(Path("/"), KIND, [], force=True)


def test_export_replaces_only_its_own_folder_and_cleans_a_killed_runs_leftovers(world, capsys):
    root, store, ckpt = world
    out = root / "model"
    assert main(_export(ckpt, str(out), store)) == 0
    first = tree(out)
    assert main(_export(ckpt, str(out), store)) == 2
    err = capsys.readouterr().err
    assert "holds a model folder mixbench wrote earlier; pass --force to replace it" in err
    assert tree(out) == first
    # what a killed export left beside the folder (older and current names) is removed by the next export
    for leftover in (".model.tmp-0123abcd", ".model.export-89abcdef", ".model.old-deadbeef"):
        (root / leftover).mkdir()
        (root / leftover / "model.safetensors").write_bytes(b"half")
    assert main(_export(ckpt, str(out), store, "--force")) == 0
    assert not [p for p in root.iterdir() if p.name.startswith(".model.")]
    assert (out / "config.json").is_file() and (out / ".mixbench-export").is_file()
    # an own folder into which the user put something of theirs is theirs again
    (out / "my-eval.json").write_text("{}")
    check_output_folder(out, KIND, [], force=True)  # the marker alone decides for a model folder
    (out / ".mixbench-export").unlink()
    assert main(_export(ckpt, str(out), store, "--force")) == 2
    assert "was not written by mixbench" in capsys.readouterr().err


def test_publish_shares_the_guard(world, tmp_path, capsys):
    root, store, _ = world
    before = tree(root / "mine")
    for out, expected in ((root / "mine", "was not written by mixbench (no .mixbench-site in it)"),
                          (store / "site", "lies inside the results store")):
        assert main(["publish", "--results", str(store), "--out", str(out), "--force"]) == 2
        err = capsys.readouterr().err
        assert expected in err and "--force" not in err, err
    assert tree(root / "mine") == before and not (store / "site").exists()
    site = tmp_path / "site"
    (tmp_path / ".site.tmp-0123").mkdir()  # a killed publish's half site
    assert main(["publish", "--results", str(store), "--out", str(site)]) == 0
    assert (site / ".mixbench-site").is_file() and not (tmp_path / ".site.tmp-0123").exists()


def test_the_pure_check_names_what_it_keeps(tmp_path):
    keep = [Keep(tmp_path / "ckpt", "the checkpoint being exported")]
    with pytest.raises(MixbenchError, match="is or contains the checkpoint being exported"):
        check_output_folder(tmp_path, KIND, keep, force=True)
    check_output_folder(tmp_path / "new", KIND, keep, force=False)  # a new folder beside it is fine
