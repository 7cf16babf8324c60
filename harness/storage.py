"""Where mixbench keeps its caches, and how a cache file is written so that no reader sees half of it.

Light on purpose (the standard library only): the CLI's listings read their cache through it before anything
heavy is imported.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """``$MIXBENCH_CACHE`` or ``~/.cache/mixbench`` (``~`` expanded; an empty variable means the default):
    tokenizers, token streams, gate verdicts, kernels, judge replies, listings."""
    return Path(os.environ.get("MIXBENCH_CACHE") or Path.home() / ".cache" / "mixbench").expanduser()


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temp file and rename, so readers (and a killed run) never see a half-written cache file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
