"""The results store under concurrent writers, on a local folder and on a non-local fsspec filesystem.

Two real processes (spawned, released together by a shared start time) write into one store at once; every
run each of them wrote must be readable afterwards with exactly the values it wrote. The non-local store is
fsspec's DirFileSystem over local disk (``dir::file://...``): it is not a LocalFileSystem, so the store takes
its object-store path (in-place writes, manifest last), while both processes still see the same files.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from pathlib import Path

import pytest

from harness.errors import MixbenchError
from harness.store.results import ResultsStore
from harness.stats import Interval
from harness.suite import Metric, SuiteResult
from tests.planted import payload

RUNS_PER_WRITER = 40


def _result(writer: int, i: int) -> SuiteResult:
    value = writer * 1000.0 + i
    return SuiteResult([Metric("score", value, True, interval=Interval(value - 1, value + 1, "bootstrap"), n=10), Metric("writer", float(writer), True)],
                       samples=[{"text": f"writer {writer} run {i}"}])


def _write_many(root: str, writer: int, start_at: float, shared_ids: list[str]) -> tuple[float, float, list[str]]:
    """Distinct runs, plus attempts at runs the other writer also writes; returns the writer's time span and how
    each shared run ended for it."""
    store = ResultsStore(root)
    while time.time() < start_at:
        time.sleep(0.001)
    began = time.time()
    outcomes = []
    for i in range(RUNS_PER_WRITER):
        store.write_run(f"w{writer}-{i:03d}", payload({"writer": writer, "i": i}), _result(writer, i))
        if i < len(shared_ids):
            try:
                store.write_run(shared_ids[i], payload({"writer": writer, "i": i}), _result(writer, i))
                outcomes.append("wrote")
            except MixbenchError as exc:
                outcomes.append(str(exc))
        store.write_file(f"nightly/shared/{i:03d}.json", f'{{"writer": {writer}, "pad": "{"x" * 4096}"}}')
    return began, time.time(), outcomes


def _race(root: str, shared_ids: list[str]) -> list[list[str]]:
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 12.0  # both interpreters are up and importing done by then, even on a loaded machine
    with ctx.Pool(2) as pool:
        pending = [pool.apply_async(_write_many, (root, w, start_at, shared_ids)) for w in (1, 2)]
        (a0, a1, first), (b0, b1, second) = (p.get(timeout=120) for p in pending)
    assert max(a0, b0) < min(a1, b1), "the writers did not overlap in time; the test proved nothing"
    return [first, second]


def _check_distinct_runs(store: ResultsStore) -> None:
    for writer in (1, 2):
        for i in range(RUNS_PER_WRITER):
            run = store.read_run(f"w{writer}-{i:03d}")
            assert run.manifest.extra["writer"] == writer and run.manifest.extra["i"] == i
            assert [m.value for m in run.metrics] == [writer * 1000.0 + i, float(writer)]
            assert run.samples == [{"text": f"writer {writer} run {i}"}]
    files = store.list_files("nightly/shared")
    assert files == [f"nightly/shared/{i:03d}.json" for i in range(RUNS_PER_WRITER)]
    for rel in files:  # whole-file writes: one writer's complete content, never a mix
        assert store.read_file(rel).decode() in {f'{{"writer": {w}, "pad": "{"x" * 4096}"}}' for w in (1, 2)}


def test_two_processes_writing_one_local_store_lose_nothing(tmp_path):
    root = str(tmp_path / "store")
    shared = [f"shared-{i:03d}" for i in range(RUNS_PER_WRITER)]
    outcomes = _race(root, shared)
    store = ResultsStore(root)
    _check_distinct_runs(store)
    for i, rid in enumerate(shared):
        run = store.read_run(rid)  # complete and self-consistent: metrics are the manifest's writer's
        writer = run.manifest.extra["writer"]
        assert [m.value for m in run.metrics] == [writer * 1000.0 + i, float(writer)]
        results = [outcomes[0][i], outcomes[1][i]]
        assert results.count("wrote") == 1, results  # the other writer was told, not silently overwritten
        loser = next(r for r in results if r != "wrote")
        assert "already exists" in loser or "written by another process" in loser
    assert sum(1 for _ in store.iter_runs(samples=False)) == 3 * RUNS_PER_WRITER
    assert not list((tmp_path / "store" / "runs").glob(".tmp-*"))  # no leftovers of either writer
    assert not [p for p in (tmp_path / "store" / "nightly").rglob(".tmp-*")]


def test_two_processes_writing_one_fsspec_store_lose_nothing(tmp_path):
    root = f"dir::file://{tmp_path}/remote"
    store = ResultsStore(root)
    assert store.local_path is None  # the object-store code path, not the local one
    _race(root, [])
    _check_distinct_runs(store)
    assert sum(1 for _ in store.iter_runs(samples=False)) == 2 * RUNS_PER_WRITER


def test_store_files_on_a_memory_filesystem():
    store = ResultsStore(f"memory://mixbench-files-{uuid.uuid4().hex}")
    assert store.local_path is None
    store.write_file("nightly/p/20260101T000000.000000Z.json", '{"a": 1}')
    store.write_file("nightly/p/plots/x.png", b"\x89PNG")
    assert store.read_file("nightly/p/20260101T000000.000000Z.json") == b'{"a": 1}'
    assert store.read_file("nightly/p/missing.json") is None
    assert store.list_files("nightly/p") == ["nightly/p/20260101T000000.000000Z.json", "nightly/p/plots/x.png"]
    assert store.list_files("nightly/none") == []
    for bad in ("../x", "/etc/passwd", "runs/abc/manifest.json", "a/../../b", "s3://x/y"):
        with pytest.raises(MixbenchError, match="invalid store file"):
            store.write_file(bad, "x")


def test_local_file_writes_are_atomic_replacements(tmp_path):
    store = ResultsStore(tmp_path)
    store.write_file("nightly/p/history.csv", "old")
    store.write_file("nightly/p/history.csv", "new")
    assert store.read_file("nightly/p/history.csv") == b"new"
    assert [p.name for p in Path(tmp_path, "nightly", "p").iterdir()] == ["history.csv"]
