"""Checkpoints: safetensors weights + JSON config, written so that a kill at any instant loses nothing.

Layout of a checkpoint folder ``DIR``::

    DIR/LATEST                 name of the newest complete snapshot (replaced atomically)
    DIR/step-000128/           one snapshot, renamed into place only once complete
        model.safetensors      weights (loaded with safetensors: no pickle)
        config.json            run spec, step, history, weight hash, provenance
        tokenizer.json         the tokenizer, so the checkpoint is self-contained
        train_state.pt         optimizer state + RNG (loaded with ``torch.load(weights_only=True)``)

A snapshot is written into ``DIR/.tmp-*`` and renamed; ``LATEST`` is then replaced, and older snapshots are
deleted last. Whatever instant a SIGKILL lands, ``LATEST`` names a complete snapshot (or, before the first
``LATEST`` exists, the newest complete ``step-*`` folder is used). A folder holding ``config.json`` and
``model.safetensors`` directly is also accepted as a checkpoint (hand-assembled or exported).

One writer at a time: training holds :func:`writer_lock` (``fcntl.flock`` on ``DIR/.lock``) for its whole run,
so a second ``mixbench train`` into the same folder stops with a sentence, and whoever holds the lock knows
that any ``.tmp-*`` folder there was left by a writer that died, and removes it. Every file of a snapshot
gets the mode an ordinary ``open()`` gives (0644 under the usual umask), weights included.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from harness.config import RunSpec, content_hash
from harness.errors import MixbenchError
from harness.store.identity import train_id
from harness.store.storage import atomic_write

FORMAT = "mixbench-checkpoint"
VERSION = 1


@dataclass
class Checkpoint:
    """A loaded checkpoint: where it is, its run spec and metadata, and its weights."""

    path: Path
    spec: RunSpec
    meta: dict[str, Any]
    weights: dict[str, torch.Tensor]

    @property
    def step(self) -> int:
        return int(self.meta["step"])

    @property
    def final(self) -> bool:
        return bool(self.meta.get("final", False))

    @property
    def tokenizer_path(self) -> Path:
        return self.path / "tokenizer.json"

    def train_state(self) -> dict[str, Any] | None:
        file = self.path / "train_state.pt"
        if not file.exists():
            return None
        return torch.load(file, map_location="cpu", weights_only=True)


def weights_hash(weights: dict[str, torch.Tensor]) -> str:
    """SHA-256 over parameter names, shapes, dtypes and bytes, in name order: the identity of a model."""
    h = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name].detach().contiguous().cpu()
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def save_checkpoint(
    out_dir: Path,
    spec: RunSpec,
    model: torch.nn.Module,
    step: int,
    meta: dict[str, Any],
    tokenizer_file: Path | None,
    train_state: dict[str, Any] | None,
    keep: int = 1,
) -> Path:
    """Write a snapshot of ``model`` at ``step`` atomically; returns the snapshot folder."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(weights, str(tmp / "model.safetensors"))
    if tokenizer_file is not None:
        shutil.copyfile(tokenizer_file, tmp / "tokenizer.json")
    if train_state is not None:
        torch.save(train_state, tmp / "train_state.pt")
    config = {
        "format": FORMAT,
        "version": VERSION,
        "run_spec": spec.to_json(),
        "train_id": train_id(spec),
        "step": step,
        "weights_sha256": weights_hash(weights),
        **meta,
    }
    (tmp / "config.json").write_text(json.dumps(config, indent=2, allow_nan=False))
    mode = stat.S_IMODE((tmp / "config.json").stat().st_mode)  # what open() gives under this umask
    for f in tmp.iterdir():
        os.chmod(f, mode)  # safetensors writes 0600: a shared checkpoint would be unreadable to others
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    final = out_dir / f"step-{step:07d}"
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    atomic_write(out_dir / "LATEST", final.name.encode(), durable=True)
    snapshots = sorted(p for p in out_dir.glob("step-*") if p.is_dir())
    for old in snapshots[:-keep] if keep > 0 else []:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


LOCK_NAME = ".lock"


@contextlib.contextmanager
def writer_lock(out_dir: Path) -> Iterator[None]:
    """Hold the exclusive write lock of checkpoint folder ``out_dir`` (created if needed) or fail with a sentence
    naming the process that holds it; then remove what interrupted writers left behind (:func:`clean_stale`)."""
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(out_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise MixbenchError(
            f"cannot write to the checkpoint folder {out_dir} ({exc.strerror}); pick another --out."
        ) from None
    failed = True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise MixbenchError(
                f"another mixbench process (pid {holder}) is training into {out_dir} right now; wait for it to "
                "finish or pick another --out."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        clean_stale(out_dir)
        yield
        failed = False
    finally:
        if failed and created and [p.name for p in out_dir.iterdir()] == [LOCK_NAME]:
            (out_dir / LOCK_NAME).unlink()  # a run that failed before writing anything leaves no folder behind
            out_dir.rmdir()
        os.close(fd)  # closing the descriptor releases the lock; the file stays (deleting it would race)


def clean_stale(out_dir: Path) -> list[Path]:
    """Remove the ``.tmp-*`` snapshot folders and ``.LATEST-*`` files an interrupted writer left in ``out_dir``.

    Call only while holding :func:`writer_lock`: then no live writer owns them. What cannot be removed is named on
    stderr so the user can delete it; returns what was removed.
    """
    removed, stuck = [], []
    for leftover in sorted(Path(out_dir).glob(".tmp-*")) + sorted(Path(out_dir).glob(".LATEST-*")):
        try:
            if leftover.is_dir():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()
            removed.append(leftover)
        except OSError:
            stuck.append(leftover)
    if removed:
        names = ", ".join(p.name for p in removed)
        print(f"[mixbench] removed what an interrupted run left in {out_dir}: {names}", file=sys.stderr, flush=True)
    if stuck:
        print(
            f"[mixbench] could not remove {', '.join(str(p) for p in stuck)} (left by an interrupted run); "
            "delete it by hand.", file=sys.stderr, flush=True,
        )
    return removed


_SNAPSHOT_NAME = re.compile(r"step-\d{7,}")


def resolve(path: Path) -> Path | None:
    """The snapshot folder a checkpoint path designates, or None when it holds no checkpoint.

    A snapshot is a real ``step-*`` folder inside ``path``: a ``LATEST`` that names anything else (``../x``, an
    absolute path) or a snapshot that is a link leading out of the folder is refused, never followed."""
    path = Path(path)
    if (path / "config.json").exists() and (path / "model.safetensors").exists():
        return path
    latest = path / "LATEST"
    if latest.exists():
        name = latest.read_text(errors="replace").strip()
        if not _SNAPSHOT_NAME.fullmatch(name) or not _inside(path / name, path):
            raise MixbenchError(
                f"checkpoint {path}: LATEST names {name[:80]!r}, which is not a snapshot folder of this checkpoint "
                "(step-NNNNNNN inside it); restore LATEST, or delete it to use the newest complete snapshot."
            )
        snap = path / name
        if (snap / "config.json").exists():
            return snap
    complete = sorted(p for p in path.glob("step-*")
                      if _SNAPSHOT_NAME.fullmatch(p.name) and _inside(p, path) and (p / "config.json").exists())
    return complete[-1] if complete else None


def _inside(snapshot: Path, folder: Path) -> bool:
    """``snapshot`` is a folder directly inside ``folder`` once every link is followed."""
    try:
        return snapshot.resolve().parent == folder.resolve()
    except OSError:
        return False


def final_weights_hash(path: Path | str) -> str | None:
    """The weight hash of the finished checkpoint in ``path`` (read from its config, no weights loaded), or None
    when ``path`` holds no finished checkpoint: what a grid needs to predict run ids before loading anything."""
    snap = resolve(Path(path)) if Path(path).exists() else None
    if snap is None:
        return None
    try:
        meta = json.loads((snap / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return meta.get("weights_sha256") if meta.get("final") else None


def load_checkpoint(path: Path | str, map_location: str = "cpu") -> Checkpoint:
    """Load a checkpoint folder, or fail with a sentence saying what is wrong and what to do."""
    path = Path(path)
    if not path.exists():
        raise MixbenchError(f"checkpoint {path} does not exist; train one with `mixbench train --out {path}`.")
    snap = resolve(path)
    if snap is None:
        raise MixbenchError(
            f"{path} holds no checkpoint (no config.json + model.safetensors); point --checkpoint at a folder "
            f"written by `mixbench train`."
        )
    try:
        meta = json.loads((snap / "config.json").read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"format is {meta.get('format')!r}")
        spec = RunSpec.from_json(meta["run_spec"])
        weights = load_file(str(snap / "model.safetensors"), device=map_location)
    except MixbenchError:
        raise
    except Exception as exc:
        raise MixbenchError(
            f"checkpoint {snap} is corrupt or unreadable ({type(exc).__name__}: {exc}); retrain it or restore it."
        ) from exc
    if weights_hash(weights) != meta.get("weights_sha256"):
        raise MixbenchError(f"checkpoint {snap}: the weights do not match the hash in config.json; it is corrupt.")
    return Checkpoint(snap, spec, meta, weights)


def _stored_identity(ckpt: Checkpoint) -> dict[str, Any] | None:
    stored = ckpt.meta.get("model_identity")
    return stored.get("parts") if isinstance(stored, dict) and isinstance(stored.get("parts"), dict) else None


def _require_mixer(ckpt: Checkpoint) -> None:
    """A checkpoint of a plugin mixer loaded without its plugin: say which module to load, not "did you mean"."""
    from harness.registry import MIXERS

    name = ckpt.spec.model.mixer
    try:
        MIXERS.get(name)  # also builds a resolver's name (``hybrid:...``, ``fla:...``), not yet in names()
        return
    except MixbenchError:
        pass
    source = ((_stored_identity(ckpt) or {}).get("mixer") or {}).get("mixer_source")
    if source:
        module = source.rsplit(".", 1)[0]
        raise MixbenchError(
            f"checkpoint {ckpt.path} is a '{name}' model, a mixer registered by the plugin module {module}, which is "
            f"not loaded; pass --plugin {module} (after the subcommand) or install the package that provides it."
        )


def verify_identity(ckpt: Checkpoint) -> None:
    """Refuse a checkpoint whose config.json no longer matches the identity recorded when it was trained (a head
    count edited after training loads into same-shaped weights and would be scored as another model)."""
    from harness.config import to_dict
    from harness.registry import MIXERS

    parts = _stored_identity(ckpt)
    if parts is None:  # no identity (trained before identities were recorded, or removed): the training id
        recorded = ckpt.meta.get("train_id")
        if recorded is not None and content_hash(ckpt.meta.get("run_spec")) != recorded:
            raise MixbenchError(
                f"checkpoint {ckpt.path}: its run spec in config.json no longer hashes to the training id saved with "
                f"it ({recorded}): the config was edited after training, so the weights would be scored as a model "
                "they are not. Restore the original config.json or retrain."
            )
        return
    spec = ckpt.spec
    stored_mixer = parts.get("mixer") or {}
    current = {
        "mixer": spec.model.mixer,
        "mixer_config": to_dict(MIXERS.get(spec.model.mixer).make_config(spec.model.mixer_config)),
        "backbone": to_dict(spec.model.backbone),
        "train": to_dict(spec.train),
        "data": to_dict(spec.data),
    }
    recorded = {
        "mixer": stored_mixer.get("mixer"),
        "mixer_config": stored_mixer.get("mixer_config") or {},
        "backbone": parts.get("backbone") or {},
        "train": parts.get("train") or {},
        "data": parts.get("data") or {},
    }
    changed = []
    if current["mixer"] != recorded["mixer"]:
        changed.append(f"mixer {recorded['mixer']} -> {current['mixer']}")
    for section in ("mixer_config", "backbone", "train", "data"):
        now, then = current[section], recorded[section]
        changed += [f"{section}.{k} {then[k]!r} -> {now[k]!r}" for k in sorted(set(now) & set(then)) if now[k] != then[k]]
    if changed:
        raise MixbenchError(
            f"checkpoint {ckpt.path}: its config.json no longer matches the model it was trained as "
            f"({'; '.join(changed[:4])}); restore the original config.json or retrain."
        )


def load_model(path: Path | str, device: str = "cpu"):
    """Build the model a checkpoint describes and load its weights (strict: every name and shape must match)."""
    from harness.model.backbone import build_model

    ckpt = load_checkpoint(path)
    _require_mixer(ckpt)
    verify_identity(ckpt)
    model = build_model(ckpt.spec.model)
    try:
        model.load_state_dict(ckpt.weights, strict=True)
    except RuntimeError as exc:
        raise MixbenchError(
            f"checkpoint {ckpt.path} does not fit the '{ckpt.spec.model.mixer}' model this code builds ({exc}); "
            f"it was written by another version of the mixer."
        ) from exc
    model.to(device)
    model.set_kernel(None, torch.device(device))
    return model.eval(), ckpt
