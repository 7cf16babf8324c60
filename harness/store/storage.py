"""Where mixbench keeps its caches, and how files and folders are written so that no reader sees half of one and
a crash leaves either the old version or the new one: the one implementation of each (the results store,
checkpoints, tokenizers, token streams, lexicons, gate verdicts, listings and the site all use it).

Light on purpose (the standard library only): the CLI's listings read their cache through it before anything
heavy is imported.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_dir() -> Path:
    """``$MIXBENCH_CACHE`` or ``~/.cache/mixbench`` (``~`` expanded; an empty variable means the default):
    tokenizers, token streams, gate verdicts, kernels, judge replies, listings."""
    return Path(os.environ.get("MIXBENCH_CACHE") or Path.home() / ".cache" / "mixbench").expanduser()


def atomic_write(path: Path, data: bytes, durable: bool = False, prefix: str | None = None) -> None:
    """Write via a temp file in the same folder and rename, so readers (and a killed run) never see a half-written
    file. ``durable``: the data and the rename are fsynced too (results, checkpoints), not only atomic (caches,
    which a crash may lose). ``prefix`` names the temp file (default ``.NAME.``), for folders whose listing skips
    temp files by their prefix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix or f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` and fsync it (a file inside a folder that is renamed into place afterwards)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Persist a folder's entries (a rename is only durable once its parent is synced); a no-op where the
    filesystem does not support it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fill_folder_once(root: Path, fill: Callable[[Path], None], ready: Callable[[Path], bool]) -> Path:
    """``root``, filled by ``fill(tmp)`` in a temporary sibling folder renamed into place unless ``ready(root)``
    already holds. Concurrent first uses each fill their own copy and the first rename wins; a killed fill leaves
    only a hidden temp folder."""
    root = Path(root)
    if ready(root):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}."))
    try:
        fill(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        try:
            os.rename(tmp, root)
        except OSError:  # another process finished first: keep its copy
            if not ready(root):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def swap_folder(new: Path, final: Path, aside: Path, replace: bool) -> None:
    """Put the folder ``new`` at ``final``: readers see the old folder or the new one, never a mix.

    ``replace``: the caller saw a folder at ``final`` and decided to replace it; it is renamed to ``aside`` first
    and removed afterwards (``aside`` hidden from the folder's listing: the caller's temp prefix). Without it the
    rename fails (EEXIST / ENOTEMPTY) when a folder appeared at ``final`` meanwhile: a concurrent writer's, which
    must not be silently replaced. When ``new`` cannot be renamed into place the old folder is put back and the
    error raised."""
    new, final, aside = Path(new), Path(final), Path(aside)
    moved = False
    if replace and final.exists():
        os.rename(final, aside)
        moved = True
    try:
        os.rename(new, final)
    except OSError:
        if moved:
            try:
                os.rename(aside, final)
                moved = False
            except OSError:
                pass
        raise
    finally:
        if moved:
            shutil.rmtree(aside, ignore_errors=True)
    fsync_dir(final.parent)
