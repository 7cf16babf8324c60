"""Built-in reproduction targets: published results the harness must get right (docs/reproductions.md).

Importing this package registers them (the registry does so on first lookup). A target names suites and mixers
by their registered names only; it imports no suite or mixer (tests/test_layering.py).
"""

from reproductions import (  # noqa: F401
    controls, leading_terms, physics, protot_intervention, recall, state_tracking, zoology_width,
)
