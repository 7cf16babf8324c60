"""harness/store/storage.py: the one way folders are swapped in, checked on real folders."""

from __future__ import annotations

import pytest

from harness.store.storage import swap_folder


def _folder(path, text):
    path.mkdir()
    (path / "f").write_text(text)
    return path


def test_a_folder_that_appeared_after_the_check_is_never_replaced(tmp_path):
    """A concurrent writer's folder at the target (it was not there when the caller checked): the rename fails
    and both folders are kept, so the caller can say so instead of silently replacing the other's work."""
    new, final = _folder(tmp_path / "new", "mine"), _folder(tmp_path / "final", "theirs")
    with pytest.raises(OSError):
        swap_folder(new, final, tmp_path / ".aside", replace=False)
    assert (final / "f").read_text() == "theirs" and (new / "f").read_text() == "mine"
    assert not (tmp_path / ".aside").exists()


def test_replacing_swaps_the_folder_as_a_whole(tmp_path):
    new, final = _folder(tmp_path / "new", "new"), _folder(tmp_path / "final", "old")
    swap_folder(new, final, tmp_path / ".aside", replace=True)
    assert (final / "f").read_text() == "new" and not new.exists() and not (tmp_path / ".aside").exists()
    fresh = _folder(tmp_path / "fresh", "first")
    swap_folder(fresh, tmp_path / "absent", tmp_path / ".aside2", replace=True)  # nothing there: a plain rename
    assert (tmp_path / "absent" / "f").read_text() == "first"


def test_a_failed_swap_puts_the_old_folder_back(tmp_path):
    final = _folder(tmp_path / "final", "old")
    with pytest.raises(OSError):
        swap_folder(tmp_path / "missing", final, tmp_path / ".aside", replace=True)
    assert (final / "f").read_text() == "old" and not (tmp_path / ".aside").exists()
