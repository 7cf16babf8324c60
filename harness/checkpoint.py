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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from harness.config import RunSpec
from harness.errors import MixbenchError

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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        "train_id": spec.train_id,
        "step": step,
        "weights_sha256": weights_hash(weights),
        **meta,
    }
    (tmp / "config.json").write_text(json.dumps(config, indent=2, allow_nan=False))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    final = out_dir / f"step-{step:07d}"
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    latest_tmp = out_dir / f".LATEST-{uuid.uuid4().hex}"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, out_dir / "LATEST")
    _fsync_dir(out_dir)
    snapshots = sorted(p for p in out_dir.glob("step-*") if p.is_dir())
    for old in snapshots[:-keep] if keep > 0 else []:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def resolve(path: Path) -> Path | None:
    """The snapshot folder a checkpoint path designates, or None when it holds no checkpoint."""
    path = Path(path)
    if (path / "config.json").exists() and (path / "model.safetensors").exists():
        return path
    latest = path / "LATEST"
    if latest.exists():
        snap = path / latest.read_text().strip()
        if (snap / "config.json").exists():
            return snap
    complete = sorted(p for p in path.glob("step-*") if (p / "config.json").exists())
    return complete[-1] if complete else None


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


def load_model(path: Path | str, device: str = "cpu"):
    """Build the model a checkpoint describes and load its weights (strict: every name and shape must match)."""
    from harness.backbone import build_model

    ckpt = load_checkpoint(path)
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
