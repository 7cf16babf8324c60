"""The results store: atomic writes, force semantics, fsspec stores, corruption and secret redaction."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import uuid
import warnings
from pathlib import Path

import pytest

from harness.errors import MixbenchError
from harness.store.manifest import RunManifest
from harness.store.redaction import REDACTED, redact
from harness.store.results import ResultsStore
from harness.stats import Interval
from harness.suite import Metric, SuiteResult
from tests.planted import payload

REPO = Path(__file__).resolve().parents[1]
RID = "0123456789abcdef"


def _result(value: float = 1.0, samples: int = 2) -> SuiteResult:
    return SuiteResult(
        [Metric("ppl", value, False, interval=Interval(value - 0.5, value + 0.5, "bootstrap"), n=10, unit="ppl"), Metric("acc", 0.5, True)],
        samples=[{"prompt": f"p{i}", "text": f"t{i}"} for i in range(samples)],
    )


def _strict_json(text: str):
    def reject(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=reject)


@pytest.fixture
def memory_root():
    root = f"memory://mixbench-test-{uuid.uuid4().hex}"
    yield root
    import fsspec

    fs = fsspec.filesystem("memory")
    path = root.removeprefix("memory://")
    if fs.exists(path):
        fs.rm(path, recursive=True)


def test_a_store_of_older_manifests_is_refused_with_how_to_rebuild(tmp_path):
    store = ResultsStore(tmp_path)
    store.write_run(RID, payload({}), _result())
    old = tmp_path / "runs" / "00000000000000aa"
    old.mkdir()
    (old / "metrics.jsonl").write_text("")
    (old / "manifest.json").write_text(json.dumps({"suite": "perplexity", "mixer": "protot", "run_id": old.name}))
    with pytest.raises(MixbenchError, match=r"1 run\(s\) in .* older mixbench .*Move that store aside"):
        list(store.iter_runs())


def test_a_manifest_field_of_the_wrong_type_is_named(tmp_path):
    store = ResultsStore(tmp_path)
    store.write_run(RID, payload({}), _result())
    path = tmp_path / "runs" / RID / "manifest.json"
    data = json.loads(path.read_text())
    data["subject"]["mixer_config"] = "not a mapping"
    path.write_text(json.dumps(data))
    with pytest.raises(MixbenchError, match="subject.mixer_config must be a mapping"):
        store.read_run(RID)


def test_local_round_trip(tmp_path):
    plot = tmp_path / "curve.png"
    plot.write_bytes(b"\x89PNG fake")
    store = ResultsStore(tmp_path / "store")
    result = _result()
    result.plots.append(plot)
    where = store.write_run(RID, payload({"windows": 4}), result)

    assert Path(where) == tmp_path / "store" / "runs" / RID
    assert store.has_run(RID)
    record = store.read_run(RID)
    assert record.metrics == result.metrics
    assert record.samples == result.samples
    assert record.manifest.run_id == RID and record.manifest.written_at.endswith("+00:00")
    assert record.manifest.extra == {"windows": 4} and record.manifest == RunManifest.from_json(
        json.loads((Path(where) / "manifest.json").read_text()))
    assert record.plots == ["plots/curve.png"]
    assert store.read_bytes(RID, "plots/curve.png") == b"\x89PNG fake"
    assert store.read_run(RID, samples=False).samples == []
    assert [r.run_id for r in store.iter_runs()] == [RID]
    for name in ("manifest.json", "metrics.jsonl", "samples/samples.jsonl"):
        text = (Path(where) / name).read_text()
        for line in text.splitlines() if name.endswith("l") else [text]:
            _strict_json(line)


def test_non_finite_values_are_written_as_null_and_read_back_as_nan(tmp_path):
    store = ResultsStore(tmp_path)
    result = SuiteResult([Metric("ppl", math.nan, False), Metric("speed", 3.0, True, interval=Interval(1.0, math.inf, "range", None))])
    store.write_run(RID, payload({"loss_curve": [1.0, math.nan, -math.inf]}), result)
    run_dir = tmp_path / "runs" / RID
    assert _strict_json((run_dir / "manifest.json").read_text())["extra"]["loss_curve"] == [1.0, None, None]
    lines = [_strict_json(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["value"] is None and lines[1]["interval"]["high"] is None
    record = store.read_run(RID)
    assert math.isnan(record.metrics[0].value) and math.isnan(record.metrics[1].ci_high)


def test_existing_run_needs_force(tmp_path):
    store = ResultsStore(tmp_path)
    store.write_run(RID, payload({"v": 1}), _result(1.0, samples=3))
    with pytest.raises(MixbenchError, match=f"{RID} already exists.*--force"):
        store.write_run(RID, payload({"v": 2}), _result(2.0))
    assert store.read_run(RID).manifest.extra["v"] == 1

    store.write_run(RID, payload({"v": 2}), _result(2.0, samples=0), force=True)
    record = store.read_run(RID)
    assert record.manifest.extra["v"] == 2 and record.metrics[0].value == 2.0
    assert record.samples == [] and not (tmp_path / "runs" / RID / "samples").exists()  # nothing stale survives
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [RID]  # the old copy was removed


def test_partial_tmp_dir_is_invisible_and_cleaned(tmp_path):
    store = ResultsStore(tmp_path)
    store.write_run(RID, payload({}), _result())
    crashed = tmp_path / "runs" / f".tmp-{'f' * 16}-{uuid.uuid4().hex}"
    crashed.mkdir()
    (crashed / "metrics.jsonl").write_text('{"name": "ppl", "val')
    (crashed / "manifest.json").write_text("{")

    assert [r.run_id for r in store.iter_runs()] == [RID]
    assert not store.has_run("f" * 16)
    assert store.clean_tmp(max_age_s=3600) == []  # too fresh: could be a live writer
    assert store.clean_tmp(max_age_s=0) == [crashed.name]
    assert not crashed.exists() and store.has_run(RID)


def test_folder_without_manifest_is_not_a_run_and_is_replaced(tmp_path):
    store = ResultsStore(tmp_path)
    broken = tmp_path / "runs" / RID
    broken.mkdir(parents=True)
    (broken / "metrics.jsonl").write_text("garbage")
    assert not store.has_run(RID) and list(store.iter_runs()) == []
    store.write_run(RID, payload({"v": 1}), _result())  # no --force needed: nothing complete was there
    assert store.read_run(RID).manifest.extra["v"] == 1


_WRITER = textwrap.dedent(
    """
    import sys
    from harness.store.results import ResultsStore
    from harness.suite import Metric, SuiteResult
    from tests.planted import payload

    store = ResultsStore(sys.argv[1])
    i = 0
    while True:
        n = 20 + i % 30
        result = SuiteResult([Metric(f"m{j}", float(j), True) for j in range(n)],
                             samples=[{"text": "x" * 4000, "j": j} for j in range(n)])
        store.write_run(f"{i % 5:016x}", payload({"n": n, "i": i}), result, force=True)
        i += 1
        if i == 10:
            print("ready", flush=True)
    """
)


def test_sigkill_mid_write_leaves_only_complete_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=REPO, env=env
    )
    try:
        assert proc.stdout.readline().strip() == "ready", "writer subprocess failed to start"
        subprocess.run(["sleep", "0.3"], check=True)  # let it get into the middle of more writes
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()

    store = ResultsStore(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a half-written run would be reported as corrupt
        runs = list(store.iter_runs())
    assert runs, "no complete run survived"
    for run in runs:
        assert len(run.metrics) == len(run.samples) == run.manifest.extra["n"]
    store.clean_tmp(max_age_s=0)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [r.run_id for r in runs]


def test_memory_store_round_trip(memory_root):
    store = ResultsStore(memory_root)
    assert list(store.iter_runs()) == [] and not store.has_run(RID)
    store.ensure_writable()
    where = store.write_run(RID, payload({"suite": "glue", "api_key": "abc"}), _result())
    assert where == f"{memory_root}/runs/{RID}"
    record = store.read_run(RID)
    assert record.metrics == _result().metrics and record.samples == _result().samples
    assert record.manifest.extra["api_key"] == REDACTED
    with pytest.raises(MixbenchError, match="--force"):
        store.write_run(RID, payload({}), _result())
    store.write_run(RID, payload({"v": 2}), _result(3.0, samples=0), force=True)
    assert store.read_run(RID).metrics[0].value == 3.0 and store.read_run(RID).samples == []
    store.delete_run(RID)
    assert list(store.iter_runs()) == []


def test_memory_store_ignores_and_cleans_killed_writes(memory_root):
    import fsspec

    fs = fsspec.filesystem("memory")
    base = memory_root.removeprefix("memory://")
    fs.pipe_file(f"{base}/runs/{RID}/metrics.jsonl", b'{"name": "x"')  # a writer died before the manifest
    store = ResultsStore(memory_root)
    assert list(store.iter_runs()) == [] and not store.has_run(RID)
    assert store.clean_tmp(max_age_s=0) == [RID]
    assert not fs.exists(f"{base}/runs/{RID}")


def test_file_url_uses_the_local_atomic_path(tmp_path):
    store = ResultsStore(f"file://{tmp_path}")
    assert Path(store.write_run(RID, payload({}), _result())) == tmp_path / "runs" / RID
    assert [r.run_id for r in ResultsStore(tmp_path).iter_runs()] == [RID]


def test_empty_or_missing_store_has_no_runs(tmp_path):
    store = ResultsStore(tmp_path / "never-created")
    assert list(store.iter_runs()) == [] and not store.has_run(RID)
    assert not (tmp_path / "never-created").exists()  # reading creates nothing
    with pytest.raises(MixbenchError, match=f"no run {RID}"):
        store.read_run(RID)


def test_corrupt_runs_are_named_and_skipped(tmp_path):
    store = ResultsStore(tmp_path)
    good, bad_manifest, bad_metrics = "a" * 16, "b" * 16, "c" * 16
    for rid in (good, bad_manifest, bad_metrics):
        store.write_run(rid, payload({}), _result())
    (tmp_path / "runs" / bad_manifest / "manifest.json").write_text('{"suite": "glue"')
    (tmp_path / "runs" / bad_metrics / "metrics.jsonl").write_text('{"name": "ppl", "value": "high"}\n[1]\n')

    with pytest.raises(MixbenchError, match=f"run {bad_manifest} .* corrupt \\(manifest.json"):
        store.read_run(bad_manifest)
    with pytest.raises(MixbenchError, match=f"run {bad_metrics} .* corrupt \\(metrics.jsonl"):
        store.read_run(bad_metrics)
    with pytest.warns(UserWarning, match="corrupt") as caught:
        runs = list(store.iter_runs())
    assert [r.run_id for r in runs] == [good]
    assert {bad_manifest, bad_metrics} <= {w for rec in caught for w in str(rec.message).split() if len(w) == 16}


def test_invalid_run_ids_are_rejected(tmp_path):
    store = ResultsStore(tmp_path)
    for bad in ("../escape", ".tmp-x", "", "a/b"):
        with pytest.raises(MixbenchError, match="invalid run id"):
            store.has_run(bad)
    with pytest.raises(MixbenchError, match="invalid file"):
        store.read_bytes(RID, "../../etc/passwd")


def test_delete_run(tmp_path):
    store = ResultsStore(tmp_path)
    store.write_run(RID, payload({}), _result())
    store.delete_run(RID)
    assert not store.has_run(RID) and list((tmp_path / "runs").iterdir()) == []
    with pytest.raises(MixbenchError, match="nothing to delete"):
        store.delete_run(RID)


def test_missing_plot_is_skipped_with_a_warning(tmp_path):
    store = ResultsStore(tmp_path)
    result = _result()
    result.plots.append(tmp_path / "gone.png")
    with pytest.warns(UserWarning, match="gone.png"):
        store.write_run(RID, payload({}), result)
    assert store.read_run(RID).plots == []


def test_ensure_writable_creates_runs(tmp_path):
    ResultsStore(tmp_path / "new").ensure_writable()
    assert (tmp_path / "new" / "runs").is_dir()
    assert list((tmp_path / "new" / "runs").iterdir()) == []  # the probe is gone


def test_results_path_that_is_a_file_is_a_user_error(tmp_path):
    (tmp_path / "results").write_text("not a folder")
    store = ResultsStore(tmp_path / "results")
    with pytest.raises(MixbenchError, match="results directory .*results is not writable.*--results"):
        store.ensure_writable()
    with pytest.raises(MixbenchError, match=f"could not write run {RID}.*--results"):
        store.write_run(RID, payload({}), _result())
    assert list(store.iter_runs()) == []


def test_unwritable_directory_is_a_user_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        try:
            (locked / "probe").write_text("")
        except PermissionError:
            pass
        else:
            pytest.skip("permissions are not enforced for this user (root)")
        store = ResultsStore(locked)
        with pytest.raises(MixbenchError, match="not writable.*--results"):
            store.ensure_writable()
        with pytest.raises(MixbenchError, match="could not write run.*--results"):
            store.write_run(RID, payload({}), _result())
    finally:
        locked.chmod(0o700)


def test_unknown_protocol_is_a_user_error():
    with pytest.raises(MixbenchError, match="cannot open results store"):
        ResultsStore("nosuchprotocol://bucket/x")


def test_redact_keys_and_environment_values(monkeypatch):
    secret = "sk-test-" + uuid.uuid4().hex
    monkeypatch.setenv("MIXBENCH_JUDGE_API_KEY", secret)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false-but-long")  # benign name: its value must survive
    obj = {
        "judge": {"base_url": "http://x", "api_key": "literal", "Authorization": "Bearer abc", "model": "m"},
        "HF_TOKEN": "hf_abc",
        "access_token": None,
        "db_password": "pw",
        "client_secret": ["x"],
        "headers": [{"x-api-key": "k"}],
        "note": f"called with Bearer {secret}",
        "copied": secret,
        "train": {"token_budget": 65536, "tokens": 10, "n_tokens": 3, "max_new_tokens": 8},
        "tokenizer_file": "bpe.json",
        "tokens_per_s_decode": 12.5,
        "flag": "false-but-long",
    }
    out = redact(obj)
    assert out["judge"] == {"base_url": "http://x", "api_key": REDACTED, "Authorization": REDACTED, "model": "m"}
    assert out["HF_TOKEN"] == out["db_password"] == out["client_secret"] == REDACTED
    assert out["headers"] == [{"x-api-key": REDACTED}]
    assert out["access_token"] is None  # shows no key was set
    assert out["note"] == f"called with Bearer {REDACTED}" and out["copied"] == REDACTED
    assert out["train"] == obj["train"] and out["tokenizer_file"] == "bpe.json"
    assert out["tokens_per_s_decode"] == 12.5 and out["flag"] == "false-but-long"
    assert obj["judge"]["api_key"] == "literal"  # the input is not modified


def test_secrets_never_reach_the_files(tmp_path, monkeypatch):
    secret = "sk-live-" + uuid.uuid4().hex
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    store = ResultsStore(tmp_path)
    result = SuiteResult([Metric("elo", 1000.0, True)], samples=[{"request": {"headers": {"api-key": secret}}}])
    store.write_run(RID, payload({"judge": {"endpoint_key": secret, "api_key": secret}, "token_budget": 5}), result)
    text = "".join(p.read_text() for p in (tmp_path / "runs" / RID).rglob("*") if p.is_file())
    assert secret not in text and REDACTED in text
    assert store.read_run(RID).manifest.extra["token_budget"] == 5
