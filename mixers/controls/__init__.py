"""Controls that do no real token mixing (`none`, `mean`): what a board is worth (docs/controls.md)."""

from mixers.controls import layer  # noqa: F401 - registers the mixer(s)
