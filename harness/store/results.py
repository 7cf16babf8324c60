"""The results store (docs/DESIGN.md §6): one folder per run, written atomically, readable by anything that reads JSON.

Layout under the store root (a local folder or an fsspec URL such as ``s3://bucket/mixbench``)::

    runs/<run_id>/manifest.json          configs, provenance, kernel, timings (+ run_id, written_at, plots)
    runs/<run_id>/metrics.jsonl          one Metric per line
    runs/<run_id>/samples/samples.jsonl  optional generations and other examples
    runs/<run_id>/plots/<file>           optional copies of the suite's plot files

A run counts as present only when its ``manifest.json`` exists, and the manifest is always the last thing to
appear. Locally the whole run is written into ``runs/.tmp-<run_id>-<uuid>/`` (files fsynced) and the folder
is renamed into place, so a killed writer leaves at most a ``.tmp-*`` folder that readers ignore and
:meth:`ResultsStore.clean_tmp` removes. Object stores have no atomic folder rename: there the files are
written in place with the manifest last, so a killed writer leaves a folder without a manifest, which readers
also ignore and the next write of that run replaces.

Every JSON file is strict JSON (NaN and infinities become ``null``) and passes through :func:`redact` so API
keys and tokens given to a suite (e.g. the judge endpoint's key) never reach a results folder that may be
published.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import math
import os
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from harness.config import to_dict
from harness.errors import MixbenchError
from harness.store.manifest import LegacyManifest, RunManifest, legacy_store_error
from harness.store.redaction import redact
from harness.store.storage import atomic_write, fsync_dir, swap_folder, write_synced
from harness.suite import Metric, SuiteResult

MANIFEST = "manifest.json"
METRICS = "metrics.jsonl"
SAMPLES = "samples/samples.jsonl"
TMP_PREFIX = ".tmp-"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def json_safe(obj: Any) -> Any:
    """Plain JSON data from configs, numpy/torch scalars and paths; NaN and infinities become ``None``."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return json_safe(to_dict(obj))
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "tolist"):  # numpy / torch scalars and arrays
        return json_safe(obj.tolist())
    return str(obj)


def _dumps(obj: Any, indent: int | None = None) -> str:
    return json.dumps(redact(json_safe(obj)), allow_nan=False, ensure_ascii=False, indent=indent)


@dataclass(frozen=True)
class RunRecord:
    """One complete run as read back from the store."""

    run_id: str
    manifest: RunManifest
    metrics: list[Metric]
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def plots(self) -> list[str]:
        """Plot files, as paths relative to the run folder (read them with :meth:`ResultsStore.read_bytes`)."""
        return list(self.manifest.plots)

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)


class _LocalRuns:
    """``runs/`` on a local filesystem: atomic folder renames and fsync."""

    def __init__(self, root: Path):
        self.runs = root / "runs"

    def make_dirs(self) -> None:
        self.runs.mkdir(parents=True, exist_ok=True)

    def probe(self) -> None:
        probe = self.runs / f".probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()

    def read(self, rel: str) -> bytes | None:
        try:
            return (self.runs / rel).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, rel: str) -> bool:
        return (self.runs / rel).exists()

    def size(self, rel: str) -> int | None:
        try:
            return (self.runs / rel).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def complete_ids(self) -> list[str]:
        return sorted(p.parent.name for p in self.runs.glob(f"*/{MANIFEST}") if not p.parent.name.startswith("."))

    def write(self, run_id: str, files: dict[str, bytes], force: bool) -> Path:
        self.make_dirs()
        tmp = self.runs / f"{TMP_PREFIX}{run_id}-{uuid.uuid4().hex}"
        final = self.runs / run_id
        try:
            for rel, data in files.items():
                write_synced(tmp / rel, data)
            fsync_dir(tmp)
            replace = final.exists()  # decided now: a folder that appears later is another writer's
            if replace and (final / MANIFEST).exists() and not force:
                raise _exists_error(run_id, str(self.runs.parent))
            try:  # atomic; fails if another writer put a folder there meanwhile
                swap_folder(tmp, final, self.runs / f"{TMP_PREFIX}{run_id}-{uuid.uuid4().hex}-old", replace)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                raise MixbenchError(
                    f"run {run_id} was written by another process at the same time; pass --force to overwrite it."
                ) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final

    def put_file(self, rel: str, data: bytes) -> str:
        path = self.runs.parent / rel
        atomic_write(path, data, durable=True, prefix=TMP_PREFIX)  # a reader sees the old file or the new one
        return str(path)

    def get_file(self, rel: str) -> bytes | None:
        try:
            return (self.runs.parent / rel).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None

    def remove_file(self, rel: str) -> None:
        (self.runs.parent / rel).unlink()
        fsync_dir((self.runs.parent / rel).parent)

    def list_files(self, prefix: str) -> list[str]:
        base = self.runs.parent / prefix
        if not base.is_dir():
            return []
        root = self.runs.parent
        return sorted(
            p.relative_to(root).as_posix() for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(TMP_PREFIX)
        )

    def delete(self, run_id: str) -> None:
        doomed = self.runs / f"{TMP_PREFIX}{run_id}-{uuid.uuid4().hex}-del"
        os.rename(self.runs / run_id, doomed)  # the run disappears atomically, then its files go
        shutil.rmtree(doomed, ignore_errors=True)

    def clean_tmp(self, max_age_s: float) -> list[str]:
        removed, now = [], time.time()
        for tmp in self.runs.glob(f"{TMP_PREFIX}*"):
            try:
                if now - tmp.stat().st_mtime < max_age_s:
                    continue
            except FileNotFoundError:  # its writer just renamed it into place
                continue
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp.name)
        return sorted(removed)




class _FsspecRuns:
    """``runs/`` on an fsspec filesystem (object stores): in-place writes, manifest last."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, url: str):
        self.fs, self.runs, self.url = fs, root.rstrip("/") + "/runs", url.rstrip("/") + "/runs"

    def location(self, run_id: str) -> str:
        return f"{self.url}/{run_id}"  # as the user spelled the root

    def make_dirs(self) -> None:
        self.fs.makedirs(self.runs, exist_ok=True)

    def probe(self) -> None:
        probe = f"{self.runs}/.probe-{uuid.uuid4().hex}"
        self.fs.pipe_file(probe, b"")
        self.fs.rm_file(probe)

    def read(self, rel: str) -> bytes | None:
        try:
            return self.fs.cat_file(f"{self.runs}/{rel}")
        except FileNotFoundError:
            return None

    def exists(self, rel: str) -> bool:
        return self.fs.exists(f"{self.runs}/{rel}")

    def size(self, rel: str) -> int | None:
        try:
            return int(self.fs.size(f"{self.runs}/{rel}"))
        except FileNotFoundError:
            return None

    def complete_ids(self) -> list[str]:
        if not self.fs.exists(self.runs):
            return []
        names = (p.rstrip("/").split("/")[-2] for p in self.fs.glob(f"{self.runs}/*/{MANIFEST}"))
        return sorted(n for n in names if not n.startswith("."))

    def write(self, run_id: str, files: dict[str, bytes], force: bool) -> str:
        final = f"{self.runs}/{run_id}"
        if self.fs.exists(final):  # an older run (force) or a write that was killed: remove, manifest first
            self._remove(final)
        for rel, data in files.items():  # ``files`` ends with the manifest
            path = f"{final}/{rel}"
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            self.fs.pipe_file(path, data)
        return self.location(run_id)

    def put_file(self, rel: str, data: bytes) -> str:
        path = f"{self.runs.rsplit('/', 1)[0]}/{rel}"
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, data)  # object stores replace an object in one PUT
        return f"{self.url.rsplit('/', 1)[0]}/{rel}"

    def get_file(self, rel: str) -> bytes | None:
        try:
            return self.fs.cat_file(f"{self.runs.rsplit('/', 1)[0]}/{rel}")
        except (FileNotFoundError, IsADirectoryError):
            return None

    def remove_file(self, rel: str) -> None:
        self.fs.rm_file(f"{self.runs.rsplit('/', 1)[0]}/{rel}")

    def list_files(self, prefix: str) -> list[str]:
        root = self.runs.rsplit("/", 1)[0]
        base = f"{root}/{prefix}".rstrip("/")
        if not self.fs.exists(base):
            return []
        found = (p.rstrip("/") for p in self.fs.find(base))
        return sorted(p[len(root) :].lstrip("/") for p in found if not p.rsplit("/", 1)[-1].startswith(TMP_PREFIX))

    def _remove(self, path: str) -> None:
        if self.fs.exists(f"{path}/{MANIFEST}"):
            self.fs.rm_file(f"{path}/{MANIFEST}")
        self.fs.rm(path, recursive=True)

    def delete(self, run_id: str) -> None:
        self._remove(f"{self.runs}/{run_id}")

    def clean_tmp(self, max_age_s: float) -> list[str]:
        """Remove run folders without a manifest (killed writes) whose newest file is older than ``max_age_s``."""
        if not self.fs.exists(self.runs):
            return []
        removed, now = [], time.time()
        for entry in self.fs.ls(self.runs, detail=True):
            path = entry["name"].rstrip("/")
            if entry["type"] != "directory" or self.fs.exists(f"{path}/{MANIFEST}"):
                continue
            try:
                stamps = [_timestamp(self.fs.modified(f)) for f in self.fs.find(path)]
            except (NotImplementedError, FileNotFoundError):  # age unknown: leave it for the next write of the run
                continue
            if not stamps or now - max(stamps) >= max_age_s:
                self.fs.rm(path, recursive=True)
                removed.append(path.rsplit("/", 1)[-1])
        return sorted(removed)


def _timestamp(moment: datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def _exists_error(run_id: str, root: str) -> MixbenchError:
    return MixbenchError(f"run {run_id} already exists in {root}; pass --force to overwrite it.")


class ResultsStore:
    """Runs under ``root`` (a local path, ``file://`` URL or any fsspec URL such as ``memory://x``)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = os.fspath(root)
        if "://" in self.root:
            try:
                fs, path = fsspec.core.url_to_fs(self.root)
            except (ImportError, ValueError) as exc:
                raise MixbenchError(
                    f"cannot open results store {self.root} ({exc}); install the fsspec backend for it "
                    "or pass a local folder to --results."
                ) from None
            local = isinstance(fs, LocalFileSystem)
            self._runs: _LocalRuns | _FsspecRuns = _LocalRuns(Path(path)) if local else _FsspecRuns(fs, path, self.root)
        else:
            self._runs = _LocalRuns(Path(self.root).expanduser())

    def __repr__(self) -> str:
        return f"ResultsStore({self.root!r})"

    @property
    def local_path(self) -> Path | None:
        """The store's folder when it is on this machine's filesystem, else None (checkpoints go elsewhere)."""
        return self._runs.runs.parent if isinstance(self._runs, _LocalRuns) else None

    def check_writable(self) -> None:
        """Refuse a local store that cannot be written, creating nothing: a bad ``--results`` fails before the
        gate's work, and a mixer the gate then refuses leaves the store as it was (:meth:`ensure_writable` creates
        ``runs/`` once there is something to write). A remote store is proven by :meth:`ensure_writable` alone."""
        if not isinstance(self._runs, _LocalRuns):
            return
        existing = self._runs.runs
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        reason = ("Not a directory" if not existing.is_dir() else
                  "Permission denied" if not os.access(existing, os.W_OK | os.X_OK) else None)
        if reason is not None:
            raise MixbenchError(
                f"results directory {self.root} is not writable ({reason}); pass --results to a writable folder."
            )

    def ensure_writable(self) -> None:
        """Create ``runs/`` and prove a file can be written there, before any expensive work starts."""
        try:
            self._runs.make_dirs()
            self._runs.probe()
        except Exception as exc:  # fsspec backends raise their own (non-OSError) exception types
            reason = getattr(exc, "strerror", None) or exc
            raise MixbenchError(
                f"results directory {self.root} is not writable ({reason}); pass --results to a writable folder."
            ) from None

    def require_existing(self) -> None:
        """For commands that only read: fail with a sentence when ``root`` is not a results store (a mistyped
        path must never read as an empty board, nor be published over a live site)."""
        if isinstance(self._runs, _LocalRuns):
            root = self._runs.runs.parent
            if not root.exists():
                raise MixbenchError(f"no results store at {self.root} (the folder does not exist); check --results.")
            if not root.is_dir():
                raise MixbenchError(f"--results {self.root} is a file, not a results store folder.")
            present = self._runs.runs.is_dir()
        else:
            present = self._runs.fs.exists(self._runs.runs)
        if not present:
            raise MixbenchError(
                f"{self.root} is not a results store yet (it has no runs/ folder); score something first "
                "(`mixbench quickstart`, `mixbench eval` or `mixbench run`) or check --results."
            )

    def has_run(self, run_id: str) -> bool:
        """True when the run is in the store whole: its manifest, and every file it records at the recorded size
        (metrics.jsonl also by content). A broken run is reported (what is wrong, what happens next) and counts
        as absent, so the grid scores it again and the write replaces it."""
        problem = self.run_problem(run_id)
        if problem == "absent":
            return False
        if problem:
            warnings.warn(f"run {run_id} in {self.root} is broken ({problem}); it is not counted as done, and "
                          "scoring it again replaces it.", stacklevel=2)
            return False
        return True

    def run_problem(self, run_id: str) -> str:
        """"" for a complete run, "absent" when there is no manifest, else what is wrong with the run's files."""
        _check_id(run_id)
        raw = self._runs.read(f"{run_id}/{MANIFEST}")
        if raw is None:
            return "absent"
        try:
            recorded = json.loads(raw).get("files") or {}
        except (ValueError, AttributeError):
            return f"{MANIFEST} is not valid JSON"
        metrics = self._runs.read(f"{run_id}/{METRICS}")
        if metrics is None:
            return f"{METRICS} is missing"
        if not recorded:  # written before files were recorded: at least every metric line must parse
            try:
                _jsonl(metrics)
            except ValueError as exc:
                return f"{METRICS} does not parse ({exc})"
            return ""
        for rel, want in sorted(recorded.items()):
            have = len(metrics) if rel == METRICS else self._runs.size(f"{run_id}/{rel}")
            if have is None:
                return f"{rel} is missing"
            if not isinstance(want, dict) or have != want.get("bytes"):
                return f"{rel} has {have:,} bytes, the manifest recorded {want.get('bytes') if isinstance(want, dict) else want}"
        if _sha256(metrics) != (recorded.get(METRICS) or {}).get("sha256"):
            return f"{METRICS} differs from what was written (its sha256 does not match the manifest's)"
        return ""

    def write_run(self, run_id: str, manifest: RunManifest, result: SuiteResult, force: bool = False) -> Path | str:
        """Write one run atomically and return where it landed.

        The store sets the manifest's ``run_id``, ``written_at`` (UTC ISO) and ``plots`` (relative paths of the
        copied plots).
        """
        if not isinstance(manifest, RunManifest):
            raise TypeError(f"write_run takes a harness.store.manifest.RunManifest, got {type(manifest).__name__}")
        _check_id(run_id)
        problem = self.run_problem(run_id)
        if not force and problem == "":
            raise _exists_error(run_id, self.root)
        force = force or problem not in ("", "absent")  # a broken run is replaced without asking
        files = self._encode(run_id, manifest, result)
        try:
            return self._runs.write(run_id, files, force)
        except OSError as exc:
            raise MixbenchError(
                f"could not write run {run_id} into {self.root} ({exc.strerror or exc}); check the folder is writable "
                "and has free space, or pass --results to another folder."
            ) from None

    def _encode(self, run_id: str, manifest: RunManifest, result: SuiteResult) -> dict[str, bytes]:
        files: dict[str, bytes] = {METRICS: "".join(_dumps(m.to_json()) + "\n" for m in result.metrics).encode()}
        if result.samples:
            files[SAMPLES] = "".join(_dumps(s) + "\n" for s in result.samples).encode()
        for plot in map(Path, result.plots):
            try:
                data = plot.read_bytes()
            except OSError as exc:  # losing a plot must not lose the metrics it illustrates
                warnings.warn(f"run {run_id}: plot {plot} could not be read ({exc.strerror}); skipped.", stacklevel=3)
                continue
            name, i = plot.name, 1
            while f"plots/{name}" in files:
                name, i = f"{plot.stem}-{i}{plot.suffix}", i + 1
            files[f"plots/{name}"] = data
        full = dataclasses.replace(
            manifest,
            run_id=run_id,
            written_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            plots=tuple(sorted(rel for rel in files if rel.startswith("plots/"))),
            files={rel: {"bytes": len(data), "sha256": _sha256(data)} for rel, data in sorted(files.items())},
        )
        files[MANIFEST] = (_dumps(full.to_json(), indent=2) + "\n").encode()  # last: its presence marks the run complete
        return files

    def read_run(self, run_id: str, samples: bool = True) -> RunRecord:
        """One complete run; ``samples=False`` skips the (possibly large) samples file."""
        _check_id(run_id)
        raw = self._runs.read(f"{run_id}/{MANIFEST}")
        if raw is None:
            raise MixbenchError(f"no run {run_id} in {self.root}; check the run id and --results.")
        current = MANIFEST
        try:
            manifest = RunManifest.from_json(json.loads(raw))
            current = METRICS
            metrics_raw = self._runs.read(f"{run_id}/{METRICS}")
            want = manifest.files.get(METRICS)
            if want and metrics_raw is not None and _sha256(metrics_raw) != want.get("sha256"):
                raise ValueError("it differs from what was written (cut short or edited)")
            metrics = [_metric(d) for d in _jsonl(metrics_raw)]
            current = SAMPLES
            rows = _jsonl(self._runs.read(f"{run_id}/{SAMPLES}") or b"") if samples else []
        except LegacyManifest:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # JSON and UTF-8 errors are ValueErrors
            raise MixbenchError(
                f"run {run_id} in {self.root} is corrupt ({current}: {exc}); "
                f"re-run it with --force or delete runs/{run_id}."
            ) from None
        return RunRecord(run_id, manifest, metrics, rows)

    def run_ids(self) -> list[str]:
        """Ids of the store's complete runs, sorted."""
        return sorted(self._runs.complete_ids())

    def iter_runs(self, samples: bool = True) -> Iterator[RunRecord]:
        """Complete runs sorted by id; corrupt ones are reported with a warning and skipped.

        A store holding runs of an older manifest schema is refused as a whole (a
        :class:`MixbenchError` saying how to rebuild it) before any run is returned: old and new identities
        must never meet on one board.
        """
        runs, legacy = [], []
        for rid in self._runs.complete_ids():
            try:
                runs.append(self.read_run(rid, samples=samples))
            except LegacyManifest as exc:
                legacy.append((rid, str(exc)))
            except MixbenchError as exc:
                warnings.warn(str(exc), stacklevel=2)
        if legacy:
            raise legacy_store_error(self.root, len(legacy), legacy[0][0], legacy[0][1])
        yield from runs

    def read_bytes(self, run_id: str, rel: str) -> bytes:
        """A file of a run by its relative path (e.g. an entry of ``RunRecord.plots``)."""
        _check_id(run_id)
        if rel.startswith("/") or ".." in rel.split("/"):
            raise MixbenchError(f"invalid file {rel!r} for run {run_id}; give a path inside the run folder.")
        data = self._runs.read(f"{run_id}/{rel}")
        if data is None:
            raise MixbenchError(f"run {run_id} in {self.root} has no file {rel}.")
        return data

    def delete_run(self, run_id: str) -> None:
        _check_id(run_id)
        if not self._runs.exists(run_id):
            raise MixbenchError(f"no run {run_id} in {self.root}; nothing to delete.")
        self._runs.delete(run_id)

    # Files beside runs/ (nightly snapshots, history tables, plots): small, whole-file writes, atomic locally.

    def write_file(self, rel: str, data: bytes | str) -> str:
        """Write ``rel`` (a path under the store root, outside ``runs/``) in one piece; returns where it landed."""
        _check_rel(rel)
        payload = data.encode("utf-8") if isinstance(data, str) else data
        try:
            return self._runs.put_file(rel, payload)
        except OSError as exc:
            raise MixbenchError(
                f"could not write {rel} into {self.root} ({exc.strerror or exc}); check the store is writable."
            ) from None

    def read_file(self, rel: str) -> bytes | None:
        """The bytes of ``rel`` under the store root, or None when there is no such file."""
        _check_rel(rel)
        return self._runs.get_file(rel)

    def move_file(self, rel: str, target: str) -> str:
        """Move the file ``rel`` to ``target`` (both under the store root, outside ``runs/``): written there, then
        removed here, so a crash in between leaves a copy, never nothing."""
        _check_rel(rel)
        data = self.read_file(rel)
        if data is None:
            raise MixbenchError(f"no file {rel} in {self.root} to move.")
        where = self.write_file(target, data)
        try:
            self._runs.remove_file(rel)
        except OSError as exc:
            raise MixbenchError(f"could not remove {rel} from {self.root} ({exc.strerror or exc}).") from None
        return where

    def list_files(self, prefix: str) -> list[str]:
        """Paths (relative to the store root, sorted) of the files under the folder ``prefix``."""
        _check_rel(prefix)
        return self._runs.list_files(prefix.strip("/"))

    def clean_tmp(self, max_age_s: float = 24 * 3600) -> list[str]:
        """Remove leftovers of killed writers older than ``max_age_s``; returns their folder names.

        Keep ``max_age_s`` above the longest write so an in-flight write is never removed.
        """
        return self._runs.clean_tmp(max_age_s)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_id(run_id: str) -> None:
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise MixbenchError(f"invalid run id {run_id!r}; run ids are the hex content hashes under runs/ in the store.")


def _check_rel(rel: str) -> None:
    parts = rel.strip("/").split("/")
    if not rel or rel.startswith("/") or "\\" in rel or ".." in parts or parts[0] in ("runs", "") or "://" in rel:
        raise MixbenchError(
            f"invalid store file {rel!r}; give a relative path outside runs/ (e.g. nightly/plan/20260101T000000Z.json)."
        )


def _jsonl(raw: bytes | None) -> list[Any]:
    if raw is None:
        raise ValueError("file missing")
    return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]


def _metric(d: dict[str, Any]) -> Metric:
    return Metric.from_json(d)
