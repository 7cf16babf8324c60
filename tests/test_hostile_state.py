"""Hostile state, round two (issue 31): files that were damaged, left behind or configured so that they would be
stored unsafely, met through the real CLI with real files, servers and processes. What the bad input rows of
tests/test_bad_inputs.py cannot show: what happens on the next run.

* a corrupt nightly snapshot is quarantined and the night compares with the last good one, night after night;
* a run whose metrics.jsonl was cut short is not "already in the store": it is scored again and replaced;
* a publish killed mid-way leaves folders that the next publish removes;
* a judge key too short to redact is refused before a request is made (a real echoing server on 127.0.0.1);
* a plugin with a syntax error is named by file and line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fake_judge import FakeJudge
from harness.cli import main
from harness.store.results import ResultsStore
from test_judge import table_judge, write_generations

REPO = Path(__file__).resolve().parents[1]

NIGHTLY = """\
name: hostile-nightly
preset: tiny
mixers: [attention]
controls: []
suites: {perplexity: {max_windows: 4, bootstrap: 20, splits: [test]}}
train: {token_budget: 4096}
data: {max_train_docs: 20}
"""


def _night(plan: Path, store: Path, capsys) -> tuple[int, str, str]:
    code = main(["nightly", str(plan), "--results", str(store), "--no-progress"])
    out = capsys.readouterr()
    return code, out.out, out.err


def _snapshots(store: Path) -> list[Path]:
    return sorted((store / "nightly" / "hostile-nightly").glob("*Z.json"))


@pytest.mark.parametrize("damage", ["rows-not-objects", "value-a-string", "interval-a-string", "bad-version",
                                    "not-json"])
def test_a_corrupt_snapshot_is_quarantined_and_the_night_compares_with_the_last_good_one(damage, tmp_path, capsys):
    plan, store = tmp_path / "plan.yaml", tmp_path / "store"
    plan.write_text(NIGHTLY)
    assert _night(plan, store, capsys)[0] == 0
    assert _night(plan, store, capsys)[0] == 0
    good, newest = _snapshots(store)
    snap = json.loads(newest.read_text())
    if damage == "rows-not-objects":
        snap["rows"] = [1, 2, 3]
    elif damage == "value-a-string":
        snap["rows"][0]["value"] = "high"
    elif damage == "interval-a-string":
        snap["rows"][0]["interval"] = {"low": "0", "high": 1.0, "kind": "bootstrap", "level": 0.95}
    elif damage == "bad-version":
        snap["version"] = "two"
    newest.write_text("{not json" if damage == "not-json" else json.dumps(snap))
    code, out, err = _night(plan, store, capsys)  # the damaged night is left out; the last good one compared
    assert code == 0 and "Traceback" not in err, err
    assert f"left out: snapshot nightly/hostile-nightly/{newest.name}" in out and out.count("quarantined") == 1
    assert f"compared with {good.stem}: 0 regression" in out
    quarantined = list((store / "nightly" / "hostile-nightly" / "quarantine").glob("*.json"))
    assert [q.name for q in quarantined] == [newest.name]
    tonight = _snapshots(store)[-1]
    code, out, err = _night(plan, store, capsys)  # and the night after compares with tonight, nothing left out
    assert code == 0 and "left out" not in out and f"compared with {tonight.stem}" in out
    header = (store / "nightly" / "hostile-nightly" / "history.csv").read_text().splitlines()[0]
    assert len(header.split(",")) - 4 == len(_snapshots(store)) == 3  # a column per good night, none for the bad


def test_a_truncated_run_is_not_done_and_is_replaced(attention_checkpoint, tmp_path, capsys):
    store = tmp_path / "store"
    argv = ["eval", "--suite", "perplexity", "--checkpoint", str(attention_checkpoint), "--results", str(store),
            "--no-progress", "--suite-config", "max_windows=4", "bootstrap=20"]
    assert main(argv) == 0
    (run,) = (store / "runs").iterdir()
    metrics = run / "metrics.jsonl"
    whole = metrics.read_bytes()
    lines = whole.splitlines(keepends=True)
    metrics.write_bytes(b"".join(lines[: len(lines) // 2]))  # cut at a line boundary: every line still parses
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "already in" not in out.out and f"run {run.name} in {store} is broken (metrics.jsonl has" in out.err
    assert metrics.read_bytes() == whole  # scored again: the same numbers, whole
    assert ResultsStore(store).has_run(run.name)
    # a run edited in place (same size, other bytes) is caught by its hash when the board reads it
    metrics.write_bytes(whole.replace(b'"value":', b'"value" :', 1)[: len(whole)])
    with pytest.warns(UserWarning, match="its sha256 does not match the manifest's"):
        assert not ResultsStore(store).has_run(run.name)


def test_a_killed_publish_leaves_nothing_the_next_one_keeps(attention_checkpoint, tmp_path, capsys):
    store, site = tmp_path / "store", tmp_path / "site"
    assert main(["eval", "--suite", "perplexity", "--checkpoint", str(attention_checkpoint), "--results", str(store),
                 "--no-progress", "--suite-config", "max_windows=4", "bootstrap=20"]) == 0
    killed = subprocess.Popen(  # a real publish, killed while it writes its temporary folder
        [sys.executable, "-c", textwrap.dedent(f"""
            import os, signal, harness.reporting.publish as p
            real = p._Site.write
            def write(self):
                real(self)
                os.kill(os.getpid(), signal.SIGKILL)
            p._Site.write = write
            from harness.cli import main
            main(["publish", "--results", {str(store)!r}, "--out", {str(site)!r}])
        """)], cwd=REPO)
    assert killed.wait(timeout=120) == -9
    leftovers = sorted(p.name for p in tmp_path.glob(".site.tmp-*"))
    assert leftovers and not site.exists()
    capsys.readouterr()
    assert main(["publish", "--results", str(store), "--out", str(site)]) == 0
    assert f"removed 1 unfinished folder(s) a killed run left beside {site}" in capsys.readouterr().err
    assert not list(tmp_path.glob(".site.tmp-*")) and not list(tmp_path.glob(".site.old-*"))
    assert (site / "index.html").is_file()


def test_a_judge_key_too_short_to_redact_is_refused_before_any_request(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SHORT_JUDGE_KEY", "k3y")
    results = tmp_path / "results"
    write_generations(ResultsStore(results), mixers=("alpha", "beta"))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with FakeJudge(table_judge, echo=True) as judge:
        code = main(["judge", "--judge-url", judge.url, "--judge-model", "fake-judge", "--results", str(results),
                     "--api-key-env", "SHORT_JUDGE_KEY", "--no-progress"])
        assert judge.chat_requests == 0
        short_password = judge.url.replace("http://", "http://u:pw@")
        assert main(["judge", "--judge-url", short_password, "--judge-model", "fake-judge", "--results",
                     str(results), "--no-progress"]) == 2
        assert judge.chat_requests == 0
    err = capsys.readouterr().err
    assert code == 2 and "the key in SHORT_JUDGE_KEY is 3 characters long" in err
    assert "a password or key in the judge URL" in err and "pw@" not in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing cached or stored


def test_a_plugin_with_a_syntax_error_is_named_by_file_and_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_plugin.py").write_text("x = 1\ndef register(:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["mixers", "--plugin", "broken_plugin"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"--plugin broken_plugin: {tmp_path / 'broken_plugin.py'}, line 2: invalid syntax" in err
