"""Replacing a folder a command writes (``export --out``, ``publish --out``) without destroying anything else.

Both commands write their folder whole and swap it in (docs/ARCHITECTURE.md, "Folders a command replaces"), so
an ``--out`` that already exists is deleted. :func:`check_output_folder` is the one guard they share: it refuses,
in one sentence and whatever ``--force`` says,

* a name the file system cannot hold (the temporary sibling adds a suffix to it);
* the root, the home folder, the working folder or a folder that contains it;
* a folder that is, contains or lies inside something the command must keep (the results store, the checkpoint
  being read);
* a file, a link, or a folder this command did not write (no marker file) or that holds entries it does not write:
  what would be deleted is named, and ``--force`` is never suggested, because it would delete them.

A folder the command wrote itself (its marker) is replaced; ``own_needs_force`` makes that take ``--force`` (an
export: a model someone may be using), and only then is ``--force`` suggested. :func:`replacing` builds the new
folder in a hidden sibling under a lock on the parent, removes what killed runs left there first, writes the
marker and swaps the folder in.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from harness.errors import MixbenchError
from harness.store.storage import swap_folder

#: the suffixes of a folder's hidden siblings: ``.NAME<suffix>-<hex>`` (built, set aside, older exports' builds)
LEFTOVER_SUFFIXES = (".tmp", ".old", ".export")
#: room the hidden sibling's name needs beyond the folder's own: ``.`` + ``.tmp-`` + 32 hex digits
_SIBLING_EXTRA = 1 + len(".tmp-") + 32


@dataclass(frozen=True)
class OutputKind:
    """What a command writes: ``what`` names it in messages ("model folder", "site"); ``marker`` is the file it
    puts in every folder it writes; ``entries`` the top-level names such a folder may hold (None: whatever the
    command writes, the marker alone decides); ``own_needs_force``: replacing its own folder takes ``--force``."""

    what: str
    marker: str
    entries: frozenset[str] | None = None
    own_needs_force: bool = False


@dataclass(frozen=True)
class Keep:
    """A path the command must not delete, and what to call it ("the results store", "the checkpoint")."""

    path: Path
    name: str


@dataclass
class _Listing:
    entries: list[str] = field(default_factory=list)

    def shown(self, limit: int = 5) -> str:
        more = f" and {len(self.entries) - limit} more" if len(self.entries) > limit else ""
        return ", ".join(self.entries[:limit]) + more


def check_output_folder(out: Path, kind: OutputKind, keep: list[Keep], force: bool) -> None:
    """Refuse an ``--out`` whose replacement would delete what the command did not write (module docstring)."""
    out = Path(out).expanduser()
    _check_name(out)
    target = _absolute(out)
    _check_special(out, target)
    for k in keep:
        kept = _absolute(k.path)
        if kept == target or target in kept.parents:
            raise MixbenchError(f"--out {out} is or contains {k.name} ({k.path}); writing the {kind.what} "
                                f"replaces {out} as a whole and would delete it: pick a new or empty --out.")
        if kept in target.parents:
            raise MixbenchError(f"--out {out} lies inside {k.name} ({k.path}); a {kind.what} written there would "
                                f"change it: pick an --out outside it.")
    if out.is_symlink():
        raise MixbenchError(f"--out {out} is a link; pass the folder itself, or a new or empty folder.")
    if not out.exists():
        return
    if not out.is_dir():
        raise MixbenchError(f"--out {out} is a file; writing the {kind.what} would replace it: pass a new or empty "
                            "folder.")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    if kind.marker not in entries:
        raise MixbenchError(f"--out {out} was not written by mixbench (no {kind.marker} in it) and holds "
                            f"{_Listing(entries).shown()}; writing the {kind.what} would delete them: pick a new "
                            "or empty --out.")
    foreign = [e for e in entries if kind.entries is not None and e not in kind.entries]
    if foreign:
        raise MixbenchError(f"--out {out} is a {kind.what} mixbench wrote but also holds what it does not write "
                            f"({_Listing(foreign).shown()}); writing it again would delete them: move them "
                            "elsewhere, or pick another --out.")
    if kind.own_needs_force and not force:
        raise MixbenchError(f"--out {out} holds a {kind.what} mixbench wrote earlier; pass --force to replace it, "
                            "or pick another --out.")


def _absolute(path: Path) -> Path:
    """``path`` made absolute with its links resolved, also where it does not exist yet."""
    return Path(os.path.realpath(Path(path).expanduser()))


def _check_name(out: Path) -> None:
    limit = _name_max(out)
    for part in out.parts:
        if len(os.fsencode(part)) + _SIBLING_EXTRA > limit:
            raise MixbenchError(f"--out: the name {part[:40]!r}... is {len(os.fsencode(part))} bytes long; this "
                                f"file system holds at most {limit} bytes per name and mixbench needs "
                                f"{_SIBLING_EXTRA} for a temporary sibling: pick a name under "
                                f"{limit - _SIBLING_EXTRA} bytes.")


def _name_max(out: Path) -> int:
    """The longest name the file system under ``out`` holds (its nearest existing folder's)."""
    probe = Path(os.path.abspath(out))
    while probe != probe.parent:
        try:
            if probe.is_dir():
                break
        except OSError:  # a name too long to look up
            pass
        probe = probe.parent
    try:
        return int(os.pathconf(probe, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def _check_special(out: Path, target: Path) -> None:
    if target == Path(target.anchor):
        raise MixbenchError(f"--out {out} is the root folder; pick a new or empty folder.")
    home = _absolute(Path.home())
    if target == home or target in home.parents:
        raise MixbenchError(f"--out {out} is or contains the home folder; pick a new or empty folder.")
    cwd = _absolute(Path.cwd())
    if target == cwd or target in cwd.parents:
        raise MixbenchError(f"--out {out} is or contains the working folder ({cwd}); pick a new or empty folder "
                            "inside it or elsewhere.")


@contextlib.contextmanager
def replacing(out: Path, kind: OutputKind, recheck: Callable[[], None] | None = None) -> Iterator[Path]:
    """Yield an empty hidden sibling of ``out`` to build the new folder in; on a normal exit write the marker
    and swap it in (readers see the old folder or the new one), on any error remove it and keep the old one.
    ``recheck`` runs again under the lock (another writer may have replaced ``out`` since the caller checked)."""
    out = Path(out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    with folder_lock(out):
        remove_leftovers(out)
        if recheck is not None:
            recheck()
        tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            yield tmp
            (tmp / kind.marker).write_text(f"written by mixbench ({kind.what})\n", encoding="utf-8")
            swap_folder(tmp, out, out.parent / f".{out.name}.old-{uuid.uuid4().hex}", replace=out.exists())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on the folder that holds ``out`` (flock on the directory itself, so no lock file is
    left beside it): a second writer there stops with a sentence instead of racing this one, and leftovers are
    only removed by a writer that holds the lock."""
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise MixbenchError(f"another mixbench command is writing into {out.parent} right now; wait for it "
                                "to finish.") from None
        yield
    finally:
        os.close(fd)


def remove_leftovers(out: Path) -> list[Path]:
    """The hidden siblings of ``out`` that writers killed before they finished left behind (call under the lock)."""
    found = sorted(p for suffix in LEFTOVER_SUFFIXES
                   for p in out.parent.glob(f".{glob.escape(out.name)}{suffix}-*"))
    for leftover in found:
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
    if found:
        print(f"[mixbench] removed {len(found)} unfinished folder(s) a killed run left beside {out}", file=sys.stderr)
    return found
